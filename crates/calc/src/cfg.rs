//! The procedure's control-flow graph from its machine code (DCPI §6.1.1):
//! blocks end at branches, jumps, returns and before branch targets; jump
//! tables behind indirect jumps are read from the image; where an indirect
//! jump's targets cannot be found the graph is marked as missing edges.

use crate::decode::{Flow, Insn};
use iced_x86::{Mnemonic, Register};
use std::collections::{BTreeSet, HashMap};

/// Bytes of the image by virtual address (jump tables live in `.rodata`).
pub trait Memory {
    fn read(&self, vaddr: u64, len: usize) -> Option<Vec<u8>>;
}

/// No memory: every indirect jump is unresolved.
pub struct NoMemory;

impl Memory for NoMemory {
    fn read(&self, _: u64, _: usize) -> Option<Vec<u8>> {
        None
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EdgeKind {
    FallThrough,
    Taken,
    Table,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Edge {
    pub from: usize,
    pub to: usize,
    pub kind: EdgeKind,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Block {
    /// Instruction indices `first..last+1`.
    pub first: usize,
    pub end: usize,
    pub succs: Vec<usize>,
    pub preds: Vec<usize>,
    /// Control leaves the procedure after this block (return, tail call).
    pub exits: bool,
    /// Ends in an indirect jump whose targets were not found.
    pub unresolved: bool,
    pub reachable: bool,
}

#[derive(Clone, Debug)]
pub struct Cfg {
    pub insns: Vec<Insn>,
    pub blocks: Vec<Block>,
    pub edges: Vec<Edge>,
    pub missing_edges: bool,
}

impl Cfg {
    pub fn block_of(&self, insn: usize) -> usize {
        self.blocks.partition_point(|b| b.end <= insn)
    }

    pub fn start(&self, b: usize) -> u64 {
        self.insns[self.blocks[b].first].addr
    }

    pub fn last(&self, b: usize) -> &Insn {
        &self.insns[self.blocks[b].end - 1]
    }
}

/// Builds the graph of the procedure `insns` (decoded, contiguous).
pub fn build(insns: Vec<Insn>, mem: &dyn Memory) -> Cfg {
    let lo = insns.first().map_or(0, |i| i.addr);
    let hi = insns.last().map_or(0, |i| i.end());
    let inside = |a: u64| a >= lo && a < hi;
    let index: HashMap<u64, usize> = insns.iter().enumerate().map(|(i, x)| (x.addr, i)).collect();
    let mut tables: HashMap<usize, Vec<usize>> = HashMap::new();
    let mut leaders: BTreeSet<usize> = BTreeSet::from([0]);
    // Every table first: an unguarded one ends where the next begins.
    let located: HashMap<usize, Table> = (0..insns.len())
        .filter(|&i| matches!(insns[i].flow, Flow::IndirectJump))
        .filter_map(|i| locate_table(&insns, i).map(|t| (i, t)))
        .collect();
    let table_addrs: Vec<u64> = located.values().map(|t| t.addr).collect();
    for (i, x) in insns.iter().enumerate() {
        let targets: Vec<u64> = match x.flow {
            Flow::Jump(t) | Flow::Branch(t) => vec![t],
            Flow::IndirectJump => {
                let t = located.get(&i).and_then(|&t| jump_table(t, mem, &inside, &table_addrs));
                if let Some(t) = &t {
                    let idx: Vec<usize> = t.iter().filter_map(|a| index.get(a).copied()).collect();
                    tables.insert(i, idx);
                }
                t.unwrap_or_default()
            }
            _ => vec![],
        };
        for t in targets.into_iter().filter(|t| inside(*t)) {
            if let Some(&j) = index.get(&t) {
                leaders.insert(j);
            }
        }
        if x.flow != Flow::Next && i + 1 < insns.len() {
            leaders.insert(i + 1);
        }
    }
    let starts: Vec<usize> = leaders.into_iter().collect();
    let mut blocks: Vec<Block> = starts
        .iter()
        .enumerate()
        .map(|(k, &s)| Block {
            first: s,
            end: starts.get(k + 1).copied().unwrap_or(insns.len()),
            succs: vec![],
            preds: vec![],
            exits: false,
            unresolved: false,
            reachable: false,
        })
        .collect();
    let block_at = |i: usize| starts.partition_point(|&s| s <= i) - 1;
    let mut edges = Vec::new();
    let mut missing = false;
    for b in 0..blocks.len() {
        let li = blocks[b].end - 1;
        let last = &insns[li];
        let next = (blocks[b].end < insns.len()).then(|| b + 1);
        let mut out: Vec<(usize, EdgeKind)> = Vec::new();
        let jump_to = |t: u64, kind, out: &mut Vec<(usize, EdgeKind)>, exits: &mut bool| match index.get(&t) {
            Some(&j) if inside(t) => out.push((block_at(j), kind)),
            _ => *exits = true, // a tail call, or a target in another procedure
        };
        let mut exits = false;
        match last.flow {
            Flow::Next => match next {
                Some(n) => out.push((n, EdgeKind::FallThrough)),
                None => exits = true,
            },
            Flow::Jump(t) => jump_to(t, EdgeKind::Taken, &mut out, &mut exits),
            Flow::Branch(t) => {
                jump_to(t, EdgeKind::Taken, &mut out, &mut exits);
                match next {
                    Some(n) => out.push((n, EdgeKind::FallThrough)),
                    None => exits = true,
                }
            }
            Flow::IndirectJump => match tables.get(&li) {
                Some(ts) => {
                    let mut seen = BTreeSet::new();
                    for &j in ts {
                        if seen.insert(block_at(j)) {
                            out.push((block_at(j), EdgeKind::Table));
                        }
                    }
                }
                // A jump through memory or a register with no table found: a tail
                // call through a pointer leaves; anything else may go anywhere.
                None if is_tail_call_shape(last) => exits = true,
                None => {
                    blocks[b].unresolved = true;
                    missing = true;
                }
            },
            Flow::Return => exits = true,
            Flow::Stop => {}
        }
        blocks[b].exits = exits;
        for (to, kind) in out {
            let e = edges.len();
            edges.push(Edge { from: b, to, kind });
            blocks[b].succs.push(e);
            blocks[to].preds.push(e);
        }
    }
    mark_reachable(&mut blocks, &edges);
    if missing {
        // An unresolved jump may land on any block: none is provably dead.
        blocks.iter_mut().for_each(|b| b.reachable = true);
    }
    Cfg { insns, blocks, edges, missing_edges: missing }
}

/// Jumps through one loaded pointer (`jmp *0x10(%rax)`, a PLT's
/// `jmp *X(%rip)`) are calls in tail position; jump tables index with a
/// scaled register.
fn is_tail_call_shape(x: &Insn) -> bool {
    x.mem.is_some_and(|m| m.index == Register::None)
}

fn mark_reachable(blocks: &mut [Block], edges: &[Edge]) {
    if blocks.is_empty() {
        return;
    }
    let mut stack = vec![0];
    blocks[0].reachable = true;
    while let Some(b) = stack.pop() {
        for &e in &blocks[b].succs.clone() {
            let t = edges[e].to;
            if !blocks[t].reachable {
                blocks[t].reachable = true;
                stack.push(t);
            }
        }
    }
}

/// Where an indirect jump reads its table: address, entry size (8:
/// absolute entries, 4: entries relative to the table), and the entry
/// count its guard gives.
#[derive(Clone, Copy)]
struct Table {
    addr: u64,
    size: usize,
    bound: Option<u64>,
}

/// The targets listed in table `t`. `others`: every table address found
/// in the function; a table without a guard (`cmp $N; ja`) ends where the
/// next one starts, else entries are read while they land inside the
/// procedure (CPython's `long_richcompare` switches over a compared-op
/// value checked earlier; read until a target left the function, its first
/// table took the next two's 12 entries, and BOLT rejected the profile as
/// stale).
fn jump_table(t: Table, mem: &dyn Memory, inside: &dyn Fn(u64) -> bool, others: &[u64]) -> Option<Vec<u64>> {
    let next = others.iter().filter(|&&o| o > t.addr).min();
    let bound = t.bound.or_else(|| next.map(|n| (n - t.addr) / t.size as u64));
    let relative = t.size == 4;
    let read = |raw: u64, base: u64| if relative { base.wrapping_add(raw as u32 as i32 as i64 as u64) } else { raw };
    read_entries(mem, t.addr, t.size, bound, t.bound.is_some(), inside, read)
}

/// The table of the indirect jump at `at`, when it reads one GCC and Clang
/// emit: `jmp *T(,%r,8)` (absolute entries) or `lea T(%rip),%b; movslq
/// (%b,%r,4),%x; add %b,%x; jmp *%x` (entries relative to T); the entry
/// count from the `cmp $N, %r; ja default` guarding it.
fn locate_table(insns: &[Insn], at: usize) -> Option<Table> {
    let window = &insns[at.saturating_sub(16)..at];
    let bound = table_bound(window);
    let jmp = &insns[at];
    // `jmp *T(,%r,8)`, or `mov T(...,8),%x; jmp *%x` (the table loaded into the jump's register first).
    let loaded = || {
        let x = window.last().filter(|x| x.mnemonic == Mnemonic::Mov && x.loads && x.writes & jmp.reads != 0)?;
        x.mem
    };
    if let Some(m) = jmp.mem.or_else(loaded).filter(|m| m.index != Register::None && m.scale == 8) {
        let addr = match m.base {
            Register::None => m.disp,
            b => register_table(insns, at, b)?.wrapping_add(m.disp),
        };
        return Some(Table { addr, size: 8, bound });
    }
    // Relative table: the last RIP-relative lea before the jump names it.
    let movslq = window.iter().rev().find(|x| x.mnemonic == Mnemonic::Movsxd && x.mem.is_some_and(|m| m.scale == 4))?;
    let base_reg = movslq.mem?.base;
    // The lea may sit further back (SQLite's VDBE sets the base 20
    // instructions before, ahead of a loop): up to 48 back, when nothing
    // in between writes the register.
    let bit = crate::decode::reg_bit(base_reg);
    let wide = &insns[at.saturating_sub(48)..at];
    let k = wide.iter().rposition(|x| x.lea_target.is_some_and(|(_, r)| r == base_reg))?;
    let (addr, _) = wide[k].lea_target?;
    if bit == 0 || wide[k + 1..].iter().any(|x| x.writes & bit != 0) {
        return None;
    }
    Some(Table { addr, size: 4, bound })
}

/// The table a threaded interpreter keeps in a register for the whole
/// procedure (Lua's `jmp *(%r13,%rax,8)` over `disptab`, loaded by one
/// `lea disptab(%rip),%r13` at entry): the address, when an earlier
/// RIP-relative lea sets `base` and every other instruction that writes it
/// is a `pop` (the epilogue restoring the caller's value).
fn register_table(insns: &[Insn], at: usize, base: Register) -> Option<u64> {
    let bit = crate::decode::reg_bit(base);
    let (table, _) = insns[..at].iter().rev().filter_map(|x| x.lea_target).find(|(_, r)| *r == base)?;
    let others = insns.iter().filter(|x| x.writes & bit != 0).all(|x| x.mnemonic == Mnemonic::Pop || x.lea_target == Some((table, base)));
    (bit != 0 && others).then_some(table)
}

fn table_bound(window: &[Insn]) -> Option<u64> {
    // `cmp $N, %r` then `ja` (index <= N: N+1 entries) or `jae` (N entries).
    let k = window.iter().rposition(|x| matches!(x.mnemonic, Mnemonic::Ja | Mnemonic::Jae))?;
    let n = window[..k].iter().rev().find_map(|x| x.cmp_imm)?;
    Some(if window[k].mnemonic == Mnemonic::Ja { n + 1 } else { n })
}

/// `guarded`: the bound is the guard's, so every entry must be a target.
fn read_entries(
    mem: &dyn Memory,
    table: u64,
    size: usize,
    bound: Option<u64>,
    guarded: bool,
    inside: &dyn Fn(u64) -> bool,
    target: impl Fn(u64, u64) -> u64,
) -> Option<Vec<u64>> {
    let max = bound.unwrap_or(1024).min(4096);
    let mut out = Vec::new();
    for k in 0..max {
        let Some(raw) = mem.read(table + k * size as u64, size) else { break };
        let v = raw.iter().rev().fold(0u64, |a, b| (a << 8) | *b as u64);
        let t = target(v, table);
        if !inside(t) {
            if guarded {
                return None; // the guard promised more entries: not a table we understand
            }
            break;
        }
        out.push(t);
    }
    (!out.is_empty()).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::decode;

    struct Bytes(u64, Vec<u8>);
    impl Memory for Bytes {
        fn read(&self, a: u64, len: usize) -> Option<Vec<u8>> {
            let o = a.checked_sub(self.0)? as usize;
            self.1.get(o..o + len).map(|s| s.to_vec())
        }
    }

    #[test]
    fn if_then_else_has_four_blocks_and_four_edges() {
        // Checks block splitting at a branch and its target, and the exit at `ret`.
        // 0: test edi,edi; je 8; mov eax,1; jmp 0xd; 8: mov eax,2; 0xd: ret
        let bytes = [0x85, 0xff, 0x74, 0x07, 0xb8, 0x01, 0, 0, 0, 0xeb, 0x05, 0xb8, 0x02, 0, 0, 0, 0xc3];
        let g = build(decode(0, &bytes), &NoMemory);
        let starts: Vec<u64> = (0..g.blocks.len()).map(|b| g.start(b)).collect();
        assert_eq!(starts, vec![0, 4, 0xb, 0x10]);
        let e: Vec<(usize, usize)> = g.edges.iter().map(|e| (e.from, e.to)).collect();
        assert_eq!(e, vec![(0, 2), (0, 1), (1, 3), (2, 3)]);
        assert!(g.blocks[3].exits && !g.missing_edges);
    }

    #[test]
    fn relative_jump_table_is_read_with_its_bound() {
        // Checks GCC's PIC jump table: cmp/ja bound, lea base, movslq, add, jmp *%rax -> three case edges.
        // 0: cmp $2,%edi; ja 0x1c; lea 0x100(%rip),%rdx (=0x10f); movslq (%rdx,%rdi,4),%rax; add %rdx,%rax; jmp *%rax
        // 0x17: ret (case 0) ; 0x18: nop x3 ; 0x1b: ret... cases at 0x17, 0x18, 0x1b; 0x1c: ret (default)
        let mut bytes = vec![0x83, 0xff, 0x02, 0x77, 0x17, 0x48, 0x8d, 0x15, 0x00, 0x01, 0, 0];
        bytes.extend([0x48, 0x63, 0x04, 0xba, 0x48, 0x01, 0xd0, 0xff, 0xe0]); // movslq, add, jmp *%rax -> ends at 0x15
        bytes.extend([0x90, 0x90, 0xc3, 0x90, 0x90, 0x90, 0xc3, 0xc3]); // 0x15..0x1d
        let code = decode(0, &bytes);
        let table = 0x10c_u64; // lea at 5, len 7: rip 0xc + 0x100
        let entries: Vec<u8> = [0x17i32, 0x18, 0x1b].iter().flat_map(|t| ((*t as i64 - table as i64) as i32).to_le_bytes()).collect();
        let g = build(code, &Bytes(table, entries));
        assert!(!g.missing_edges);
        let jb = g.block_of(g.insns.iter().position(|x| x.addr == 0x13).unwrap());
        let targets: Vec<u64> = g.blocks[jb].succs.iter().map(|&e| g.start(g.edges[e].to)).collect();
        assert_eq!(targets, vec![0x17, 0x18, 0x1b]);
    }

    #[test]
    fn relative_table_base_set_far_back_is_read_unless_overwritten() {
        // Checks a PIC table whose lea is 21 instructions before the jump (SQLite's VDBE): read when nothing in
        // between writes the base register, missing edges when something does.
        // 0: lea 0xf9(%rip),%rdx (=0x100) | 7: 20 bytes of filler | 0x1b: cmp $2,%edi; ja 0x2b;
        // 0x20: movslq (%rdx,%rdi,4),%rax; add %rdx,%rax; jmp *%rax | 0x29: ret; 0x2a: ret; 0x2b: ret
        let graph = |filler: &[u8]| {
            let mut bytes = vec![0x48, 0x8d, 0x15, 0xf9, 0, 0, 0];
            bytes.extend(filler);
            bytes.extend([0x83, 0xff, 0x02, 0x77, 0x0b, 0x48, 0x63, 0x04, 0xba, 0x48, 0x01, 0xd0, 0xff, 0xe0, 0xc3, 0xc3, 0xc3]);
            let entries: Vec<u8> = [0x29i32, 0x2a].iter().flat_map(|t| (t - 0x100).to_le_bytes()).collect();
            build(decode(0, &bytes), &Bytes(0x100, entries))
        };
        let g = graph(&[0x90; 20]);
        assert!(!g.missing_edges);
        let jb = g.block_of(g.insns.iter().position(|x| x.addr == 0x27).unwrap());
        let targets: Vec<u64> = g.blocks[jb].succs.iter().map(|&e| g.start(g.edges[e].to)).collect();
        assert_eq!(targets, vec![0x29, 0x2a]);
        let mut filler = vec![0x90; 15];
        filler.extend([0xba, 0, 0, 0, 0]); // mov $0,%edx
        assert!(graph(&filler).missing_edges);
    }

    #[test]
    fn interpreter_table_in_a_register_is_read() {
        // Checks Lua's threaded dispatch: `lea T(%rip),%r13` at entry, later `jmp *(%r13,%rax,8)` over absolute
        // entries -> edges to the two handlers the table lists; likewise `mov (%r13,%rax,8),%rax; jmp *%rax`.
        // 0: lea 0x100(%rip),%r13 | 7: mov %edi,%eax | 9: jmp *0(%r13,%rax,8) | 0xe: xor %eax,%eax; ret | 0x11: mov $1,%eax; ret
        let code = decode(
            0,
            &[
                0x4c, 0x8d, 0x2d, 0xf9, 0x00, 0x00, 0x00, 0x89, 0xf8, 0x41, 0xff, 0x64, 0xc5, 0x00, 0x31, 0xc0, 0xc3, 0xb8, 0x01, 0, 0, 0,
                0xc3,
            ],
        );
        assert_eq!(code[0].lea_target.map(|t| t.0), Some(0x100));
        let entries: Vec<u8> = [0xe_u64, 0x11].iter().flat_map(|t| t.to_le_bytes()).collect();
        let g = build(code, &Bytes(0x100, entries));
        assert!(!g.missing_edges);
        let jmp = g.block_of(2);
        let mut to: Vec<u64> = g.blocks[jmp].succs.iter().map(|&e| g.start(g.edges[e].to)).collect();
        to.sort();
        assert_eq!(to, vec![0xe, 0x11]);
        // 9: mov 0(%r13,%rax,8),%rax; 0xe: jmp *%rax | 0x10: xor %eax,%eax; ret | 0x13: mov $1,%eax; ret
        let code = decode(
            0,
            &[
                0x4c, 0x8d, 0x2d, 0xf9, 0x00, 0x00, 0x00, 0x89, 0xf8, 0x49, 0x8b, 0x44, 0xc5, 0x00, 0xff, 0xe0, 0x31, 0xc0, 0xc3, 0xb8,
                0x01, 0, 0, 0, 0xc3,
            ],
        );
        let entries: Vec<u8> = [0x10_u64, 0x13].iter().flat_map(|t| t.to_le_bytes()).collect();
        let g = build(code, &Bytes(0x100, entries));
        assert!(!g.missing_edges);
        let jmp = g.block_of(3);
        let mut to: Vec<u64> = g.blocks[jmp].succs.iter().map(|&e| g.start(g.edges[e].to)).collect();
        to.sort();
        assert_eq!(to, vec![0x10, 0x13]);
    }

    #[test]
    fn unguarded_table_ends_where_the_next_one_starts() {
        // Checks CPython's long_richcompare shape: two `jmp *T(,%rdx,8)` over tables at 0x100 and 0x110, the
        // first without a `cmp; ja` guard. Its targets are its own two entries, not the second table's 7.
        // 0: jmp *0x100(,%rdx,8) | 7: jmp *0x110(,%rdx,8) | 0xe: xor %eax,%eax; ret | 0x11: mov $1,%eax; ret
        let code = decode(
            0,
            &[0xff, 0x24, 0xd5, 0x00, 0x01, 0, 0, 0xff, 0x24, 0xd5, 0x10, 0x01, 0, 0, 0x31, 0xc0, 0xc3, 0xb8, 0x01, 0, 0, 0, 0xc3],
        );
        let entries: Vec<u8> = [0xe_u64, 0x11, 0x11, 0x7].iter().flat_map(|t| t.to_le_bytes()).collect();
        let g = build(code, &Bytes(0x100, entries));
        let targets = |at: u64| {
            let b = (0..g.blocks.len()).find(|&b| g.start(b) == at).unwrap();
            let mut to: Vec<u64> = g.blocks[b].succs.iter().map(|&e| g.start(g.edges[e].to)).collect();
            to.sort();
            to.dedup();
            to
        };
        assert_eq!(targets(0), vec![0xe, 0x11]);
        assert_eq!(targets(7), vec![0x7, 0x11]);
    }

    #[test]
    fn jump_through_the_got_is_a_tail_call() {
        // Checks that a PLT-style `jmp *0x2fcc(%rip)` leaves the procedure without marking missing edges.
        let g = build(decode(0x1026, &[0xff, 0x25, 0xcc, 0x2f, 0, 0]), &NoMemory);
        assert!(!g.missing_edges && g.blocks[0].exits);
    }

    #[test]
    fn unknown_indirect_jump_marks_missing_edges() {
        // Checks that `jmp *%rax` with no table in sight marks the graph as missing edges.
        let g = build(decode(0, &[0x48, 0x89, 0xf8, 0xff, 0xe0, 0xc3]), &NoMemory);
        assert!(g.missing_edges && g.blocks[0].unresolved);
        // The `ret` after it has no known predecessor but may be a target: still analysed.
        assert!(g.blocks[1].reachable);
    }
}
