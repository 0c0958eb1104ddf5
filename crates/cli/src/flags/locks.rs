//! `loupe locks`.

use super::{Format, OutputFlag};
use clap::Args;
use std::path::PathBuf;

pub const LOCKS_HELP: &str = "\
Measures, per lock, the time it was held (from the return of the lock call to the unlock call), the \
time threads waited for it (lock call to its return), acquisitions, and the fraction of the run it was \
held, with eBPF uprobes on the C library's pthread_mutex_*, pthread_rwlock_*, pthread_spin_* and \
pthread_cond_*wait functions (glibc's pthread_spin_lock begins with a lock-prefixed instruction that \
the kernel cannot uprobe, so spinlocks are named in a warning and not traced there). Static locks are named by their data symbol; heap locks by the procedure \
that allocated their block (malloc/calloc, traced with a command only), else by the one that \
called pthread_*_init for them. Read locks held by several threads at once add up, so an rwlock's \
held fraction can exceed 1. Each probe costs a trap (about 1-3 us here), which also biases each hold \
and wait by about that much; locks taken through inlined atomics (not the C library) are not seen.

Feed two runs to the saturation profile (McKenney): the lock nearest to being held all the time comes first.
  loupe locks --format json -- ./server --clients 4 > load4.json
  loupe locks --format json -- ./server --clients 8 > load8.json
  loupe diff load4.json load8.json --mode saturation --load 4 8 --saturation 1.0

Examples:
  loupe locks -- ./my-threaded-program args
  loupe locks --duration 10                    every process for 10 s
  loupe locks --db prof.db -- ./server         also keep the result in prof.db (for loupe serve)
  loupe locks --db prof.db                     the result kept last in prof.db";

#[derive(Args, Debug)]
pub struct LocksArgs {
    /// Trace every process for this many seconds (without a command).
    #[arg(long, value_name = "SECONDS")]
    pub duration: Option<f64>,
    /// The C library to probe (default: the one loupe itself runs with).
    #[arg(long, value_name = "PATH")]
    pub libc: Option<PathBuf>,
    /// Show at most this many locks.
    #[arg(long, default_value_t = 40)]
    pub limit: usize,
    /// Output format; the JSON form is what `loupe diff` reads as a side.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    #[command(flatten)]
    pub output: OutputFlag,
    /// Keep the result in this database as well (its locks/ folder), where `loupe serve` shows it; without a
    /// command or --duration, print the result kept there last instead of tracing.
    #[arg(long, value_name = "DIR")]
    pub db: Option<PathBuf>,
    /// Command to run and trace, with its arguments (after `--`).
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,
}
