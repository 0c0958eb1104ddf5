//! `loupe optimize` and its subcommands (Morph's manager). Its own module
//! path, since its `export` has arguments of the same names as `loupe export`.

use super::{DbArg, Format, OutputFlag};
use clap::{Args, Subcommand, ValueEnum};
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct OptimizeArgs {
    #[command(subcommand)]
    pub command: OptimizeCommand,
}

#[derive(Subcommand, Debug)]
pub enum OptimizeCommand {
    /// Write the image's profile for an optimizer: BOLT fdata (branch records when the database has LBR records of
    /// this build, else no-LBR block counts), an LLVM text sample profile, or block counts as JSON.
    #[command(after_help = "Examples:\n  loupe optimize export --format bolt ./layout > layout.fdata\n  \
loupe optimize export --format llvm-sample --epoch all -o prof.txt /usr/local/bin/lua\n  \
loupe optimize export --build-id 3f9c0a7e5d /usr/local/bin/lua\n  \
llvm-bolt ./layout -o layout.bolt -data=layout.fdata -reorder-blocks=ext-tsp -split-functions\n\n\
Samples of every epoch are combined, each weighted by 0.5^(age/--half-life). Only samples of the build whose \
build-id the file on disk has (or --build-id names: a build since replaced at that path, read from the database's \
image cache) are used.")]
    Export(ExportArgs),
    /// Run llvm-bolt on the image with its profile, check and measure the result, and install it if it is faster.
    #[command(after_help = "Examples:\n  loupe optimize run ./layout --check '{} 200' --bench '{} 20000'\n  \
loupe optimize run ./layout --check '{} 200' --bench '{} 20000' --rounds 20 --install\n\n\
{} in --check and --bench stands for the binary under test. The candidate must give the same exit status and \
standard output as the original under --check, and be faster under --bench in a sign test over alternating runs \
(p < 0.05) by at least --min-gain. Every decision is appended to DB/optimize/decisions.jsonl.")]
    Run(RunArgs),
    /// The decisions taken for an image and whether an optimized version is installed.
    Status(StatusArgs),
    /// Put the original binary back in place of the installed optimized one.
    Rollback(StatusArgs),
    /// Count the hottest functions' blocks exactly with execute breakpoints (the debug registers), in short
    /// windows on a running program: what timer samples cannot count without a branch stack.
    #[command(after_help = PROBE_HELP)]
    Probe(ProbeArgs),
    /// Watch configured programs and re-optimize them by itself: decide, optimize at low priority within a CPU budget, validate, install, roll back.
    #[command(after_help = MANAGE_HELP)]
    Manage(ManageArgs),
}

#[derive(Args, Debug)]
pub struct ProfileArgs {
    #[command(flatten)]
    pub db: DbArg,
    /// The executable: its path on disk (its build-id selects the samples).
    pub image: PathBuf,
    /// Epochs to combine: a number, `current` or `all`.
    #[arg(long, default_value = "all")]
    pub epoch: String,
    /// Age in seconds at which an epoch's samples count half (0: no aging).
    #[arg(long, default_value_t = 7.0 * 86400.0)]
    pub half_life: f64,
    /// A never-sampled block is cold when the 95% upper bound of its count is below this fraction of its function's hottest block.
    #[arg(long, default_value_t = 0.01)]
    pub cold_fraction: f64,
    /// Count each block from all its samples: no correction for the timer's skid (which moves a
    /// predecessor's samples onto a block's first instruction).
    #[arg(long)]
    pub no_skid: bool,
    /// Make block and edge counts flow-consistent by minimum-cost flow (LLVM's profi method): a
    /// chain of blocks that must run equally often gets the median of their estimates.
    #[arg(long)]
    pub infer: bool,
    /// Leave out the block counts of `optimize probe` (execute breakpoints) even when the database has some
    /// for this build.
    #[arg(long)]
    pub no_probes: bool,
    /// The ELF file of the build profiled, when it is no longer at `image`
    /// (`export --build-id`: its copy in the database's image cache).
    #[arg(skip)]
    pub file: Option<PathBuf>,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExportFormat {
    /// BOLT fdata: the LBR's branch records when recorded (`loupe record --lbr`), else the no-LBR form (block counts).
    Bolt,
    /// BOLT fdata, branch records: edge counts synthesized from block counts.
    BoltEdges,
    LlvmSample,
    Json,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum BoltProfile {
    Edges,
    Blocks,
}

#[derive(Args, Debug)]
pub struct ExportArgs {
    #[command(flatten)]
    pub profile: ProfileArgs,
    #[arg(long, value_enum, default_value_t = ExportFormat::Bolt)]
    pub format: ExportFormat,
    /// Write here instead of standard output.
    #[arg(short, long)]
    pub output: Option<PathBuf>,
    /// Export this build of the program at IMAGE (its samples filed under IMAGE), read from the file at IMAGE
    /// when it is that build, else from the database's image cache (DB/images/HEX): for an original that is gone
    /// from its path.
    #[arg(long, value_name = "HEX")]
    pub build_id: Option<String>,
}

#[derive(Args, Debug)]
pub struct RunArgs {
    #[command(flatten)]
    pub profile: ProfileArgs,
    /// Shell command that must behave the same on the candidate ({} = binary).
    #[arg(long)]
    pub check: String,
    /// Shell command timed on original and candidate in alternation ({} = binary).
    #[arg(long)]
    pub bench: String,
    /// Do not optimize from fewer samples of the image (after aging): a sparse profile lays out whatever a few
    /// samples hit; keep collecting instead (the default is where sampled profiles stopped improving, BENCHMARKS.md).
    #[arg(long, default_value_t = 30000.0)]
    pub min_samples: f64,
    /// Alternating rounds of --bench (at least 5: fewer can never pass the sign test at p < 0.05).
    #[arg(long, default_value_t = 10)]
    pub rounds: usize,
    /// Smallest median gain accepted (0.01 = 1%).
    #[arg(long, default_value_t = 0.01)]
    pub min_gain: f64,
    /// Install the candidate in place of the image when it passes (the original is kept as IMAGE.loupe-orig;
    /// given IMAGE.loupe-orig itself, the candidate replaces the version installed at IMAGE).
    #[arg(long)]
    pub install: bool,
    /// Where the candidate is written (default IMAGE.loupe-bolt).
    #[arg(long)]
    pub output: Option<PathBuf>,
    /// Profile given to BOLT: `edges` (branch records from edge counts synthesized from block counts) or `blocks` (no-LBR block counts).
    #[arg(long, value_enum, default_value_t = BoltProfile::Edges)]
    pub profile_kind: BoltProfile,
    /// Path of llvm-bolt (default /usr/lib/llvm-19/bin/llvm-bolt).
    #[arg(long)]
    pub bolt: Option<PathBuf>,
    /// Instead of llvm-bolt, rebuild the program with the LLVM sample profile (clang -fprofile-sample-use):
    /// a shell command where {profile} is the profile Loupe writes and {out} where the new binary must go,
    /// e.g. 'clang -O2 -g -fprofile-sample-use={profile} -o {out} src/*.c'. Checked, measured and installed as BOLT's output is.
    #[arg(long, value_name = "CMD")]
    pub rebuild: Option<String>,
}

#[derive(Args, Debug)]
pub struct StatusArgs {
    #[command(flatten)]
    pub db: DbArg,
    pub image: PathBuf,
    /// Output format (JSON: the decisions as the log keeps them).
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    #[command(flatten)]
    pub output: OutputFlag,
}

pub const PROBE_HELP: &str = "Examples:\n  loupe optimize probe ./lua -- ./lua bench.lua\n  \
loupe optimize probe --seconds 60 /usr/local/bin/lua\n\n\
Timer samples cannot count short blocks on an out-of-order core (a block that retires beside others may never be \
sampled, one that stalls draws samples out of proportion), and without a branch stack (LBR) nothing else counts \
them. The debug registers can: an execute breakpoint traps on every execution. Probing arms four at a time (a \
function's reference block and three others) on a thread running IMAGE for --window-us, reads the counts and \
moves on; their ratios are exact relative execution counts of that stretch of the run, and windows at random \
times average to the whole run's. Blocks are those of the --functions hottest functions of the profile already in \
the database (record first); each function's reference is the most executed of its four most-sampled blocks, \
found by counting them against each other first. Every armed execution traps (about 10 us in a VM), so the \
program's slowdown is about the duty cycle, window / period (2% at the defaults), plus the timer samples taken \
between windows (--sample-hz), which weigh each run's ratios by how often its references ran. Counts add up \
across runs in DB/probes/BUILD.json; `optimize export`, `run` and the manager then take the measured blocks' \
counts from there, scaled to the samples, and infer the rest of each function's counts by minimum-cost flow \
around them (--no-probes: without them).";

#[derive(Args, Debug)]
pub struct ProbeArgs {
    #[command(flatten)]
    pub profile: ProfileArgs,
    /// How long to probe running processes of IMAGE (with a command: until it exits).
    #[arg(long, default_value_t = 30.0)]
    pub seconds: f64,
    /// Microseconds the breakpoints stay armed per window.
    #[arg(long, default_value_t = 1000)]
    pub window_us: u64,
    /// Mean milliseconds between windows (each drawn from 0.5 to 1.5 times it, so windows do not lock to a
    /// period of the program).
    #[arg(long, default_value_t = 50)]
    pub period_ms: u64,
    /// Timer samples per second of a probed thread's CPU, taken between windows: how often each reference block
    /// ran in this run, to weigh this run's ratios against other runs' (0: runs are summed unweighted).
    #[arg(long, default_value_t = 2000)]
    pub sample_hz: u64,
    /// How many of the profile's hottest functions to probe.
    #[arg(long, default_value_t = 16)]
    pub functions: usize,
    /// The command to run and probe (after --): the processes of IMAGE among it and its descendants; without
    /// one, every running process of IMAGE is probed.
    #[arg(last = true)]
    pub command: Vec<String>,
}

pub const MANAGE_HELP: &str = "Examples:\n  loupe optimize manage --config /etc/loupe/optimize.json\n  \
loupe daemon --optimize /etc/loupe/optimize.json\n\n\
Configuration (JSON; every key but `programs` optional, defaults shown):\n  \
{\"interval\": 60, \"min_share\": 0.05, \"min_samples\": 30000, \"max_drift\": 0.25, \"recheck_secs\": 86400,\n   \
\"retry_factor\": 2, \"regrow_factor\": 0, \"half_life\": 604800, \"cold_fraction\": 0.01, \"infer\": false,\n   \"probe_seconds\": 0, \"probe_functions\": 16, \"nice\": 19, \
\"programs\": [{\"path\": \"/usr/local/bin/lua\", \"check\": \"{} test.lua\", \"bench\": \"{} bench.lua\",\n                 \
\"rounds\": 10, \"min_gain\": 0.01, \"bolt_opts\": null}]}\n\n\
A program is optimized once it has min_share of the sampled time and min_samples (aged) samples; the candidate \
must pass `check` and be faster under `bench`; it is then renamed over `path` (original kept as PATH.loupe-orig), \
so later runs use it. An installed version the manager has not measured (or not for recheck_secs) is measured \
against the original and rolled back unless faster. When usage drifts (max_drift of the time moved between \
functions since the profile behind the installed version), the installed version keeps running: its samples since \
it was installed are mapped back to the original through BOLT's address table, and a candidate built from them \
(checked and measured against the original) replaces it. When they cannot be mapped (no table, or a version Loupe \
did not make), the original is put back and a fresh profile collected. Without drift, once that mapped profile \
holds regrow_factor times the samples the installed version was built from (0, the default: never; candidates \
from mapped profiles have not yet beaten the version they were to replace, see BENCHMARKS.md), a candidate from \
it must beat the installed version itself to replace it. With probe_seconds, the first candidate of a build waits \
for that long a run of `optimize probe` on the program's running processes (execute breakpoints count the blocks of \
its probe_functions hottest functions exactly; the program slows by about 2% meanwhile).";

#[derive(Args, Debug)]
pub struct ManageArgs {
    #[command(flatten)]
    pub db: DbArg,
    /// The programs to manage and the policy's thresholds (JSON; see --help).
    #[arg(long)]
    pub config: PathBuf,
    /// One pass over the programs, then exit.
    #[arg(long)]
    pub once: bool,
    /// Stop after this many seconds.
    #[arg(long)]
    pub duration: Option<f64>,
    /// Average share of one CPU the manager's work (BOLT, checks, benchmarks) may use.
    #[arg(long, default_value_t = 0.25)]
    pub cpu_budget: f64,
    /// CPU seconds that may be spent at once before the budget applies.
    #[arg(long, default_value_t = 300.0)]
    pub cpu_burst: f64,
    /// Niceness of the manager and of everything it runs (default: the configuration's `nice`, 19).
    #[arg(long)]
    pub nice: Option<i32>,
    /// Path of llvm-bolt (default /usr/lib/llvm-19/bin/llvm-bolt).
    #[arg(long)]
    pub bolt: Option<PathBuf>,
}
