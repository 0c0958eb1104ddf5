//! The stack path beside [`Collector::attribute`]: a sample's kernel call
//! chain and its user stack (DWARF-unwound from the copied stack, or the
//! kernel's frame-pointer chain when no copy was taken) become a list of
//! (image, offset) frames, counted per (process, event, stack).
//!
//! Caller frames are stored at return address - 1 so they symbolize to
//! the call site. An unwind that did not reach the root ends with a
//! [`truncated_image`] frame and is counted in [`StackStats`].

use crate::unwind::{End, Unwinders};
use crate::{images, kernel, Collector};
use foldhash::{HashMap, HashMapExt};
use loupe_model::stacks::{truncated_image, Frame, StackProfile};
use loupe_model::{ImageOffset, ProcessKey};
use loupe_perf::Sample;
use std::sync::Arc;

/// How stacks fared, for `record`'s summary and the daemon's stats.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct StackStats {
    pub stacks: u64,
    /// Samples whose user part was unwound from a stack copy (DWARF/FP).
    pub dwarf_unwinds: u64,
    /// Samples whose unwind stopped before the root (marked in the stack).
    pub truncated: u64,
    pub frames: u64,
    /// Samples whose stack was walked and counted in the kernel (BPF).
    pub kernel_walks: u64,
    /// Of those, samples whose frame-pointer chain was cut where it passed
    /// through code without frame pointers (marked as stopped early).
    pub cut: u64,
}

#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct Key {
    pid: u32,
    comm: u32,
    event: u16,
    stack: u32,
}

/// Stacks counted since the last flush.
pub struct StackState {
    pub(crate) unwinders: Unwinders,
    /// Processes whose mappings changed since the BPF stack walker was last
    /// told about them (see [`crate::kstacks`]).
    pub(crate) changed: foldhash::HashSet<u32>,
    /// Ids in `table` by the hash of their frames: each stack is kept once,
    /// in `table`, shared with the derived stacks of [`crate::kstacks`] that
    /// name it (a map keyed by the frames held a 16-byte key per stack more).
    stacks: loupe_model::stacks::SliceIndex,
    table: Vec<Arc<[(u32, u64)]>>,
    counts: HashMap<Key, u64>,
    /// By event index (a handful of events: an array, not a map, per entry).
    period_sums: Vec<u64>,
    pub stats: StackStats,
    pub(crate) truncated_image: u32,
    scratch: Vec<u64>,
    /// Bumped whenever `table` is emptied: ids cached beside derived
    /// stacks from an older table are stale (never u32::MAX, the "none" mark).
    table_generation: u32,
}

impl StackState {
    pub(crate) fn new(vdso: Option<Vec<u8>>, truncated_image: u32) -> StackState {
        StackState {
            unwinders: Unwinders::new(vdso),
            changed: <foldhash::HashSet<u32> as foldhash::HashSetExt>::new(),
            stacks: Default::default(),
            table: Vec::new(),
            counts: HashMap::new(),
            period_sums: Vec::new(),
            stats: StackStats::default(),
            truncated_image,
            scratch: Vec::new(),
            table_generation: 0,
        }
    }

    /// Counts `n` samples of one stack (their periods summing to `period`);
    /// `comm` is the aggregator's id for the process's name.
    pub(crate) fn count(&mut self, pid: u32, comm: u32, event: u16, frames: &[(u32, u64)], n: u64, period: u64) {
        let stack = self.intern(frames);
        self.count_id(pid, comm, event, stack, n, period);
    }

    /// Counts `n` samples of the stack `stack` (an id from [`StackState::intern`]).
    pub(crate) fn count_id(&mut self, pid: u32, comm: u32, event: u16, stack: u32, n: u64, period: u64) {
        *self.counts.entry(Key { pid, comm, event, stack }).or_insert(0) += n;
        let e = event as usize;
        if e >= self.period_sums.len() {
            self.period_sums.resize(e + 1, 0);
        }
        self.period_sums[e] += period;
    }

    /// The id of `frames` in the table being filled, added when new.
    pub(crate) fn intern(&mut self, frames: &[(u32, u64)]) -> u32 {
        match self.find(frames) {
            (Some(s), _) => s,
            (None, hash) => self.add(hash, frames.into()),
        }
    }

    /// The id of `frames` if the table has them, and their hash.
    fn find(&self, frames: &[(u32, u64)]) -> (Option<u32>, u64) {
        self.stacks.find(&self.table, frames)
    }

    /// The table's copy of `frames` (added when new), its id remembered in
    /// `cell` as [`StackState::intern_cached`] does.
    pub(crate) fn table_copy(&mut self, frames: &[(u32, u64)], cell: &std::sync::atomic::AtomicU64) -> Arc<[(u32, u64)]> {
        let id = self.intern(frames);
        self.remember(cell, id);
        self.table[id as usize].clone()
    }

    /// [`StackState::intern`] of frames already shared: kept without a copy.
    fn intern_shared(&mut self, frames: &Arc<[(u32, u64)]>) -> u32 {
        match self.find(frames) {
            (Some(s), _) => s,
            (None, hash) => self.add(hash, frames.clone()),
        }
    }

    fn add(&mut self, hash: u64, frames: Arc<[(u32, u64)]>) -> u32 {
        let s = self.table.len() as u32;
        self.table.push(frames);
        self.stacks.insert(&self.table, hash, s);
        s
    }

    /// A stack id remembered beside a derived stack: valid only for the
    /// table it was taken from (the table is emptied at every flush).
    pub(crate) const fn uncached() -> std::sync::atomic::AtomicU64 {
        std::sync::atomic::AtomicU64::new(u64::MAX)
    }

    pub(crate) fn cached_id(&self, cell: &std::sync::atomic::AtomicU64) -> Option<u32> {
        let v = cell.load(std::sync::atomic::Ordering::Relaxed);
        ((v >> 32) as u32 == self.table_generation).then_some(v as u32)
    }

    /// [`StackState::intern_shared`], remembering the id in `cell`.
    pub(crate) fn intern_cached(&mut self, frames: &Arc<[(u32, u64)]>, cell: &std::sync::atomic::AtomicU64) -> u32 {
        let id = self.intern_shared(frames);
        self.remember(cell, id);
        id
    }

    /// Keeps `id`, valid for this table only, in `cell` ([`StackState::cached_id`]).
    fn remember(&self, cell: &std::sync::atomic::AtomicU64, id: u32) {
        cell.store(((self.table_generation as u64) << 32) | id as u64, std::sync::atomic::Ordering::Relaxed);
    }
}

impl Collector {
    /// Turns stack collection on; samples must carry call chains, and
    /// user stack copies for DWARF unwinding.
    pub fn enable_stacks(&mut self) {
        let (_, vdso) = images::own_vdso();
        let truncated = self.images.intern(truncated_image()).0;
        self.stacks = Some(Box::new(StackState::new(vdso, truncated)));
    }

    pub fn stack_stats(&self) -> Option<StackStats> {
        self.stacks.as_ref().map(|s| s.stats)
    }

    /// Counts one sample's whole stack (the flat profile got its leaf
    /// through [`Collector::attribute`]).
    pub(crate) fn sample_stack(&mut self, s: &Sample) {
        let Some(mut st) = self.stacks.take() else { return };
        let mut frames: Vec<(u32, u64)> = Vec::with_capacity(32);
        let kernel_part = s.callchain.iter().take_while(|&&a| a >= kernel::KERNEL_SPACE_START);
        for (i, &a) in kernel_part.enumerate() {
            let (image, off) = self.kernel_location(if i == 0 { a } else { a - 1 });
            frames.push((image, off));
        }
        let mut user = std::mem::take(&mut st.scratch);
        user.clear();
        let truncated = match s.user_regs {
            Some(regs) if !s.user_stack.is_empty() => {
                st.stats.dwarf_unwinds += 1;
                let procs = &self.procs;
                let imgs = &self.images;
                let mut maps = || user_mappings(procs, imgs, s.pid);
                st.unwinders.unwind(s.pid, &mut maps, regs, &s.user_stack, &mut user) == End::Truncated
            }
            // A kernel thread, or a user thread without a copy: the kernel's
            // frame-pointer chain (the whole of it when it hit the 127 cap is suspect).
            _ => {
                let (chain, bad_frame) = user_part_of_chain(&s.callchain);
                user.extend_from_slice(chain);
                bad_frame || s.callchain.len() >= 127
            }
        };
        let pc_in_user = frames.is_empty();
        let native: Vec<(u64, (u32, u64))> = user
            .iter()
            .enumerate()
            .map(|(i, &a)| {
                let a = if i == 0 && pc_in_user { a } else { a.wrapping_sub(1) };
                (a, self.frame_of(s.pid, a))
            })
            .collect();
        match self.python_stack(s.pid, s.tid, s.user_regs.map(|r| (r.ip, r.sp))) {
            Some((eval, py)) if !py.is_empty() => {
                let pid = s.pid;
                frames.extend(crate::pyframes::splice(&native, &eval, &py, &mut |f| self.python_frame(pid, f)));
            }
            _ => frames.extend(native.iter().map(|n| n.1)),
        }
        st.scratch = user;
        if truncated {
            st.stats.truncated += 1;
            frames.push((st.truncated_image, 0));
        }
        st.stats.stacks += 1;
        st.stats.frames += frames.len() as u64;
        st.count(s.pid, self.comm_id(s.pid), s.event_index as u16, &frames, 1, s.period);
        self.stacks = Some(st);
    }

    pub(crate) fn frame_of(&mut self, pid: u32, addr: u64) -> (u32, u64) {
        if addr >= kernel::KERNEL_SPACE_START {
            return self.kernel_location(addr);
        }
        match self.user_location(pid, addr) {
            Some((image, off, _)) => (image, off),
            None => (self.unknown_image, addr),
        }
    }

    /// Hands over every stack counted since the last call, one profile per event.
    pub fn take_stacks(&mut self) -> Vec<StackProfile> {
        let pids: Vec<u32> = self.stacks.as_ref().map_or(Vec::new(), |st| st.counts.keys().map(|k| k.pid).collect());
        let jit = self.jit_images(pids.into_iter().collect::<foldhash::HashSet<u32>>());
        let anon = self.anon_image;
        let dir = self.jit.dir().cloned();
        self.keep_python_tables(dir.as_ref());
        let Some(st) = self.stacks.as_mut() else { return Vec::new() };
        // The interval's table is given back as the profiles grow (at a flush
        // both were whole at once): its index first, each stack after its
        // last count, the counts in stack order.
        st.stacks = Default::default();
        let mut table = std::mem::take(&mut st.table);
        let mut counts: Vec<(Key, u64)> = std::mem::take(&mut st.counts).into_iter().collect();
        counts.sort_unstable_by_key(|(k, _)| k.stack);
        let gone: Arc<[(u32, u64)]> = Arc::new([]);
        let mut out: HashMap<u16, StackProfile> = HashMap::new();
        let mut image_ix: HashMap<(u16, u32), u32> = HashMap::new();
        let mut frames: Vec<Frame> = Vec::new();
        for (i, &(k, n)) in counts.iter().enumerate() {
            let p = out.entry(k.event).or_insert_with(|| StackProfile::new(self.events[k.event as usize].clone()));
            frames.clear();
            frames.extend(table[k.stack as usize].iter().map(|&(img, off)| {
                let img = if img == anon { jit.get(&k.pid).copied().unwrap_or(img) } else { img };
                let image = *image_ix.entry((k.event, img)).or_insert_with(|| p.intern_image(self.images.get(img)));
                Frame { image, offset: ImageOffset(off) }
            }));
            p.add_frames(&ProcessKey::new(k.pid, self.agg.comm(k.comm)), &frames, n);
            if counts.get(i + 1).is_none_or(|next| next.0.stack != k.stack) {
                table[k.stack as usize] = gone.clone();
            }
        }
        for (ev, p) in out.iter_mut() {
            p.period_sum = st.period_sums.get(*ev as usize).copied().unwrap_or(0);
        }
        st.period_sums.clear();
        st.table_generation = (st.table_generation + 1) % u32::MAX;
        let mut v: Vec<StackProfile> = out.into_values().collect();
        v.sort_by(|a, b| a.event.cmp(&b.event));
        v
    }
}

/// A process's executable mappings, each with the path its image is best
/// read from: the exact mapped file through /proc, else its path; None for the vDSO.
/// The user frames of a kernel call chain (after its kernel part), and
/// whether they end early (see [`user_space_prefix`]).
fn user_part_of_chain(chain: &[u64]) -> (&[u64], bool) {
    user_space_prefix(&chain[chain.iter().take_while(|&&a| a >= kernel::KERNEL_SPACE_START).count()..])
}

/// A user stack up to its first address where no user code can be, where a
/// frame pointer led into garbage, and whether it ended there (a last 0 is
/// the outermost frame's null return address: the root, not an early end).
pub(crate) fn user_space_prefix(user: &[u64]) -> (&[u64], bool) {
    let valid = user.iter().take_while(|&&a| kernel::USER_CODE.contains(&a)).count();
    (&user[..valid], valid < user.len() && user[valid..] != [0])
}

fn user_mappings(
    procs: &crate::process::Processes,
    imgs: &images::ImageTable,
    pid: u32,
) -> Vec<(crate::process::Mapping, Option<std::path::PathBuf>)> {
    let Some(p) = procs.get(pid) else { return Vec::new() };
    p.mappings()
        .filter_map(|m| {
            let id = imgs.get(m.image);
            match id.kind {
                loupe_model::ImageKind::Vdso => Some((*m, None)),
                loupe_model::ImageKind::Elf => {
                    let live = images::map_files_path(pid, m.start, m.end);
                    Some((*m, Some(if live.exists() { live } else { std::path::PathBuf::from(&id.path) })))
                }
                _ => None,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chain_s_user_part_ends_at_a_frame_where_no_user_code_can_be() {
        // Checks the kernel part is skipped and a garbage return address
        // (here one in kernel space, after user frames) ends the user part.
        let k = 0xffff_ffff_8100_0000;
        assert_eq!(user_part_of_chain(&[k, k + 8, 0x401000, 0x402000]), (&[0x401000, 0x402000][..], false));
        assert_eq!(user_part_of_chain(&[0x401000, k, 0x402000]), (&[0x401000][..], true));
        assert_eq!(user_part_of_chain(&[0x401000, 0x0200_0000_0000_0000]), (&[0x401000][..], true));
        // A return address of 0 (whose call site, 0 - 1, is a kernel address).
        assert_eq!(user_part_of_chain(&[0x401000, 0, 0x402000]), (&[0x401000][..], true));
        assert_eq!(user_part_of_chain(&[0x401000, 0]), (&[0x401000][..], false));
    }
}
