//! Every flag of the `loupe` binary, defined once; `--help` is generated
//! from here, with examples.

use clap::{Args, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;

#[derive(Parser, Debug)]
#[command(
    name = "loupe",
    version,
    about = "Loupe: an always-on, system-wide continuous profiler for Linux",
    long_about = "Loupe samples every process, shared library and the kernel on all CPUs through \
perf_event_open, maps each sample to the executable image it hit, and merges the counts into an \
on-disk profile database organized in epochs (after DCPI). Analysis tools read the database.",
    after_help = "Examples:\n  \
loupe record --db prof.db -- ./my-program --its-args     profile one command and its children\n  \
loupe record --db prof.db --duration 10                  profile the whole machine for 10 s\n  \
loupe daemon --db /var/lib/loupe &                       leave it running; SIGTERM flushes and exits\n  \
loupe top --db prof.db --by procedure --limit 20          where did the cycles go?\n  \
loupe top --db prof.db --by line --image libc --format json"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Profile the whole machine for a while, or one command and all its children.
    #[command(after_help = "Examples:\n  loupe record -- make -j2\n  loupe record --freq 5000 --duration 30 --db /tmp/p.db\n\n\
Recording into an existing database adds to its current epoch, so several runs of a program sum into one profile.\n\
With a command, loupe exits with the command's exit status; its stdout and stderr pass through untouched.")]
    Record(RecordArgs),
    /// Run the collector until stopped, merging into the database every --flush-every seconds.
    #[command(after_help = "Examples:\n  loupe daemon --db /var/lib/loupe --flush-every 60 --stats 10\n\n\
Control a running daemon with `loupe flush --db DIR` and `loupe epoch --db DIR`. SIGTERM or SIGINT flushes and exits.")]
    Daemon(DaemonArgs),
    /// Ask the running daemon to merge everything it holds into the database now.
    Flush(DbArg),
    /// Start a new epoch (through the running daemon if there is one).
    Epoch(DbArg),
    /// List the epochs of a database.
    Epochs(DbArg),
    /// Samples per image, procedure or source line, sorted descending (DCPI's dcpiprof).
    #[command(
        after_help = "Examples:\n  loupe top --by image\n  loupe top --by procedure --comm postgres --limit 30\n  loupe top --by line --image selftime --format json\n\n\
Percentages are of all samples of the event in the selected epochs and processes, including the [unknown] image."
    )]
    Top(TopArgs),
    /// Show which sampling events this machine supports.
    Events,
    /// Disassembly of one procedure with samples per instruction, source lines interleaved (like perf annotate).
    #[command(after_help = "Examples:\n  loupe annotate --image selftime --procedure hot_alpha\n  \
loupe annotate --image libc.so.6 --procedure memcpy --source --epoch all --format json\n\n\
Addresses are ELF virtual addresses, as objdump prints them. With --source, the hottest source lines are marked with *.")]
    Annotate(AnnotateArgs),
    /// Per-instruction execution counts, CPI and stall culprits of one procedure (DCPI's dcpicalc).
    #[command(after_help = "Examples:\n  loupe calc --image calcwork --procedure chase\n  \
loupe calc --image ./a.out --procedure main --format json > main.json\n\n\
Execution counts are estimated from the samples alone: the procedure's control-flow graph, frequency classes by cycle \
equivalence, and each instruction's minimum cycles from llvm-mca's model of this CPU (Debian package llvm-19). \
Bubbles above an instruction name the possible causes of its dynamic stall and the instruction to blame: \
d D-cache miss, D DTLB miss, f divider busy, p branch mispredict, i I-cache miss, w store buffer full. \
The clock event's period (ns) becomes cycles with the core clock measured at start (or --cpu-ghz).")]
    Calc(CalcArgs),
    /// Re-optimize a program from its profile (Morph): export BOLT or LLVM profiles, run llvm-bolt, validate, install, roll back.
    Optimize(crate::optimize::OptimizeArgs),
}

#[derive(Args, Debug, Clone)]
pub struct DbArg {
    /// Profile database directory.
    #[arg(long, default_value = "loupe.db", env = "LOUPE_DB")]
    pub db: PathBuf,
}

#[derive(Args, Debug, Clone)]
pub struct SamplingArgs {
    /// Mean samples per second per CPU per event; each period is drawn at random within ±10%.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub freq: u64,
    /// Event to sample (repeatable): cpu-clock, task-clock, page-faults, cycles, instructions, cache-misses, ...
    /// Hardware events the machine lacks fall back to cpu-clock with a warning.
    #[arg(short = 'e', long = "event", value_name = "EVENT")]
    pub events: Vec<String>,
    /// Collection backend. `auto` uses in-kernel BPF aggregation when the kernel and privileges allow it
    /// and says why when it falls back to streaming.
    #[arg(long, value_enum, default_value_t = Backend::Auto)]
    pub backend: Backend,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// BPF when possible, else the stream.
    Auto,
    /// Samples counted per CPU in kernel hash tables by an eBPF program (DCPI's driver); only the buckets reach user space.
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

#[derive(Args, Debug)]
pub struct RecordArgs {
    #[command(flatten)]
    pub db: DbArg,
    #[command(flatten)]
    pub sampling: SamplingArgs,
    /// Stop after this many seconds (system-wide mode: default until Ctrl-C).
    #[arg(long, value_name = "SECONDS")]
    pub duration: Option<f64>,
    /// Merge into the database this often while recording, in seconds.
    #[arg(long, default_value_t = 60.0)]
    pub flush_every: f64,
    /// Command to run and profile, with its arguments (after `--`).
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

#[derive(Args, Debug)]
pub struct DaemonArgs {
    #[command(flatten)]
    pub db: DbArg,
    #[command(flatten)]
    pub sampling: SamplingArgs,
    /// Merge in-memory profiles into the database within this many seconds; the work is spread evenly over the interval.
    #[arg(long, default_value_t = 60.0)]
    pub flush_every: f64,
    /// Print per-interval statistics (samples, unknown, lost, daemon CPU per sample, RSS) as JSON lines to stderr every SECONDS.
    #[arg(long, value_name = "SECONDS", num_args = 0..=1, default_missing_value = "10")]
    pub stats: Option<f64>,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum By {
    Image,
    Procedure,
    Line,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Text,
    Json,
}

#[derive(Args, Debug)]
pub struct TopArgs {
    #[command(flatten)]
    pub db: DbArg,
    /// Group samples by image, procedure or source line.
    #[arg(long, value_enum, default_value_t = By::Procedure)]
    pub by: By,
    /// Epoch to read: a number, `current` or `all`.
    #[arg(long, default_value = "current")]
    pub epoch: String,
    /// Only samples of these process ids (repeatable).
    #[arg(long)]
    pub pid: Vec<u32>,
    /// Only samples of processes with this name (repeatable).
    #[arg(long)]
    pub comm: Vec<String>,
    /// Only images whose path contains this text.
    #[arg(long)]
    pub image: Option<String>,
    /// Events to show (default: every event in the database); the first one sorts.
    #[arg(short = 'e', long = "event")]
    pub events: Vec<String>,
    /// Show at most this many rows.
    #[arg(long, default_value_t = 40)]
    pub limit: usize,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
}

#[derive(Args, Debug)]
pub struct ProcedureArgs {
    #[command(flatten)]
    pub db: DbArg,
    /// The image: its path, file name, or a unique part of its path.
    #[arg(long)]
    pub image: String,
    /// The procedure: its (demangled) name, or a unique part of it.
    #[arg(long)]
    pub procedure: String,
    /// Epoch to read: a number, `current` or `all`.
    #[arg(long, default_value = "current")]
    pub epoch: String,
    /// Only samples of these process ids (repeatable).
    #[arg(long)]
    pub pid: Vec<u32>,
    /// Only samples of processes with this name (repeatable).
    #[arg(long)]
    pub comm: Vec<String>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
}

#[derive(Args, Debug)]
pub struct AnnotateArgs {
    #[command(flatten)]
    pub proc_: ProcedureArgs,
    /// Events to show (default: every event with samples in the image).
    #[arg(short = 'e', long = "event")]
    pub events: Vec<String>,
    /// Interleave source lines (DWARF line tables; the source file must be readable).
    #[arg(long)]
    pub source: bool,
}

#[derive(Args, Debug)]
pub struct CalcArgs {
    #[command(flatten)]
    pub proc_: ProcedureArgs,
    /// The time event whose samples are analysed (cpu-clock, task-clock or cycles).
    #[arg(short = 'e', long = "event", default_value = "cpu-clock")]
    pub event: String,
    /// CPU model for llvm-mca (`native`: the CPU LLVM detects here, which should be the one that ran the samples).
    #[arg(long, default_value = "native")]
    pub mcpu: String,
    /// Path of llvm-mca (default: llvm-mca-19, then llvm-mca).
    #[arg(long, value_name = "PATH")]
    pub llvm_mca: Option<String>,
    /// Core clock of the profiled machine in GHz (default: measured here).
    #[arg(long, value_name = "GHZ")]
    pub cpu_ghz: Option<f64>,
}
