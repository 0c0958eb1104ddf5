//! Counts of a procedure whose calls are too long for a window to hold a
//! whole one (issue 30): a single call that lasts the whole run traps on
//! every iteration of its loops, so no window can span it, and the time a
//! window covers is mostly trap time (about 17 µs a hit against a few ns an
//! iteration), useless for scaling its counts up to the run.
//!
//! Two exact things remain. **An induction register**: every hit records
//! the thread's registers, and a register that steps by the same non-zero
//! amount between every two consecutive executions of an instruction (a
//! loop counter, a pointer walking an array) counts the executions that ran
//! between two windows, untrapped: (first of the next window - last of
//! this one) / step. Chained over the windows, it counts the instruction
//! exactly from its first hit in the run to its last ([`chain_level`]).
//! Only the stretch before the first window and after the last (about one
//! gap each) is scaled, by the rate the gaps measured (executions per ns of
//! the thread's CPU time, untrapped), and its uncertainty is the interval.
//! **Ratios within a window**: every class of a group is armed at once, so
//! between an anchor's first and last hit in a window the other classes'
//! hits belong to whole intervals of the anchor ([`between`]); their ratio
//! to a chained anchor, pooled over windows, gives their level
//! ([`ratio_level`]), the spread between windows its interval.

use crate::ElfAddr;
use serde::{Deserialize, Serialize};

/// Registers recorded at every hit (`perf_regs.h`: AX, BX, CX, DX, SI, DI,
/// BP and R8-R15; not SP, IP or flags): where induction variables live.
pub const INDUCTION_REGS: u64 = 0x7f | (0xff << 16);

/// What one armed instruction's hits showed in a window.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SlotSpan {
    /// Hits over the whole window.
    pub hits: u64,
    /// Registers ([`INDUCTION_REGS`] order) at the first and the last hit.
    pub first: Vec<u64>,
    pub last: Vec<u64>,
    /// Per register, the step between consecutive hits where it was the
    /// same every time (None where it varied); empty below two hits.
    pub stride: Vec<Option<i64>>,
}

impl SlotSpan {
    /// Adds a hit with registers `regs`.
    pub fn add(&mut self, regs: &[u64]) {
        self.hits += 1;
        if self.hits == 1 {
            self.first = regs.to_vec();
        } else {
            let step = |(i, &r): (usize, &u64)| r.wrapping_sub(self.last.get(i).copied().unwrap_or(0)) as i64;
            let steps: Vec<i64> = regs.iter().enumerate().map(step).collect();
            if self.hits == 2 {
                self.stride = steps.into_iter().map(Some).collect();
            } else {
                for (s, d) in self.stride.iter_mut().zip(steps) {
                    if *s != Some(d) {
                        *s = None;
                    }
                }
            }
        }
        self.last = regs.to_vec();
    }
}

/// One window as the levels need it: the thread, the instructions armed
/// (slot 0 the entry), the thread's CPU time in ns when armed and disarmed,
/// each slot's span, and `inside[a][c]`: slot c's hits between slot a's
/// first and last hit (`inside[a][a]`: a's whole intervals).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct WindowSpan {
    pub tid: u32,
    pub addrs: Vec<ElfAddr>,
    pub cpu: (u64, u64),
    pub slots: Vec<SlotSpan>,
    pub inside: Vec<Vec<u64>>,
}

/// `inside` of a window's hit sequence (slot indices in the order they ran).
pub fn between(seq: &[u8], slots: usize) -> Vec<Vec<u64>> {
    (0..slots)
        .map(|a| {
            let (Some(f), Some(l)) = (seq.iter().position(|&k| k as usize == a), seq.iter().rposition(|&k| k as usize == a)) else {
                return vec![0; slots];
            };
            let span = &seq[f..l];
            (0..slots).map(|c| span.iter().filter(|&&k| k as usize == c).count() as u64).collect()
        })
        .collect()
}

/// How stale the thread's last CPU-time reading may be, ns (it is read every 2 ms between windows).
pub const POLL_NS: f64 = 2e6;

/// The executions of `addr` over the run of one thread that spent it in one
/// call, and a 95% half-width: chained by an induction register from its
/// first hit to its last, plus the rate measured in the untrapped gaps times
/// the CPU time before the first window and after the last (`end_cpu`: the
/// thread's CPU time at its last reading, ns). None when the windows are on
/// several threads, no register steps alike in every window, two registers
/// disagree, or no gap measured a rate.
pub fn chain_level(windows: &[WindowSpan], addr: ElfAddr, end_cpu: u64) -> Option<(f64, f64)> {
    let tid = windows.first()?.tid;
    if windows.iter().any(|w| w.tid != tid) {
        return None;
    }
    let armed: Vec<(usize, &SlotSpan)> =
        windows.iter().enumerate().filter_map(|(i, w)| Some((i, &w.slots[w.addrs.iter().position(|&a| a == addr)?]))).collect();
    // A window in which the thread never ran (descheduled) says nothing.
    let armed: Vec<(usize, &SlotSpan)> = armed.into_iter().filter(|x| x.1.hits > 0 || windows[x.0].cpu.1 > windows[x.0].cpu.0).collect();
    // Windows with no hit before the first hit and after the last: the loop had not begun or was over (its stretch
    // ends at them); one in between: the rate was not steady, nothing to scale by.
    let (f, l) = (armed.iter().position(|x| x.1.hits > 0)?, armed.iter().rposition(|x| x.1.hits > 0)?);
    let with = &armed[f..=l];
    if with.iter().any(|x| x.1.hits == 0) {
        return None;
    }
    let begin = f.checked_sub(1).map_or(0, |j| windows[armed[j].0].cpu.1);
    let end_cpu = armed.get(l + 1).map_or(end_cpu, |x| windows[x.0].cpu.0);
    let nregs = with.first()?.1.first.len();
    let chains: Vec<(u64, Vec<(u64, u64)>)> = (0..nregs).filter_map(|r| chain_by(with, r)).collect();
    let (total, gaps) = chains.first()?;
    if chains.iter().any(|(t, _)| t != total) {
        return None;
    }
    // Rates only from gaps no other group's traps interrupt (a window that trapped nothing ran freely).
    let trapped = |w: &WindowSpan| w.slots.iter().any(|s| s.hits > 0);
    let usable: Vec<(f64, f64)> = with
        .windows(2)
        .zip(gaps)
        .filter(|(p, _)| !windows[p[0].0 + 1..p[1].0].iter().any(trapped))
        .map(|(p, &(n, _))| (n as f64, windows[p[1].0].cpu.0.saturating_sub(windows[p[0].0].cpu.1) as f64))
        .filter(|&(_, t)| t > 0.0)
        .collect();
    let (rate, rate_hw) = ratio_with_interval(&usable)?;
    let (i1, il) = (with.first()?.0, with.last()?.0);
    let others = |r: std::ops::Range<usize>| -> f64 {
        windows[r].iter().filter(|w| trapped(w)).map(|w| w.cpu.1.saturating_sub(w.cpu.0) as f64).sum()
    };
    let after = armed.get(l + 1).map_or(windows.len(), |x| x.0);
    let (oh, ot) = (others(f.checked_sub(1).map_or(0, |j| armed[j].0 + 1)..i1), others(il + 1..after));
    let head = (windows[i1].cpu.0.saturating_sub(begin) as f64 - oh).max(0.0);
    let tail = (end_cpu.saturating_sub(windows[il].cpu.1) as f64 - ot).max(0.0);
    let scaled = rate * (head + tail);
    // Other groups' windows in the head or tail ran somewhere between trapped (no progress) and free: both ends.
    let hw = rate_hw * (head + tail) + rate * (oh + ot + POLL_NS);
    Some((*total as f64 + scaled, hw))
}

/// The chain of register `r` over the windows that hit the instruction:
/// its total from the first hit to the last, and per gap (executions
/// between the windows, 0). None unless r steps by one non-zero amount in
/// every window of two hits or more and moves by a positive multiple of it
/// across every gap.
fn chain_by(with: &[(usize, &SlotSpan)], r: usize) -> Option<(u64, Vec<(u64, u64)>)> {
    let mut step = None;
    for (_, s) in with.iter().filter(|(_, s)| s.hits >= 2) {
        let d = (*s.stride.get(r)?)?;
        if d == 0 || step.is_some_and(|x| x != d) {
            return None;
        }
        step = Some(d);
    }
    let d = step?;
    let mut gaps = Vec::new();
    for p in with.windows(2) {
        let diff = p[1].1.first.get(r)?.wrapping_sub(*p[0].1.last.get(r)?) as i64;
        if diff % d != 0 || diff / d < 1 {
            return None;
        }
        gaps.push(((diff / d - 1) as u64, 0));
    }
    let span = with.last()?.1.last.get(r)?.wrapping_sub(*with.first()?.1.first.get(r)?) as i64;
    let total = span / d + 1;
    let hits: u64 = with.iter().map(|(_, s)| s.hits).sum();
    (span % d == 0 && total >= hits as i64).then_some((total as u64, gaps))
}

/// Σy / Σx over (y, x) pairs and the ratio estimator's 95% half-width from their spread; None when Σx is 0.
pub fn ratio_with_interval(pairs: &[(f64, f64)]) -> Option<(f64, f64)> {
    let n = pairs.len() as f64;
    let (y, x) = pairs.iter().fold((0.0, 0.0), |(a, b), &(p, q)| (a + p, b + q));
    if x <= 0.0 {
        return None;
    }
    let r = y / x;
    if n < 2.0 {
        return Some((r, r));
    }
    let ss: f64 = pairs.iter().map(|&(p, q)| (p - r * q).powi(2)).sum();
    Some((r, 1.96 * (ss / (n * (n - 1.0))).sqrt() / (x / n)))
}

/// The executions of `addr` from its hits between the hits of `anchor`
/// (armed in the same windows) and the anchor's level: the ratio pooled over
/// windows, its interval from their spread and the anchor's. None when no
/// window held two hits of the anchor with `addr` armed.
pub fn ratio_level(windows: &[WindowSpan], addr: ElfAddr, anchor: ElfAddr, level: (f64, f64)) -> Option<(f64, f64)> {
    let pairs: Vec<(f64, f64)> = windows
        .iter()
        .filter_map(|w| {
            let (a, c) = (w.addrs.iter().position(|&x| x == anchor)?, w.addrs.iter().position(|&x| x == addr)?);
            Some((w.inside[a][c] as f64, w.inside[a][a] as f64))
        })
        .collect();
    // Never between the anchor's hits: it runs outside the anchor's loop, where the windows say nothing.
    if pairs.iter().all(|p| p.0 == 0.0) {
        return None;
    }
    let (r, h) = ratio_with_interval(&pairs)?;
    Some((r * level.0, r * level.1 + h * level.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A window of `hits` hits of one slot whose register 0 runs from `from` in steps of `d`, register 1 varies.
    fn span(from: u64, d: u64, hits: u64) -> SlotSpan {
        let mut s = SlotSpan::default();
        for i in 0..hits {
            s.add(&[from + i * d, i * i]);
        }
        s
    }

    fn window(cpu: (u64, u64), s: SlotSpan) -> WindowSpan {
        WindowSpan { tid: 7, addrs: vec![ElfAddr(0), ElfAddr(9)], cpu, slots: vec![SlotSpan::default(), s], inside: vec![] }
    }

    #[test]
    fn a_register_that_steps_alike_is_an_induction_the_others_are_not() {
        // Checks SlotSpan::add: register 0 steps by 8 at every hit, register 1 (i²) by 1, 3, 5: only 0 keeps a stride.
        let s = span(100, 8, 4);
        assert_eq!((s.hits, s.first.clone(), s.last.clone()), (4, vec![100, 0], vec![124, 9]));
        assert_eq!(s.stride, vec![Some(8), None]);
    }

    #[test]
    fn a_chain_counts_the_gaps_exactly_and_scales_only_head_and_tail() {
        // Checks chain_level on a loop of 1,000 iterations per µs of CPU: windows of 10 hits at iterations 1,000,
        // 3,000 and 5,000 (register = 16 x iteration), gaps of 1 ms CPU holding 1,990 iterations each; the thread ran
        // 1 ms before the first window and 0.5 ms after the last: 5,010 - 1,000 + 1 chained + 1,000 + 500 scaled.
        let w = |it: u64, t: u64| window((t, t + 10_000), span(16 * it, 16, 10));
        let ws = [w(1000, 1_000_000), w(3000, 2_010_000), w(5000, 3_020_000)];
        let rate = 1990.0 / 1_000_000.0;
        let (n, hw) = chain_level(&ws, ElfAddr(9), 3_530_000).unwrap();
        let want = 4010.0 + rate * 1_500_000.0;
        assert!((n - want).abs() < 1e-6, "{n} vs {want}");
        // Identical gaps: the rate has no spread, and the interval is the last reading's lag at that rate.
        assert!((hw - rate * POLL_NS).abs() < 1e-6, "{hw}");
        // A window with no hit after the last: the loop was over by then, so the tail ends there, not at end_cpu.
        let mut done = ws.to_vec();
        done.push(window((3_530_000, 3_540_000), SlotSpan::default()));
        let (m, _) = chain_level(&done, ElfAddr(9), 9_000_000).unwrap();
        assert!((m - want).abs() < 1e-6, "{m} vs {want}");
        // ... but one in the middle: the rate was not steady.
        let mut mid = ws.to_vec();
        mid.insert(1, window((1_500_000, 1_500_100), SlotSpan::default()));
        assert_eq!(chain_level(&mid, ElfAddr(9), 3_530_000), None);
        // A register that goes back (a new call restarted the loop) breaks the chain.
        let back = [w(1000, 1_000_000), w(500, 2_010_000)];
        assert_eq!(chain_level(&back, ElfAddr(9), 3_000_000), None);
    }

    #[test]
    fn classes_between_anchor_hits_take_the_anchors_level() {
        // Checks between and ratio_level: in each window the arm (slot 2) runs 3 of every 8 loop heads (slot 1),
        // cut at arbitrary points; only hits between the first and last head count, so 3/8 exactly x the head's level.
        let pattern = |start: usize, len: usize| -> Vec<u8> {
            (start..start + len).flat_map(|i| if i % 8 < 3 { vec![1u8, 2] } else { vec![1u8] }).collect()
        };
        let mk = |seq: Vec<u8>| WindowSpan {
            addrs: vec![ElfAddr(0), ElfAddr(1), ElfAddr(2)],
            inside: between(&seq[1..], 3),
            ..Default::default()
        };
        let ws = [mk(pattern(5, 801)), mk(pattern(2, 1601)), mk(pattern(7, 2401))];
        assert_eq!(ws[0].inside[1][1], 799);
        let (n, hw) = ratio_level(&ws, ElfAddr(2), ElfAddr(1), (8e6, 0.0)).unwrap();
        assert!((n / 3e6 - 1.0).abs() < 0.002, "{n}");
        assert!(hw < 0.01 * n, "{hw}");
    }
}
