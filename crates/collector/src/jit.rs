//! JIT code: a process that describes its anonymous code in a perf map
//! (`/tmp/perf-PID.map`) or a jitdump (`jit-PID.dump`, found because the
//! runtime maps it, as perf finds it) gets its own image, `[jit] PID`, in
//! place of the shared `[anon]`; at every flush the files are copied into
//! the database (`DB/jit`, 0600), so the code is still named after the
//! process has exited and the runtime's files are gone.
//!
//! Offsets into anonymous memory are absolute addresses (the mapping's
//! pgoff is set to its start), which is what those files give. The check
//! is made at flush time because a JVM writes its map only at exit
//! (`-XX:+DumpPerfMapAtExit`) or when asked (`jcmd PID Compiler.perfmap`):
//! samples flushed before the map existed stay `[anon]`.

use crate::Collector;
use loupe_model::{fnv1a, ImageId, ImageKind, JIT_IMAGE_PREFIX};
use std::collections::HashMap;
use std::fs;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// What is known of one process's JIT files.
struct JitProcess {
    image: u32,
    /// File key of the image: the kept copies' base name.
    key: String,
    /// Sizes of the map and the jitdump when last copied.
    copied: (Option<u64>, Option<u64>),
    /// The drain at which the process was first seen gone.
    gone_since: Option<u64>,
}

/// The collector's JIT state.
#[derive(Default)]
pub struct JitState {
    /// Where copies go (`DB/jit`); none: nothing is kept.
    dir: Option<PathBuf>,
    procs: HashMap<u32, JitProcess>,
    /// jitdump files the processes mapped, by pid, with the drain at
    /// which the process was first seen gone.
    dumps: HashMap<u32, (PathBuf, Option<u64>)>,
    /// Files copied, for the daemon's stats.
    pub copies: u64,
}

/// Whether a mapped file is a jitdump (`.../jit-PID.dump`): a marker the
/// runtime maps so profilers find the file, not code.
pub fn is_jitdump(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or("");
    name.strip_prefix("jit-").and_then(|r| r.strip_suffix(".dump")).is_some_and(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
}

/// perf's map file of a process.
pub fn perf_map_path(pid: u32) -> PathBuf {
    PathBuf::from(format!("/tmp/perf-{pid}.map"))
}

impl JitState {
    pub fn keep_in(&mut self, dir: PathBuf) {
        self.dir = Some(dir);
    }

    pub fn dir(&self) -> Option<&PathBuf> {
        self.dir.as_ref()
    }

    pub fn saw_jitdump(&mut self, pid: u32, path: &str) {
        self.dumps.insert(pid, (PathBuf::from(path), None));
    }

    /// Forgets processes gone for a few drains (their last samples are
    /// flushed by then); a reused pid then gets a new identity.
    pub fn forget_gone(&mut self, drain: u64, alive: impl Fn(u32) -> bool) {
        let gone = |pid: u32, since: &mut Option<u64>| {
            *since = if alive(pid) { None } else { Some(since.unwrap_or(drain)) };
            since.is_none_or(|d| drain < d + 4)
        };
        self.procs.retain(|pid, p| gone(*pid, &mut p.gone_since));
        self.dumps.retain(|pid, d| gone(*pid, &mut d.1));
    }

    /// Copies the process's map and jitdump when they grew since last time.
    fn keep_files(&mut self, pid: u32) {
        let (Some(dir), Some(p)) = (&self.dir, self.procs.get_mut(&pid)) else { return };
        let map = perf_map_path(pid);
        let dump = self.dumps.get(&pid).map(|d| &d.0);
        let key = &p.key;
        let (m, d) = (dir.join(format!("{key}.map")), dir.join(format!("{key}.dump")));
        if copy_if_grown(&map, &m, &mut p.copied.0, dir) {
            self.copies += 1;
        }
        if dump.is_some_and(|src| copy_if_grown(src, &d, &mut p.copied.1, dir)) {
            self.copies += 1;
        }
    }
}

/// Copies `src` to `dest` (0600, atomically) when its size changed.
fn copy_if_grown(src: &Path, dest: &Path, last: &mut Option<u64>, dir: &Path) -> bool {
    let Ok(meta) = fs::metadata(src) else { return false };
    if *last == Some(meta.len()) {
        return false;
    }
    let Ok(bytes) = fs::read(src) else { return false };
    let written = write_private(dir, dest, &bytes);
    if written {
        *last = Some(bytes.len() as u64);
    }
    written
}

/// Writes `dest` in `dir` (made 0700) as a 0600 file, atomically.
pub(crate) fn write_private(dir: &Path, dest: &Path, bytes: &[u8]) -> bool {
    let tmp = dest.with_extension("tmp");
    let written = fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).is_ok()
        && fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)
            .and_then(|mut f| f.write_all(bytes))
            .is_ok()
        && fs::rename(&tmp, dest).is_ok();
    if !written {
        let _ = fs::remove_file(&tmp);
    }
    written
}

impl Collector {
    /// The `[jit] PID` image of a process with a perf map or jitdump (its
    /// files copied into the database now if they grew), else None.
    pub(crate) fn jit_image(&mut self, pid: u32) -> Option<u32> {
        if !self.jit.procs.contains_key(&pid) {
            if !perf_map_path(pid).exists() && !self.jit.dumps.contains_key(&pid) {
                return None;
            }
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
            let ident = fnv1a(&[pid.to_le_bytes().as_slice(), &now.to_le_bytes()].concat());
            let id =
                ImageId { kind: ImageKind::Anonymous, path: format!("{JIT_IMAGE_PREFIX}{pid}"), build_id: None, content_hash: Some(ident) };
            let key = id.file_key();
            let image = self.images.intern(id).0;
            self.jit.procs.insert(pid, JitProcess { image, key, copied: (None, None), gone_since: None });
        }
        self.jit.keep_files(pid);
        self.jit.procs.get(&pid).map(|p| p.image)
    }

    /// Each of `pids` that has a JIT image, with that image.
    pub(crate) fn jit_images(&mut self, pids: impl IntoIterator<Item = u32>) -> HashMap<u32, u32> {
        pids.into_iter().filter_map(|pid| Some((pid, self.jit_image(pid)?))).collect()
    }

    /// Moves the `[anon]` samples of processes with JIT files to their
    /// `[jit] PID` images before a flush.
    pub(crate) fn move_jit_samples(&mut self) {
        let pids = self.agg.pids_of(self.anon_image);
        if pids.is_empty() {
            return;
        }
        let to = self.jit_images(pids);
        if !to.is_empty() {
            self.agg.move_counts(self.anon_image, &to);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitdump_marker_names() {
        // Checks which mapped paths are taken for jitdump markers: jit-<digits>.dump only.
        assert!(is_jitdump("/home/u/app/jit-1234.dump"));
        assert!(is_jitdump("jit-7.dump"));
        assert!(!is_jitdump("/x/jit-.dump"));
        assert!(!is_jitdump("/x/jit-12a.dump"));
        assert!(!is_jitdump("/usr/lib/libjit.so"));
    }

    #[test]
    fn copies_only_when_grown_and_private() {
        // Checks a kept copy is made 0600 in a 0700 directory, and made again only when the source changed size.
        let t = tempfile::tempdir().unwrap();
        let (src, dir) = (t.path().join("perf-1.map"), t.path().join("jit"));
        let dest = dir.join("k.map");
        fs::write(&src, "1000 10 a\n").unwrap();
        let mut last = None;
        assert!(copy_if_grown(&src, &dest, &mut last, &dir));
        assert!(!copy_if_grown(&src, &dest, &mut last, &dir));
        fs::write(&src, "1000 10 a\n2000 10 b\n").unwrap();
        assert!(copy_if_grown(&src, &dest, &mut last, &dir));
        assert_eq!(fs::read_to_string(&dest).unwrap(), "1000 10 a\n2000 10 b\n");
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(fs::metadata(&dest).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(fs::metadata(&dir).unwrap().permissions().mode() & 0o777, 0o700);
    }

    #[test]
    fn anon_samples_of_a_process_with_a_perf_map_become_its_jit_image() {
        // Checks [anon] samples of a process with a perf map move to `[jit] PID` at their addresses with their period, the map is kept, and another process stays [anon].
        use crate::{Collector, KernelInfo};
        use loupe_model::{EventName, ANON_IMAGE};
        use loupe_perf::{Mmap, Record};
        // Above any pid the kernel hands out (pid_max is at most 2^22).
        let (jit_pid, other) = (5_000_000 + std::process::id(), 6_000_000 + std::process::id());
        let map = perf_map_path(jit_pid);
        fs::write(&map, "7f0000001000 100 hot_method\n").unwrap();
        let db = tempfile::tempdir().unwrap();
        let kernel = KernelInfo { text_base: None, build_id: None, modules: vec![] };
        let mut c = Collector::new(vec![EventName::new("cpu-clock")], kernel, None);
        c.keep_jit_files_in(db.path().join("jit"));
        for pid in [jit_pid, other] {
            let (addr, len, pgoff, prot, flags) = (0x7f0000000000, 0x10000, 0x7f0000000000, 5, 0x22);
            let filename = "//anon".to_string();
            c.process(&Record::Mmap(Mmap { pid, tid: pid, addr, len, pgoff, prot, flags, filename, build_id: None, time: 0 }));
            c.attribute(pid, 0x7f0000001010, false, 0, 3, 3000);
        }
        let profiles = c.take_profiles(|_| true);
        fs::remove_file(&map).unwrap();
        let jit = profiles.iter().find(|p| p.image.path == format!("[jit] {jit_pid}")).expect("a [jit] profile");
        let anon = profiles.iter().find(|p| p.image.path == ANON_IMAGE).expect("an [anon] profile");
        assert_eq!((jit.period_sum, anon.period_sum), (3000, 3000));
        let offsets =
            |p: &loupe_model::Profile| p.entries.iter().map(|((i, o), n)| (p.processes[*i as usize].pid, o.0, *n)).collect::<Vec<_>>();
        assert_eq!(offsets(jit), vec![(jit_pid, 0x7f0000001010, 3)]);
        assert_eq!(offsets(anon), vec![(other, 0x7f0000001010, 3)]);
        let kept = db.path().join("jit").join(format!("{}.map", jit.image.file_key()));
        assert_eq!(fs::read_to_string(kept).unwrap(), "7f0000001000 100 hot_method\n");
    }
}
