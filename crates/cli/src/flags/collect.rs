//! `loupe record` and `loupe daemon`.

use super::DbArg;
use clap::{Args, ValueEnum};
use std::path::PathBuf;

pub const RECORD_HELP: &str = "Examples:\n  loupe record -- make -j2\n  loupe record --freq 5000 --duration 30 --db /tmp/p.db\n  \
loupe record -p 1234,1240 --duration 10 -o /tmp/p.db   (running processes, as perf record -p)\n  \
loupe record -F 999 -g -e cpu-clock:u,sched:sched_switch -- ./prog\n  \
loupe record --lbr -- ./prog   (then: loupe optimize export --format bolt ./prog > prog.fdata)\n\n\
Recording into an existing database adds to its current epoch, so several runs of a program sum into one profile.\n\
With a command, loupe exits with the command's exit status; its stdout and stderr pass through untouched.";

pub const DAEMON_HELP: &str = "Examples:\n  loupe daemon --db /var/lib/loupe --flush-every 60 --stats 10\n  \
loupe daemon --print-config > /etc/loupe/daemon.toml; loupe daemon --config /etc/loupe/daemon.toml\n\n\
Control a running daemon with `loupe flush --db DIR` and `loupe epoch --db DIR`. SIGTERM or SIGINT flushes and exits.";

#[derive(Args, Debug, Clone)]
pub struct SamplingArgs {
    /// Mean samples per second per CPU per event; each period is drawn at random within ±10%.
    #[arg(short = 'F', long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub freq: u64,
    /// Events to sample (repeatable, or a comma-separated list): cpu-clock, task-clock, page-faults, cycles,
    /// instructions, cache-misses, ...; tracepoints as `subsystem:name` (every hit a sample, e.g. sched:sched_switch);
    /// `:u` or `:k` after a name counts user or kernel code only. Hardware events the machine lacks fall back to
    /// cpu-clock with a warning.
    #[arg(short = 'e', long = "event", value_name = "EVENT", value_delimiter = ',')]
    pub events: Vec<String>,
    /// Collection backend. `auto` uses in-kernel BPF aggregation (call stacks walked and counted in the kernel)
    /// when the kernel (5.17+) and privileges allow it, and says why when it falls back to streaming.
    #[arg(long, value_enum, default_value_t = Backend::Auto)]
    pub backend: Backend,
    /// Do not collect call stacks (flat per-instruction profiles only); as `--call-graph none`.
    #[arg(long, conflicts_with_all = ["g", "call_graph"])]
    pub no_stacks: bool,
    /// Call stacks from frame pointers only, as perf's -g (`--call-graph fp`).
    #[arg(short = 'g', conflicts_with = "call_graph")]
    pub g: bool,
    /// How call stacks are collected, in perf's words: `fp` (frame pointers only), `dwarf[,BYTES]` (frame pointers,
    /// and DWARF unwinding of a stack copy of --stack-bytes or BYTES where they are missing: the default) or `none`.
    #[arg(long, value_name = "fp|dwarf|none", value_parser = parse_call_graph)]
    pub call_graph: Option<CallGraph>,
    /// Bytes of user stack copied per sample for DWARF unwinding of code without frame pointers
    /// (deeper stacks end in an `[unwind stopped]` frame); 0 = frame pointers only.
    #[arg(long, default_value_t = 16384, value_name = "BYTES", value_parser = clap::value_parser!(u32).range(0..=65528))]
    pub stack_bytes: u32,
    /// Also record the CPU's last branch records (LBR) with each sample of a hardware event (cycles unless -e names
    /// one): taken branches of `user` code (the default), `kernel` or `all`, for `loupe optimize export --format bolt`.
    /// Without a branch stack (no PMU, or a VM that hides it) Loupe says so and records IP samples only.
    #[arg(long, value_enum, value_name = "WHICH", num_args = 0..=1, default_missing_value = "user")]
    pub lbr: Option<Lbr>,
    /// Also record off-CPU time, summed in the kernel at each context switch: how long threads are blocked, with
    /// their stacks and why (sleep, lock, io, runnable), as the event `off-cpu` weighted in ns (one sample per µs),
    /// and each thread's on-CPU and off-CPU time for `loupe wall`.
    #[arg(long)]
    pub off_cpu: bool,
}

/// `--call-graph`: how stacks are walked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallGraph {
    Fp,
    /// With the stack copy's size when given.
    Dwarf(Option<u32>),
    None,
}

fn parse_call_graph(s: &str) -> Result<CallGraph, String> {
    let bytes = |b: &str| b.parse::<u32>().ok().filter(|&n| n <= 65528).ok_or_else(|| format!("stack bytes must be 0..=65528, got {b:?}"));
    match s.split_once(',') {
        None if s == "fp" => Ok(CallGraph::Fp),
        None if s == "none" => Ok(CallGraph::None),
        None if s == "dwarf" => Ok(CallGraph::Dwarf(None)),
        Some(("dwarf", b)) => Ok(CallGraph::Dwarf(Some(bytes(b)?))),
        _ => Err(format!("expected fp, dwarf, dwarf,BYTES or none, got {s:?}")),
    }
}

impl SamplingArgs {
    /// Bytes of stack copied per sample, or `None` for no stacks at all, after -g, --call-graph and --no-stacks.
    pub fn stacks(&self) -> Option<u32> {
        match (self.no_stacks, self.g, self.call_graph) {
            (true, _, _) | (_, _, Some(CallGraph::None)) => None,
            (_, true, _) | (_, _, Some(CallGraph::Fp)) => Some(0),
            (_, _, Some(CallGraph::Dwarf(Some(b)))) => Some(b),
            _ => Some(self.stack_bytes),
        }
    }
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// BPF when possible, else the stream.
    Auto,
    /// Samples counted per CPU in kernel hash tables by an eBPF program (DCPI's driver), with their call stacks walked
    /// there; only the buckets, and each stack once, reach user space.
    Bpf,
    /// Every sample streamed through per-CPU perf ring buffers and aggregated in the daemon.
    Stream,
}

impl Backend {
    pub fn choice(self) -> loupe_collector::daemon::BackendChoice {
        use loupe_collector::daemon::BackendChoice;
        match self {
            Backend::Auto => BackendChoice::Auto,
            Backend::Bpf => BackendChoice::Bpf,
            Backend::Stream => BackendChoice::Stream,
        }
    }
}

/// `--group`: who besides the owner may read a database.
#[derive(Args, Debug, Clone)]
pub struct ShareArg {
    /// Share the database with group NAME (directories 2750, files 0640, that group) instead of keeping it to its
    /// owner (0700/0600, whatever the umask). Profiles hold command lines and code and data addresses.
    #[arg(long, value_name = "NAME")]
    pub group: Option<String>,
}

#[derive(Args, Debug)]
// As perf's `-o perf.data`: on record and daemon, -o names the database written.
#[command(mut_arg("db", |a| a.short('o').visible_alias("output")))]
pub struct RecordArgs {
    #[command(flatten)]
    pub db: DbArg,
    #[command(flatten)]
    pub share: ShareArg,
    #[command(flatten)]
    pub sampling: SamplingArgs,
    /// Profile running processes (comma-separated or repeated), all their threads, and the threads and children they
    /// start while recorded, as perf record -p; stops at --duration, Ctrl-C, or when all of them have exited.
    #[arg(short = 'p', long = "pid", value_name = "PID", value_delimiter = ',', conflicts_with_all = ["command", "all_cpus"])]
    pub pids: Vec<i32>,
    /// Every process on every CPU (the default without a command or -p); with a command, for as long as it runs.
    #[arg(short = 'a', long)]
    pub all_cpus: bool,
    /// Stop after this many seconds (system-wide mode and -p: default until Ctrl-C).
    #[arg(long, value_name = "SECONDS")]
    pub duration: Option<f64>,
    /// Merge into the database this often while recording, in seconds.
    #[arg(long, default_value_t = 60.0)]
    pub flush_every: f64,
    /// Collect access samples for `loupe data` (data address of each sample, heap allocations) instead of a code profile.
    #[arg(long)]
    pub data: bool,
    /// With --data: how heap allocations are tracked: `shim` (LD_PRELOAD, ~0.1 us per call), `uprobes`
    /// (eBPF, ~15 us per call here, catches calls the dynamic linker does not route), or `off`.
    #[arg(long, value_enum, default_value_t = Allocs::Shim, value_name = "HOW")]
    pub allocs: Allocs,
    /// Count the executions of these procedures of the command's executable exactly, for `loupe calc`: an
    /// entry uprobe for the whole run, and breakpoints on one instruction per frequency class armed in
    /// windows over whole calls (comma-separated or repeated). PROCEDURE@IMAGE names one in another image
    /// (a path, or a file in PATH: a program the command runs, a library it loads). Kept in DB/counts/.
    #[arg(long = "count", value_name = "PROCEDURE", value_delimiter = ',', requires = "command")]
    pub count: Vec<String>,
    /// With --count: a window stops after this many breakpoint traps (about 17 us each here).
    #[arg(long, value_name = "N", default_value_t = 2000)]
    pub count_hits: u64,
    #[command(flatten)]
    pub ship: super::ShipArgs,
    /// Command to run and profile, with its arguments (after `--`).
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

#[derive(Args, Debug)]
#[command(mut_arg("db", |a| a.short('o').visible_alias("output")))]
pub struct DaemonArgs {
    #[command(flatten)]
    pub db: DbArg,
    #[command(flatten)]
    pub share: ShareArg,
    #[command(flatten)]
    pub sampling: SamplingArgs,
    /// Merge in-memory profiles into the database within this many seconds; the work is spread evenly over the interval.
    #[arg(long, default_value_t = 60.0)]
    pub flush_every: f64,
    /// Close the current epoch and start a new one this often, in seconds (0: only when asked, `loupe epoch`), so a
    /// daemon left running answers questions about time ranges (`--since`, the web overview) and each flush merges
    /// into an epoch of bounded size. Closed epochs are summed into merged blocks in the background.
    #[arg(long, value_name = "SECONDS", default_value_t = 3600.0)]
    pub epoch_every: f64,
    /// Keep the cost of sampling under this percent of each CPU: at start the daemon times one sample's interrupt
    /// on its own thread (a few milliseconds; nothing else spins), then samples at the highest rate that fits,
    /// never above --freq, re-checking its own CPU per sample and the BPF handler's cost every 10 s. Lowering the rate
    /// never loses a record. `off` samples at --freq regardless.
    #[arg(long, value_name = "PCT|off", default_value = "1", value_parser = parse_overhead)]
    pub max_overhead: Overhead,
    /// Print per-interval statistics (samples, unknown, lost, daemon CPU per sample, RSS) as JSON lines to stderr every SECONDS.
    #[arg(long, value_name = "SECONDS", num_args = 0..=1, default_missing_value = "10")]
    pub stats: Option<f64>,
    /// Also run the re-optimization manager (`loupe optimize manage --config CONFIG`) beside the daemon, niced, until the daemon stops.
    #[arg(long, value_name = "CONFIG")]
    pub optimize: Option<PathBuf>,
    /// Read flags from a TOML file: any flag above by its long name (`flush-every = 30`, `event = ["cpu-clock"]`,
    /// `no-stacks = true`); flags on the command line win. Mistakes are reported with the file's line.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Print every setting, with what this command line and --config make of it, as a --config file, and exit.
    #[arg(long)]
    pub print_config: bool,
    #[command(flatten)]
    pub ship: super::ShipArgs,
    #[command(flatten)]
    pub agents: super::DaemonAgentsArgs,
}

/// `--max-overhead`: a percent of each CPU, or off.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Overhead(pub Option<f64>);

fn parse_overhead(s: &str) -> Result<Overhead, String> {
    if s == "off" {
        return Ok(Overhead(None));
    }
    match s.trim_end_matches('%').parse::<f64>() {
        Ok(p) if p > 0.0 && p <= 100.0 => Ok(Overhead(Some(p))),
        _ => Err(format!("expected a percent in (0, 100] or `off`, got {s:?}")),
    }
}

/// Which branches `--lbr` keeps (`branch_sample_type`: every taken branch
/// at these privilege levels).
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lbr {
    User,
    Kernel,
    All,
}

/// How `record --data` tracks heap allocations.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Allocs {
    Shim,
    Uprobes,
    Off,
}
