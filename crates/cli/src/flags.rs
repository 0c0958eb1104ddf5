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
    /// Vertical event tracing: event specs, generated stubs, record, dump, export.
    Trace(TraceArgs),
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

/// `loupe trace`: vertical event tracing (PEM).
#[derive(Args, Debug)]
pub struct TraceArgs {
    #[command(subcommand)]
    pub cmd: TraceCmd,
}

#[derive(Subcommand, Debug)]
pub enum TraceCmd {
    /// Validate event spec files; every error names the file and line.
    #[command(after_help = "Example:\n  loupe trace check crates/trace/spec/loupe.xml my-app.xml")]
    Check(TraceSpecs),
    /// Generate the logging stub for one language from event specs.
    #[command(after_help = "Examples:\n  loupe trace gen --lang c -o include/ crates/trace/spec/loupe.xml app.xml\n  \
loupe trace gen --lang python --vectors -o out/ app.xml      also write shared test vectors\n\n\
C includes sdk/c/loupe_trace.h; Rust uses the loupe-trace crate's `stub` module.")]
    Gen(TraceGenArgs),
    /// Run a command with tracing on and write its events to a trace directory.
    #[command(after_help = "Example:\n  loupe trace record -o run.trace --spec app.xml -- ./my-app\n\n\
The command logs through generated stubs into a per-CPU shared-memory buffer named by $LOUPE_TRACE_SHM; \
loupe drains it while the command runs. Events the buffer could not hold are dropped and counted in trace.json.")]
    Record(TraceRecordArgs),
    /// Print a trace's events in time order.
    #[command(after_help = "Example:\n  loupe trace dump run.trace | head")]
    Dump(TraceDirArg),
    /// Frequency strips per interval aligned with phase markers, correlations, periods (PEM Figure 4).
    #[command(
        after_help = "Examples:\n  loupe trace report run.trace\n  loupe trace report run.trace --interval-ms 2 --svg strips.svg\n  loupe trace report run.trace --format json\n\n\
Series: the counters logged per interval (page-faults, context-switches, ...) and the number of each application \
event per interval. Correlations are Pearson over intervals; 'within phase N' uses only intervals inside its iterations."
    )]
    Report(TraceReportArgs),
    /// Export a trace to the Chrome JSON trace format (opens in ui.perfetto.dev).
    #[command(after_help = "Example:\n  loupe trace export run.trace -o run.json")]
    Export(TraceExportArgs),
}

#[derive(Args, Debug)]
pub struct TraceSpecs {
    /// Event specification files (XML).
    #[arg(required = true)]
    pub specs: Vec<PathBuf>,
}

#[derive(Args, Debug)]
pub struct TraceGenArgs {
    /// Target language: c, rust, python, go or java.
    #[arg(long)]
    pub lang: String,
    /// Output directory.
    #[arg(short, long, default_value = ".")]
    pub out: PathBuf,
    /// Also write the shared test vectors (<spec>.json, <spec>.txt).
    #[arg(long)]
    pub vectors: bool,
    #[command(flatten)]
    pub specs: TraceSpecs,
}

#[derive(Args, Debug)]
pub struct TraceRecordArgs {
    /// Trace directory to create.
    #[arg(short, long, default_value = "loupe.trace")]
    pub out: PathBuf,
    /// Event specs of the traced program (Loupe's own spec is always included).
    #[arg(long = "spec")]
    pub specs: Vec<PathBuf>,
    /// Sub-buffers per CPU.
    #[arg(long, default_value_t = 16)]
    pub subbufs: u32,
    /// Sub-buffer size in KiB (a power of two, at least 32).
    #[arg(long, default_value_t = 256)]
    pub subbuf_kib: u32,
    /// Counter sampling interval in microseconds (page faults, context switches, ... per interval).
    #[arg(long, default_value_t = 1000)]
    pub interval_us: u64,
    /// Also print every application event on stdout as it is drained (an online PEM client).
    #[arg(long)]
    pub live: bool,
    /// Log every page fault of the command as an OS::Memory::PageFault event with its address
    /// (perf, one sample per fault, on the same clock); slows fault-heavy code noticeably.
    #[arg(long)]
    pub page_faults: bool,
    /// The command to run.
    #[arg(last = true, required = true)]
    pub command: Vec<String>,
}

#[derive(Args, Debug)]
pub struct TraceDirArg {
    /// Trace directory.
    pub dir: PathBuf,
}

#[derive(Args, Debug)]
pub struct TraceExportArgs {
    /// Trace directory.
    pub dir: PathBuf,
    /// Output file.
    #[arg(short, long)]
    pub out: PathBuf,
}

#[derive(Args, Debug)]
pub struct TraceReportArgs {
    /// Trace directory.
    pub dir: PathBuf,
    /// Interval width in milliseconds.
    #[arg(long, default_value_t = 1.0)]
    pub interval_ms: f64,
    /// Also write the strips as an SVG plot.
    #[arg(long)]
    pub svg: Option<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = TraceFormat::Text)]
    pub format: TraceFormat,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum TraceFormat {
    Text,
    Json,
}
