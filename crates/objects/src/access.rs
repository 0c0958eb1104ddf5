//! Which instruction made a breakpoint hit, and whether it read or wrote:
//! x86 data breakpoints trap after the access, so the reported IP is the
//! next instruction's. Decoding forward from the start of the function
//! (known from its symbol) finds the instruction that ends exactly at the
//! IP without guessing where instructions start.

use iced_x86::{Code, Decoder, DecoderOptions, InstructionInfoFactory, OpAccess};
use serde::Serialize;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Kind {
    #[serde(rename = "R")]
    Read,
    #[serde(rename = "W")]
    Write,
    #[serde(rename = "RW")]
    ReadWrite,
}

impl Kind {
    pub fn label(self) -> &'static str {
        match self {
            Kind::Read => "R",
            Kind::Write => "W",
            Kind::ReadWrite => "RW",
        }
    }
}

/// `code` is the function's bytes from its start (`code_start`, a runtime
/// address) up to at least `ip`. Returns the start of the instruction that
/// ends at `ip` and how it used memory (`None` kind: no memory operand,
/// e.g. a string instruction the decoder reports differently).
pub fn instruction_ending_at(code: &[u8], code_start: u64, ip: u64) -> Option<(u64, Option<Kind>)> {
    let len = ip.checked_sub(code_start)? as usize;
    let mut dec = Decoder::with_ip(64, code.get(..len)?, code_start, DecoderOptions::NONE);
    let mut last = None;
    while dec.can_decode() {
        let ins = dec.decode();
        if ins.code() == Code::INVALID {
            return None;
        }
        last = Some(ins);
    }
    let ins = last.filter(|i| i.next_ip() == ip)?;
    let mut info = InstructionInfoFactory::new();
    let kind = info.info(&ins).used_memory().iter().find_map(|m| match m.access() {
        OpAccess::Read | OpAccess::CondRead => Some(Kind::Read),
        OpAccess::Write | OpAccess::CondWrite => Some(Kind::Write),
        OpAccess::ReadWrite | OpAccess::ReadCondWrite => Some(Kind::ReadWrite),
        _ => None,
    });
    Some((ins.ip(), kind))
}

#[cfg(test)]
mod tests {
    use super::*;

    // At 0x1000: mov [rdi],rsi (48 89 37); mov rax,[rdi+8] (48 8b 47 08); add [rdi+16],rax (48 01 47 10); ret (c3)
    const CODE: &[u8] = &[0x48, 0x89, 0x37, 0x48, 0x8b, 0x47, 0x08, 0x48, 0x01, 0x47, 0x10, 0xc3];

    #[test]
    fn finds_the_store_load_and_read_modify_write_before_each_trap_ip() {
        // Checks hand-assembled code: the instruction ending at each IP, and W, R, RW for its memory operand.
        assert_eq!(instruction_ending_at(CODE, 0x1000, 0x1003), Some((0x1000, Some(Kind::Write))));
        assert_eq!(instruction_ending_at(CODE, 0x1000, 0x1007), Some((0x1003, Some(Kind::Read))));
        assert_eq!(instruction_ending_at(CODE, 0x1000, 0x100b), Some((0x1007, Some(Kind::ReadWrite))));
    }

    #[test]
    fn refuses_an_ip_inside_an_instruction_or_before_the_code() {
        // Checks that an IP that is no instruction boundary, or lies before the function, gives None.
        assert_eq!(instruction_ending_at(CODE, 0x1000, 0x1005), None);
        assert_eq!(instruction_ending_at(CODE, 0x1000, 0x0fff), None);
    }
}
