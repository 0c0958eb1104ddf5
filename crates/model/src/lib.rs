//! Loupe's data model: what a sample becomes once it is attributed to an
//! executable image, and how profiles merge.
//!
//! Design constraint: no IO and no platform code, so every invariant here is
//! testable on literal values. The collector produces [`Profile`]s, the store
//! persists them, the analysis tools read them.
//!
//! A profile is DCPI's unit of storage: one (image, event) pair, holding
//! `(process, image offset) -> count`. The process dimension lets `top` filter
//! by pid/comm without a second file per process; it costs a few bytes per
//! entry because entries are sorted by process, then offset, and delta-coded.
//!
//! ```
//! use loupe_model::*;
//! let img = ImageId::elf("/usr/bin/true", Some(BuildId::from_hex("abcd").unwrap()));
//! let mut a = Profile::new(img.clone(), EventName::new("cpu-clock"));
//! a.add(ProcessKey::new(42, "true"), ImageOffset(0x1040), 3, 3_000_000);
//! let mut b = Profile::new(img, EventName::new("cpu-clock"));
//! b.add(ProcessKey::new(42, "true"), ImageOffset(0x1040), 2, 2_000_000);
//! a.merge(&b).unwrap();
//! assert_eq!(a.total_samples(), 5);
//! ```

pub mod branches;
pub mod cgroup;
pub mod maps;
pub mod stacks;

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// An address in a process's virtual address space, as the CPU saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct RuntimeAddr(pub u64);

/// An offset into an image, the unit stored in the database.
///
/// For ELF files it is a **file offset** (what `mmap`'s pgoff speaks), so the
/// daemon never needs to parse ELF headers; the symbolizer converts it to an
/// ELF virtual address with the program headers. For the kernel it is the
/// distance from `_text` (so KASLR does not change it); for modules, from the
/// module's load base; for the `[unknown]` image it is the raw runtime address.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ImageOffset(pub u64);

/// A GNU build-id (usually 20 bytes of SHA-1), or our content hash when the
/// file has none.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct BuildId(pub Vec<u8>);

impl BuildId {
    pub fn from_hex(s: &str) -> Option<BuildId> {
        if !s.len().is_multiple_of(2) {
            return None;
        }
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).ok()).collect::<Option<Vec<u8>>>().map(BuildId)
    }
    pub fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }
}

impl fmt::Debug for BuildId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "BuildId({})", self.to_hex())
    }
}

/// What kind of code an image is; decides how offsets are symbolized.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum ImageKind {
    /// An ELF file mapped from the file system (executable or shared library).
    Elf,
    /// The kernel proper; offsets are relative to `_text`.
    Kernel,
    /// A kernel module; offsets are relative to its load base.
    KernelModule,
    /// The vDSO the kernel maps into every process.
    Vdso,
    /// Anonymous executable memory (JIT code, trampolines): no file behind it.
    Anonymous,
    /// Samples the daemon could not attribute to any image.
    Unknown,
}

/// How an image is identified for good: path plus build-id or content hash.
///
/// Two files at the same path with different build-ids are different images
/// (a binary replaced while running keeps its own profile).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ImageId {
    pub kind: ImageKind,
    /// Path as the kernel reported it (without a " (deleted)" suffix), or
    /// `[kernel]`, `[vdso]`, `[unknown]`, `[anon]`, a module name in brackets.
    pub path: String,
    /// Build-id from the ELF note; `None` when the file has none.
    pub build_id: Option<BuildId>,
    /// A hash of the file's content, used when there is no build-id.
    pub content_hash: Option<u64>,
}

impl ImageId {
    pub fn elf(path: &str, build_id: Option<BuildId>) -> ImageId {
        ImageId { kind: ImageKind::Elf, path: path.to_string(), build_id, content_hash: None }
    }
    pub fn kernel(build_id: Option<BuildId>) -> ImageId {
        ImageId { kind: ImageKind::Kernel, path: KERNEL_IMAGE.to_string(), build_id, content_hash: None }
    }
    pub fn unknown() -> ImageId {
        ImageId { kind: ImageKind::Unknown, path: UNKNOWN_IMAGE.to_string(), build_id: None, content_hash: None }
    }
    /// A short, file-name-safe key that is unique per identity: used to name
    /// the profile file of this image in the database. The same build at two
    /// paths (a copy in a temporary directory) gets two keys, so each
    /// profile keeps the path its samples were mapped from.
    pub fn file_key(&self) -> String {
        let base: String = self
            .path
            .rsplit('/')
            .next()
            .unwrap_or("")
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() || c == '.' || c == '-' || c == '_' { c } else { '_' })
            .take(40)
            .collect();
        let path_hash = fnv1a(self.path.as_bytes());
        let ident = match (&self.build_id, self.content_hash) {
            (Some(b), _) => b.to_hex().chars().take(40).collect(),
            (None, Some(h)) => format!("h{h:016x}"),
            (None, None) => return format!("{base}-p{path_hash:016x}"),
        };
        format!("{base}-{ident}-{:08x}", path_hash as u32)
    }
    pub fn is_kernel(&self) -> bool {
        matches!(self.kind, ImageKind::Kernel | ImageKind::KernelModule)
    }
}

/// Image names used for images that have no path of their own.
pub const KERNEL_IMAGE: &str = "[kernel]";
pub const UNKNOWN_IMAGE: &str = "[unknown]";
pub const VDSO_IMAGE: &str = "[vdso]";
pub const ANON_IMAGE: &str = "[anon]";
/// Anonymous code of a process that described it in a perf map or jitdump
/// is the image `[jit] PID` (kind [`ImageKind::Anonymous`]).
pub const JIT_IMAGE_PREFIX: &str = "[jit] ";

/// FNV-1a 64: a stable, dependency-free hash for names and small keys.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf29ce484222325;
    for b in bytes {
        h ^= *b as u64;
        h = h.wrapping_mul(0x100000001b3);
    }
    h
}

/// An event's canonical name, as perf spells it (`cpu-clock`, `cycles`, ...).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct EventName(pub String);

impl EventName {
    pub fn new(s: &str) -> EventName {
        EventName(s.to_string())
    }
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for EventName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The process a sample came from. `comm` is the name at the time of the
/// sample (after exec), so a pid reused by another program stays apart.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ProcessKey {
    pub pid: u32,
    pub comm: String,
}

impl ProcessKey {
    pub fn new(pid: u32, comm: &str) -> ProcessKey {
        ProcessKey { pid, comm: comm.to_string() }
    }
}

/// Why two profiles refuse to merge.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MergeError {
    #[error("cannot merge profiles of different images ({0} vs {1})")]
    DifferentImage(String, String),
    #[error("cannot merge profiles of different events ({0} vs {1})")]
    DifferentEvent(String, String),
}

/// Samples of one event in one image: DCPI's per-(image, EVENT) profile.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Profile {
    pub image: ImageId,
    pub event: EventName,
    /// Processes referenced by `entries`, by index.
    pub processes: Vec<ProcessKey>,
    /// (process index, offset) -> sample count.
    pub entries: BTreeMap<(u32, ImageOffset), u64>,
    /// Sum of the sampling periods of all samples (ns for clock events,
    /// events for counters): converts samples to time or event counts.
    pub period_sum: u64,
}

impl Profile {
    pub fn new(image: ImageId, event: EventName) -> Profile {
        Profile { image, event, processes: Vec::new(), entries: BTreeMap::new(), period_sum: 0 }
    }

    fn process_index(&mut self, p: ProcessKey) -> u32 {
        // Linear search is fine: an image rarely has more than a few hundred
        // processes per flush; the collector caches the index per process.
        match self.processes.iter().position(|q| *q == p) {
            Some(i) => i as u32,
            None => {
                self.processes.push(p);
                (self.processes.len() - 1) as u32
            }
        }
    }

    /// Adds `count` samples at `offset` in process `p`, with their summed period.
    pub fn add(&mut self, p: ProcessKey, offset: ImageOffset, count: u64, period: u64) {
        let i = self.process_index(p);
        self.add_indexed(i, offset, count, period);
    }

    /// Like [`Profile::add`] with a process index already obtained from
    /// [`Profile::intern_process`].
    pub fn add_indexed(&mut self, proc_index: u32, offset: ImageOffset, count: u64, period: u64) {
        *self.entries.entry((proc_index, offset)).or_insert(0) += count;
        self.period_sum += period;
    }

    pub fn intern_process(&mut self, p: ProcessKey) -> u32 {
        self.process_index(p)
    }

    pub fn total_samples(&self) -> u64 {
        self.entries.values().sum()
    }

    /// Adds every sample of `other` into `self`. Counts are summed exactly;
    /// process indices are remapped.
    pub fn merge(&mut self, other: &Profile) -> Result<(), MergeError> {
        if self.image != other.image {
            return Err(MergeError::DifferentImage(self.image.path.clone(), other.image.path.clone()));
        }
        if self.event != other.event {
            return Err(MergeError::DifferentEvent(self.event.0.clone(), other.event.0.clone()));
        }
        let remap: Vec<u32> = other.processes.iter().map(|p| self.process_index(p.clone())).collect();
        for (&(pi, off), &n) in &other.entries {
            *self.entries.entry((remap[pi as usize], off)).or_insert(0) += n;
        }
        self.period_sum += other.period_sum;
        Ok(())
    }

    /// Samples per offset, summed over the processes that `keep` accepts.
    pub fn by_offset(&self, keep: impl Fn(&ProcessKey) -> bool) -> BTreeMap<ImageOffset, u64> {
        let kept: Vec<bool> = self.processes.iter().map(keep).collect();
        let mut out = BTreeMap::new();
        for (&(pi, off), &n) in &self.entries {
            if kept[pi as usize] {
                *out.entry(off).or_insert(0) += n;
            }
        }
        out
    }
}

/// An (image, event)'s samples per process without their offsets: what a
/// database's index holds, enough for per-image totals without reading
/// (or faking) a profile.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageTotals {
    pub image: ImageId,
    pub event: EventName,
    /// Samples per process.
    pub processes: Vec<(ProcessKey, u64)>,
    /// Sum of the sampling periods of all samples, as [`Profile::period_sum`].
    pub period_sum: u64,
}

impl ImageTotals {
    /// The totals of a whole profile.
    pub fn of(p: &Profile) -> ImageTotals {
        let mut per_proc = vec![0u64; p.processes.len()];
        for (&(pi, _), &n) in &p.entries {
            per_proc[pi as usize] += n;
        }
        ImageTotals {
            image: p.image.clone(),
            event: p.event.clone(),
            processes: p.processes.iter().cloned().zip(per_proc).collect(),
            period_sum: p.period_sum,
        }
    }

    /// Samples of the processes that `keep` accepts.
    pub fn samples(&self, keep: impl Fn(&ProcessKey) -> bool) -> u64 {
        self.processes.iter().filter(|(p, _)| keep(p)).map(|(_, n)| n).sum()
    }
}

/// CPU mode a sample was taken in, from the perf record header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum CpuMode {
    Kernel,
    User,
    GuestKernel,
    GuestUser,
    Hypervisor,
    Unknown,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn img() -> ImageId {
        ImageId::elf("/bin/x", Some(BuildId(vec![1, 2, 3])))
    }

    #[test]
    fn totals_sum_each_process_and_filter() {
        // Checks that a profile's totals hold each process's samples and that `samples` sums the kept ones.
        let mut p = Profile::new(img(), EventName::new("cpu-clock"));
        p.add(ProcessKey::new(1, "a"), ImageOffset(0x10), 3, 30);
        p.add(ProcessKey::new(2, "b"), ImageOffset(0x10), 4, 40);
        p.add(ProcessKey::new(1, "a"), ImageOffset(0x20), 5, 50);
        let t = ImageTotals::of(&p);
        assert_eq!(t.processes, vec![(ProcessKey::new(1, "a"), 8), (ProcessKey::new(2, "b"), 4)]);
        assert_eq!((t.samples(|_| true), t.samples(|k| k.pid == 2), t.period_sum), (12, 4, 120));
    }

    #[test]
    fn merge_sums_counts_and_remaps_processes() {
        // Checks that merge adds counts exactly and maps process indices by identity.
        let ev = EventName::new("cpu-clock");
        let mut a = Profile::new(img(), ev.clone());
        a.add(ProcessKey::new(1, "a"), ImageOffset(10), 2, 20);
        let mut b = Profile::new(img(), ev);
        b.add(ProcessKey::new(2, "b"), ImageOffset(10), 5, 50);
        b.add(ProcessKey::new(1, "a"), ImageOffset(10), 1, 10);
        a.merge(&b).unwrap();
        assert_eq!(a.total_samples(), 8);
        assert_eq!(a.period_sum, 80);
        assert_eq!(a.processes.len(), 2);
        assert_eq!(a.by_offset(|p| p.pid == 1)[&ImageOffset(10)], 3);
        assert_eq!(a.by_offset(|p| p.pid == 2)[&ImageOffset(10)], 5);
    }

    #[test]
    fn merge_refuses_other_image_or_event() {
        // Checks that profiles of different identity never mix.
        let a0 = Profile::new(img(), EventName::new("cpu-clock"));
        let mut a = a0.clone();
        let other = Profile::new(ImageId::elf("/bin/x", Some(BuildId(vec![9]))), EventName::new("cpu-clock"));
        assert!(a.merge(&other).is_err());
        let other = Profile::new(img(), EventName::new("page-faults"));
        assert!(a.merge(&other).is_err());
        assert_eq!(a, a0);
    }

    #[test]
    fn file_key_is_safe_and_distinct() {
        // Checks that file keys have no path separators and differ by build-id.
        let a = ImageId::elf("/usr/lib/libc.so.6", Some(BuildId(vec![0xab])));
        let b = ImageId::elf("/usr/lib/libc.so.6", Some(BuildId(vec![0xcd])));
        assert!(a.file_key().starts_with("libc.so.6-ab-"), "{}", a.file_key());
        assert_ne!(a.file_key(), b.file_key());
        let copy = ImageId::elf("/tmp/x/libc.so.6", Some(BuildId(vec![0xab])));
        assert_ne!(a.file_key(), copy.file_key(), "same build at another path keeps its own file");
        assert!(!ImageId::kernel(None).file_key().contains('/'));
    }

    #[test]
    fn build_id_hex_round_trip() {
        // Checks hex parsing and printing agree and reject odd lengths.
        let b = BuildId::from_hex("00ff10").unwrap();
        assert_eq!(b.0, vec![0, 0xff, 0x10]);
        assert_eq!(b.to_hex(), "00ff10");
        assert!(BuildId::from_hex("abc").is_none());
    }
}
