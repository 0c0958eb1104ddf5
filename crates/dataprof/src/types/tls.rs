//! Thread-locals in the type flow (issue 28): code built with the
//! initial-exec TLS model (the C library's `tcache`, its locale pointers)
//! loads a thread-local's offset from the thread pointer out of a global
//! offset table slot (`TPOFF64`), then reads the variable through `%fs`
//! (`mov rdx, [rip+slot]; mov rdx, fs:[rdx]`). The relocation's addend (or
//! its symbol's value) is the variable's offset in the image's TLS block,
//! which is also what its DWARF location says (`DW_OP_const8u OFF;
//! DW_OP_form_tls_address`): the value read has the variable's type, and a
//! pointer read so carries its pointee on.

use super::{ImageTypes, TypeRef, R};

/// A thread-local variable: its offset in the image's TLS block and its type.
#[derive(Clone, Copy, Debug)]
pub(crate) struct TlsVar {
    offset: u64,
    size: u64,
    ty: TypeRef,
}

impl TlsVar {
    pub(super) fn offset(&self) -> u64 {
        self.offset
    }
}

impl ImageTypes {
    /// The thread-local a DWARF variable entry describes: a constant offset
    /// followed by the TLS address operation, and nothing else.
    pub(super) fn tls_var(&self, unit: &gimli::Unit<R>, ui: usize, e: &gimli::DebuggingInformationEntry<R>) -> Option<TlsVar> {
        let gimli::AttributeValue::Exprloc(expr) = e.attr_value(gimli::DW_AT_location).ok()?? else { return None };
        let mut ops = expr.operations(unit.encoding());
        let gimli::Operation::UnsignedConstant { value: offset } = ops.next().ok()?? else { return None };
        let (Ok(Some(gimli::Operation::TLS)), Ok(None)) = (ops.next(), ops.next()) else { return None };
        let ty = TypeRef { ui, ty: self.var_type(unit, e)? };
        let size = self.size_of(ui, unit, ty.ty).max(1);
        Some(TlsVar { offset, size, ty })
    }

    /// The thread-local at `offset` in the image's TLS block and the offset into it.
    pub(crate) fn tls_at(&self, offset: u64) -> Option<(TypeRef, u64)> {
        let i = self.tls.partition_point(|v| v.offset <= offset).checked_sub(1)?;
        let v = &self.tls[i];
        (offset - v.offset < v.size).then_some((v.ty, offset - v.offset))
    }
}

#[cfg(test)]
mod tests {
    use iced_x86::Register;

    const LIB: &str = r#"
struct counters { long calls; long misses; };
static __thread struct counters *mine __attribute__((tls_model("initial-exec")));
void adopt(struct counters *c) { mine = c; }
long miss(void) { return ++mine->misses; }
"#;

    #[test]
    fn a_pointer_read_from_an_initial_exec_thread_local_has_its_pointee_type() {
        // Checks in a shared library (-fPIC, -O1 and -O2) that `++mine->misses`, `mine` a `static __thread struct counters *` reached through a TPOFF64 GOT slot and %fs, is struct counters.misses by type flow.
        for opt in ["-O1", "-O2"] {
            let lib = crate::types::built::c(LIB, &[opt, "-fPIC", "-shared"]);
            let (t, insns) = (&lib.types, lib.function("miss"));
            let read = insns.iter().position(|i| i.segment_prefix() == Register::FS).expect("a read through %fs");
            let to = insns[read].op0_register();
            let deref = insns[read + 1..].iter().find(|i| i.memory_base() == to).expect("a dereference of the thread-local's value");
            let reg = crate::interp::dwarf_number(to).unwrap();
            assert_eq!(t.pointee_at(deref.ip(), reg, 8), None, "{opt}: no DWARF variable holds the loaded pointer");
            let got = t.flow_pointee(deref.ip(), reg, deref.memory_displacement64() as i64).unwrap();
            assert_eq!((got.type_name.as_str(), got.field.as_str()), ("struct counters", "misses"), "{opt}");
        }
    }
}
