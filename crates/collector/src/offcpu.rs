//! Off-CPU time from [`loupe_bpf::offcpu::OffCpuAggregator`] brought into the collector.
//!
//! Blocked time is stored as the event [`OFF_CPU_EVENT`], weighted in
//! nanoseconds the way every event is: a profile counts samples and sums
//! their periods, so an off-CPU block counts one sample per microsecond
//! (rounded) with a period sum of its exact nanoseconds. `top -e off-cpu`
//! then reads microseconds, and shares of time are shares of samples.
//!
//! The flat profile places each block at the thread's user-space pc (the
//! system call it blocked in; the kernel's for kernel threads). The stack
//! profile gets its kernel frames, then its user frames, with one frame
//! on top naming the reason (`[off-cpu: lock]`), so flame graphs and
//! `top --children` split time by reason. User chains are walked by the
//! stack program's unwind tables where the daemon has them (BPF backend
//! with stacks), complete through code without frame pointers; otherwise
//! (the stream backend, `--stack-bytes 0`, a process not yet described, a
//! table walk that stopped) they are frame-pointer walks and, as for
//! samples walked in the kernel, a chain through code without frame
//! pointers is cut there and marked `[unwind stopped]`.
//!
//! On-CPU entries (`Reason::Running`) and every off-CPU entry also sum
//! per thread into [`ThreadTimes`], the wall-clock view.

use crate::Collector;
use loupe_bpf::offcpu::{OffCpuEntry, Reason};
use loupe_model::{ImageId, ImageKind};
use loupe_store::meta::{ThreadTime, ThreadTimes};
use std::collections::HashMap;

/// The event off-CPU time is stored as.
pub const OFF_CPU_EVENT: &str = "off-cpu";
/// Nanoseconds one off-CPU sample stands for.
pub const NS_PER_SAMPLE: u64 = 1000;

/// The pseudo-image of the frame naming why a thread was off the CPU.
pub fn reason_image(r: Reason) -> ImageId {
    ImageId { kind: ImageKind::Unknown, path: format!("[off-cpu: {}]", r.name()), build_id: None, content_hash: None }
}

/// What the collector keeps between drains for off-CPU time.
#[derive(Default)]
pub(crate) struct OffCpuState {
    event: u16,
    reasons: HashMap<Reason, u32>,
    /// Per image index: built with frame pointers?
    verdicts: HashMap<u32, bool>,
    /// Where `__schedule` lies: kernel frames above it (the tracepoint and
    /// this program) are left out of off-CPU stacks.
    schedule: Option<(u64, u64)>,
    threads: ThreadTimes,
}

impl Collector {
    /// Adds the event [`OFF_CPU_EVENT`]; returns its index.
    pub fn enable_off_cpu(&mut self) -> u16 {
        self.events.push(loupe_model::EventName::new(OFF_CPU_EVENT));
        let event = (self.events.len() - 1) as u16;
        let reasons = Reason::OFF_CPU.iter().map(|&r| (r, self.images.intern(reason_image(r)).0)).collect();
        let schedule = symbol_range(&std::fs::read_to_string("/proc/kallsyms").unwrap_or_default(), "__schedule");
        self.off_cpu = Some(Box::new(OffCpuState { event, reasons, schedule, ..Default::default() }));
        event
    }

    /// Counts drained off-CPU and on-CPU entries.
    pub fn count_off_cpu(&mut self, entries: &[OffCpuEntry]) {
        let Some(mut st) = self.off_cpu.take() else { return };
        for e in entries {
            self.add_thread_time(&mut st, e);
            if e.reason != Reason::Running {
                self.count_block(&mut st, e);
            }
        }
        self.off_cpu = Some(st);
    }

    /// Hands over the per-thread times summed since the last call.
    pub fn take_thread_times(&mut self) -> ThreadTimes {
        self.off_cpu.as_mut().map(|s| std::mem::take(&mut s.threads)).unwrap_or_default()
    }

    fn add_thread_time(&mut self, st: &mut OffCpuState, e: &OffCpuEntry) {
        let process = self.procs.get(e.pid).map(|p| self.agg.comm(p.comm).to_string());
        let t = st
            .threads
            .entry((e.pid, e.tid))
            .or_insert_with(|| ThreadTime { comm: thread_comm(e.pid, e.tid, process), ..Default::default() });
        match Reason::OFF_CPU.iter().position(|&r| r == e.reason) {
            Some(i) => t.off_cpu_ns[i] += e.ns,
            None => t.on_cpu_ns += e.ns,
        }
    }

    fn count_block(&mut self, st: &mut OffCpuState, e: &OffCpuEntry) {
        let n = (e.ns + NS_PER_SAMPLE / 2) / NS_PER_SAMPLE;
        if n == 0 {
            return;
        }
        let kernel: &[u64] = e.kernel_stack.as_ref().map_or(&[], |s| &s.frames);
        let kernel = from_schedule(kernel, st.schedule);
        let user_frames = e.user.as_ref().map(|s| s.frames());
        let (user, bad_frame) = crate::stacks::user_space_prefix(user_frames.as_deref().unwrap_or(&[]));
        let (ip, in_kernel) = match (user.first(), kernel.first()) {
            (Some(&u), _) => (u, false),
            (None, Some(&k)) => (k, true),
            (None, None) => (0, true),
        };
        // Off-CPU time is not sampled: the collector's sample counts stay those of the sampling events.
        let before = self.stats;
        self.attribute(e.pid, ip, in_kernel, st.event, n, e.ns);
        self.stats = before;
        let mut frames: Vec<(u32, u64)> = vec![(st.reasons[&e.reason], 0)];
        frames.extend(kernel.iter().enumerate().map(|(i, &a)| self.kernel_location(if i == 0 { a } else { a - 1 })));
        let user_frames: Vec<(u32, u64)> =
            user.iter().enumerate().map(|(i, &a)| self.frame_of(e.pid, if i == 0 { a } else { a.wrapping_sub(1) })).collect();
        // A chain the tables walked is right through code without frame pointers.
        let (keep, cut) = if e.by_tables {
            (user_frames.len(), false)
        } else {
            let images: Vec<u32> = user_frames.iter().map(|f| f.0).collect();
            crate::kstacks::trustworthy_prefix(&images, &mut |img| self.has_frame_pointers(st, e.pid, img))
        };
        frames.extend_from_slice(&user_frames[..keep]);
        let Some(mut stacks) = self.stacks.take() else { return };
        if cut || bad_frame || e.lost_stack || e.depth_limit {
            frames.push((stacks.truncated_image, 0));
        }
        stacks.count(e.pid, self.comm_id(e.pid), st.event, &frames, n, e.ns);
        self.stacks = Some(stacks);
    }

    /// Judges an image once, as the in-kernel stack walk does.
    fn has_frame_pointers(&self, st: &mut OffCpuState, pid: u32, image: u32) -> bool {
        if let Some(&v) = st.verdicts.get(&image) {
            return v;
        }
        let id = self.images.get(image);
        let v = match id.kind {
            ImageKind::Elf => crate::kstacks::image_bytes(self, pid, image, &id.path)
                .and_then(|m| crate::framepointers::judge(&m))
                .is_some_and(|v| v.has_frame_pointers()),
            ImageKind::Vdso => {
                crate::framepointers::judge(&crate::images::own_vdso().1.unwrap_or_default()).is_some_and(|v| v.has_frame_pointers())
            }
            _ => true,
        };
        st.verdicts.insert(image, v);
        v
    }
}

/// A thread's name, read when it is first seen; once it is gone, its process's.
fn thread_comm(pid: u32, tid: u32, process: Option<String>) -> String {
    let read = |p: String| std::fs::read_to_string(p).ok().map(|s| s.trim_end().to_string());
    read(format!("/proc/{pid}/task/{tid}/comm")).or(process).unwrap_or_default()
}

/// The kernel frames from `__schedule` on (leaf first): what the thread
/// was doing, without the tracepoint's and the program's own frames.
fn from_schedule(kernel: &[u64], schedule: Option<(u64, u64)>) -> &[u64] {
    let Some((lo, hi)) = schedule else { return kernel };
    kernel.iter().position(|&a| a >= lo && a < hi).map_or(kernel, |i| &kernel[i..])
}

/// [start, end) of function `name` in /proc/kallsyms text (end: the next symbol's address).
fn symbol_range(kallsyms: &str, name: &str) -> Option<(u64, u64)> {
    fn parse(l: &str) -> Option<(u64, &str, &str)> {
        let mut w = l.split_whitespace();
        Some((u64::from_str_radix(w.next()?, 16).ok()?, w.next()?, w.next()?))
    }
    let start = kallsyms.lines().filter_map(parse).find(|&(_, _, n)| n == name)?.0;
    let end = kallsyms.lines().filter_map(parse).map(|(a, _, _)| a).filter(|&a| a > start).min()?;
    (start != 0).then_some((start, end))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stacks_start_at_schedule_and_its_range_comes_from_kallsyms() {
        // Checks __schedule's range from kallsyms text (end at the next address) and that frames above it are dropped.
        let text = "ffffffff81000000 T _text\nffffffff81a00000 t __schedule\nffffffff81a00900 T schedule\nffffffff81a00400 t helper\n";
        assert_eq!(symbol_range(text, "__schedule"), Some((0xffffffff81a00000, 0xffffffff81a00400)));
        assert_eq!(symbol_range("0000000000000000 t __schedule\n0000000000000010 T x\n", "__schedule"), None, "hidden addresses");
        let range = symbol_range(text, "__schedule");
        let chain = [0xffffffffc0001000, 0xffffffff81100000, 0xffffffff81a00123, 0xffffffff81a00950];
        assert_eq!(from_schedule(&chain, range), &chain[2..]);
        assert_eq!(from_schedule(&chain[..2], range), &chain[..2], "no __schedule: everything kept");
    }
}
