//! `loupe wall`.

use super::{CgroupFlag, CommFlag, DbArg, EpochFlag, Format, OutputFlag, PidFlag};
use clap::Args;

pub const WALL_HELP: &str = "Examples:\n  loupe record --off-cpu -- ./server\n  loupe wall\n  loupe wall --comm server --format json\n\n\
Needs a recording with --off-cpu: the scheduler's own account of each thread, summed in the kernel at every context switch. \
wall = on-CPU + off-CPU; each reason's column is its share of the thread's wall-clock time. Reasons: sleep (timers, wait, \
signals), lock (futex: mutexes, condition variables), io (read/write on pipes, sockets, terminals; poll, select, epoll), \
uninterruptible (D state: usually disk I/O, page faults), runnable (preempted, waiting for a CPU).";

#[derive(Args, Debug)]
pub struct WallArgs {
    #[command(flatten)]
    pub db: DbArg,
    #[command(flatten)]
    pub epoch: EpochFlag,
    #[command(flatten)]
    pub pid: PidFlag,
    #[command(flatten)]
    pub comm: CommFlag,
    #[command(flatten)]
    pub cgroup: CgroupFlag,
    /// Show at most this many threads (longest wall-clock time first).
    #[arg(long, default_value_t = 40)]
    pub limit: usize,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    #[command(flatten)]
    pub output: OutputFlag,
}
