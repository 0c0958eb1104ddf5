//! The in-kernel sample paths brought into the collector: flat buckets
//! from [`BpfAggregator`], or call stacks walked and counted in the kernel
//! by [`StackAggregator`] (`stacks.bpf.c`).
//!
//! With stacks, the daemon keeps the program told which code of each
//! process keeps frame pointers ([`framepointers`](crate::framepointers)),
//! so a sample whose chain passes through any other code below its root
//! (code without them, or mapped since the daemon last looked) takes the
//! stream path with its stack copy (DWARF-unwound, as `--backend stream`
//! does). The collector checks each walked stack once by the same rule
//! (`trustworthy_prefix`): a chain the program judged on stale ranges
//! (an image replaced at the same address) is cut there and marked as
//! stopped early.
//! With frame pointers only (`--stack-bytes 0`) every process is walked in
//! the kernel, as the stream backend's kernel chains would be.
//!
//! Each (process, user stack, kernel stack) is turned into (image, offset)
//! frames once and remembered until the process's mappings change.

use crate::rowspace::RowSpace;
use crate::unwindtable::{segment_bias, TableCache};
use crate::{images, Collector};
use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};
use loupe_bpf::stacks::{
    MappingCode, ProcessUnwind, StackAggregator, StackCounters, StackEntry, UnwindMapping, UnwindReason, UNWIND_ROW_BYTES,
};
use loupe_bpf::{AggEntry, BpfAggregator, Counters, RunStats};
use loupe_model::ImageKind;
use std::path::PathBuf;
use std::sync::Arc;

/// The chain length at which the kernel's call chain stops (`sample_max_stack`,
/// counting its context markers): a chain this long may have been cut short.
const KERNEL_CHAIN_LIMIT: usize = 127;

/// Which in-kernel program feeds the collector.
pub enum KernelAggregator {
    Flat(Box<BpfAggregator>),
    Stacks(Box<KernelStacks>),
}

impl KernelAggregator {
    /// The counters in the flat program's terms: `evicted` are samples sent
    /// to the perf ring (stacks: every `streamed_*` reason), never lost.
    pub fn counters(&self) -> Counters {
        match self {
            KernelAggregator::Flat(b) => b.counters(),
            KernelAggregator::Stacks(k) => {
                let c = k.bpf.counters();
                Counters { samples: c.samples, entries_created: c.new_keys, evicted: c.streamed(), dropped: 0 }
            }
        }
    }

    pub fn stack_counters(&self) -> Option<StackCounters> {
        match self {
            KernelAggregator::Flat(_) => None,
            KernelAggregator::Stacks(k) => Some(k.bpf.counters()),
        }
    }

    /// Per image without frame pointers, sorted by path (stacks only).
    pub fn stack_fallbacks(&self) -> Option<std::collections::BTreeMap<String, ImageFallbacks>> {
        match self {
            KernelAggregator::Flat(_) => None,
            KernelAggregator::Stacks(k) => Some(k.fallbacks_by_image()),
        }
    }

    pub fn run_stats(&self) -> RunStats {
        match self {
            KernelAggregator::Flat(b) => b.run_stats(),
            KernelAggregator::Stacks(k) => k.bpf.run_stats(),
        }
    }

    pub fn map_memory_bytes(&self) -> u64 {
        match self {
            KernelAggregator::Flat(b) => b.map_memory_bytes(),
            KernelAggregator::Stacks(k) => k.bpf.map_memory_bytes(),
        }
    }

    pub fn table_capacity(&self) -> u32 {
        match self {
            KernelAggregator::Flat(b) => b.table_capacity(),
            KernelAggregator::Stacks(k) => k.bpf.table_capacity(),
        }
    }

    /// Moves the kernel's counts into the collector; returns the entries moved.
    pub fn drain(&mut self, collector: &mut Collector, flat: &mut Vec<AggEntry>) -> Result<u64, loupe_bpf::Error> {
        match self {
            KernelAggregator::Flat(b) => {
                flat.clear();
                b.drain(flat)?;
                for e in flat.iter() {
                    collector.attribute(e.pid, e.ip, e.kernel, e.event_index, e.count, e.period);
                }
                Ok(flat.len() as u64)
            }
            KernelAggregator::Stacks(k) => k.drain(collector),
        }
    }

    /// Tells the stack program about processes whose mappings changed or
    /// that are gone (after side-band records were applied).
    pub fn sync(&mut self, collector: &mut Collector) {
        if let KernelAggregator::Stacks(k) = self {
            k.sync(collector);
        }
    }
}

/// Per image without frame pointers, for `--stats`.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ImageFallbacks {
    /// Distinct walked stacks cut in the image (the program was not told of it yet).
    pub cut: u64,
    /// Mappings of it left out when processes were described to the
    /// program (samples through them take stack copies).
    pub mappings_left_out: u64,
    /// Table walks (where frame pointers could not be believed) that
    /// stopped in it, by reason: those samples took stack copies, except
    /// at the depth limit.
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub unwind_stopped: std::collections::BTreeMap<UnwindReason, u64>,
    /// Rows of its unwind table in the kernel (0: none, no room, or evicted).
    #[serde(skip_serializing_if = "is_zero")]
    pub table_rows: u64,
    /// Times its table was evicted from the kernel's array (no described
    /// process mapped it and another image needed the room).
    #[serde(skip_serializing_if = "is_zero")]
    pub evicted: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// What the table walker knows of one image.
struct ImageUnwind {
    /// Its rows in the kernel's array, when it has a table and it fit.
    shard: Option<(u32, u32)>,
    /// (file offset, file size, virtual address) of its loadable segments.
    segments: Vec<(u64, u64, u64)>,
    path: String,
}

/// Derived stacks kept for all processes together (~100 bytes each, their
/// frames shared with the flush's table: a few MiB). Where stacks repeat
/// a few thousand cover the hot set; where they hardly do (deep recursion)
/// a larger cache held mostly stacks never seen again: 65,536 were 12 MiB
/// of a 44-MiB recorder of 16 qsortcb for no measurable CPU.
const DERIVED_LIMIT: usize = 1 << 14;

/// Stack walking in the kernel, seen from the collector.
pub struct KernelStacks {
    bpf: StackAggregator,
    frame_pointers_only: bool,
    entries: Vec<StackEntry>,
    /// Per process: frames derived from (user, kernel, Python stack)
    /// hashes and whether the user stack was walked by tables.
    derived: HashMap<u32, HashMap<StackHashes, Arc<Derived>>>,
    /// Entries in `derived`, all processes together.
    derived_len: usize,
    /// Unwind tables by image identity (compiled once, cached on disk).
    tables: TableCache,
    /// Per image index: its table's place in the kernel.
    unwind_images: HashMap<u32, ImageUnwind>,
    /// Free and used rows of the kernel's table array.
    rows: RowSpace,
    /// Per described process: the images whose shards its mappings use.
    proc_images: HashMap<u32, Vec<u32>>,
    /// Processes described to the table walker.
    unwound: HashSet<u32>,
    /// Per image index: built with frame pointers?
    verdicts: HashMap<u32, bool>,
    vdso: Option<Vec<u8>>,
    described: HashSet<u32>,
    /// Fallbacks by image path.
    pub fallbacks: HashMap<String, ImageFallbacks>,
}

/// The hashes of an entry's user, kernel and Python stacks (0: none), and
/// whether the user stack was walked by unwind tables.
type StackHashes = (u64, u64, u64, bool);

/// One stack in (image, offset) frames, ready to count (a truncated one
/// ends in the "stopped early" marker frame).
#[derive(Debug)]
struct Derived {
    frames: Arc<[(u32, u64)]>,
    truncated: bool,
    cut: bool,
    /// Python frames read at sample time are spliced in.
    python: bool,
    /// Its id in the stack table being filled ([`crate::stacks::StackState::cached_id`]),
    /// so a recurring stack is counted without hashing its frames again.
    counted_as: std::sync::atomic::AtomicU64,
}

impl KernelStacks {
    /// `table_dir` keeps compiled unwind tables between runs (by build-id).
    pub fn new(bpf: StackAggregator, frame_pointers_only: bool, table_dir: Option<PathBuf>) -> KernelStacks {
        KernelStacks {
            frame_pointers_only,
            entries: Vec::new(),
            derived: HashMap::new(),
            derived_len: 0,
            tables: TableCache::new(table_dir),
            unwind_images: HashMap::new(),
            rows: RowSpace::new(bpf.unwind_row_capacity()),
            proc_images: HashMap::new(),
            unwound: HashSet::new(),
            verdicts: HashMap::new(),
            vdso: images::own_vdso().1,
            described: HashSet::new(),
            fallbacks: HashMap::new(),
            bpf,
        }
    }

    pub fn aggregator(&self) -> &StackAggregator {
        &self.bpf
    }

    /// The program whose unwind tables other walkers may share (off-CPU
    /// chains); none when every stack is walked by frame pointers.
    pub fn unwind_tables(&self) -> Option<&StackAggregator> {
        (!self.frame_pointers_only).then_some(&self.bpf)
    }

    fn drain(&mut self, c: &mut Collector) -> Result<u64, loupe_bpf::Error> {
        let mut entries = std::mem::take(&mut self.entries);
        entries.clear();
        self.bpf.drain(&mut entries)?;
        for e in &entries {
            c.attribute(e.pid, e.ip, e.kernel, e.event_index, e.count, e.period);
            let d = self.derive(c, e);
            if d.python {
                c.count_python_in_kernel(e.count);
            }
            c.count_walked_stack(e.pid, e.event_index, &d.frames, (d.truncated, d.cut), &d.counted_as, e.count, e.period);
        }
        let n = entries.len() as u64;
        self.entries = entries;
        Ok(n)
    }

    /// Tells the table walker about a process's executable mappings: each
    /// with its image's table (compiled now if new), else by frame pointers
    /// when the image keeps them, else none.
    fn describe_for_tables(&mut self, c: &Collector, pid: u32) {
        let Some(p) = c.procs.get(pid) else { return };
        let maps: Vec<crate::process::Mapping> = p.mappings().copied().collect();
        let mut out = Vec::with_capacity(maps.len());
        let mut images = Vec::new();
        for m in maps {
            self.image_unwind(c, pid, m.image);
            let info = &self.unwind_images[&m.image];
            let bias = segment_bias(&info.segments, m.start, m.pgoff);
            let code = match (info.shard, bias) {
                (Some((first_row, nrows)), Some(_)) => {
                    images.push(m.image);
                    MappingCode::Table { first_row, nrows }
                }
                _ if self.has_frame_pointers(c, pid, m.image) => MappingCode::FramePointers,
                _ => MappingCode::None,
            };
            out.push(UnwindMapping { start: m.start, end: m.end, bias: bias.unwrap_or(0), image: m.image, code });
        }
        if self.bpf.set_unwind_process(pid, &out).is_ok() {
            self.unwound.insert(pid);
            self.proc_images.insert(pid, images);
        }
    }

    /// Compiles (or finds) an image's table and writes it into the kernel's
    /// array once; an image past the array's room gets none.
    fn image_unwind(&mut self, c: &Collector, pid: u32, image: u32) {
        if self.unwind_images.contains_key(&image) {
            return;
        }
        let id = c.images.get(image);
        let (vdso, mapped) = (self.vdso.clone(), matches!(id.kind, ImageKind::Elf).then(|| image_bytes(c, pid, image, &id.path)).flatten());
        let bytes: Option<&[u8]> = match id.kind {
            ImageKind::Vdso => vdso.as_deref(),
            _ => mapped.as_deref(),
        };
        let segments = bytes.map(crate::unwindtable::segments).unwrap_or_default();
        let table = bytes.and_then(|b| self.tables.get(id.build_id.as_ref(), b));
        let mut shard = None;
        if let Some(t) = table.filter(|t| !t.rows().is_empty()) {
            let n = t.rows().len() as u32;
            let first = self.rows.alloc(n).or_else(|| self.evict_unused().then(|| self.rows.alloc(n)).flatten());
            if let Some(first) = first {
                if self.bpf.write_unwind_rows(first, &t.to_bytes()).is_ok() {
                    shard = Some((first, n));
                } else {
                    self.rows.free(first, n);
                }
            }
        }
        let path = id.path.clone();
        self.fallbacks.entry(path.clone()).or_default().table_rows = shard.map_or(0, |s| s.1 as u64);
        self.unwind_images.insert(image, ImageUnwind { shard, segments, path });
    }

    /// Gives back the shards of images no described process maps (their
    /// processes exited or dropped them); true when any was freed. An
    /// evicted image is compiled again (or read from the cache) when a
    /// process maps it next.
    fn evict_unused(&mut self) -> bool {
        let with_shards = self.unwind_images.iter().filter(|(_, u)| u.shard.is_some()).map(|(&img, _)| img);
        let unused = crate::rowspace::unused_images(with_shards, self.proc_images.values());
        for image in &unused {
            let Some(u) = self.unwind_images.remove(image) else { continue };
            if let Some((first, n)) = u.shard {
                self.rows.free(first, n);
            }
            let f = self.fallbacks.entry(u.path).or_default();
            f.evicted += 1;
            f.table_rows = 0;
        }
        !unused.is_empty()
    }

    /// Per image: fallbacks, and table walks stopped in it by reason.
    fn fallbacks_by_image(&self) -> std::collections::BTreeMap<String, ImageFallbacks> {
        let mut out: std::collections::BTreeMap<String, ImageFallbacks> = self
            .fallbacks
            .iter()
            .filter(|(_, f)| f.cut + f.mappings_left_out + f.evicted > 0 || f.table_rows > 0)
            .map(|(p, f)| (p.clone(), f.clone()))
            .collect();
        for (image, reason, n) in self.bpf.unwind_failures() {
            let path = if image == u32::MAX { loupe_model::UNKNOWN_IMAGE.to_string() } else { self.image_path(image) };
            *out.entry(path).or_default().unwind_stopped.entry(reason).or_default() += n;
        }
        out
    }

    fn image_path(&self, image: u32) -> String {
        self.unwind_images.get(&image).map_or_else(|| format!("image {image}"), |i| i.path.clone())
    }

    /// Bytes of unwind rows in the kernel's array in use.
    pub fn table_bytes(&self) -> u64 {
        self.rows.used() as u64 * UNWIND_ROW_BYTES as u64
    }

    fn forget_derived(&mut self, pid: u32) {
        if let Some(m) = self.derived.remove(&pid) {
            self.derived_len -= m.len();
        }
    }

    /// The frames of an entry's stacks, derived once per process.
    fn derive(&mut self, c: &mut Collector, e: &StackEntry) -> Arc<Derived> {
        let hash = |s: &Option<loupe_bpf::stacks::Stack>| s.as_ref().map_or(0, |s| s.hash);
        let key = (hash(&e.user), hash(&e.kernel_stack), hash(&e.python), e.by_tables);
        if let Some(d) = self.derived.get(&e.pid).and_then(|m| m.get(&key)) {
            return d.clone();
        }
        let kernel_chain: &[u64] = e.kernel_stack.as_ref().map_or(&[], |s| &s.frames);
        let user_frames = e.user.as_ref().map(|s| s.frames());
        let (user_chain, bad_frame) = crate::stacks::user_space_prefix(user_frames.as_deref().unwrap_or(&[]));
        let kernel_pcs = kernel_chain.iter().enumerate().map(|(i, &a)| if i == 0 { a } else { a - 1 });
        let mut native: Vec<(u64, (u32, u64))> = kernel_pcs.map(|a| (a, c.kernel_location(a))).collect();
        let pc_in_user = native.is_empty();
        let user_pcs: Vec<u64> =
            user_chain.iter().enumerate().map(|(i, &a)| if i == 0 && pc_in_user { a } else { a.wrapping_sub(1) }).collect();
        let user: Vec<(u32, u64)> = user_pcs.iter().map(|&a| c.frame_of(e.pid, a)).collect();
        // A stack the tables walked is right through code without frame pointers.
        let (keep, cut) = if self.frame_pointers_only || e.by_tables {
            (user.len(), false)
        } else {
            let images: Vec<u32> = user.iter().map(|f| f.0).collect();
            let mut fp = |img: u32| self.has_frame_pointers(c, e.pid, img);
            trustworthy_prefix(&images, &mut fp)
        };
        if cut {
            let path = c.images.get(user[keep - 1].0).path.clone();
            self.fallbacks.entry(path).or_default().cut += 1;
        }
        native.extend(user_pcs.iter().copied().zip(user[..keep].iter().copied()));
        let (frames, py_truncated, python) = with_python(c, e, &native);
        let truncated = cut
            || bad_frame
            || py_truncated
            || e.lost_stack
            || e.depth_limit
            || kernel_chain.len() + user_chain.len() + 2 >= KERNEL_CHAIN_LIMIT;
        let mut frames = frames;
        if let Some(marker) = truncated.then(|| c.stacks.as_ref().map(|st| st.truncated_image)).flatten() {
            frames.push((marker, 0));
        }
        // One copy of each stack for every process whose samples reach it
        // (16 copies of one program on 16 CPUs derive the same frames), the
        // one the flush's table keeps.
        let counted_as = crate::stacks::StackState::uncached();
        let frames = match c.stacks.as_mut() {
            Some(st) => st.table_copy(&frames, &counted_as),
            None => frames.into(),
        };
        let d = Arc::new(Derived { frames, truncated, cut, python, counted_as });
        // Programs whose stacks rarely repeat (deep recursion) would grow
        // this without bound: past the limit the process with the most
        // entries starts again (emptying all of them made every process
        // derive its stacks again: +30% daemon CPU on 16 CPUs of qsortcb).
        if self.derived_len >= DERIVED_LIMIT {
            if let Some(pid) = self.derived.iter().max_by_key(|(_, m)| m.len()).map(|(&pid, _)| pid) {
                self.forget_derived(pid);
            }
        }
        self.derived.entry(e.pid).or_default().insert(key, d.clone());
        self.derived_len += 1;
        d
    }

    /// Judges an image once; anything that is not user code counts as
    /// having frame pointers (the kernel's own unwinder walks the kernel).
    fn has_frame_pointers(&mut self, c: &Collector, pid: u32, image: u32) -> bool {
        if let Some(&v) = self.verdicts.get(&image) {
            return v;
        }
        let id = c.images.get(image);
        let verdict = match id.kind {
            ImageKind::Vdso => self.vdso.as_deref().and_then(crate::framepointers::judge),
            ImageKind::Elf => image_bytes(c, pid, image, &id.path).and_then(|m| crate::framepointers::judge(&m)),
            _ => return true,
        };
        let v = verdict.is_some_and(|v| v.has_frame_pointers());
        self.verdicts.insert(image, v);
        v
    }

    fn sync(&mut self, c: &mut Collector) {
        // At every side-band drain, so a process's samples take stack copies
        // for one poll interval at most. A process asked for again was asked
        // for while it was being described.
        for (pid, words) in self.bpf.take_fresh_python() {
            c.name_python_early(pid, &words);
        }
        let wanted: Vec<u32> = self.bpf.take_unwind_wanted().into_iter().filter(|p| !self.unwound.contains(p)).collect();
        for pid in wanted {
            self.describe_for_tables(c, pid);
        }
        let changed: Vec<u32> = c.stacks.as_mut().map(|st| st.changed.drain().collect()).unwrap_or_default();
        for pid in changed {
            self.forget_derived(pid);
            if self.unwound.contains(&pid) {
                self.describe_for_tables(c, pid);
            }
            if c.procs.get(pid).is_none() {
                continue;
            }
            if let Some(layout) = c.python_layout(pid) {
                if self.bpf.set_python(pid, &layout).is_ok() {
                    c.python_in_kernel(pid);
                    self.described.insert(pid);
                }
            }
            // With frame pointers only the program consults no process table.
            if self.frame_pointers_only {
                continue;
            }
            let p = self.describe(c, pid);
            if self.bpf.set_process(pid, &p).is_ok() {
                self.described.insert(pid);
            }
        }
        let gone: Vec<u32> = self.described.union(&self.unwound).copied().filter(|&pid| c.procs.get(pid).is_none()).collect();
        for pid in gone {
            self.bpf.forget_process(pid);
            self.described.remove(&pid);
            self.unwound.remove(&pid);
            self.proc_images.remove(&pid);
            self.forget_derived(pid);
        }
    }

    /// What the program needs to know of one process: the ranges of its
    /// executable mappings built with frame pointers, merged.
    fn describe(&mut self, c: &Collector, pid: u32) -> ProcessUnwind {
        let maps: Vec<crate::process::Mapping> = c.procs.get(pid).map(|p| p.mappings().copied().collect()).unwrap_or_default();
        let mut ranges: Vec<(u64, u64)> = Vec::new();
        for m in maps {
            if !self.has_frame_pointers(c, pid, m.image) {
                let path = c.images.get(m.image).path.clone();
                self.fallbacks.entry(path).or_default().mappings_left_out += 1;
                continue;
            }
            match ranges.last_mut() {
                Some(last) if last.1 == m.start => last.1 = m.end,
                _ => ranges.push((m.start, m.end)),
            }
        }
        ProcessUnwind { stream: false, frame_pointers: ranges }
    }
}

/// A stack's native frames (pc, frame), leaf first, with the Python
/// frames the program read at sample time spliced in above their
/// interpreter activations; whether outer Python frames are missing; and
/// whether any were spliced.
fn with_python(c: &mut Collector, e: &StackEntry, native: &[(u64, (u32, u64))]) -> (Vec<(u32, u64)>, bool, bool) {
    let read = e.python.as_ref().and_then(|py| c.python_read_in_kernel(e.pid, &py.frames, 0));
    match read {
        Some((eval, py, truncated)) if !py.is_empty() => {
            let pid = e.pid;
            (crate::pyframes::splice(native, &eval, &py, &mut |f| c.python_frame(pid, f)), truncated, true)
        }
        _ => (native.iter().map(|n| n.1).collect(), false, false),
    }
}

/// How much of a frame-pointer chain to believe, given the image of each
/// user frame (leaf first): every frame up to and including the first one
/// below the root in code without frame pointers. The frame above it was
/// found through a frame pointer that code did not maintain (at the leaf,
/// its caller was skipped); a root frame there has nothing above it to get
/// wrong. `needs_copy` in stacks.bpf.c applies the same rule before
/// counting. Returns (frames to keep, whether the chain was cut).
pub(crate) fn trustworthy_prefix(images: &[u32], has_frame_pointers: &mut dyn FnMut(u32) -> bool) -> (usize, bool) {
    let below_root = if images.len() == 1 { 1 } else { images.len().saturating_sub(1) };
    match (0..below_root).find(|&i| !has_frame_pointers(images[i])) {
        Some(i) => (i + 1, true),
        None => (images.len(), false),
    }
}

/// An image's bytes, mapped: through a live mapping of it when one exists
/// (the exact file mapped), else from its path.
pub(crate) fn image_bytes(c: &Collector, pid: u32, image: u32, path: &str) -> Option<memmap2::Mmap> {
    let live = c.procs.get(pid).and_then(|p| p.mappings().find(|m| m.image == image)).map(|m| images::map_files_path(pid, m.start, m.end));
    let f = live.and_then(|p| std::fs::File::open(p).ok()).or_else(|| std::fs::File::open(PathBuf::from(path)).ok())?;
    // SAFETY: a read-only private mapping of an executable image, read once
    // and dropped; a concurrent truncation could fault, the same risk the
    // DWARF unwinder's mappings of images take.
    unsafe { memmap2::Mmap::map(&f) }.ok()
}

impl Collector {
    /// Counts `n` samples of a stack walked in the kernel (the flat profile
    /// got their leaf through [`Collector::attribute`]).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn count_walked_stack(
        &mut self,
        pid: u32,
        event: u16,
        frames: &Arc<[(u32, u64)]>,
        (truncated, cut): (bool, bool),
        counted_as: &std::sync::atomic::AtomicU64,
        n: u64,
        period: u64,
    ) {
        let Some(mut st) = self.stacks.take() else { return };
        let stack = match st.cached_id(counted_as) {
            Some(id) => id,
            None => st.intern_cached(frames, counted_as),
        };
        st.count_id(pid, self.comm_id(pid), event, stack, n, period);
        st.stats.frames += frames.len() as u64 * n;
        st.stats.truncated += truncated as u64 * n;
        st.stats.stacks += n;
        st.stats.kernel_walks += n;
        st.stats.cut += cut as u64 * n;
        self.stacks = Some(st);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chains_are_cut_after_the_first_caller_without_frame_pointers() {
        // Checks the kept prefix of frame-pointer chains: all of an all-FP chain, up to a non-FP leaf or caller, and a non-FP root kept whole.
        let fp = |i: u32| i != 9;
        // leaf, callers..., root: image 9 has no frame pointers.
        assert_eq!(trustworthy_prefix(&[1, 1, 2, 2], &mut |i| fp(i)), (4, false));
        assert_eq!(trustworthy_prefix(&[1, 9, 2, 2], &mut |i| fp(i)), (2, true), "frames above a libc callback are not believed");
        assert_eq!(trustworthy_prefix(&[1, 1, 9, 7, 7], &mut |i| fp(i)), (3, true));
        assert_eq!(trustworthy_prefix(&[1, 1, 1, 9], &mut |i| fp(i)), (4, false), "__libc_start_call_main at the root is fine");
        assert_eq!(trustworthy_prefix(&[9, 1, 1], &mut |i| fp(i)), (1, true), "a leaf without frame pointers hides its caller");
        assert_eq!(trustworthy_prefix(&[9], &mut |i| fp(i)), (1, true));
        assert_eq!(trustworthy_prefix(&[1], &mut |i| fp(i)), (1, false));
        assert_eq!(trustworthy_prefix(&[], &mut |i| fp(i)), (0, false));
    }
}
