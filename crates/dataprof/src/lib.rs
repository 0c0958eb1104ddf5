//! DProf for Loupe: data profiling from access samples.
//!
//! * [`interp`]: instruction interpretation (DCPI §7): the exact effective
//!   address, size and read/write kind of the memory operand of the
//!   instruction at a sampled PC, from the sampled registers.
//! * [`regs`]: the x86-64 register set perf delivers with each sample.

pub mod interp;
pub mod regs;
