//! x86-64 decoding (iced-x86): each instruction's text (AT&T, as objdump
//! and llvm-mca write it), how it changes control flow, and the registers
//! and memory it touches (for stall culprits).

use iced_x86::{
    Decoder, DecoderOptions, FlowControl, Formatter, GasFormatter, Instruction, InstructionInfoFactory, Mnemonic, OpAccess, Register,
};

/// How an instruction passes control on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flow {
    /// Falls through (calls too: the callee returns here).
    Next,
    /// Unconditional direct jump.
    Jump(u64),
    /// Conditional direct branch: taken target, else falls through.
    Branch(u64),
    /// Indirect jump (jump table, tail call through a pointer).
    IndirectJump,
    /// Leaves the procedure: return.
    Return,
    /// Never continues: ud2, hlt, int3, undecodable bytes.
    Stop,
}

/// Functional units whose occupancy DCPI names as a stall culprit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    Plain,
    /// Integer or floating-point divide, square root: long, unpipelined.
    Divide,
    Multiply,
}

/// One decoded instruction. `reads`/`writes` are register bit sets (see
/// [`reg_bit`]); `addr_regs` are the registers of its memory address.
#[derive(Clone, Debug, PartialEq)]
pub struct Insn {
    /// ELF virtual address, as objdump prints it.
    pub addr: u64,
    pub len: u8,
    pub text: String,
    pub flow: Flow,
    pub is_call: bool,
    pub loads: bool,
    pub stores: bool,
    pub unit: Unit,
    pub reads: u64,
    pub writes: u64,
    pub addr_regs: u64,
    /// Constant operand of a compare (jump-table bound detection).
    pub cmp_imm: Option<u64>,
    /// `[base + index*scale + disp]` of a memory operand, for jump tables.
    pub mem: Option<MemOperand>,
    /// RIP-relative `lea` target.
    pub lea_target: Option<(u64, Register)>,
    pub mnemonic: Mnemonic,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemOperand {
    pub base: Register,
    pub index: Register,
    pub scale: u32,
    pub disp: u64,
}

impl Insn {
    pub fn end(&self) -> u64 {
        self.addr + self.len as u64
    }
}

/// Bit of a register in the sets above: 16 GPRs, 32 vector registers, flags.
pub fn reg_bit(r: Register) -> u64 {
    let f = r.full_register();
    if f.is_gpr64() {
        1 << (f as u32 - Register::RAX as u32)
    } else if f.is_zmm() {
        1 << (16 + f as u32 - Register::ZMM0 as u32)
    } else {
        0
    }
}

/// The flags pseudo-register's bit.
pub const FLAGS: u64 = 1 << 48;

/// Decodes `bytes` that start at virtual address `start`.
pub fn decode(start: u64, bytes: &[u8]) -> Vec<Insn> {
    let mut dec = Decoder::with_ip(64, bytes, start, DecoderOptions::NONE);
    let mut fmt = GasFormatter::new();
    fmt.options_mut().set_uppercase_hex(false);
    fmt.options_mut().set_gas_show_mnemonic_size_suffix(false);
    fmt.options_mut().set_space_after_operand_separator(true);
    fmt.options_mut().set_branch_leading_zeros(false);
    let mut info = InstructionInfoFactory::new();
    let mut out = Vec::new();
    let mut ins = Instruction::default();
    while dec.can_decode() {
        dec.decode_out(&mut ins);
        let mut text = String::new();
        fmt.format(&ins, &mut text);
        out.push(describe(&ins, text, &mut info));
    }
    out
}

fn describe(ins: &Instruction, text: String, factory: &mut InstructionInfoFactory) -> Insn {
    let invalid = ins.is_invalid();
    let flow = if invalid { Flow::Stop } else { flow_of(ins) };
    let info = factory.info(ins);
    let (mut reads, mut writes) = (0u64, 0u64);
    for r in info.used_registers() {
        match r.access() {
            OpAccess::Read | OpAccess::CondRead => reads |= reg_bit(r.register()),
            OpAccess::Write | OpAccess::CondWrite => writes |= reg_bit(r.register()),
            OpAccess::ReadWrite | OpAccess::ReadCondWrite => {
                reads |= reg_bit(r.register());
                writes |= reg_bit(r.register());
            }
            _ => {}
        }
    }
    if ins.rflags_read() != 0 {
        reads |= FLAGS;
    }
    if ins.rflags_written() != 0 {
        writes |= FLAGS;
    }
    let (mut loads, mut stores, mut addr_regs) = (false, false, 0u64);
    let mut mem = None;
    for m in info.used_memory() {
        match m.access() {
            OpAccess::Read | OpAccess::CondRead => loads = true,
            OpAccess::Write | OpAccess::CondWrite => stores = true,
            OpAccess::ReadWrite | OpAccess::ReadCondWrite => {
                loads = true;
                stores = true;
            }
            _ => continue,
        }
        addr_regs |= reg_bit(m.base()) | reg_bit(m.index());
        mem = Some(MemOperand { base: m.base(), index: m.index(), scale: m.scale(), disp: m.displacement() });
    }
    // `lea` computes an address without touching memory.
    if ins.mnemonic() == Mnemonic::Lea {
        loads = false;
        mem = None;
    }
    let lea_target =
        (ins.mnemonic() == Mnemonic::Lea && ins.is_ip_rel_memory_operand()).then(|| (ins.ip_rel_memory_address(), ins.op0_register()));
    let cmp_imm = (ins.mnemonic() == Mnemonic::Cmp && ins.op_count() == 2).then(|| ins.immediate(1)).filter(|_| {
        matches!(
            ins.op1_kind(),
            iced_x86::OpKind::Immediate8to32
                | iced_x86::OpKind::Immediate8
                | iced_x86::OpKind::Immediate32
                | iced_x86::OpKind::Immediate8to64
                | iced_x86::OpKind::Immediate32to64
        )
    });
    Insn {
        addr: ins.ip(),
        len: ins.len() as u8,
        text: if invalid { "(bad)".into() } else { text },
        flow,
        is_call: matches!(ins.flow_control(), FlowControl::Call | FlowControl::IndirectCall),
        loads,
        stores,
        unit: unit_of(ins.mnemonic()),
        reads,
        writes,
        addr_regs,
        cmp_imm,
        mem,
        lea_target,
        mnemonic: ins.mnemonic(),
    }
}

fn flow_of(ins: &Instruction) -> Flow {
    match ins.flow_control() {
        FlowControl::Next | FlowControl::Call | FlowControl::IndirectCall | FlowControl::XbeginXabortXend => Flow::Next,
        FlowControl::UnconditionalBranch => Flow::Jump(ins.near_branch_target()),
        FlowControl::ConditionalBranch => Flow::Branch(ins.near_branch_target()),
        FlowControl::IndirectBranch => Flow::IndirectJump,
        FlowControl::Return => Flow::Return,
        FlowControl::Interrupt | FlowControl::Exception => {
            // `syscall` and `int 0x80` return; ud2/int3/hlt do not.
            if matches!(ins.mnemonic(), Mnemonic::Syscall | Mnemonic::Int | Mnemonic::Sysenter) {
                Flow::Next
            } else {
                Flow::Stop
            }
        }
    }
}

fn unit_of(m: Mnemonic) -> Unit {
    use Mnemonic::*;
    match m {
        Div | Idiv | Divss | Divsd | Divps | Divpd | Vdivss | Vdivsd | Vdivps | Vdivpd | Sqrtss | Sqrtsd | Sqrtps | Sqrtpd | Vsqrtss
        | Vsqrtsd | Vsqrtps | Vsqrtpd | Fdiv | Fdivp | Fdivr | Fdivrp | Fsqrt => Unit::Divide,
        Imul | Mul | Mulx | Mulss | Mulsd | Vmulss | Vmulsd => Unit::Multiply,
        _ => Unit::Plain,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_a_loop_body_with_flow_and_memory() {
        // Checks text, lengths, branch targets and load/divide classification on hand-assembled bytes.
        // 0x1000: mov rax,[rdi]; add rbx,rax; div rcx; jne 0x1000; ret
        let bytes = [0x48, 0x8b, 0x07, 0x48, 0x01, 0xc3, 0x48, 0xf7, 0xf1, 0x75, 0xf5, 0xc3];
        let v = decode(0x1000, &bytes);
        assert_eq!(v.len(), 5);
        assert_eq!(v[0].text, "mov (%rdi), %rax");
        assert!(v[0].loads && !v[0].stores);
        assert_eq!(v[0].writes & reg_bit(Register::RAX), reg_bit(Register::RAX));
        assert_eq!(v[0].addr_regs, reg_bit(Register::RDI));
        assert_eq!(v[2].unit, Unit::Divide);
        assert_eq!(v[3].flow, Flow::Branch(0x1000));
        assert_eq!(v[3].addr, 0x1009);
        assert_eq!(v[4].flow, Flow::Return);
    }
}
