//! Stack slots by their owner: the frame base of a function is one address
//! for the whole call (the CFA), so `DW_OP_fbreg k` names the same bytes at
//! every instruction. A location list says where a variable is *at each
//! PC*, and optimized code leaves gaps — the store that initializes a
//! variable sits before the range where its location says "in the slot"
//! (glibc's `vfprintf`: `space = 0` writes `rsp+0x38` while the list still
//! says "the constant 0"). When every variable that ever lives in the slot
//! (any range, any nested scope or inlined call of the function) agrees on
//! the type and the offset in it, an access to the slot is that type's;
//! when two disagree (slots shared by disjoint scopes), nothing is named.

use super::{ImageTypes, TypeRef, Typed, R};
use gimli::{AttributeValue, UnitOffset};

impl ImageTypes {
    /// The type and field at `reg + offset` at `pc` when that is a stack
    /// slot (frame base + k) whose every occupant in the function agrees.
    pub fn slot_owner(&self, pc: u64, reg: u16, offset: i64) -> Option<Typed> {
        let end = self.funcs.partition_point(|f| f.low <= pc);
        let f = self.funcs[..end].iter().filter(|f| pc < f.high).max_by_key(|f| f.high - f.low)?;
        let unit = &self.units[f.unit];
        let (r, base) = self.frame_base(unit, f.die, pc)?;
        if r != reg {
            return None;
        }
        let mut owners = Vec::new();
        self.slot_occupants(f.unit, unit, f.die, offset - base, &mut owners);
        let (first, rest) = owners.split_first()?;
        if rest.iter().any(|o| o != first) {
            return None;
        }
        self.local(first.0.ui, unit, first.0.ty, first.1)
    }

    /// Every variable or parameter under `die` with a `DW_OP_fbreg` location
    /// (in any range) covering frame base + `k`: its type and `k`'s offset in it.
    pub(super) fn slot_occupants(&self, ui: usize, unit: &gimli::Unit<R>, die: UnitOffset, k: i64, out: &mut Vec<(TypeRef, i64)>) {
        self.each_variable(unit, die, &mut |e| {
            for at in self.frame_offsets(unit, e) {
                let Some(ty) = self.var_type(unit, e) else { continue };
                let ty = TypeRef { ui, ty };
                if self.covers(ty, k - at) {
                    out.push((ty, k - at));
                }
            }
        });
    }

    /// Calls `f` on every variable and parameter under `die`, through its
    /// lexical blocks and inlined calls.
    pub(super) fn each_variable(&self, unit: &gimli::Unit<R>, die: UnitOffset, f: &mut dyn FnMut(&gimli::DebuggingInformationEntry<R>)) {
        let Ok(mut tree) = unit.entries_tree(Some(die)) else { return };
        let Ok(root) = tree.root() else { return };
        let mut it = root.children();
        let mut nested = Vec::new();
        while let Ok(Some(child)) = it.next() {
            let e = child.entry();
            match e.tag() {
                gimli::DW_TAG_variable | gimli::DW_TAG_formal_parameter => f(e),
                gimli::DW_TAG_lexical_block | gimli::DW_TAG_inlined_subroutine => nested.push(e.offset()),
                _ => {}
            }
        }
        for n in nested {
            self.each_variable(unit, n, f);
        }
    }

    /// The distinct `k` of every `DW_OP_fbreg k` location (alone in its
    /// expression) a variable has anywhere.
    fn frame_offsets(&self, unit: &gimli::Unit<R>, e: &gimli::DebuggingInformationEntry<R>) -> Vec<i64> {
        let fbreg = |expr: gimli::Expression<R>| {
            let mut ops = expr.operations(unit.encoding());
            match (ops.next(), ops.next()) {
                (Ok(Some(gimli::Operation::FrameOffset { offset })), Ok(None)) => Some(offset),
                _ => None,
            }
        };
        let mut out = Vec::new();
        match e.attr_value(gimli::DW_AT_location).ok().flatten() {
            Some(AttributeValue::Exprloc(x)) => out.extend(fbreg(x)),
            Some(other) => {
                if let Ok(Some(mut list)) = self.dwarf.attr_locations(unit, other) {
                    while let Ok(Some(l)) = list.next() {
                        out.extend(fbreg(l.data));
                    }
                }
            }
            None => {}
        }
        out.sort_unstable();
        out.dedup();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use iced_x86::{Decoder, DecoderOptions, Register};
    use object::{Object, ObjectSymbol};

    /// dtypes.c built with `opt`, its types, and `main`'s address and size.
    fn build(opt: &str) -> (tempfile::TempDir, ImageTypes, (u64, u64)) {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("w");
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/workloads/dtypes.c");
        let st = std::process::Command::new("cc").args([opt, "-g", "-o"]).arg(&bin).arg(&src).arg("-lpthread").status().unwrap();
        assert!(st.success(), "cc {opt}");
        let data = std::fs::read(&bin).unwrap();
        let file = object::File::parse(&*data).unwrap();
        let main = file.symbols().find(|s| s.name() == Ok("main")).map(|s| (s.address(), s.size())).unwrap();
        (dir, ImageTypes::load(&bin).unwrap(), main)
    }

    #[test]
    fn a_stack_slot_names_its_variable_at_every_instruction() {
        // Checks in dtypes' main (-O1, -O2) that a stack local's slot, found where the instruction addresses it from RSP, is named the same (type, field, offset) at every instruction with an RSP-based CFA once moved by the CFA, and the return address slot (CFA-8) is no variable's.
        for opt in ["-O1", "-O2"] {
            let (_d, t, (addr, size)) = build(opt);
            let insns: Vec<_> = Decoder::with_ip(64, t.code(addr, addr + size).unwrap(), addr, DecoderOptions::NONE).into_iter().collect();
            let cfa = |pc| t.cfa_at(pc).filter(|&(r, _)| r == 7).map(|(_, x)| x);
            let (k, want) = insns
                .iter()
                .filter(|i| i.memory_base() == Register::RSP)
                .find_map(|i| {
                    let disp = i.memory_displacement64() as i64;
                    let got = t.slot_owner(i.ip(), 7, disp)?;
                    if let Some(p) = t.pointee_at(i.ip(), 7, disp) {
                        assert_eq!(p, got, "{opt}: agrees with the location list where that covers the PC");
                    }
                    Some((disp - cfa(i.ip())?, got))
                })
                .unwrap_or_else(|| panic!("{opt}: no stack local addressed from RSP in main"));
            let mut checked = 0;
            for pc in insns.iter().map(|i| i.ip()) {
                let Some(x) = cfa(pc) else { continue };
                assert_eq!(t.slot_owner(pc, 7, k + x), Some(want.clone()), "{opt} at {pc:#x}");
                assert_eq!(t.slot_owner(pc, 7, x - 8), None, "{opt}: the return address at {pc:#x}");
                checked += 1;
            }
            assert!(checked > 10, "{opt}: {checked} instructions");
        }
    }
}
