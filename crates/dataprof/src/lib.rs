//! DProf for Loupe: data profiling from access samples.
//!
//! * [`interp`]: instruction interpretation (DCPI §7): the exact effective
//!   address, size and read/write kind of the memory operand of the
//!   instruction at a sampled PC, from the sampled registers.
//! * [`sample`], [`pmu`], [`recorder`]: collecting access samples (timer +
//!   registers, or a memory-sampling PMU when there is one) into the
//!   access log ([`log`]).
//! * [`cache`], [`maps`]: cache geometry and process memory maps.

pub mod cache;
pub mod error;
pub mod hottest;
pub mod interp;
pub mod log;
pub mod maps;
pub mod pmu;
pub mod recorder;
pub mod regs;
pub mod resolve;
pub mod sample;
pub mod types;
pub mod views;
