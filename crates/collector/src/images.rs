//! Image identities: turning what the kernel says about a mapping (path,
//! maybe a build-id) into a stable [`ImageId`], and keeping a copy of binaries
//! that were deleted or replaced while running so they can still be
//! symbolized later.
//!
//! File access goes through [`FileProbe`] so the identity rules are testable
//! without a file system.

use loupe_model::{BuildId, ImageId, ImageKind, ANON_IMAGE, VDSO_IMAGE};
use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};

/// Reads identities from files. `read_build_id` returns `None` both for a
/// missing file and for one without a build-id note.
pub trait FileProbe {
    fn read_build_id(&mut self, path: &Path) -> Option<BuildId>;
    fn content_hash(&mut self, path: &Path) -> Option<u64>;
    /// (inode, modification time in ns) of the file, to cache by when the
    /// MMAP2 record carried no inode (it carries a build-id slot instead).
    fn file_key(&mut self, path: &Path) -> Option<(u64, i64)>;
}

/// The real file system.
pub struct Fs;

impl FileProbe for Fs {
    fn read_build_id(&mut self, path: &Path) -> Option<BuildId> {
        build_id_of_file(path)
    }
    fn content_hash(&mut self, path: &Path) -> Option<u64> {
        // Streamed through a small buffer: mapping a 200 MB library to hash
        // it would show up as 200 MB of daemon RSS.
        use std::io::Read;
        let mut f = fs::File::open(path).ok()?;
        let mut h = xxhash_rust::xxh3::Xxh3::new();
        let mut buf = vec![0u8; 256 * 1024];
        loop {
            match f.read(&mut buf) {
                Ok(0) => return Some(h.digest()),
                Ok(n) => h.update(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => return None,
            }
        }
    }
    fn file_key(&mut self, path: &Path) -> Option<(u64, i64)> {
        use std::os::unix::fs::MetadataExt;
        let m = fs::metadata(path).ok()?;
        Some((m.ino(), m.mtime() * 1_000_000_000 + m.mtime_nsec()))
    }
}

/// Maps a file read-only: only the pages looked at (ELF headers and notes)
/// are read, which keeps the daemon's memory small next to big binaries.
fn map_file(path: &Path) -> Option<memmap2::Mmap> {
    let f = fs::File::open(path).ok()?;
    // SAFETY: a private read-only view; a concurrent truncation could fault,
    // which is the accepted risk of every ELF reader that maps files.
    unsafe { memmap2::Mmap::map(&f) }.ok()
}

/// The GNU build-id note of an ELF file.
pub fn build_id_of_file(path: &Path) -> Option<BuildId> {
    build_id_of_bytes(&map_file(path)?)
}

pub fn build_id_of_bytes(data: &[u8]) -> Option<BuildId> {
    loupe_symbolize::build_id::of_elf(data)
}

/// Interns image identities to small indices used on the sample path.
#[derive(Default)]
pub struct ImageTable {
    ids: Vec<ImageId>,
    index: HashMap<ImageId, u32>,
    /// Identity of files seen without a kernel build-id, by path and inode,
    /// so a file is read at most once.
    by_file: HashMap<(String, u64, i64), u32>,
}

impl ImageTable {
    pub fn intern(&mut self, id: ImageId) -> (u32, bool) {
        if let Some(&i) = self.index.get(&id) {
            return (i, false);
        }
        let i = self.ids.len() as u32;
        self.index.insert(id.clone(), i);
        self.ids.push(id);
        (i, true)
    }

    pub fn get(&self, i: u32) -> &ImageId {
        &self.ids[i as usize]
    }

    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// Identity of a file-backed or special mapping. `kernel_build_id` is
    /// what the MMAP2 record carried; `probe_path` is where the mapped bytes
    /// can be read (e.g. `/proc/PID/map_files/...`, which still works for a
    /// deleted file), `inode` disambiguates files replaced at the same path.
    pub fn resolve(
        &mut self,
        probe: &mut dyn FileProbe,
        path: &str,
        kernel_build_id: Option<BuildId>,
        probe_path: &Path,
        inode: u64,
        vdso: &ImageId,
    ) -> (u32, bool) {
        if path == VDSO_IMAGE {
            return self.intern(vdso.clone());
        }
        if path.is_empty() || path.starts_with('[') || path.starts_with("//anon") || path.starts_with("/memfd:") {
            let kind = ImageKind::Anonymous;
            return self.intern(ImageId { kind, path: ANON_IMAGE.into(), build_id: None, content_hash: None });
        }
        if let Some(b) = kernel_build_id.filter(|b| !b.0.is_empty()) {
            return self.intern(ImageId::elf(path, Some(b)));
        }
        // With build-ids in MMAP2 the kernel sends no inode; without a key,
        // a file with no build-id (rustup's 200 MB libLLVM) would be hashed
        // again at every mapping.
        let key = if inode != 0 { Some((inode, 0)) } else { probe.file_key(probe_path).or_else(|| probe.file_key(Path::new(path))) };
        let key = key.map(|(ino, mtime)| (path.to_string(), ino, mtime));
        if let Some(i) = key.as_ref().and_then(|k| self.by_file.get(k)) {
            return (*i, false);
        }
        let id = match probe.read_build_id(probe_path) {
            Some(b) => ImageId::elf(path, Some(b)),
            None => ImageId { content_hash: probe.content_hash(probe_path), ..ImageId::elf(path, None) },
        };
        let r = self.intern(id);
        if let Some(k) = key {
            self.by_file.insert(k, r.0);
        }
        r
    }
}

/// `/proc/PID/map_files/START-END`: the mapped file itself, even after it was
/// deleted or replaced on disk (needs CAP_SYS_ADMIN).
pub fn map_files_path(pid: u32, start: u64, end: u64) -> PathBuf {
    PathBuf::from(format!("/proc/{pid}/map_files/{start:x}-{end:x}"))
}

/// Makes sure the bytes of a newly seen image stay available for analysis:
/// when the file at its path is gone or has another build-id (replaced since
/// the process mapped it), copy the mapped file into the database's image
/// cache as `<build-id hex>`. Returns true when a copy was made.
pub fn preserve_if_replaced(image: &ImageId, mapped: &Path, cache_dir: &Path) -> bool {
    let Some(bid) = &image.build_id else { return false };
    if image.kind != ImageKind::Elf {
        return false;
    }
    if build_id_of_file(Path::new(&image.path)).as_ref() == Some(bid) {
        return false;
    }
    let dest = cache_dir.join(bid.to_hex());
    if dest.exists() {
        return false;
    }
    let tmp = dest.with_extension("tmp");
    let copied = loupe_files::create_dir_all(cache_dir).is_ok() && loupe_files::copy(mapped, &tmp).is_ok();
    if copied && build_id_of_file(&tmp).as_ref() == Some(bid) && fs::rename(&tmp, &dest).is_ok() {
        return true;
    }
    let _ = fs::remove_file(&tmp);
    false
}

/// What a file looked like when first mapped: a change means it was
/// deleted or replaced while processes still run the old bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileSig {
    dev: u64,
    ino: u64,
    size: u64,
    mtime_ns: i64,
}

pub fn file_sig(path: &Path) -> Option<FileSig> {
    use std::os::unix::fs::MetadataExt;
    let m = fs::metadata(path).ok()?;
    Some(FileSig { dev: m.dev(), ino: m.ino(), size: m.size(), mtime_ns: m.mtime() * 1_000_000_000 + m.mtime_nsec() })
}

/// An image file under watch, with one live mapping of it to copy from.
#[derive(Clone, Debug)]
pub struct Watch {
    pub sig: Option<FileSig>,
    pub pid: u32,
    pub start: u64,
    pub end: u64,
}

/// The vDSO of this very process: every process on this kernel maps the
/// same one. Returns its identity and bytes (to save in the image cache).
pub fn own_vdso() -> (ImageId, Option<Vec<u8>>) {
    let bytes = read_own_vdso();
    let build_id = bytes.as_deref().and_then(build_id_of_bytes);
    (ImageId { kind: ImageKind::Vdso, path: VDSO_IMAGE.into(), build_id, content_hash: None }, bytes)
}

fn read_own_vdso() -> Option<Vec<u8>> {
    let maps = fs::read_to_string("/proc/self/maps").ok()?;
    let line = maps.lines().filter_map(loupe_model::maps::parse_line).find(|l| l.path == VDSO_IMAGE)?;
    let len = (line.end - line.start) as usize;
    let mut buf = vec![0u8; len];
    // SAFETY: the range is this process's own [vdso] mapping as listed in
    // /proc/self/maps; it is readable, never unmapped, and `buf` has `len` bytes.
    unsafe { std::ptr::copy_nonoverlapping(line.start as *const u8, buf.as_mut_ptr(), len) };
    Some(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    struct FakeFs {
        reads: usize,
        hashes: usize,
        bid: Option<BuildId>,
    }
    impl FileProbe for FakeFs {
        fn read_build_id(&mut self, _: &Path) -> Option<BuildId> {
            self.reads += 1;
            self.bid.clone()
        }
        fn content_hash(&mut self, _: &Path) -> Option<u64> {
            self.hashes += 1;
            Some(42)
        }
        fn file_key(&mut self, p: &Path) -> Option<(u64, i64)> {
            (p == Path::new("/proc/1/map_files/big")).then_some((77, 123))
        }
    }

    fn vdso() -> ImageId {
        ImageId { kind: ImageKind::Vdso, path: VDSO_IMAGE.into(), build_id: None, content_hash: None }
    }

    #[test]
    fn kernel_build_id_wins_and_needs_no_file_read() {
        // Checks that a build-id from the MMAP2 record is used as is.
        let mut t = ImageTable::default();
        let mut fs = FakeFs { reads: 0, hashes: 0, bid: None };
        let (i, new) = t.resolve(&mut fs, "/bin/x", Some(BuildId(vec![1])), Path::new("/x"), 5, &vdso());
        assert!(new);
        assert_eq!(t.get(i).build_id, Some(BuildId(vec![1])));
        assert_eq!(fs.reads, 0);
    }

    #[test]
    fn files_without_kernel_build_id_are_read_once_per_inode() {
        // Checks the fallback: build-id read from the file, cached by (path, inode); content hash without one.
        let mut t = ImageTable::default();
        let mut fs = FakeFs { reads: 0, hashes: 0, bid: Some(BuildId(vec![9])) };
        let a = t.resolve(&mut fs, "/bin/x", None, Path::new("/x"), 5, &vdso());
        let b = t.resolve(&mut fs, "/bin/x", None, Path::new("/x"), 5, &vdso());
        assert_eq!((a.0, fs.reads), (b.0, 1));
        let mut nobid = FakeFs { reads: 0, hashes: 0, bid: None };
        let (c, _) = t.resolve(&mut nobid, "/bin/x", None, Path::new("/x"), 6, &vdso());
        assert_eq!(t.get(c).content_hash, Some(42));
        assert_ne!(a.0, c);
    }

    #[test]
    fn file_without_build_id_or_inode_is_hashed_once() {
        // Regression: MMAP2 records with build-ids carry no inode, so a big file without a build-id was re-hashed at every mapping.
        let mut t = ImageTable::default();
        let mut fs = FakeFs { reads: 0, hashes: 0, bid: None };
        let p = Path::new("/proc/1/map_files/big");
        let a = t.resolve(&mut fs, "/lib/libLLVM.so", None, p, 0, &vdso());
        let b = t.resolve(&mut fs, "/lib/libLLVM.so", None, p, 0, &vdso());
        assert_eq!((a.0, fs.hashes, fs.reads), (b.0, 1, 1));
    }

    #[test]
    fn special_mappings_get_special_images() {
        // Checks vdso and anonymous executable memory are not treated as files.
        let mut t = ImageTable::default();
        let mut fs = FakeFs { reads: 0, hashes: 0, bid: None };
        let (v, _) = t.resolve(&mut fs, "[vdso]", None, Path::new("/x"), 0, &vdso());
        let (a, _) = t.resolve(&mut fs, "//anon", None, Path::new("/x"), 0, &vdso());
        assert_eq!(t.get(v).kind, ImageKind::Vdso);
        assert_eq!(t.get(a).kind, ImageKind::Anonymous);
        assert_eq!(fs.reads, 0);
    }

    #[test]
    fn own_vdso_has_a_build_id() {
        // Checks that the vDSO can be read from memory and identified.
        let (id, bytes) = own_vdso();
        assert!(bytes.is_some_and(|b| b.starts_with(b"\x7fELF")));
        assert!(id.build_id.is_some());
    }
}
