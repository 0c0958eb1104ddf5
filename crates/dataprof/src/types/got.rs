//! The global offset table: in a position-independent image, code reaches
//! other images' functions and data, and thread-locals, through 8-byte
//! slots the dynamic linker fills. No variable owns them, but each slot's
//! dynamic relocation says what it holds — the address of a named symbol
//! (`GLOB_DAT`, a PLT stub's `JUMP_SLOT`, an ifunc's `IRELATIVE`) or a
//! thread-local's offset (`TPOFF64`) — so a load from one (a PLT stub's
//! `jmp *slot`, `mov rax, sym@GOTPCREL(%rip)`) is named by it, and the
//! address loaded carries the symbol's type into the type flow.

use super::{ImageTypes, TypeRef, Typed};
use object::{Object, ObjectSection, ObjectSymbol, ObjectSymbolTable, RelocationFlags, RelocationTarget};

/// The type name of global offset table slots in every view.
pub const GOT_TYPE: &str = "(global offset table)";

const R_X86_64_GLOB_DAT: u32 = 6;
const R_X86_64_JUMP_SLOT: u32 = 7;
const R_X86_64_TPOFF64: u32 = 18;
const R_X86_64_IRELATIVE: u32 = 37;

/// One slot: its place, what it holds (for the field name) and the
/// address of the symbol it points to when that is in this image.
#[derive(Clone, Debug)]
pub(crate) struct Slot {
    place: u64,
    holds: String,
    target: Option<u64>,
    /// For a `TPOFF64` slot, the thread-local's offset in this image's TLS block.
    tls: Option<u64>,
}

impl ImageTypes {
    /// The slots of `.got` and `.got.plt` by their relocations, sorted by place.
    pub(crate) fn got_slots(file: &object::File) -> Vec<Slot> {
        let in_got =
            |a: u64| file.sections().any(|s| matches!(s.name(), Ok(".got" | ".got.plt")) && s.address() <= a && a < s.address() + s.size());
        let Some(relocs) = file.dynamic_relocations() else { return Vec::new() };
        let syms = file.dynamic_symbol_table();
        let mut out: Vec<Slot> = relocs
            .filter(|(place, _)| in_got(*place))
            .filter_map(|(place, r)| {
                let RelocationFlags::Elf { r_type } = r.flags() else { return None };
                let sym = match r.target() {
                    RelocationTarget::Symbol(i) => syms.as_ref().and_then(|t| t.symbol_by_index(i).ok()),
                    _ => None,
                };
                let name = sym.as_ref().and_then(|s| s.name().ok()).filter(|n| !n.is_empty()).map(str::to_string);
                let defined = sym.as_ref().filter(|s| !s.is_undefined()).map(|s| s.address());
                let (holds, target, tls) = match (r_type, name) {
                    (R_X86_64_GLOB_DAT | R_X86_64_JUMP_SLOT, Some(n)) => (format!("address of {n}"), defined, None),
                    // A thread-local symbol's value is its offset in the TLS block; another image's is not ours.
                    (R_X86_64_TPOFF64, Some(n)) => (format!("TLS offset of {n}"), None, defined.map(|v| v.wrapping_add(r.addend() as u64))),
                    (R_X86_64_TPOFF64, None) => (format!("TLS offset {:+#x}", r.addend()), None, Some(r.addend() as u64)),
                    (R_X86_64_IRELATIVE, _) => ("address of an ifunc's choice".to_string(), None, None),
                    _ => return None,
                };
                Some(Slot { place, holds, target, tls })
            })
            .collect();
        out.sort_by_key(|s| s.place);
        out
    }

    fn got_slot(&self, vaddr: u64) -> Option<&Slot> {
        let i = self.got.partition_point(|s| s.place <= vaddr).checked_sub(1)?;
        let s = &self.got[i];
        (vaddr < s.place + 8).then_some(s)
    }

    /// The global offset table slot at `vaddr`, named by what it holds.
    pub fn got_at(&self, vaddr: u64) -> Option<Typed> {
        let s = self.got_slot(vaddr)?;
        Some(Typed { type_name: GOT_TYPE.into(), field: s.holds.clone(), field_offset: 0, offset: vaddr - s.place, size: 8 })
    }

    /// The type of the typed static whose address the slot at `vaddr` holds.
    pub(crate) fn got_target(&self, vaddr: u64) -> Option<TypeRef> {
        let s = self.got_slot(vaddr).filter(|s| s.place == vaddr)?;
        let (t, 0) = self.static_raw(s.target?)? else { return None };
        Some(t)
    }

    /// The thread-local whose offset from the thread pointer the slot at
    /// `vaddr` holds: its type and the offset into it.
    pub(crate) fn got_tls(&self, vaddr: u64) -> Option<(TypeRef, u64)> {
        let s = self.got_slot(vaddr).filter(|s| s.place == vaddr)?;
        self.tls_at(s.tls?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use iced_x86::Register;

    const LIB: &str = r#"
struct tally { long hits; long misses; };
struct tally tally_global;
long miss(void) { return ++tally_global.misses; }
"#;

    #[test]
    fn a_global_reached_through_the_got_is_typed_and_so_is_its_slot() {
        // Checks in a shared library (-fPIC -O2) that `++tally_global.misses` loads the global's address from a GOT slot named `address of tally_global` and the dereference of it is struct tally.misses by type flow.
        let lib = crate::types::built::c(LIB, &["-O2", "-fPIC", "-shared"]);
        let (t, insns) = (&lib.types, lib.function("miss"));
        let load = insns.iter().position(|i| i.memory_base() == Register::RIP).expect("a GOT load");
        let slot = insns[load].ip_rel_memory_address();
        let named = t.got_at(slot).map(|x| (x.type_name, x.field));
        assert_eq!(named, Some((GOT_TYPE.to_string(), "address of tally_global".to_string())));
        let to = insns[load].op0_register();
        let deref = insns[load + 1..].iter().find(|i| i.memory_base() == to).expect("a dereference of the loaded address");
        let got = t.flow_pointee(deref.ip(), crate::interp::dwarf_number(to).unwrap(), deref.memory_displacement64() as i64).unwrap();
        assert_eq!((got.type_name.as_str(), got.field.as_str()), ("struct tally", "misses"));
    }
}
