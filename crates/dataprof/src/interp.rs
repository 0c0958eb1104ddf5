//! Instruction interpretation (DCPI §7): the timer interrupt leaves the PC
//! at the next instruction to execute, and the sampled registers are the
//! ones it will read, so decoding it and evaluating its memory operand gives
//! the exact address it is about to touch (not an estimate, no skid).
//! Accesses through FS/GS (thread-local storage) need the segment base,
//! which perf does not sample: they are reported as not computable.

use crate::regs::{self, Regs};
use iced_x86::{Code, Decoder, DecoderOptions, InstructionInfoFactory, OpAccess, Register};

/// Read, write or both (read-modify-write) of one memory operand.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Kind {
    Read,
    Write,
    ReadWrite,
}

impl Kind {
    pub fn writes(self) -> bool {
        !matches!(self, Kind::Read)
    }
}

/// The memory operand of a sampled instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Access {
    pub addr: u64,
    pub size: u32,
    pub kind: Kind,
    /// Base register as a DWARF register number (type resolution looks up
    /// the variable that lives in it), if the operand has one.
    pub base_dwarf: Option<u16>,
    /// Address minus the base register's value: the offset into the object
    /// the base register points to.
    pub base_offset: i64,
}

/// Why no address came out of an instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoAccess {
    /// The bytes do not decode.
    Invalid,
    /// The instruction does not read or write memory (or only by `lea`/`nop`).
    NoMemory,
    /// A register the address needs was not sampled (FS/GS base, vector index).
    Unknown,
}

/// Decodes the instruction at `ip` from `code` and evaluates its first
/// data memory operand with `regs`.
pub fn access(code: &[u8], ip: u64, regs: &Regs) -> Result<Access, NoAccess> {
    evaluate(code, ip, regs, false)
}

/// The same for the instruction that has just retired (it ends at the
/// sampled PC), with the registers as it left them: only exact when it
/// wrote none of the registers its address uses, otherwise `Unknown`.
pub fn access_retired(code: &[u8], ip: u64, regs: &Regs) -> Result<Access, NoAccess> {
    evaluate(code, ip, regs, true)
}

/// The timer interrupt is taken at an instruction boundary once the
/// instruction that was stalling retires, so the PC names the instruction
/// *after* the one the time went to (a load's miss shows at the next
/// instruction). This picks the instruction that attribution should use:
/// the one ending at the PC when it references memory and its address is
/// still computable, else the one at the PC. `before` holds the bytes just
/// before `pc` (any length; empty when unreadable). Returns the access and
/// how many bytes before the PC the chosen instruction starts (0: at it).
pub fn charged_access(before: &[u8], at: &[u8], pc: u64, regs: &Regs) -> Result<(Access, u8), NoAccess> {
    charged_access_from(before, at, pc, previous_start(before, pc), regs)
}

/// [`charged_access`] with the previous instruction's start already found
/// (it depends only on the code, so callers cache it per PC).
pub fn charged_access_from(before: &[u8], at: &[u8], pc: u64, previous: Option<u64>, regs: &Regs) -> Result<(Access, u8), NoAccess> {
    let mut lost = false;
    if let Some(start) = previous.filter(|&s| s < pc && pc - s <= before.len() as u64) {
        let back = pc - start;
        let from = before.len() - back as usize;
        match access_retired(&before[from..], start, regs) {
            Ok(a) => return Ok((a, back as u8)),
            Err(NoAccess::Unknown) => lost = true,
            Err(_) => {}
        }
    }
    match access(at, pc, regs) {
        // The retiring instruction touched memory but overwrote its address register (`mov rax,[rax]`): a memory sample whose address is unknown.
        Err(NoAccess::NoMemory) if lost => Err(NoAccess::Unknown),
        r => r.map(|a| (a, 0)),
    }
}

/// Start of the instruction that ends exactly at `pc`, decoding forward
/// from every offset of `before` (x86 decoding resynchronizes within a few
/// instructions) and taking the candidate most starting points agree on.
pub fn previous_start(before: &[u8], pc: u64) -> Option<u64> {
    let base = pc.checked_sub(before.len() as u64)?;
    let mut votes: Vec<(u64, u32)> = Vec::new();
    for s in 0..before.len() {
        let mut dec = Decoder::with_ip(64, &before[s..], base + s as u64, DecoderOptions::NONE);
        let mut last = None;
        while dec.can_decode() {
            let ins = dec.decode();
            if ins.code() == Code::INVALID {
                last = None;
                break;
            }
            last = Some(ins.ip());
        }
        if let (Some(start), true) = (last, dec.ip() == pc) {
            match votes.iter_mut().find(|(v, _)| *v == start) {
                Some(v) => v.1 += 1,
                None => votes.push((start, 1)),
            }
        }
    }
    votes.into_iter().max_by_key(|&(start, n)| (n, std::cmp::Reverse(start))).map(|(s, _)| s)
}

fn evaluate(code: &[u8], ip: u64, regs: &Regs, retired: bool) -> Result<Access, NoAccess> {
    let mut dec = Decoder::with_ip(64, code, ip, DecoderOptions::NONE);
    let ins = dec.decode();
    if ins.code() == Code::INVALID {
        return Err(NoAccess::Invalid);
    }
    let mut factory = InstructionInfoFactory::new();
    let info = factory.info(&ins);
    let Some(mem) = info.used_memory().iter().find(|m| kind(m.access()).is_some()) else {
        return Err(NoAccess::NoMemory);
    };
    if retired {
        let written = |r: Register| {
            r != Register::None
                && info.used_registers().iter().any(|u| {
                    u.register().full_register() == r.full_register()
                        && matches!(u.access(), OpAccess::Write | OpAccess::ReadWrite | OpAccess::CondWrite | OpAccess::ReadCondWrite)
                })
        };
        if written(mem.base()) || written(mem.index()) {
            return Err(NoAccess::Unknown);
        }
    }
    let addr = mem.virtual_address(0, |reg, _, _| value(reg, regs)).ok_or(NoAccess::Unknown)?;
    let base = mem.base();
    let (base_dwarf, base_offset) = match dwarf_number(base).zip(value(base, regs)) {
        Some((n, v)) => (Some(n), addr.wrapping_sub(v) as i64),
        None => (None, 0),
    };
    Ok(Access { addr, size: mem.memory_size().size() as u32, kind: kind(mem.access()).ok_or(NoAccess::NoMemory)?, base_dwarf, base_offset })
}

fn kind(a: OpAccess) -> Option<Kind> {
    match a {
        OpAccess::Read | OpAccess::CondRead => Some(Kind::Read),
        OpAccess::Write | OpAccess::CondWrite => Some(Kind::Write),
        OpAccess::ReadWrite | OpAccess::ReadCondWrite => Some(Kind::ReadWrite),
        _ => None,
    }
}

/// A register's value as the address computation wants it: 64-bit
/// registers whole, 32-bit ones truncated; segment bases 0 except FS/GS.
fn value(reg: Register, regs: &Regs) -> Option<u64> {
    match reg {
        Register::None => Some(0),
        Register::ES | Register::CS | Register::SS | Register::DS => Some(0),
        Register::FS | Register::GS => None,
        _ if reg.is_gpr64() || reg.is_gpr32() => {
            let v = regs.0[perf_index(reg.full_register())?]?;
            Some(if reg.is_gpr32() { v & 0xffff_ffff } else { v })
        }
        _ => None,
    }
}

fn perf_index(full: Register) -> Option<usize> {
    use Register::*;
    Some(match full {
        RAX => regs::AX,
        RBX => regs::BX,
        RCX => regs::CX,
        RDX => regs::DX,
        RSI => regs::SI,
        RDI => regs::DI,
        RBP => regs::BP,
        RSP => regs::SP,
        RIP => regs::IP,
        R8 | R9 | R10 | R11 | R12 | R13 | R14 | R15 => regs::R8 + (full as usize - R8 as usize),
        _ => return Option::None,
    })
}

/// DWARF number of a 64-bit general register (x86-64 psABI).
pub(crate) fn dwarf_number(reg: Register) -> Option<u16> {
    use Register::*;
    if !reg.is_gpr64() {
        return Option::None;
    }
    Some(match reg {
        RAX => 0,
        RDX => 1,
        RCX => 2,
        RBX => 3,
        RSI => 4,
        RDI => 5,
        RBP => 6,
        RSP => 7,
        r => 8 + (r as u16 - R8 as u16),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::regs::*;

    fn regs(pairs: &[(usize, u64)]) -> Regs {
        let mut r = Regs::default();
        for &(i, v) in pairs {
            r.set(i, v);
        }
        r
    }

    #[test]
    fn base_index_scale_displacement() {
        // Checks mov rax,[rbx+rcx*8+0x10] (48 8b 44 cb 10): 0x1000 + 3*8 + 0x10 = 0x1028, 8-byte read, base rbx (DWARF 3) at offset 0x28.
        let a = access(&[0x48, 0x8b, 0x44, 0xcb, 0x10], 0x400000, &regs(&[(BX, 0x1000), (CX, 3)])).unwrap();
        assert_eq!(a, Access { addr: 0x1028, size: 8, kind: Kind::Read, base_dwarf: Some(3), base_offset: 0x28 });
    }

    #[test]
    fn store_through_r12_is_a_write() {
        // Checks mov [r12+8],eax (41 89 44 24 08): address r12+8, 4 bytes, written; r12 is DWARF 12.
        let a = access(&[0x41, 0x89, 0x44, 0x24, 0x08], 0x1000, &regs(&[(R8 + 4, 0x7f00_0000_0000), (AX, 1)])).unwrap();
        assert_eq!((a.addr, a.size, a.kind, a.base_dwarf, a.base_offset), (0x7f00_0000_0008, 4, Kind::Write, Some(12), 8));
    }

    #[test]
    fn lock_add_is_read_modify_write() {
        // Checks lock add qword [rdi],1 (f0 48 83 07 01): address rdi, read-modify-write.
        let a = access(&[0xf0, 0x48, 0x83, 0x07, 0x01], 0x1000, &regs(&[(DI, 0x5000)])).unwrap();
        assert_eq!((a.addr, a.size, a.kind), (0x5000, 8, Kind::ReadWrite));
    }

    #[test]
    fn rip_relative_uses_the_next_instruction() {
        // Checks mov eax,[rip+0x10] (8b 05 10 00 00 00) at 0x1000: 0x1000 + 6 + 0x10 = 0x1016, no base register.
        let a = access(&[0x8b, 0x05, 0x10, 0, 0, 0], 0x1000, &Regs::default()).unwrap();
        assert_eq!((a.addr, a.size, a.base_dwarf), (0x1016, 4, None));
    }

    #[test]
    fn thirty_two_bit_address_truncates() {
        // Checks mov eax,[ebx] with the 0x67 prefix (67 8b 03): only the low 32 bits of rbx count.
        let a = access(&[0x67, 0x8b, 0x03], 0x1000, &regs(&[(BX, 0xdead_0000_1234)])).unwrap();
        assert_eq!(a.addr, 0x1234);
    }

    #[test]
    fn lea_nop_and_tls_give_no_address() {
        // Checks lea (48 8d 04 cb) and a multi-byte nop (0f 1f 44 00 00) touch no memory; mov rax,fs:[0] (64 48 8b 04 25 0 0 0 0) needs the FS base.
        let r = regs(&[(AX, 0), (BX, 0x1000), (CX, 1)]);
        assert_eq!(access(&[0x48, 0x8d, 0x04, 0xcb], 0, &r), Err(NoAccess::NoMemory));
        assert_eq!(access(&[0x0f, 0x1f, 0x44, 0x00, 0x00], 0, &r), Err(NoAccess::NoMemory));
        assert_eq!(access(&[0x64, 0x48, 0x8b, 0x04, 0x25, 0, 0, 0, 0], 0, &r), Err(NoAccess::Unknown));
        assert_eq!(access(&[0x06], 0, &r), Err(NoAccess::Invalid));
    }

    /// `bump` from dataprof.c at -O2: mov edx,1000; nop; L: mov rax,[rdi]; add rax,1; mov [rdi],rax; sub edx,1; jne L.
    const BUMP: [u8; 23] = [
        0xba, 0xe8, 0x03, 0x00, 0x00, 0x0f, 0x1f, 0x00, 0x48, 0x8b, 0x07, 0x48, 0x83, 0xc0, 0x01, 0x48, 0x89, 0x07, 0x83, 0xea, 0x01, 0x75,
        0xf1,
    ];

    #[test]
    fn previous_instruction_found_by_resynchronizing() {
        // Checks the instruction ending at each PC of `bump` (0x100 based) is its true predecessor.
        let (base, b) = (0x100u64, &BUMP[..]);
        assert_eq!(previous_start(&b[..0xb], base + 0xb), Some(base + 0x8));
        assert_eq!(previous_start(&b[..0x12], base + 0x12), Some(base + 0xf));
        assert_eq!(previous_start(&b[..0x8], base + 0x8), Some(base + 0x5));
        assert_eq!(previous_start(&[], base), None);
    }

    #[test]
    fn time_after_a_load_goes_to_the_load() {
        // Checks a sample at `add rax,1` charges the load before it ([rdi], 1 byte back is wrong: 3 bytes back), and one at `sub` the store.
        let r = regs(&[(DI, 0x6000), (AX, 5)]);
        let (a, back) = charged_access(&BUMP[..0xb], &BUMP[0xb..], 0x10b, &r).unwrap();
        assert_eq!((a.addr, a.kind, back), (0x6000, Kind::Read, 3));
        let (a, back) = charged_access(&BUMP[..0x12], &BUMP[0x12..], 0x112, &r).unwrap();
        assert_eq!((a.addr, a.kind, back), (0x6000, Kind::Write, 3));
        // At the loop head the predecessor is a nop: the load at the PC is charged.
        let (a, back) = charged_access(&BUMP[..0x8], &BUMP[0x8..], 0x108, &r).unwrap();
        assert_eq!((a.addr, back), (0x6000, 0));
    }

    #[test]
    fn retired_load_that_overwrote_its_base_is_not_guessed() {
        // Checks mov rax,[rax] (48 8b 00) cannot be evaluated after it ran (rax now holds the loaded value); the PC's own instruction is used.
        let r = regs(&[(AX, 0x9999), (DI, 0x6000)]);
        assert_eq!(access_retired(&[0x48, 0x8b, 0x00], 0x100, &r), Err(NoAccess::Unknown));
        let (a, back) = charged_access(&[0x48, 0x8b, 0x00], &[0x48, 0x8b, 0x07], 0x103, &r).unwrap();
        assert_eq!((a.addr, back), (0x6000, 0));
        // Followed by add rcx,rax (48 01 c1), no memory: the sample is memory time with an unknown address.
        assert_eq!(charged_access(&[0x48, 0x8b, 0x00], &[0x48, 0x01, 0xc1], 0x103, &r), Err(NoAccess::Unknown));
    }

    #[test]
    fn push_writes_below_the_stack_pointer() {
        // Checks push rbx (53) writes 8 bytes at rsp-8.
        let a = access(&[0x53], 0x1000, &regs(&[(SP, 0x7ffc_0010), (BX, 7)])).unwrap();
        assert_eq!((a.addr, a.size, a.kind), (0x7ffc_0008, 8, Kind::Write));
    }
}
