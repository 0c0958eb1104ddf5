//! Accesses a function makes to its own frame's bookkeeping: `push` and
//! `pop` of a register, and the return address `call` writes and `ret`
//! reads. No source variable lives there, so DWARF names none, but what the
//! slot holds is known from the instruction itself (perf's data-type
//! profiling reports them as "(stack operation)"): they are named, never
//! left untyped as if the register were unknown.

use super::{ImageTypes, Typed};
use iced_x86::{Decoder, DecoderOptions, Instruction, Mnemonic, OpKind, Register};

/// The type name of frame slots in every view.
pub const FRAME_TYPE: &str = "(stack frame)";

/// Longest x86-64 instruction.
const MAX_INSN: u64 = 15;

impl ImageTypes {
    /// The frame slot the instruction at `pc` touches through the stack
    /// pointer (`reg`, DWARF number, at `offset` from it before the
    /// instruction), when it is a push or pop of a general register, a call
    /// or a return; `None` for any other instruction.
    pub fn frame_slot(&self, pc: u64, reg: u16, offset: i64) -> Option<Typed> {
        const RSP: u16 = 7;
        if reg != RSP {
            return None;
        }
        let ins = self.instruction_at(pc)?;
        frame_field(&ins, offset).map(|field| Typed { type_name: FRAME_TYPE.into(), field, field_offset: 0, offset: 0, size: 8 })
    }

    pub(super) fn instruction_at(&self, pc: u64) -> Option<Instruction> {
        let bytes = (1..=MAX_INSN).rev().find_map(|n| self.code(pc, pc + n))?;
        let ins = Decoder::with_ip(64, bytes, pc, DecoderOptions::NONE).decode();
        (!ins.is_invalid()).then_some(ins)
    }
}

/// What the slot an instruction touches at `offset` from the stack pointer
/// holds: the register a push saves or a pop restores, the constant a push
/// stores (a call's stack argument: glibc's `mbrtowc` pushes two `int`s for
/// its gconv step), or the return address. Only the instruction's implicit
/// stack access counts (a push writes below the stack pointer, a pop or
/// return reads at it).
fn frame_field(ins: &Instruction, offset: i64) -> Option<String> {
    let register = ins.op_count() == 1 && ins.op0_kind() == OpKind::Register && ins.op0_register().is_gpr64();
    let constant = ins.op_count() == 1 && matches!(ins.op0_kind(), OpKind::Immediate8to64 | OpKind::Immediate32to64);
    match ins.mnemonic() {
        Mnemonic::Push if register && offset == -8 => Some(format!("saved {}", name(ins.op0_register()))),
        Mnemonic::Push if constant && offset == -8 => Some("pushed constant".into()),
        Mnemonic::Pop if register && offset == 0 => Some(format!("saved {}", name(ins.op0_register()))),
        Mnemonic::Call if ins.op0_kind() != OpKind::Memory && offset == -8 => Some("return address".into()),
        Mnemonic::Ret if offset == 0 => Some("return address".into()),
        _ => None,
    }
}

fn name(r: Register) -> String {
    format!("{r:?}").to_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(bytes: &[u8]) -> Instruction {
        Decoder::with_ip(64, bytes, 0x1000, DecoderOptions::NONE).decode()
    }

    #[test]
    fn pushes_pops_calls_and_returns_name_their_slot() {
        // Checks push r14 / pop rbx name the saved register, push 1 / push 0x100 the pushed constant, call rel32 / call rax / ret the return address, each only at its implicit stack offset.
        assert_eq!(frame_field(&decode(&[0x41, 0x56]), -8).as_deref(), Some("saved r14"));
        assert_eq!(frame_field(&decode(&[0x5b]), 0).as_deref(), Some("saved rbx"));
        assert_eq!(frame_field(&decode(&[0xe8, 0, 0, 0, 0]), -8).as_deref(), Some("return address"));
        assert_eq!(frame_field(&decode(&[0xff, 0xd0]), -8).as_deref(), Some("return address"));
        assert_eq!(frame_field(&decode(&[0xc3]), 0).as_deref(), Some("return address"));
        assert_eq!(frame_field(&decode(&[0x6a, 0x01]), -8).as_deref(), Some("pushed constant"));
        assert_eq!(frame_field(&decode(&[0x68, 0, 1, 0, 0]), -8).as_deref(), Some("pushed constant"));
        assert_eq!(frame_field(&decode(&[0x41, 0x56]), 0), None, "a push's slot is below the stack pointer");
        assert_eq!(frame_field(&decode(&[0x6a, 0x01]), 0), None);
        assert_eq!(frame_field(&decode(&[0xc3]), -8), None);
    }

    #[test]
    fn other_stack_accesses_are_not_frame_slots() {
        // Checks a load from the stack (mov rax,[rsp+8]), a push of memory (push qword [rax]) and call through memory (call [rax]) are not named frame slots.
        assert_eq!(frame_field(&decode(&[0x48, 0x8b, 0x44, 0x24, 0x08]), 8), None);
        assert_eq!(frame_field(&decode(&[0xff, 0x30]), -8), None);
        assert_eq!(frame_field(&decode(&[0xff, 0x10]), -8), None);
    }
}
