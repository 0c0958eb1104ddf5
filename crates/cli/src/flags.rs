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
    #[command(after_help = "Examples:\n  loupe record -- make -j2\n  loupe record --freq 5000 --duration 30 --db /tmp/p.db\n  \
loupe record --lbr -- ./prog   (then: loupe optimize export --format bolt ./prog > prog.fdata)\n\n\
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
        after_help = "Examples:\n  loupe top --by image\n  loupe top --by procedure --comm postgres --limit 30\n  loupe top --by line --image selftime --format json\n  loupe top --children\n  loupe top --callers c_work\n\n\
Percentages are of all samples of the event in the selected epochs and processes, including the [unknown] image."
    )]
    Top(TopArgs),
    /// Show which sampling events this machine supports.
    Events,
    /// Differential profile of two runs or sets of runs (McKenney): buckets sorted by how they changed.
    #[command(after_help = crate::diff::DIFF_HELP)]
    Diff(DiffArgs),
    /// Which procedures vary most across N runs (DCPI's dcpistats): range%, sum, mean, std-dev, min, max.
    #[command(after_help = crate::diff::STATS_HELP)]
    Stats(StatsArgs),
    /// Lock hold and wait times per lock (pthread mutexes and rwlocks), for a command or every process.
    #[command(after_help = crate::locks::LOCKS_HELP)]
    Locks(LocksArgs),
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
The clock event's period (ns) becomes cycles with the core clock recorded with the profile (measured here for older databases, or --cpu-ghz). \
Hardware event samples of the same image (branch-misses, L1-dcache-load-misses, dTLB-load-misses, L1-icache-load-misses), \
when the database has them, bound each culprit to events x period x the event's penalty, and rule it out when it left no \
sample where its stall would have left several (DCPI §6.3); causes no event counts stay possible, not bounded.")]
    Calc(CalcArgs),
    /// Write an interactive flame graph (SVG or HTML) of the recorded call stacks.
    #[command(after_help = "Examples:\n  loupe flame -o cpu.svg\n  loupe flame --comm postgres --epoch all -o pg.html\n\n\
Inlined functions are expanded from DWARF and marked `(inlined)`. Stacks whose unwind stopped before the thread's root \
sit under an `[unwind stopped]` frame; the subtitle gives their share. Click a box to zoom, Ctrl-F to search.")]
    Flame(FlameArgs),
    /// Export call stacks for other tools: pprof, collapsed stacks, Perfetto, speedscope.
    #[command(after_help = "Examples:\n  loupe export --format pprof -o cpu.pb.gz && go tool pprof -top cpu.pb.gz\n  \
loupe export --format collapsed | inferno-flamegraph > cpu.svg\n  loupe export --format perfetto --pid 4242 -o trace.pftrace   (open in ui.perfetto.dev)\n  \
loupe export --format speedscope --since 3600 -o cpu.speedscope.json\n\n\
The database keeps counts per epoch, so --since/--until select whole epochs.")]
    Export(ExportArgs),
    /// Vertical event tracing: event specs, generated stubs, record, dump, export.
    Trace(TraceArgs),
    /// Re-optimize a program from its profile (Morph): export BOLT or LLVM profiles, run llvm-bolt, validate, install, roll back.
    Optimize(crate::optimize::OptimizeArgs),
    /// Data profiling (DProf): memory cost by data type and field, miss classes, working set.
    #[command(after_help = crate::data::SOURCE_NOTE)]
    Data(crate::data::DataArgs),
}

/// Which stacks: epochs, processes, images, event.
#[derive(Args, Debug)]
pub struct StackSelection {
    #[command(flatten)]
    pub db: DbArg,
    /// Epoch to read: a number, `current` or `all`.
    #[arg(long, default_value = "current")]
    pub epoch: String,
    /// Only epochs that overlap the last SECONDS (overrides --epoch).
    #[arg(long, value_name = "SECONDS")]
    pub since: Option<u64>,
    /// With --since: only epochs that started at least SECONDS ago.
    #[arg(long, value_name = "SECONDS")]
    pub until: Option<u64>,
    /// Only samples of these process ids (repeatable).
    #[arg(long)]
    pub pid: Vec<u32>,
    /// Only samples of processes with this name (repeatable).
    #[arg(long)]
    pub comm: Vec<String>,
    /// Only stacks with a frame in an image whose path contains this text.
    #[arg(long)]
    pub image: Option<String>,
    /// Event (default: cpu-clock, else the first recorded).
    #[arg(short = 'e', long = "event")]
    pub event: Option<String>,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlameFormat {
    Svg,
    Html,
}

#[derive(Args, Debug)]
pub struct FlameArgs {
    #[command(flatten)]
    pub select: StackSelection,
    /// Output file (default: stdout).
    #[arg(short, long)]
    pub output: Option<PathBuf>,
    /// svg, or html (the SVG in a page); default from the output's extension.
    #[arg(long, value_enum)]
    pub format: Option<FlameFormat>,
    /// Title at the top of the graph.
    #[arg(long, default_value = "Loupe flame graph")]
    pub title: String,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExportFormat {
    /// profile.proto, gzipped (go tool pprof, Pyroscope, Parca).
    Pprof,
    /// `root;...;leaf count` lines (flamegraph.pl, inferno).
    Collapsed,
    /// A Perfetto trace protobuf (ui.perfetto.dev).
    Perfetto,
    /// speedscope's JSON (speedscope.app).
    Speedscope,
}

#[derive(Args, Debug)]
pub struct ExportArgs {
    #[command(flatten)]
    pub select: StackSelection,
    #[arg(long, value_enum)]
    pub format: ExportFormat,
    /// Output file (default: stdout).
    #[arg(short, long)]
    pub output: Option<PathBuf>,
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
    /// Collection backend. `auto` uses in-kernel BPF aggregation (call stacks walked and counted in the kernel)
    /// when the kernel (5.17+) and privileges allow it, and says why when it falls back to streaming.
    #[arg(long, value_enum, default_value_t = Backend::Auto)]
    pub backend: Backend,
    /// Do not collect call stacks (flat per-instruction profiles only).
    #[arg(long)]
    pub no_stacks: bool,
    /// Bytes of user stack copied per sample for DWARF unwinding of code without frame pointers
    /// (deeper stacks end in an `[unwind stopped]` frame); 0 = frame pointers only.
    #[arg(long, default_value_t = 16384, value_name = "BYTES", value_parser = clap::value_parser!(u32).range(0..=65528))]
    pub stack_bytes: u32,
    /// Also record the CPU's last branch records (LBR) with each sample of a hardware event (cycles unless -e names
    /// one): taken branches of `user` code (the default), `kernel` or `all`, for `loupe optimize export --format bolt`.
    /// Without a branch stack (no PMU, or a VM that hides it) Loupe says so and records IP samples only.
    #[arg(long, value_enum, value_name = "WHICH", num_args = 0..=1, default_missing_value = "user")]
    pub lbr: Option<crate::collect::Lbr>,
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
    /// Collect access samples for `loupe data` (data address of each sample, heap allocations) instead of a code profile.
    #[arg(long)]
    pub data: bool,
    /// With --data: how heap allocations are tracked: `shim` (LD_PRELOAD, ~0.1 us per call), `uprobes`
    /// (eBPF, ~15 us per call here, catches calls the dynamic linker does not route), or `off`.
    #[arg(long, value_enum, default_value_t = crate::data::Allocs::Shim, value_name = "HOW")]
    pub allocs: crate::data::Allocs,
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
    /// Keep the cost of sampling under this percent of each CPU: at start the daemon measures what one sample
    /// costs on this host (about 1.5 s of spinning threads at two rates), then samples at the highest rate that fits,
    /// never above --freq, re-checking its own CPU per sample and the BPF handler's cost every 10 s.
    /// `off` samples at --freq regardless.
    #[arg(long, value_name = "PCT|off", default_value = "1", value_parser = parse_overhead)]
    pub max_overhead: Overhead,
    /// Print per-interval statistics (samples, unknown, lost, daemon CPU per sample, RSS) as JSON lines to stderr every SECONDS.
    #[arg(long, value_name = "SECONDS", num_args = 0..=1, default_missing_value = "10")]
    pub stats: Option<f64>,
    /// Also run the re-optimization manager (`loupe optimize manage --config CONFIG`) beside the daemon, niced, until the daemon stops.
    #[arg(long, value_name = "CONFIG")]
    pub optimize: Option<std::path::PathBuf>,
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

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum By {
    Image,
    Procedure,
    Line,
    /// One row per sampled address (image offset).
    Instruction,
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
    /// Group samples by image, procedure, source line or instruction address.
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
    /// Per procedure, from the call stacks: samples in it and everything it calls
    /// (inclusive, "children") and in it alone (self).
    #[arg(long)]
    pub children: bool,
    /// Who calls PROCEDURE, and how often (from the call stacks).
    #[arg(long, value_name = "PROCEDURE")]
    pub callers: Option<String>,
    /// Whom PROCEDURE calls, and how often; `[self]` is time in it alone.
    #[arg(long, value_name = "PROCEDURE")]
    pub callees: Option<String>,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum DiffMode {
    /// B/A, descending.
    Ratio,
    /// d = w_A·m_B − w_B·m_A (McKenney's equation 3), descending.
    Weighted,
    /// Load at which the bucket reaches --saturation by linear projection (equation 4), ascending.
    Saturation,
    /// The same by power-law projection (equation 5), ascending.
    Powerlaw,
}

/// Selection flags shared by `diff` and `stats`.
#[derive(Args, Debug)]
pub struct CompareArgs {
    /// Group samples by image, procedure, source line or instruction address.
    #[arg(long, value_enum, default_value_t = By::Procedure)]
    pub by: By,
    /// Event to compare (default: cpu-clock when present, else the first event found).
    #[arg(short = 'e', long = "event")]
    pub event: Option<String>,
    /// Only samples of processes with this name (repeatable).
    #[arg(long)]
    pub comm: Vec<String>,
    /// Only images whose path contains this text.
    #[arg(long)]
    pub image: Option<String>,
    /// Show at most this many rows.
    #[arg(long, default_value_t = 40)]
    pub limit: usize,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
}

#[derive(Args, Debug)]
pub struct DiffArgs {
    /// The less stressed side: DB, DB:EPOCH, or several joined by commas (summed).
    #[arg(value_name = "A")]
    pub a: String,
    /// The more stressed side, same syntax.
    #[arg(value_name = "B")]
    pub b: String,
    /// How buckets are compared and sorted.
    #[arg(long, value_enum, default_value_t = DiffMode::Ratio)]
    pub mode: DiffMode,
    /// Work done in A and in B (weighted mode's w_A w_B); also the expected B/A of an unchanged bucket.
    /// Without it, w_B/w_A is the sample-weighted median of the buckets' B/A ratios.
    #[arg(long, num_args = 2, value_names = ["W_A", "W_B"])]
    pub work: Option<Vec<f64>>,
    /// Offered loads of A and B (saturation and powerlaw modes).
    #[arg(long, num_args = 2, value_names = ["L_A", "L_B"])]
    pub load: Option<Vec<f64>>,
    /// Saturation measurement M_S, as a fraction of all samples of the side.
    #[arg(long, value_name = "M_S", default_value_t = 1.0)]
    pub saturation: f64,
    /// Significance level (false discovery rate, Benjamini–Hochberg); 1 marks every row significant.
    #[arg(long, default_value_t = 0.05)]
    pub level: f64,
    /// Treat relative changes up to this fraction as no change (e.g. 0.05 for ±5%).
    #[arg(long, default_value_t = 0.0)]
    pub min_change: f64,
    #[command(flatten)]
    pub sel: CompareArgs,
}

#[derive(Args, Debug)]
pub struct StatsArgs {
    /// Sample sets, one per argument: DB, DB:EPOCH, or several joined by commas (summed into one set).
    #[arg(value_name = "RUN", required = true, num_args = 2..)]
    pub runs: Vec<String>,
    /// Significance level of the dispersion test (false discovery rate, Benjamini–Hochberg).
    #[arg(long, default_value_t = 0.05)]
    pub level: f64,
    #[command(flatten)]
    pub sel: CompareArgs,
}

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
    /// Command to run and trace, with its arguments (after `--`).
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,
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
    /// Core clock of the profiled machine in GHz (default: the one recorded with the profile).
    #[arg(long, value_name = "GHZ")]
    pub cpu_ghz: Option<f64>,
    /// How class estimates are combined over the flow constraints: `local` propagation (DCPI §6.1.4) or
    /// `global`, a non-negative weighted least-squares fit of all classes.
    #[arg(long, value_name = "HOW", default_value = "local", value_parser = ["local", "global"])]
    pub solver: String,
    /// Innermost loops whose body branches: `on` keeps the blocks' relative frequencies from their local
    /// estimates and sets the level so that the loop's samples equal its estimated cycles; `off` leaves them
    /// to the per-class estimates.
    #[arg(long, value_name = "ON|OFF", default_value = "off", value_parser = ["on", "off"])]
    pub branching_loops: String,
    /// Consecutive instructions of a block taken as one issue point (1: each instruction alone, DCPI's rule).
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub retire_window: u32,
    /// Latency of a fill from main memory in ns, the most a cache or TLB miss event is charged when hardware
    /// event samples bound the culprits (default: 100 ns, a published typical figure; raise it for remote NUMA memory).
    #[arg(long, value_name = "NS", default_value_t = loupe_calc::hwbound::MEMORY_NS)]
    pub memory_ns: f64,
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
    #[command(after_help = "Examples:\n  loupe trace record -o run.trace --spec app.xml -- ./my-app\n  \
loupe trace record --kernel sched,syscalls,faults,samples -o run.trace -- ./my-app\n\n\
The command logs through generated stubs into a per-CPU shared-memory buffer named by $LOUPE_TRACE_SHM; \
loupe drains it while the command runs. Events the buffer could not hold are dropped and counted in trace.json.")]
    Record(TraceRecordArgs),
    /// Print a trace's events in time order.
    #[command(after_help = "Example:\n  loupe trace dump run.trace | head")]
    Dump(TraceDirArg),
    /// Frequency strips per interval aligned with phase markers, correlations, periods (PEM Figure 4).
    #[command(
        after_help = "Examples:\n  loupe trace report run.trace\n  loupe trace report run.trace --interval-ms 2 --svg strips.svg --png strips.png\n  loupe trace report run.trace --format json\n\n\
Series: the counters logged per interval (page-faults, context-switches, ...) and the number of each application \
event per interval. Correlations are Pearson over intervals; 'within phase N' uses only intervals inside its iterations."
    )]
    Report(TraceReportArgs),
    /// Export a trace to the Chrome JSON or Perfetto protobuf trace format (both open in ui.perfetto.dev).
    #[command(
        after_help = "Examples:\n  loupe trace export run.trace -o run.json\n  loupe trace export run.trace --format perfetto -o run.pftrace"
    )]
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
    /// Also print every application and kernel event on stdout as it is drained (an online PEM client).
    #[arg(long)]
    pub live: bool,
    /// Log every page fault of the command as an OS::Memory::PageFault event with its address
    /// (perf, one sample per fault, on the same clock); slows fault-heavy code noticeably. Same as --kernel faults.
    #[arg(long)]
    pub page_faults: bool,
    /// Kernel events on the same clock, as their own CTF streams: faults (page faults), sched (switches away from
    /// the command's threads), syscalls (system call entries), block (block I/O requests, machine-wide, from a
    /// BPF program; perf if it cannot load), block-perf (the same from perf, which misses completions in idle
    /// context), samples (Loupe's cpu-clock profiling samples), or all. Comma-separated.
    #[arg(long, value_name = "GROUPS")]
    pub kernel: Vec<String>,
    /// The writers' clock: auto (the TSC where the kernel publishes its TSC-to-ns factors, else clock_gettime),
    /// tsc (the TSC, with factors measured against CLOCK_MONOTONIC if the kernel has none; the drift is in
    /// trace.json), monotonic (clock_gettime).
    #[arg(long, value_enum, default_value_t = TraceClock::Auto)]
    pub clock: TraceClock,
    /// Profiling samples per second of CPU time with --kernel samples.
    #[arg(long, default_value_t = 1000)]
    pub sample_hz: u64,
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
    /// chrome: Chrome trace-event JSON; perfetto: Perfetto protobuf (counter tracks, phase slices, per-thread/CPU tracks).
    #[arg(long, value_enum, default_value_t = TraceExportFormat::Chrome)]
    pub format: TraceExportFormat,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum TraceClock {
    Auto,
    Tsc,
    Monotonic,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum TraceExportFormat {
    Chrome,
    Perfetto,
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
    /// Also write the strips as a PNG image.
    #[arg(long)]
    pub png: Option<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = TraceFormat::Text)]
    pub format: TraceFormat,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum TraceFormat {
    Text,
    Json,
}
