//! Stall culprits, "guilty until proven innocent" (DCPI §6.3): every
//! dynamic stall starts with every cause and keeps those the code cannot
//! rule out; each kept cause names the instruction to blame.
//!
//! On an out-of-order x86 a timer sample lands on the oldest instruction
//! not yet retired, and the interrupt often waits for that instruction to
//! retire: a stall shows on the slow instruction or the one after it.
//! Causes that empty the reorder buffer (I-cache miss, mispredict) show
//! on the first instruction fetched afterwards, with no skid.

use crate::cfg::Cfg;
use crate::decode::{Flow, Unit};
use crate::estimate::{producer, steps_regularly};
use crate::loops::enclosing_loop;
use serde::Serialize;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Cause {
    Divider,
    DCache,
    BranchMispredict,
    ICache,
    Dtlb,
    StoreBuffer,
}

impl Cause {
    pub const ALL: [Cause; 6] = [Cause::ICache, Cause::DCache, Cause::Dtlb, Cause::StoreBuffer, Cause::BranchMispredict, Cause::Divider];

    /// Figure 2's bubble letter.
    pub fn letter(self) -> char {
        match self {
            Cause::ICache => 'i',
            Cause::DCache => 'd',
            Cause::Dtlb => 'D',
            Cause::StoreBuffer => 'w',
            Cause::BranchMispredict => 'p',
            Cause::Divider => 'f',
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Cause::ICache => "I-cache miss",
            Cause::DCache => "D-cache miss",
            Cause::Dtlb => "DTLB miss",
            Cause::StoreBuffer => "store buffer full",
            Cause::BranchMispredict => "branch mispredict",
            Cause::Divider => "divider busy",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Culprit {
    pub cause: Cause,
    /// The instruction to blame (the load, the divide, the branch), when one is known.
    pub at: Option<u64>,
}

/// A mispredict costs the pipeline refill, some 15-20 cycles on current
/// x86 cores; a stall much longer per execution than this needs another
/// cause as well, so such a cause is listed first.
pub const MISPREDICT_BOUND: f64 = 25.0;
pub const CACHE_LINE: u64 = 64;
/// L1 instruction cache size (32 KB on Zen 4, Zen 5 and recent Intel cores).
pub const ICACHE_BYTES: u64 = 32 * 1024;

/// Possible causes of a dynamic stall of `stall` cycles per execution at
/// instruction `i`, most likely first; empty when all are ruled out.
pub fn culprits(g: &Cfg, i: usize, stall: f64) -> Vec<Culprit> {
    let b = g.block_of(i);
    let head = g.blocks[b].first == i;
    let before = retired_before(g, i);
    let mut out = Vec::new();
    // The slow instruction itself, the one retired before it (skid), or the producer it waits on.
    let mut suspects = vec![i];
    suspects.extend(before.iter().copied());
    suspects.extend(producer(g, i));
    // Skid also hides the producer of the instruction retired just before.
    suspects.extend(before.iter().filter_map(|&k| producer(g, k)));
    let find = |pred: &dyn Fn(usize) -> bool| {
        // Prefer the producer (DCPI: the load feeding the stalled instruction), then i, then the skid.
        let p = producer(g, i).filter(|&p| pred(p));
        p.or_else(|| suspects.iter().copied().find(|&k| pred(k)))
    };
    if let Some(k) = find(&|k| g.insns[k].unit == Unit::Divide) {
        out.push(Culprit { cause: Cause::Divider, at: Some(g.insns[k].addr) });
    }
    let load = find(&|k| g.insns[k].loads);
    // A branch is the oldest instruction while it waits to resolve, the
    // wrong path held behind it when it was mispredicted: its own
    // mispredict is a suspect (AMD EPYC, 2026-11-26: calcwork's random
    // `jne` drew a third of branchy's samples, its targets the rest).
    let own = matches!(g.insns[i].flow, Flow::Branch(_) | Flow::IndirectJump);
    // The refetched block's head retires first; with skid its samples land on the next instruction.
    let after_refetch = head || g.blocks[b].first + 1 == i;
    let branch = if own { Some(g.insns[i].addr) } else { after_refetch.then(|| mispredicting_branch(g, b)).flatten() };
    let dcache = load.map(|k| Culprit { cause: Cause::DCache, at: Some(g.insns[k].addr) });
    let mispredict = branch.map(|a| Culprit { cause: Cause::BranchMispredict, at: Some(a) });
    // A load retiring just before i (skid) or feeding i is direct evidence; a
    // mispredict is only the head's position, and cannot explain a long stall.
    // A load whose address steps regularly round its loop is prefetched and
    // hits: feeding a branch, it says less than the branch itself.
    let load_adjacent = load.is_some_and(|k| k != i && !(own && streams(g, k)));
    if stall <= MISPREDICT_BOUND && !load_adjacent {
        out.extend(mispredict.into_iter().chain(dcache));
    } else {
        out.extend(dcache.into_iter().chain(mispredict));
    }
    // With skid, the refetched head's miss shows on the instruction after it too.
    let first = g.blocks[b].first;
    let (ic, ic_before) = if !head && first + 1 == i { (first, retired_before(g, first)) } else { (i, before.clone()) };
    if icache_possible(g, i, head, &before) || (ic != i && icache_possible(g, ic, true, &ic_before)) {
        // A jump from farther away than the L1 I-cache holds, or an indirect
        // jump whose targets spread over more code than it holds (a switch
        // over a large code footprint), lands on a line the cache is
        // unlikely to keep: the miss leads the list, ahead of the mispredict
        // that took the same jump.
        let far = ic_before.iter().any(|&k| g.insns[k].addr.abs_diff(g.insns[ic].addr) > ICACHE_BYTES || target_span(g, k) > ICACHE_BYTES);
        let at = if far { out.iter().take_while(|c| c.cause == Cause::Divider).count() } else { out.len() };
        out.insert(at, Culprit { cause: Cause::ICache, at: None });
    }
    if let Some(k) = load {
        out.push(Culprit { cause: Cause::Dtlb, at: Some(g.insns[k].addr) });
    }
    if let Some(k) = [i].iter().chain(before.iter()).copied().find(|&k| g.insns[k].stores) {
        out.push(Culprit { cause: Cause::StoreBuffer, at: Some(g.insns[k].addr) });
    }
    out
}

/// The static stall cause of an instruction whose minimum cycles are
/// long (DCPI lists static stalls apart): the divider, when a divide is
/// the instruction the gap belongs to (skid) or what it waits on.
pub fn static_culprit(g: &Cfg, i: usize) -> Option<Culprit> {
    let before = retired_before(g, i);
    let mut suspects: Vec<usize> = before.clone();
    suspects.push(i);
    suspects.extend(producer(g, i));
    suspects.extend(before.iter().filter_map(|&k| producer(g, k)));
    let k = suspects.into_iter().find(|&k| g.insns[k].unit == Unit::Divide)?;
    Some(Culprit { cause: Cause::Divider, at: Some(g.insns[k].addr) })
}

/// Instructions that can retire just before `i`: the previous one in the
/// block, or the last one of each reachable predecessor block.
fn retired_before(g: &Cfg, i: usize) -> Vec<usize> {
    let b = g.block_of(i);
    if g.blocks[b].first != i {
        return vec![i - 1];
    }
    g.blocks[b].preds.iter().map(|&e| g.edges[e].from).filter(|&p| g.blocks[p].reachable).map(|p| g.blocks[p].end - 1).collect()
}

/// Bytes between the lowest and highest target of the indirect jump `k`
/// (0 for other instructions).
fn target_span(g: &Cfg, k: usize) -> u64 {
    if g.insns[k].flow != Flow::IndirectJump {
        return 0;
    }
    let starts = || g.blocks[g.block_of(k)].succs.iter().map(|&e| g.start(g.edges[e].to));
    starts().max().unwrap_or(0) - starts().min().unwrap_or(0)
}

/// Whether load `k` sits in a loop and its address steps regularly round
/// it ([`steps_regularly`] over the loop [`enclosing_loop`] finds).
fn streams(g: &Cfg, k: usize) -> bool {
    let Some(blocks) = enclosing_loop(g, g.block_of(k)) else { return false };
    let insns: Vec<usize> = blocks.iter().flat_map(|&x| g.blocks[x].first..g.blocks[x].end).collect();
    steps_regularly(g, &insns, k)
}

/// The conditional or indirect branch ending a predecessor of block `b`.
fn mispredicting_branch(g: &Cfg, b: usize) -> Option<u64> {
    g.blocks[b]
        .preds
        .iter()
        .map(|&e| g.last(g.edges[e].from))
        .find(|x| matches!(x.flow, Flow::Branch(_) | Flow::IndirectJump))
        .map(|x| x.addr)
}

/// DCPI's rule: an instruction that shares a cache line with everything
/// that can run just before it does not wait for an I-cache miss. Inside
/// a block that means "not the first instruction of a line"; at a block
/// head, every predecessor's last instruction must be in its line. The
/// entry block's callers are unknown: not ruled out.
fn icache_possible(g: &Cfg, i: usize, head: bool, before: &[usize]) -> bool {
    let line = |k: usize| g.insns[k].addr / CACHE_LINE;
    if head && before.is_empty() {
        return true;
    }
    before.iter().any(|&k| line(k) != line(i)) || (!head && g.insns[i].addr.is_multiple_of(CACHE_LINE))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cfg::{build, NoMemory};
    use crate::decode::decode;

    #[test]
    fn pointer_chase_blames_the_feeding_load_first() {
        // Checks `1: mov (%rax),%rax; test %rax,%rax; jne 1`: a stall at the test names D-cache at the load.
        // 0: nop | 1: mov (%rax),%rax; 4: test %rax,%rax; 7: jne 1; 9: ret
        let bytes = [0x90, 0x48, 0x8b, 0x00, 0x48, 0x85, 0xc0, 0x75, 0xf8, 0xc3];
        let g = build(decode(0, &bytes), &NoMemory);
        let c = culprits(&g, 2, 120.0);
        assert_eq!(c[0], Culprit { cause: Cause::DCache, at: Some(1) });
        assert!(c.iter().any(|c| c.cause == Cause::Dtlb));
        assert!(!c.iter().any(|c| c.cause == Cause::Divider || c.cause == Cause::StoreBuffer));
    }

    #[test]
    fn short_stall_at_a_branch_fed_by_a_streaming_load_blames_the_branch() {
        // Checks calcwork's branchy shape: a 5-cycle stall at `jne` fed by a load stepping through an array names
        // the jne's own mispredict first; fed by a pointer chase, the same stall names D-cache at the load first.
        // 0: testb $1,(%rdi,%rax) | 4: jne 0 | 6: add $1,%rax | 10: cmp %rax,%rsi | 13: jne 0 | 15: ret
        let bytes = [0xf6, 0x04, 0x07, 0x01, 0x75, 0xfa, 0x48, 0x83, 0xc0, 0x01, 0x48, 0x39, 0xc6, 0x75, 0xf1, 0xc3];
        let g = build(decode(0, &bytes), &NoMemory);
        let c = culprits(&g, 1, 5.0);
        assert_eq!(&c[..2], &[Culprit { cause: Cause::BranchMispredict, at: Some(4) }, Culprit { cause: Cause::DCache, at: Some(0) }]);
        // 0: mov (%rax),%rax | 3: test %rax,%rax | 6: jne 0 | 8: ret
        let bytes = [0x48, 0x8b, 0x00, 0x48, 0x85, 0xc0, 0x75, 0xf8, 0xc3];
        let g = build(decode(0, &bytes), &NoMemory);
        let c = culprits(&g, 2, 5.0);
        assert_eq!(&c[..2], &[Culprit { cause: Cause::DCache, at: Some(0) }, Culprit { cause: Cause::BranchMispredict, at: Some(6) }]);
    }

    #[test]
    fn divide_chain_blames_the_divider() {
        // Checks `xor %edx,%edx; div %rcx; add %rax,%rbx`: a stall after the divide names the divider first.
        let bytes = [0x31, 0xd2, 0x48, 0xf7, 0xf1, 0x48, 0x01, 0xc3, 0xc3];
        let g = build(decode(0x40, &bytes), &NoMemory);
        let c = culprits(&g, 2, 30.0);
        assert_eq!(c[0], Culprit { cause: Cause::Divider, at: Some(0x42) });
    }

    #[test]
    fn short_stall_at_a_branch_target_blames_the_branch() {
        // Checks a block head after `jne`: a 15-cycle stall names the mispredicting branch first.
        // 0: test %edi,%edi; jne 5; inc %eax | 5: add $1,%ecx; ret  (block at 5 has two predecessors)
        let bytes = [0x85, 0xff, 0x75, 0x01, 0x90, 0x83, 0xc1, 0x01, 0xc3];
        let g = build(decode(0, &bytes), &NoMemory);
        let i = g.insns.iter().position(|x| x.addr == 5).unwrap();
        let c = culprits(&g, i, 15.0);
        assert_eq!(c[0], Culprit { cause: Cause::BranchMispredict, at: Some(2) });
        // Both predecessors end in the same 64-byte line: I-cache is ruled out.
        assert!(!c.iter().any(|c| c.cause == Cause::ICache));
    }

    #[test]
    fn block_head_with_a_predecessor_in_another_line_keeps_icache() {
        // Checks DCPI's rule at a block head: the jne at 0x3d ends in line 0 and the head 0x41 sits in
        // line 1, so I-cache stays a suspect even though the fall-through predecessor (0x40) shares line 1.
        // 0: nop x 0x3b | 0x3b: test %edi,%edi | 0x3d: jne 0x41 | 0x3f: nop | 0x40: nop | 0x41: add $1,%ecx; ret
        let mut bytes = vec![0x90; 0x3b];
        bytes.extend([0x85, 0xff, 0x75, 0x02, 0x90, 0x90, 0x83, 0xc1, 0x01, 0xc3]);
        let g = build(decode(0, &bytes), &NoMemory);
        let i = g.insns.iter().position(|x| x.addr == 0x41).unwrap();
        assert_eq!(g.blocks[g.block_of(i)].first, i, "0x41 heads a block");
        let c = culprits(&g, i, 40.0);
        assert!(c.iter().any(|c| c.cause == Cause::ICache), "{c:?}");
        // Moved so that both predecessors end in line 1 (branch at 0x40, head at 0x44), it is ruled out.
        let mut bytes = vec![0x90; 0x3e];
        bytes.extend([0x85, 0xff, 0x75, 0x02, 0x90, 0x90, 0x83, 0xc1, 0x01, 0xc3]);
        let g = build(decode(0, &bytes), &NoMemory);
        let i = g.insns.iter().position(|x| x.addr == 0x44).unwrap();
        assert!(!culprits(&g, i, 40.0).iter().any(|c| c.cause == Cause::ICache));
    }

    #[test]
    fn far_jump_target_names_icache_first() {
        // Checks the ordering rule: a block head reached by a jump from 40 KB away (more than the L1i
        // holds) lists I-cache before the mispredict; the same head reached from nearby lists it after.
        // 0: test %edi,%edi | 2: jne rel32 -> T | 8: ret | nops | T: add $1,%ecx; ret
        let far = |gap: usize| {
            let mut bytes = vec![0x85, 0xff, 0x0f, 0x85];
            bytes.extend(((gap + 1) as u32).to_le_bytes());
            bytes.push(0xc3);
            bytes.extend(vec![0x90; gap]);
            bytes.extend([0x83, 0xc1, 0x01, 0xc3]);
            let g = build(decode(0, &bytes), &NoMemory);
            let i = g.insns.iter().position(|x| x.addr == 9 + gap as u64).unwrap();
            culprits(&g, i, 20.0).iter().map(|c| c.cause).collect::<Vec<_>>()
        };
        let c = far(40 * 1024);
        assert_eq!(&c[..2], &[Cause::ICache, Cause::BranchMispredict], "{c:?}");
        let c = far(200);
        assert_eq!(&c[..2], &[Cause::BranchMispredict, Cause::ICache], "{c:?}");
    }

    #[test]
    fn switch_over_more_code_than_the_icache_names_icache_first() {
        // Checks the jump-table rule: a case a line after `jmp *T(,%rdi,8)` lists I-cache before the mispredict
        // when the table's cases span 40 KB (more than the L1i), after it when they span 4 bytes; on the head
        // and on the instruction after it (skid).
        struct Table(Vec<u8>);
        impl crate::cfg::Memory for Table {
            fn read(&self, a: u64, len: usize) -> Option<Vec<u8>> {
                let o = a.checked_sub(0x20000)? as usize;
                self.0.get(o..o + len).map(<[u8]>::to_vec)
            }
        }
        let order = |gap: usize, at: u64| {
            // 0: jmp *0x20000(,%rdi,8) | nops | 0x40: add $1,%ecx; add $1,%ecx; ret | nops | C: add $1,%ecx; ret
            let mut bytes = vec![0xff, 0x24, 0xfd, 0x00, 0x00, 0x02, 0x00];
            bytes.extend(vec![0x90; 0x40 - 7]);
            bytes.extend([0x83, 0xc1, 0x01, 0x83, 0xc1, 0x01, 0xc3]);
            bytes.extend(vec![0x90; gap]);
            let second = bytes.len() as u64;
            bytes.extend([0x83, 0xc1, 0x01, 0xc3]);
            let table: Vec<u8> = [0x40u64, second].iter().flat_map(|t| t.to_le_bytes()).collect();
            let g = build(decode(0, &bytes), &Table(table));
            assert!(!g.missing_edges);
            let i = g.insns.iter().position(|x| x.addr == at).unwrap();
            let c: Vec<Cause> = culprits(&g, i, 20.0).iter().map(|c| c.cause).collect();
            let pos = |x: Cause| c.iter().position(|&y| y == x).unwrap_or(usize::MAX);
            (c[0], pos(Cause::ICache) < pos(Cause::BranchMispredict))
        };
        assert_eq!(order(40 * 1024, 0x40), (Cause::ICache, true));
        assert_eq!(order(40 * 1024, 0x43), (Cause::ICache, true));
        assert!(!order(0, 0x40).1, "a switch over 7 bytes keeps the mispredict first");
    }

    #[test]
    fn straight_line_code_rules_out_icache_except_at_line_starts() {
        // Checks DCPI's I-cache rule inside a block: only the instruction that opens a new line is suspect.
        let bytes = vec![0x90; 70];
        let g = build(decode(0x1000 - 2, &bytes), &NoMemory);
        let at = |a: u64| g.insns.iter().position(|x| x.addr == a).unwrap();
        assert!(culprits(&g, at(0x1000), 5.0).iter().any(|c| c.cause == Cause::ICache));
        assert!(culprits(&g, at(0x1001), 5.0).is_empty());
    }
}
