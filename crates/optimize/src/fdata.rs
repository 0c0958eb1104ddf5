//! BOLT's profile in its no-LBR form (what `perf2bolt -nl` writes when the
//! PMU has no branch stack): a header `no_lbr EVENT...`, then one line per
//! location `1 FUNCTION HEX-OFFSET COUNT`, offsets relative to the
//! function's start. BOLT sums the counts of a block's locations into the
//! block's execution count and infers edge counts from block counts.
//!
//! BOLT divides by the block's instruction count only when an event name
//! contains "cycles" or "instructions". Loupe writes counts that are
//! already per execution (Morph's scaling, with the cold policy applied),
//! one location per block at its first byte, under an event name that
//! contains neither word, so BOLT takes them as they are.

use crate::blocks::FunctionProfile;
use std::fmt::Write;

/// Event name of the header: must not contain "cycles" or "instructions".
pub const EVENT: &str = "loupe-block-counts";

/// Counts are written as integers: per-instruction sample weight times
/// this, so blocks with less than one sample per instruction keep their
/// relative weight.
pub const SCALE: f64 = 100.0;

/// The fdata text for `funcs`. Blocks that are not cold get at least 1, so
/// BOLT never splits a block the profile cannot call cold; cold blocks are
/// left out (count 0). Functions without samples are left out entirely.
pub fn write_no_lbr(funcs: &[FunctionProfile]) -> String {
    let mut out = format!("no_lbr {EVENT}\n");
    for f in funcs.iter().filter(|f| f.samples > 0.0) {
        if f.bolt_name.chars().any(char::is_whitespace) {
            continue;
        }
        for b in f.blocks.iter().filter(|b| !b.cold) {
            let n = ((b.count * SCALE).round() as u64).max(1);
            let _ = writeln!(out, "1 {} {:x} {n}", f.bolt_name, b.offset);
        }
    }
    out
}

/// BOLT's branch-record fdata from the edge counts synthesized from block
/// counts (what BOLT's instrumentation writes, with estimated counts):
/// `1 F FROM 1 F TARGET 0 COUNT` for every edge, FROM being the source
/// block's last instruction: the branch, or for a plain fall-through
/// whatever instruction ends the block, as BOLT's instrumentation writes
/// it. BOLT does not infer a plain fall-through's count from branch
/// records: it counts the blocks but leaves the edge at 0, and ext-tsp
/// then breaks it (on SQLite's sqlite3VdbeExec, edges run 60-68 M times
/// in training laid out as jumps). Edges into or out of cold blocks are
/// left out; others get at least 1. BOLT counts a block by its edges, so
/// an edge out of a cold block at 1 made the block warm: a cold block that
/// jumps back into hot code stayed in the hot part, away from the cold
/// blocks it falls through from (Lua's `luaV_execute`: 3.5 M taken jumps
/// per such chain on the test input; BENCHMARKS.md, twelfth pass). Calls
/// between profiled functions are written as `1 CALLER OFFSET 1 CALLEE 0 0 COUNT`, which
/// BOLT's function ordering (hfsort) clusters by; calls into functions
/// without samples are left out, since BOLT would take the call count as
/// the callee's whole profile and call the rest of its blocks cold.
pub fn write_edges(funcs: &[FunctionProfile]) -> String {
    let mut out = String::new();
    let ok = |f: &&FunctionProfile| f.samples > 0.0 && !f.bolt_name.chars().any(char::is_whitespace);
    let callee: std::collections::HashMap<u64, &str> = funcs.iter().filter(ok).map(|f| (f.start, f.bolt_name.as_str())).collect();
    for f in funcs.iter().filter(ok) {
        let cold: std::collections::HashSet<u64> = f.blocks.iter().filter(|b| b.cold).map(|b| b.offset).collect();
        for e in &f.edges {
            if cold.contains(&e.from) || cold.contains(&e.to) {
                continue;
            }
            let n = ((e.count * SCALE).round() as u64).max(1);
            let _ = writeln!(out, "1 {0} {1:x} 1 {0} {2:x} 0 {n}", f.bolt_name, e.last, e.to);
        }
        for c in &f.calls {
            if let Some(to) = callee.get(&c.target) {
                let n = ((c.count * SCALE).round() as u64).max(1);
                let _ = writeln!(out, "1 {} {:x} 1 {to} 0 0 {n}", f.bolt_name, c.offset);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::blocks::BlockCount;

    fn block(offset: u64, count: f64, cold: bool) -> BlockCount {
        BlockCount { offset, insns: 1, samples: count, count, upper: count, cold, entered: 0.0, left: 0.0 }
    }

    // Literal profile: hot blocks scaled, an unsampled warm block kept at 1,
    // a cold block and an unsampled function left out, offsets in hex.
    #[test]
    fn writes_block_records() {
        let f = |name: &str, samples: f64, blocks| FunctionProfile {
            name: name.into(),
            start: 0,
            size: 0x40,
            samples,
            blocks,
            edges: vec![],
            missing_edges: false,
            calls: vec![],
            bolt_name: name.into(),
        };
        let text = write_no_lbr(&[
            f("run", 40.0, vec![block(0, 12.5, false), block(0x1a, 0.0, false), block(0x30, 0.0, true)]),
            f("idle", 0.0, vec![block(0, 0.0, false)]),
        ]);
        assert_eq!(text, "no_lbr loupe-block-counts\n1 run 0 1250\n1 run 1a 1\n");
    }

    // Branch records: from the branch instruction (a plain fall-through
    // from the block's last instruction), edges into and out of cold blocks
    // left out (one at 1 would make BOLT count the cold block warm), warm
    // unsampled targets kept at 1.
    #[test]
    fn writes_edge_records() {
        use crate::blocks::EdgeCount;
        let edges = vec![
            EdgeCount { from: 0, branch: Some(3), last: 3, to: 0x10, count: 7.5 },
            EdgeCount { from: 0, branch: Some(3), last: 3, to: 0x20, count: 0.0 },
            EdgeCount { from: 0x10, branch: None, last: 0x1c, to: 0x20, count: 7.5 },
            EdgeCount { from: 0x20, branch: Some(0x22), last: 0x22, to: 0x30, count: 0.0 },
            EdgeCount { from: 0x30, branch: Some(0x36), last: 0x36, to: 0x10, count: 0.0 },
        ];
        let f = FunctionProfile {
            name: "g".into(),
            start: 0,
            size: 0x40,
            samples: 9.0,
            blocks: vec![block(0, 7.5, false), block(0x10, 7.5, false), block(0x20, 0.0, false), block(0x30, 0.0, true)],
            edges,
            missing_edges: false,
            calls: vec![
                crate::blocks::CallCount { offset: 0x12, target: 0x1000, count: 2.5 },
                crate::blocks::CallCount { offset: 0x14, target: 0x2000, count: 2.5 },
            ],
            bolt_name: "g/2".into(),
        };
        let callee = FunctionProfile {
            name: "h".into(),
            start: 0x1000,
            samples: 1.0,
            blocks: vec![],
            edges: vec![],
            calls: vec![],
            bolt_name: "h".into(),
            ..f.clone()
        };
        // Written under BOLT's name g/2; the call into h (profiled) is kept, the one to 0x2000 (no profile) is not.
        assert_eq!(
            write_edges(&[f, callee]),
            "1 g/2 3 1 g/2 10 0 750\n1 g/2 3 1 g/2 20 0 1\n1 g/2 1c 1 g/2 20 0 750\n1 g/2 12 1 h 0 0 250\n"
        );
    }

    // The header must not make BOLT divide by block length a second time.
    #[test]
    fn event_name_is_not_scaled_by_bolt() {
        assert!(!EVENT.contains("cycles") && !EVENT.contains("instructions"));
    }
}
