//! Exact relative block counts from execute breakpoints.
//!
//! Timer samples on an out-of-order core do not count executions: a short
//! block that retires beside others may never be sampled however often it
//! runs, and a block that stalls draws samples out of proportion. Without a
//! branch stack (LBR) the only exact per-address counter left is the debug
//! registers: an execute breakpoint traps on every execution. A trap costs
//! about 10 µs in this VM, far too much to leave armed, so a [`Group`] of
//! four breakpoints (one reference block and three others of the same
//! function) is armed for a short window and read: within the window the
//! program runs its normal path, trap by trap, so the counts' ratios are the
//! blocks' relative execution frequencies. Windows at random times, rotated
//! over the groups of a [`Plan`], average to the program's whole-run ratios
//! ([`Tally`]); the traps cost the window's length, so the overhead is the
//! duty cycle (window / period).
//!
//! ```no_run
//! # fn main() -> std::io::Result<()> {
//! use loupe_probe::{Group, RuntimeAddr};
//! let g = Group::open(1234, &[RuntimeAddr(0x401560), RuntimeAddr(0x401668)])?;
//! let counts = g.window(std::time::Duration::from_millis(1))?;
//! println!("{counts:?}");
//! # Ok(()) }
//! ```

pub mod chain;
pub mod clock;
pub mod count;
mod group;
mod maps;
mod plan;
mod sampler;
mod tally;

pub use group::{Group, SLOTS};
pub use maps::{load_bias, runtime, segments};
pub use plan::{Plan, PlannedGroup};
pub use sampler::Sampler;
pub use tally::{settled, Pair, Pooled, Ratio, Run, Tally, SETTLED_COUNT, SETTLED_REFERENCE};

/// Whether a test that opens breakpoints or perf events may run: as root, yes;
/// otherwise it is skipped only when `LOUPE_ALLOW_UNPRIVILEGED` says so (CI runs as root).
#[cfg(test)]
fn privileged_test() -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        return true;
    }
    assert!(std::env::var_os("LOUPE_ALLOW_UNPRIVILEGED").is_some(), "privileged test: run as root (CI does)");
    false
}

/// An address in a running process.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RuntimeAddr(pub u64);

/// An ELF virtual address of the image (what profiles and BOLT use).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
pub struct ElfAddr(pub u64);
