//! `loupe trace` and its subcommands.

use super::OutputFlag;
use clap::{Args, Subcommand, ValueEnum};
use std::path::PathBuf;

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
    #[command(flatten)]
    pub output: OutputFlag,
}

#[derive(Args, Debug)]
pub struct TraceExportArgs {
    /// Trace directory.
    pub dir: PathBuf,
    /// Output file (`--out` is an older spelling).
    #[arg(short, long = "output", alias = "out")]
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
    #[command(flatten)]
    pub output: OutputFlag,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum TraceFormat {
    Text,
    Json,
}
