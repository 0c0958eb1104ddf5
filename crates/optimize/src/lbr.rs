//! BOLT's profile from real branch records (what `perf2bolt` writes from
//! `perf record -b`): one line per taken branch,
//! `1 FROM-FUNCTION FROM-OFFSET 1 TO-FUNCTION TO-OFFSET MISPREDICTED COUNT`,
//! offsets in hex from each function's start, names as BOLT calls the
//! functions ([`crate::bolt_names`]), and no header (a `no_lbr` header
//! would make BOLT read block counts instead). BOLT derives block counts
//! and fall-through counts from these; nothing is synthesized, and no
//! cold-block policy applies: a branch the LBR saw was taken.
//!
//! A record with an end outside every sized function (a PLT stub, code
//! without symbols) is left out and counted; so is a return (its source is
//! a `ret`), which perf2bolt leaves out too: the caller's side of it is the
//! start of the next straight run.
//!
//! Straight runs between consecutive records ([`Trace`]) become
//! fall-through lines, as perf2bolt writes them: walking the run's
//! instructions, each not-taken conditional branch gives `branch -> next
//! instruction`, and each instruction followed by a direct branch target
//! gives `it -> the target` (both are block ends in BOLT's CFG: the `from`
//! is the block's last instruction), mispredicted 0. Except: BOLT keeps a
//! conditional branch and a direct jump right after it (not a branch
//! target) in one block, so that pair has no fall-through line. A run that would pass
//! an unconditional jump or a return, or whose ends are not instruction
//! starts of one function, cannot have happened as given and is left out
//! and counted.

use loupe_calc::decode::{decode, Flow, Insn};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write;

/// One branch of the image, both ends as ELF virtual addresses, with its
/// (aged) counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Branch {
    pub from: u64,
    pub to: u64,
    pub taken: u64,
    pub mispredicted: u64,
}

/// A straight run from `start` to `end` (ELF virtual addresses) seen `count` times.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Trace {
    pub start: u64,
    pub end: u64,
    pub count: u64,
}

/// A function of the image as BOLT names it, with its machine code (empty:
/// its traces are left out).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Function {
    pub start: u64,
    pub size: u64,
    pub bolt_name: String,
    pub code: Vec<u8>,
}

/// The fdata text and what went into it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LbrFdata {
    pub text: String,
    /// Lines written, and the branch executions they hold.
    pub lines: usize,
    pub taken: u64,
    /// Branch executions left out: an end in no function.
    pub left_out: u64,
    /// Returns left out.
    pub returns: u64,
    /// Fall-through lines written (also in `lines`), and the fall-throughs they hold.
    pub fallthrough_lines: usize,
    pub fallthroughs: u64,
    /// Runs left out: impossible as given, or outside any one function.
    pub bad_traces: u64,
    /// Distinct functions named in the profile.
    pub functions: usize,
}

/// The function holding `addr`, by binary search over functions sorted by start.
fn locate<'a>(funcs: &'a [&Function], addr: u64) -> Option<&'a Function> {
    let i = funcs.partition_point(|f| f.start <= addr).checked_sub(1)?;
    let f = funcs[i];
    (addr < f.start + f.size.max(1)).then_some(f)
}

/// A function's instructions by address and its block leaders (direct
/// branch targets inside it).
struct Decoded {
    insns: Vec<Insn>,
    targets: HashSet<u64>,
    range: std::ops::Range<u64>,
}

impl Decoded {
    fn inside(&self, addr: u64) -> bool {
        self.range.contains(&addr)
    }

    /// The instruction starting at `addr`.
    fn at(&self, addr: u64) -> Option<&Insn> {
        self.insns.binary_search_by_key(&addr, |i| i.addr).ok().map(|k| &self.insns[k])
    }
}

fn decoded(f: &Function) -> Decoded {
    let insns = decode(f.start, &f.code);
    let range = f.start..f.start + f.size;
    let targets = insns
        .iter()
        .filter_map(|i| match i.flow {
            Flow::Branch(t) | Flow::Jump(t) if range.contains(&t) => Some(t),
            _ => None,
        })
        .collect();
    Decoded { insns, targets, range }
}

/// The fall-through edges (from, to) one run from `start` to `end` crosses;
/// None when the run cannot have happened as given.
fn fallthroughs_of(d: &Decoded, start: u64, end: u64) -> Option<Vec<(u64, u64)>> {
    let mut k = d.insns.binary_search_by_key(&start, |i| i.addr).ok()?;
    let mut edges = Vec::new();
    while d.insns[k].addr < end {
        let i = &d.insns[k];
        let next = i.addr + i.len as u64;
        match i.flow {
            Flow::Next if d.targets.contains(&next) => edges.push((i.addr, next)),
            Flow::Next => {}
            Flow::Branch(_) => {
                // `jcc; jmp` is one block to BOLT (its buildCFG), unless the jmp is a branch target.
                let joined =
                    d.insns.get(k + 1).is_some_and(|j| matches!(j.flow, Flow::Jump(t) if d.inside(t)) && !d.targets.contains(&next));
                if !joined {
                    edges.push((i.addr, next));
                }
            }
            Flow::Jump(_) | Flow::IndirectJump | Flow::Return | Flow::Stop => return None,
        }
        k += 1;
        if d.insns.get(k)?.addr > end {
            return None;
        }
    }
    Some(edges)
}

/// Writes `branches` and the fall-throughs of `traces` as BOLT branch
/// fdata, lines sorted by (from, to). Functions whose BOLT name has white
/// space (which fdata cannot carry) are treated as unknown.
pub fn write_fdata(branches: &[Branch], traces: &[Trace], funcs: &[Function]) -> LbrFdata {
    let mut sorted: Vec<&Function> = funcs.iter().filter(|f| !f.bolt_name.chars().any(char::is_whitespace)).collect();
    sorted.sort_by_key(|f| f.start);
    let mut out = LbrFdata::default();
    // (from, to) -> (taken, mispredicted, fall-through)
    let mut lines: BTreeMap<(u64, u64), (u64, u64, bool)> = BTreeMap::new();
    let mut cache: HashMap<u64, Decoded> = HashMap::new();
    for b in branches.iter().filter(|b| b.taken > 0) {
        let (Some(f), Some(_)) = (locate(&sorted, b.from), locate(&sorted, b.to)) else {
            out.left_out += b.taken;
            continue;
        };
        let d = cache.entry(f.start).or_insert_with(|| decoded(f));
        if d.at(b.from).is_some_and(|i| i.flow == Flow::Return) {
            out.returns += b.taken;
            continue;
        }
        let l = lines.entry((b.from, b.to)).or_default();
        l.0 += b.taken;
        l.1 += b.mispredicted.min(b.taken);
        out.taken += b.taken;
    }
    for t in traces.iter().filter(|t| t.count > 0) {
        let edges = match (locate(&sorted, t.start), locate(&sorted, t.end)) {
            (Some(f), Some(g)) if f.start == g.start && t.start <= t.end && !f.code.is_empty() => {
                fallthroughs_of(cache.entry(f.start).or_insert_with(|| decoded(f)), t.start, t.end)
            }
            _ => None,
        };
        let Some(edges) = edges else {
            out.bad_traces += t.count;
            continue;
        };
        for e in edges {
            let l = lines.entry(e).or_default();
            l.0 += t.count;
            l.2 = true;
            out.fallthroughs += t.count;
        }
    }
    let mut named = std::collections::BTreeSet::new();
    for (&(from, to), &(n, m, ft)) in &lines {
        let (f, g) = (locate(&sorted, from).expect("kept"), locate(&sorted, to).expect("kept"));
        let _ = writeln!(out.text, "1 {} {:x} 1 {} {:x} {m} {n}", f.bolt_name, from - f.start, g.bolt_name, to - g.start);
        named.insert(f.start);
        named.insert(g.start);
        out.fallthrough_lines += ft as usize;
    }
    out.lines = lines.len();
    out.functions = named.len();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(start: u64, size: u64, name: &str) -> Function {
        Function { start, size, bolt_name: name.into(), code: vec![] }
    }

    // Literal records, hand-derived lines: a loop branch inside run/1 (static), a call from run/1 into mix, its
    // return, a branch into a PLT stub (no function: left out); counts and mispredictions as given, offsets in hex.
    #[test]
    fn writes_branch_lines_per_function() {
        let funcs = [f(0x401000, 0x80, "run/1"), f(0x401100, 0x40, "mix"), f(0x401200, 0x10, "has space")];
        let br = |from, to, taken, mispredicted| Branch { from, to, taken, mispredicted };
        let got = write_fdata(
            &[
                br(0x401130, 0x401025, 40, 0),
                br(0x401020, 0x401100, 40, 1),
                br(0x401040, 0x401010, 900, 37),
                br(0x401050, 0x400500, 3, 0),
                br(0x401060, 0x401205, 2, 0),
                br(0x401070, 0x401010, 0, 0),
            ],
            &[],
            &funcs,
        );
        assert_eq!(got.text, "1 run/1 20 1 mix 0 1 40\n1 run/1 40 1 run/1 10 37 900\n1 mix 30 1 run/1 25 0 40\n");
        assert_eq!((got.lines, got.taken, got.left_out, got.functions), (3, 980, 5, 2));
    }

    // An address one past a function's end belongs to no function.
    #[test]
    fn function_ends_are_exclusive() {
        let got = write_fdata(&[Branch { from: 0x401080, to: 0x401000, taken: 1, mispredicted: 0 }], &[], &[f(0x401000, 0x80, "run")]);
        assert_eq!((got.lines, got.left_out), (0, 1));
    }

    // Hand-assembled function at 0x1000:
    //   1000 48 85 ff  test %rdi,%rdi      1003 74 05  je 100a       1005 48 ff c7  inc %rdi
    //   1008 eb 03     jmp 100d            100a 48 ff cf  dec %rdi   100d 48 89 f8  mov %rdi,%rax    1010 c3  ret
    // Runs: 1000..1008 x5 passes the not-taken je (3 -> 5); 100a..1010 x7 falls into the jmp's target (a -> d);
    // 1000..1003 x4 crosses no block end; 1005..1010 x2 would pass the jmp and 1001..1008 x1 starts mid-instruction
    // (both impossible, left out); 1000..2000 x9 leaves the function.
    #[test]
    fn traces_become_fallthrough_lines() {
        let code = vec![0x48, 0x85, 0xff, 0x74, 0x05, 0x48, 0xff, 0xc7, 0xeb, 0x03, 0x48, 0xff, 0xcf, 0x48, 0x89, 0xf8, 0xc3];
        let func = Function { start: 0x1000, size: code.len() as u64, bolt_name: "f".into(), code };
        let br = |from, to, taken, mispredicted| Branch { from, to, taken, mispredicted };
        let tr = |start, end, count| Trace { start, end, count };
        let got = write_fdata(
            &[br(0x1003, 0x100a, 3, 1), br(0x1008, 0x100d, 5, 0)],
            &[
                tr(0x1000, 0x1008, 5),
                tr(0x100a, 0x1010, 7),
                tr(0x1000, 0x1003, 4),
                tr(0x1005, 0x1010, 2),
                tr(0x1001, 0x1008, 1),
                tr(0x1000, 0x2000, 9),
            ],
            &[func],
        );
        assert_eq!(got.text, "1 f 3 1 f 5 0 5\n1 f 3 1 f a 1 3\n1 f 8 1 f d 0 5\n1 f a 1 f d 0 7\n");
        assert_eq!((got.lines, got.taken, got.fallthrough_lines, got.fallthroughs, got.bad_traces), (4, 8, 2, 12, 12));
    }

    // BOLT's block rules, hand-assembled:
    //   g: 2000 74 03 je 2005   2002 eb 02 jmp 2006   2004 90 nop   2005 90 nop   2006 c3 ret
    //   h: 3000 74 02 je 3004   3002 eb fe jmp 3002   3004 c3 ret
    // In g, je + jmp form one block: the run 2000..2002 gives no line; 2005..2006 falls into the jmp's target. In h
    // the jmp is a branch target (of itself), so it starts a block and 3000..3002 gives 0 -> 2. The return from
    // g's ret is left out, as perf2bolt does.
    #[test]
    fn bolt_block_rules_and_returns() {
        let g = vec![0x74, 0x03, 0xeb, 0x02, 0x90, 0x90, 0xc3];
        let h = vec![0x74, 0x02, 0xeb, 0xfe, 0xc3];
        let funcs = [
            Function { start: 0x2000, size: g.len() as u64, bolt_name: "g".into(), code: g },
            Function { start: 0x3000, size: h.len() as u64, bolt_name: "h".into(), code: h },
        ];
        let br = |from, to, taken| Branch { from, to, taken, mispredicted: 0 };
        let tr = |start, end, count| Trace { start, end, count };
        let got = write_fdata(
            &[br(0x2000, 0x2005, 6), br(0x2006, 0x3002, 4)],
            &[tr(0x2000, 0x2002, 3), tr(0x2005, 0x2006, 2), tr(0x3000, 0x3002, 1)],
            &funcs,
        );
        assert_eq!(got.text, "1 g 0 1 g 5 0 6\n1 g 5 1 g 6 0 2\n1 h 0 1 h 2 0 1\n");
        assert_eq!((got.returns, got.fallthrough_lines, got.fallthroughs, got.bad_traces), (4, 2, 3, 0));
    }
}
