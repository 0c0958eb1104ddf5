//! Spill slots (issue 28): optimized code keeps a value in a register and,
//! under register pressure, stores it to a stack slot that no DWARF
//! variable owns and loads it back later (glibc's `__mpn_divrem`,
//! `mbrtowc`, gawk's `format_tree`). What the slot holds is what was
//! stored: a register whose DWARF variable is known at the store. A slot
//! has a type when, over the whole function, every store into it is of a
//! variable of one type (immediates fit any), nothing else writes it and
//! its address is never taken; then every access to it, and every pointer
//! loaded back from it, is of that type. Slots are keyed by their offset
//! from the CFA, which names the same bytes at every instruction of a call.

use super::{ImageTypes, TypeRef, Typed, R};
use gimli::UnitOffset;
use iced_x86::{Decoder, DecoderOptions, Instruction, InstructionInfoFactory, Mnemonic, OpAccess, OpKind, Register};
use std::collections::HashMap;
use std::rc::Rc;

const RSP: u16 = 7;
const RBP: u16 = 6;

/// What the stores into one slot (offset from the CFA, size) agree on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Content {
    /// Only immediates so far: they fit any type.
    Constant,
    /// Every typed store is of this type.
    Of(TypeRef),
    /// The stack protector's copy of the guard (`%fs:0x28`), which the
    /// epilogue compares before returning.
    Canary,
    /// Stores disagree, or one is of an unknown value.
    Mixed,
}

impl Content {
    fn join(self, other: Content) -> Content {
        match (self, other) {
            (Content::Constant, x @ (Content::Constant | Content::Of(_))) | (x @ Content::Of(_), Content::Constant) => x,
            (Content::Of(a), Content::Of(b)) if a == b => Content::Of(a),
            (Content::Canary, Content::Canary) => Content::Canary,
            _ => Content::Mixed,
        }
    }
}

/// A function's spill slots.
#[derive(Debug, Default)]
pub(crate) struct Spills {
    /// (CFA offset, size) -> what the stores put there.
    slots: HashMap<(i64, u64), Content>,
    /// CFA offsets whose address the function takes (`lea`, a copy of the
    /// stack pointer): from each, up to the end of the DWARF variable there
    /// (or with none, every higher slot), a callee may write.
    escaped: Vec<(i64, Option<i64>)>,
    /// A write to the stack that could not be placed against the CFA: any
    /// slot may have been overwritten.
    unplaced: bool,
}

impl ImageTypes {
    /// The type and field at `reg + offset` at `pc` when that is a spill
    /// slot of the function whose stores agree on one type.
    pub fn spill_at(&self, pc: u64, reg: u16, offset: i64) -> Option<Typed> {
        let (t, off) = self.spill_place(pc, reg, offset)?;
        Some(self.describe(t, off))
    }

    /// The slot's type and the offset into it, for the type flow too.
    pub(crate) fn spill_place(&self, pc: u64, reg: u16, offset: i64) -> Option<(TypeRef, u64)> {
        match self.slot_content(pc, reg, offset)? {
            (Content::Of(t), off) => Some((t, off)),
            _ => None,
        }
    }

    /// The frame slot holding the stack protector's guard copy, when
    /// `reg + offset` at `pc` is it.
    pub fn canary_at(&self, pc: u64, reg: u16, offset: i64) -> Option<Typed> {
        let (Content::Canary, 0) = self.slot_content(pc, reg, offset)? else { return None };
        Some(Typed { type_name: super::FRAME_TYPE.into(), field: "stack protector guard".into(), field_offset: 0, offset: 0, size: 8 })
    }

    /// What the stores agree the slot at `reg + offset` holds, and the
    /// offset into it: one slot (immediates aside) whose address never escapes.
    fn slot_content(&self, pc: u64, reg: u16, offset: i64) -> Option<(Content, u64)> {
        if reg != RSP && reg != RBP {
            return None;
        }
        let key = self.cfa_key(pc, reg, offset)?;
        let (low, high) = self.function_bounds(pc)?;
        let spills = self.spills_of(low, high)?;
        if spills.unplaced || spills.escaped.iter().any(|&(from, to)| from <= key && to.is_none_or(|to| key < to)) {
            return None;
        }
        let mut found = None;
        for (&(k, _), &c) in spills.slots.iter().filter(|(&(k, size), _)| k <= key && key < k + size as i64) {
            match (found, c) {
                (_, Content::Constant) => {}
                (None, Content::Of(_) | Content::Canary) => found = Some((k, c)),
                _ => return None,
            }
        }
        // Where DWARF variables live in the slot and agree, slots.rs named it first; where they
        // disagree (the slot reused by several), every write to it is still one of these stores.
        let (k, c) = found?;
        Some((c, (key - k) as u64))
    }

    /// `reg + offset` as an offset from the CFA at `pc`.
    fn cfa_key(&self, pc: u64, reg: u16, offset: i64) -> Option<i64> {
        let (r, k) = self.cfa_at(pc)?;
        (r == reg).then_some(offset - k)
    }

    fn spills_of(&self, low: u64, high: u64) -> Option<Rc<Spills>> {
        if let Some(s) = self.spills.borrow().get(&low) {
            return s.clone();
        }
        let s = self.code(low, high).map(|code| Rc::new(self.find_spills(low, code)));
        self.spills.borrow_mut().insert(low, s.clone());
        s
    }

    /// Every store into the stack in the function, by slot.
    fn find_spills(&self, low: u64, code: &[u8]) -> Spills {
        let mut out = Spills::default();
        let mut factory = InstructionInfoFactory::new();
        // The register holding the stack protector's guard, just loaded from %fs:0x28.
        let mut guard = None;
        for ins in Decoder::with_ip(64, code, low, DecoderOptions::NONE).into_iter().take_while(|i| !i.is_invalid()) {
            self.escapes(&ins, &mut out);
            let info = factory.info(&ins);
            for m in info.used_memory() {
                let writes = matches!(m.access(), OpAccess::Write | OpAccess::ReadWrite | OpAccess::CondWrite | OpAccess::ReadCondWrite);
                let Some(base) = stack_reg(m.base()).filter(|_| writes) else { continue };
                let Some(key) = self.stack_key(ins.ip(), base, m.displacement() as i64, &mut out) else { continue };
                if m.index() != Register::None {
                    // An indexed store writes an array: anywhere in the variable at `key`, or above it.
                    out.escaped.push((key, self.occupant_end(ins.ip(), key)));
                    continue;
                }
                let size = m.memory_size().size() as u64;
                let c = self.stored(&ins, size, guard);
                out.slots.entry((key, size)).and_modify(|e| *e = e.join(c)).or_insert(c);
            }
            let written = info.used_registers().iter().any(|u| {
                let w = matches!(u.access(), OpAccess::Write | OpAccess::ReadWrite | OpAccess::CondWrite | OpAccess::ReadCondWrite);
                w && Some(u.register().full_register()) == guard
            });
            if is_guard_load(&ins) {
                guard = Some(ins.op0_register().full_register());
            } else if written || ins.flow_control() != iced_x86::FlowControl::Next {
                guard = None;
            }
        }
        out
    }

    /// Records the stack addresses the instruction lets out: `lea r, [rsp/rbp + k]`
    /// and copies of the stack pointer (not the frame pointer's `mov rbp, rsp`).
    fn escapes(&self, ins: &Instruction, out: &mut Spills) {
        let taken = match ins.mnemonic() {
            Mnemonic::Lea => stack_reg(ins.memory_base()).map(|r| (r, ins.memory_displacement64() as i64)),
            // `mov rbp, rsp` makes the frame pointer, unless the CFA does not follow it.
            Mnemonic::Mov if ins.op1_kind() == OpKind::Register && ins.op0_kind() == OpKind::Register => {
                let frame_pointer = ins.op0_register() == Register::RBP && self.cfa_at(ins.next_ip()).is_some_and(|(r, _)| r == RBP);
                (ins.op1_register() == Register::RSP && !frame_pointer).then_some((RSP, 0))
            }
            _ => None,
        };
        let Some((r, k)) = taken else { return };
        if let Some(key) = self.stack_key(ins.ip(), r, k, out) {
            out.escaped.push((key, self.occupant_end(ins.ip(), key)));
        }
    }

    /// The CFA offset of `base + disp` at `pc` (`base` RSP or RBP); `None`
    /// for RBP used as a general register (the CFA is not on it), and for a
    /// stack address it cannot place (then `unplaced`).
    fn stack_key(&self, pc: u64, base: u16, disp: i64, out: &mut Spills) -> Option<i64> {
        let cfa = self.cfa_at(pc);
        if base == RBP && cfa.is_none_or(|(r, _)| r != RBP) {
            return None;
        }
        match cfa {
            Some((r, k)) if r == base => Some(disp - k),
            _ => {
                out.unplaced = true;
                None
            }
        }
    }

    /// The end (CFA offset) of the DWARF variable starting at CFA offset `key`.
    fn occupant_end(&self, pc: u64, key: i64) -> Option<i64> {
        let end = self.funcs.partition_point(|f| f.low <= pc);
        let f = self.funcs[..end].iter().filter(|f| pc < f.high).max_by_key(|f| f.high - f.low)?;
        let unit = &self.units[f.unit];
        let (r, base) = self.frame_base(unit, f.die, pc)?;
        let (cr, ck) = self.cfa_at(pc)?;
        if r != cr {
            return None;
        }
        let mut owners = Vec::new();
        self.slot_occupants(f.unit, unit, f.die, key + ck - base, &mut owners);
        let whole = owners.iter().filter(|o| o.1 == 0).map(|o| self.size_of(o.0.ui, unit, o.0.ty) as i64).max()?;
        Some(key + whole)
    }

    /// What a store puts in its slot: a register's DWARF variable (of the
    /// store's size), an immediate, or something unknown.
    fn stored(&self, ins: &Instruction, size: u64, guard: Option<Register>) -> Content {
        let plain = matches!(ins.mnemonic(), Mnemonic::Mov) && ins.op0_kind() == OpKind::Memory;
        if !plain {
            return Content::Mixed;
        }
        match ins.op1_kind() {
            OpKind::Register if Some(ins.op1_register()) == guard && size == 8 => Content::Canary,
            OpKind::Register => {
                let Some(r) = crate::interp::dwarf_number(ins.op1_register().full_register()) else { return Content::Mixed };
                match self.register_type(ins.ip(), r) {
                    Some(t) if self.size_of(t.ui, &self.units[t.ui], t.ty) == size => Content::Of(t),
                    _ => Content::Mixed,
                }
            }
            OpKind::Immediate8 | OpKind::Immediate16 | OpKind::Immediate32 | OpKind::Immediate8to32 | OpKind::Immediate32to64 => {
                Content::Constant
            }
            _ => Content::Mixed,
        }
    }

    /// The type every DWARF variable held in register `reg` at `pc` has
    /// (innermost function holding `pc`), when there is one and they agree.
    fn register_type(&self, pc: u64, reg: u16) -> Option<TypeRef> {
        let end = self.funcs.partition_point(|f| f.low <= pc);
        let f = self.funcs[..end].iter().filter(|f| pc < f.high).max_by_key(|f| f.high - f.low)?;
        let unit = &self.units[f.unit];
        let mut found = Vec::new();
        self.register_occupants(f.unit, unit, f.die, pc, reg, &mut found);
        let (first, rest) = found.split_first()?;
        rest.iter().all(|t| t == first).then_some(*first)
    }

    fn register_occupants(&self, ui: usize, unit: &gimli::Unit<R>, die: UnitOffset, pc: u64, reg: u16, out: &mut Vec<TypeRef>) {
        self.each_variable(unit, die, &mut |e| {
            let Some(expr) = self.location_at(unit, e, pc) else { return };
            let mut ops = expr.operations(unit.encoding());
            let is_reg =
                matches!((ops.next(), ops.next()), (Ok(Some(gimli::Operation::Register { register })), Ok(None)) if register.0 == reg);
            if let Some(ty) = self.var_type(unit, e).filter(|_| is_reg) {
                out.push(TypeRef { ui, ty });
            }
        });
    }
}

/// `mov r64, %fs:0x28`: the stack protector loading its guard.
fn is_guard_load(ins: &Instruction) -> bool {
    ins.mnemonic() == Mnemonic::Mov
        && ins.op0_kind() == OpKind::Register
        && ins.op0_register().is_gpr64()
        && ins.op1_kind() == OpKind::Memory
        && ins.segment_prefix() == Register::FS
        && ins.memory_base() == Register::None
        && ins.memory_index() == Register::None
        && ins.memory_displacement64() == 0x28
}

/// DWARF number of RSP or RBP.
fn stack_reg(r: Register) -> Option<u16> {
    match r {
        Register::RSP => Some(RSP),
        Register::RBP => Some(RBP),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object::{Object, ObjectSymbol};

    /// testdata/workloads/dspill.c built `-O2 -g -fstack-protector-all`, its types and `pressure`'s instructions.
    fn build() -> (tempfile::TempDir, ImageTypes, Vec<Instruction>) {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("w");
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/workloads/dspill.c");
        let st = std::process::Command::new("cc").args(["-O2", "-g", "-fstack-protector-all", "-o"]).arg(&bin).arg(&src).status().unwrap();
        assert!(st.success());
        let data = std::fs::read(&bin).unwrap();
        let file = object::File::parse(&*data).unwrap();
        let (addr, size) = file.symbols().find(|s| s.name() == Ok("pressure")).map(|s| (s.address(), s.size())).unwrap();
        let t = ImageTypes::load(&bin).unwrap();
        let insns = Decoder::with_ip(64, t.code(addr, addr + size).unwrap(), addr, DecoderOptions::NONE).into_iter().collect();
        (dir, t, insns)
    }

    /// (pc, displacement) of `mov [rsp+k], reg` (stores) or `mov reg, [rsp+k]` (loads) of 8 bytes.
    fn rsp_moves(insns: &[Instruction], store: bool) -> Vec<(u64, i64)> {
        let mem = if store { 0 } else { 1 };
        insns
            .iter()
            .filter(|i| i.mnemonic() == Mnemonic::Mov && i.op_kind(mem) == OpKind::Memory && i.memory_base() == Register::RSP)
            .filter(|i| i.op_kind(1 - mem) == OpKind::Register && i.op_register(1 - mem).is_gpr64())
            .map(|i| (i.ip(), i.memory_displacement64() as i64))
            .collect()
    }

    #[test]
    fn spill_slots_never_contradict_dwarf() {
        // Checks in dspill's `pressure` (-O2: ten `long` values live across calls, spilled to stack slots) that every 8-byte store to and reload from the stack is typed `long int` by DWARF or by its spill slot, the two never disagreeing, the guard slot aside.
        let (_d, t, insns) = build();
        let mut checked = 0;
        for (pc, k) in rsp_moves(&insns, true).into_iter().chain(rsp_moves(&insns, false)) {
            if t.canary_at(pc, RSP, k).is_some() {
                continue;
            }
            let dwarf = t.pointee_at(pc, RSP, k).or_else(|| t.slot_owner(pc, RSP, k)).map(|x| x.type_name);
            let spill = t.spill_at(pc, RSP, k).map(|x| x.type_name);
            let long = Some("long int".to_string());
            assert!(dwarf == long || spill == long, "at {pc:#x} rsp+{k}: {dwarf:?} / {spill:?}");
            assert!(dwarf.is_none() || spill.is_none() || dwarf == spill, "at {pc:#x} rsp+{k}: {dwarf:?} / {spill:?}");
            checked += 1;
        }
        assert!(checked >= 6, "{checked} spill stores and reloads");
    }

    #[test]
    fn the_stack_protectors_guard_copy_is_a_frame_slot() {
        // Checks the slot `pressure` stores %fs:0x28 into (and reloads before returning) is named the stack protector guard, and is no spill type.
        let (_d, t, insns) = build();
        let guard = insns.iter().position(is_guard_load).expect("no stack protector in pressure");
        let store = &insns[guard + 1];
        assert_eq!((store.mnemonic(), store.op1_register()), (Mnemonic::Mov, insns[guard].op0_register()));
        let k = store.memory_displacement64() as i64;
        let named = t.canary_at(store.ip(), RSP, k).map(|x| (x.type_name, x.field));
        assert_eq!(named, Some((crate::types::FRAME_TYPE.to_string(), "stack protector guard".to_string())));
        let reload = rsp_moves(&insns, false).into_iter().find(|&(_, d)| d == k).expect("the guard is reloaded");
        assert!(t.canary_at(reload.0, RSP, k).is_some());
        assert_eq!(t.spill_at(store.ip(), RSP, k), None);
    }

    #[test]
    fn stores_that_disagree_leave_the_slot_untyped() {
        // Checks the join of store contents: immediates fit a type, two types or an unknown value make it mixed, the guard only joins itself.
        let a = Content::Of(TypeRef { ui: 0, ty: UnitOffset(1) });
        let b = Content::Of(TypeRef { ui: 0, ty: UnitOffset(2) });
        assert_eq!(Content::Constant.join(a), a);
        assert_eq!(a.join(Content::Constant), a);
        assert_eq!(a.join(a), a);
        assert_eq!(a.join(b), Content::Mixed);
        assert_eq!(a.join(Content::Mixed), Content::Mixed);
        assert_eq!(Content::Canary.join(Content::Canary), Content::Canary);
        assert_eq!(Content::Canary.join(Content::Constant), Content::Mixed);
    }
}
