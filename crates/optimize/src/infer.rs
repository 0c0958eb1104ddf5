//! Flow-consistent block and edge counts from noisy block estimates, by
//! minimum-cost flow (the method of LLVM's profi: He, Yu, Ottoni et al.,
//! "Profile Inference Revisited", POPL 2022).
//!
//! Counts estimated from timer samples break flow conservation: a block
//! that stalls on memory collects samples out of proportion to how often
//! it runs, a short block collects none. Here every block's count may move
//! away from its estimate at a cost proportional to the evidence behind
//! it (the instructions it was counted from), and control flow must be
//! conserved: into a block = its count = out of it. The cheapest such
//! flow puts a chain of blocks that must run equally often at the median
//! of their estimates, so one stalling block no longer raises its
//! neighbours (the old flow rule only raised counts), and an unsampled
//! block on the only path between sampled ones gets their count. Edge
//! counts come out of the same flow instead of being split by ratios.

use crate::mcf::{Network, UNBOUNDED};
use loupe_calc::cfg::Cfg;

/// Cost per unit of count and per instruction of evidence for moving a
/// block's count away from its estimate (either way: the median of a
/// chain).
const COST_BLOCK: i64 = 10;
/// Cost per unit of taking an edge: small, so flow does not circle.
const COST_EDGE: i64 = 1;
/// Cost per unit of entering or leaving the function anywhere but its
/// entry and exits: the graph may be wrong (an unresolved jump, a call
/// that does not return), so it is allowed, dearly: as dear as moving
/// the count of a block of this many instructions.
const ESCAPE_INSNS: i64 = 40;
/// Resolution: the largest estimate becomes this many units.
const UNITS: f64 = 1e6;

#[derive(Clone, Debug, PartialEq)]
pub struct Inferred {
    /// Per block, in the estimates' unit.
    pub blocks: Vec<f64>,
    /// Per edge of `g.edges`.
    pub edges: Vec<f64>,
    /// Per block, flow from outside the graph: the entry's calls, and
    /// escapes where the graph has no way in. Block count = its edges in
    /// + this.
    pub entered: Vec<f64>,
    /// Per block, flow out of the graph: returns, tail calls, escapes.
    /// Block count = its edges out + this.
    pub left: Vec<f64>,
}

/// `estimate[b]` is block b's count (samples per instruction),
/// `evidence[b]` the number of instructions it was counted from (0: no
/// evidence, free to take any count flow gives it).
pub fn infer(g: &Cfg, estimate: &[f64], evidence: &[usize]) -> Inferred {
    let nb = g.blocks.len();
    let top = estimate.iter().copied().fold(0.0, f64::max);
    if nb == 0 || top <= 0.0 {
        return Inferred { blocks: vec![0.0; nb], edges: vec![0.0; g.edges.len()], entered: vec![0.0; nb], left: vec![0.0; nb] };
    }
    let scale = UNITS / top;
    let w: Vec<i64> = estimate.iter().map(|&c| (c * scale).round() as i64).collect();
    // Nodes: block b is in(b) = 2b -> out(b) = 2b + 1; S feeds entries, T
    // drains exits, T -> S closes the circulation; SS and TT carry the
    // estimates as supplies (out(b) has w[b] to give, in(b) wants w[b]).
    let (s, t, ss, tt) = (2 * nb, 2 * nb + 1, 2 * nb + 2, 2 * nb + 3);
    let mut net = Network::new(2 * nb + 4);
    let mut inc = Vec::with_capacity(nb);
    let mut dec = Vec::with_capacity(nb);
    // Per block, its arcs from S and to T.
    let (mut ins, mut outs) = (vec![Vec::new(); nb], vec![Vec::new(); nb]);
    for (b, blk) in g.blocks.iter().enumerate() {
        let (i, o) = (2 * b, 2 * b + 1);
        let k = evidence[b] as i64;
        net.add(ss, o, w[b], 0);
        net.add(i, tt, w[b], 0);
        inc.push(net.add(i, o, UNBOUNDED, COST_BLOCK * k));
        dec.push(net.add(o, i, w[b], COST_BLOCK * k));
        let escape = COST_BLOCK * ESCAPE_INSNS;
        // The entry, returns, tail calls and unresolved jumps meet the outside freely. A block the graph
        // gives no way in (or out) is entered (or left) some other way, a landing pad, a call that does
        // not return: free only up to its own estimate, or an unsampled one, such as the nop padding
        // after a jump, feeds its successor from nowhere at no cost.
        let exit = blk.exits || blk.unresolved;
        let free_in = if b == 0 {
            UNBOUNDED
        } else if blk.preds.is_empty() {
            w[b]
        } else {
            0
        };
        let free_out = if exit {
            UNBOUNDED
        } else if blk.succs.is_empty() {
            w[b]
        } else {
            0
        };
        if free_in > 0 {
            ins[b].push(net.add(s, i, free_in, 0));
        }
        if free_out > 0 {
            outs[b].push(net.add(o, t, free_out, 0));
        }
        if free_in != UNBOUNDED {
            ins[b].push(net.add(s, i, UNBOUNDED, escape));
        }
        if free_out != UNBOUNDED {
            outs[b].push(net.add(o, t, UNBOUNDED, escape));
        }
    }
    net.add(t, s, UNBOUNDED, 0);
    let edges: Vec<usize> = g.edges.iter().map(|e| net.add(2 * e.from + 1, 2 * e.to, UNBOUNDED, COST_EDGE)).collect();
    net.solve(ss, tt);
    let blocks = (0..nb).map(|b| (w[b] + net.flow(inc[b]) - net.flow(dec[b])) as f64 / scale).collect();
    let edges = edges.iter().map(|&a| net.flow(a) as f64 / scale).collect();
    let total = |arcs: &Vec<usize>| arcs.iter().map(|&a| net.flow(a)).sum::<i64>() as f64 / scale;
    Inferred { blocks, edges, entered: ins.iter().map(total).collect(), left: outs.iter().map(total).collect() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use loupe_calc::cfg::{self, NoMemory};
    use loupe_calc::decode;

    fn round(v: &[f64]) -> Vec<f64> {
        v.iter().map(|x| (x * 100.0).round() / 100.0).collect()
    }

    fn graph(code: &[u8]) -> Cfg {
        cfg::build(decode::decode(0x1000, code), &NoMemory)
    }

    // A straight chain (mov; jmp L; L: add; add; ret): three blocks
    // that must run equally often. One stalling block (estimate 300) does
    // not raise the other two (100, 100): all become their median.
    #[test]
    fn chain_takes_the_median() {
        let code = [0xb8, 0x01, 0, 0, 0, 0xeb, 0x00, 0x83, 0xc0, 0x01, 0xeb, 0x00, 0x83, 0xc0, 0x01, 0xc3];
        let g = graph(&code);
        assert_eq!(g.blocks.len(), 3);
        let r = infer(&g, &[100.0, 300.0, 100.0], &[2, 2, 2]);
        assert_eq!(round(&r.blocks), vec![100.0, 100.0, 100.0]);
        assert_eq!(round(&r.edges), vec![100.0, 100.0]);
    }

    // cmp; je L; 3 x add; L: ret. The unsampled taken path and the
    // sampled fall-through: flow goes where the evidence is, and the
    // join gets the sum.
    #[test]
    fn branch_follows_the_sampled_side() {
        let code = [0x83, 0xff, 0x00, 0x74, 0x09, 0x83, 0xc0, 0x01, 0x83, 0xc0, 0x01, 0x83, 0xc0, 0x01, 0xc3];
        let g = graph(&code);
        let r = infer(&g, &[50.0, 50.0, 50.0], &[2, 3, 1]);
        assert_eq!(round(&r.blocks), vec![50.0, 50.0, 50.0]);
        let by: Vec<(usize, usize, f64)> = g.edges.iter().zip(round(&r.edges)).map(|(e, c)| (e.from, e.to, c)).collect();
        assert!(by.contains(&(0, 1, 50.0)) && by.contains(&(0, 2, 0.0)) && by.contains(&(1, 2, 50.0)), "{by:?}");
        // The add block unsampled: the entry's count goes straight to the return.
        let r = infer(&g, &[50.0, 0.0, 50.0], &[2, 3, 1]);
        assert_eq!(round(&r.blocks), vec![50.0, 0.0, 50.0]);
    }

    // jmp L; nop (padding, no way in); L: add; ret. Regression: the
    // unsampled padding fed its successor from outside for free, so the
    // successor kept its estimate while the entry kept its own, and the
    // padding got a count with no flow into it.
    #[test]
    fn padding_with_no_way_in_is_no_free_entry() {
        let code = [0xb8, 0x01, 0, 0, 0, 0xeb, 0x01, 0x90, 0x83, 0xc0, 0x01, 0xc3];
        let g = graph(&code);
        assert_eq!(g.blocks.len(), 3);
        assert!(g.blocks[1].preds.is_empty());
        let r = infer(&g, &[10.0, 0.0, 100.0], &[2, 0, 2]);
        assert_eq!(r.blocks[1], 0.0, "{r:?}");
        assert_eq!(r.blocks[0], r.blocks[2], "{r:?}");
        assert_eq!((r.entered[0], r.entered[1], r.entered[2]), (r.blocks[0], 0.0, 0.0), "{r:?}");
        assert_eq!(r.left, vec![0.0, 0.0, r.blocks[2]], "{r:?}");
    }

    // An unsampled block on the only way between two sampled ones runs as
    // often as they do.
    #[test]
    fn gap_on_the_only_path_is_filled() {
        let code = [0xb8, 0x01, 0, 0, 0, 0xeb, 0x00, 0x83, 0xc0, 0x01, 0xeb, 0x00, 0x83, 0xc0, 0x01, 0xc3];
        let g = graph(&code);
        let r = infer(&g, &[80.0, 0.0, 80.0], &[2, 1, 2]);
        assert_eq!(round(&r.blocks), vec![80.0, 80.0, 80.0]);
        // With no evidence at all (a lone instruction never sampled) too.
        let r = infer(&g, &[80.0, 0.0, 80.0], &[2, 0, 2]);
        assert_eq!(round(&r.blocks), vec![80.0, 80.0, 80.0]);
    }
}
