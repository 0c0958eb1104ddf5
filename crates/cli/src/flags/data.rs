//! `loupe data` and its subcommands (DProf's views, object histories, data
//! flow, allocation sites).

use super::{DbArg, Format, OutputFlag, PidFlag};
use clap::{Args, Subcommand, ValueEnum};

#[derive(Args, Debug)]
pub struct DataArgs {
    #[command(subcommand)]
    pub cmd: DataCommand,
}

pub const SOURCE_NOTE: &str = "\
Access samples are timer (cpu-clock) samples of user code whose data address is computed exactly by \
interpreting the instruction retiring at the interrupt with the sampled registers (or, on machines with \
PEBS/IBS, the address the PMU reports). Without hit/miss data a sample's memory cost is the sample itself: \
time spent at a memory-referencing instruction. Types come from DWARF: statics by address, others from the \
variable held in the instruction's base register; heap blocks with no type are grouped by allocation site.";

#[derive(Subcommand, Debug)]
pub enum DataCommand {
    /// Data types and fields sorted by sampled memory cost (DProf's data profile).
    #[command(after_help = "Examples:\n  loupe record --data --db d.db -- ./my-program\n  loupe data profile --db d.db\n  \
loupe data profile --db d.db --format json\n\n\
`bounces`: at least 5% of the field's samples had its cache line written by another thread on another CPU \
within --window-ms. Percentages are of all samples of the recorded processes.")]
    Profile(ViewArgs),
    /// Miss classification per type and field: true/false sharing, conflict, capacity.
    #[command(after_help = "Examples:\n  loupe data classify --db d.db\n  loupe data classify --db d.db --format json\n\n\
Sharing: another thread on another CPU wrote the accessed line within --window-ms (true sharing when the bytes \
overlap, false otherwise). Conflict: the access's L1 set holds more distinct sampled lines than it has ways and \
at least 4x the mean (the L1 is virtually indexed, so virtual addresses give its sets). Capacity: the type's \
estimated working set (Chao1 over sampled lines) exceeds a tenth of the last-level cache while all types together \
exceed it. Share: the row's samples over all memory samples.")]
    Classify(ViewArgs),
    /// Working set: which types occupy the cache, how many objects, which sets they crowd.
    #[command(
        name = "workingset",
        after_help = "Examples:\n  loupe data workingset --db d.db\n  loupe data workingset --db d.db --format json\n\n\
Estimated bytes: Chao1 estimate of the distinct cache lines the type touches, from the sampled lines seen once \
and twice. L1 lines: what an LRU model of this machine's L1 data cache holds at the end when fed the sampled \
lines in time order (a sampled, not a complete, stream)."
    )]
    Workingset(ViewArgs),
    /// Object access histories from hardware breakpoints: every access to chosen offsets of chosen objects, allocation to free.
    #[command(after_help = HISTORY_HELP)]
    History(HistoryArgs),
    /// Data flow: the common paths objects take from allocation to free, CPU changes marked (text, JSON, DOT, SVG).
    #[command(after_help = FLOW_HELP)]
    Flow(FlowArgs),
    /// Runs a command with its heap allocations tracked (uprobes or LD_PRELOAD) and lists the allocation sites.
    #[command(after_help = ALLOCS_HELP)]
    Allocs(AllocsArgs),
}

/// Selection shared by the views.
#[derive(Args, Debug)]
pub struct ViewArgs {
    #[command(flatten)]
    pub db: DbArg,
    /// Show at most this many rows.
    #[arg(long, default_value_t = 40)]
    pub limit: usize,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    #[command(flatten)]
    pub output: OutputFlag,
    /// Sharing window: another CPU's writes this close in time count as invalidations, and one thread's
    /// sampled writes to the same bytes up to this far apart count as continuous writing.
    #[arg(long, default_value_t = 20.0, value_name = "MS")]
    pub window_ms: f64,
    #[command(flatten)]
    pub pid: PidFlag,
}

pub const HISTORY_HELP: &str = "\
With a command, runs it under allocation tracking (eBPF uprobes on malloc/calloc/realloc/free and \
operator new/delete) and watches objects it allocates: the first allocation that matches --site and \
--size stops the process before the allocator returns, breakpoints (the CPU's debug registers, on every \
CPU) are set on the --offset ranges, and the process continues; every read or write of those bytes is \
recorded with its instruction, thread, CPU and time until the object is freed. One object at a time; \
the next only while the cost so far (time stopped + hits x the calibrated cost of a breakpoint trap) \
stays under --budget of the elapsed time. Breakpoints trap after the access; the instruction shown is \
the one before the trap IP, found by decoding the function from its start, with R or W. Needs root. Without a command, shows the \
histories already in --db. With --hottest (or --type TYPE), --site, --size and --offset are chosen from the \
access samples a `loupe record --data` left in --db: the hottest heap type (or TYPE), its commonest allocation \
site and size, and its four hottest fields, each as the aligned 1/2/4/8-byte range covering its sampled \
accesses; the choice and its sample counts are printed (and under \"chosen\" in JSON).

Examples:
  loupe data history --db d.db --site make_msg --size 64 --offset 0:8 --offset 16:8 -- ./queue
  loupe record --data --db d.db -- ./queue && loupe data history --hottest --db d.db -- ./queue
  loupe data history --type \"struct msg\" --db d.db -- ./queue
  loupe data history --db d.db --format json
  loupe data flow --db d.db --format svg > flow.svg";

pub const FLOW_HELP: &str = "\
Combines the object access histories in --db into the paths objects take from allocation to free: \
each step is a function that touched the object on one CPU, '=>' (a red edge in DOT/SVG) marks the \
object moving to another CPU. Record histories first with `loupe data history ... -- CMD`. SVG needs \
graphviz's `dot`.

Examples:
  loupe data flow --db d.db
  loupe data flow --db d.db --format dot > flow.dot
  loupe data flow --db d.db --format svg > flow.svg";

#[derive(Args, Debug)]
pub struct HistoryArgs {
    #[command(flatten)]
    pub db: DbArg,
    /// Watch objects allocated by calls from this function (a symbol of the program or its libraries).
    #[arg(long)]
    pub site: Option<String>,
    /// Watch objects of exactly this many bytes.
    #[arg(long)]
    pub size: Option<u64>,
    /// OFFSET:LEN byte range to watch (LEN 1, 2, 4 or 8, aligned); up to four (the debug registers).
    #[arg(long = "offset", value_parser = parse_range, default_values = ["0:8"])]
    pub offsets: Vec<(u64, u64)>,
    /// Choose --site, --size and --offset from the access samples already in --db (`loupe record --data`):
    /// the hottest heap type, its commonest allocation site and size, its four hottest fields.
    #[arg(long, conflicts_with_all = ["site", "size"])]
    pub hottest: bool,
    /// Like --hottest, for this type (as `loupe data profile` names it, e.g. "struct msg").
    #[arg(long = "type", value_name = "TYPE", conflicts_with_all = ["site", "size"])]
    pub type_name: Option<String>,
    /// Stop after this many objects.
    #[arg(long, default_value_t = 100)]
    pub objects: usize,
    /// Fraction of the run the histories may cost the program.
    #[arg(long, default_value_t = 0.05)]
    pub budget: f64,
    /// Let an object go after this many seconds without a free.
    #[arg(long, default_value_t = 2.0)]
    pub max_watch: f64,
    /// Show at most this many histories.
    #[arg(long, default_value_t = 10)]
    pub limit: usize,
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    #[command(flatten)]
    pub output: OutputFlag,
    /// Command to run (after `--`).
    #[arg(last = true)]
    pub command: Vec<String>,
}

pub const ALLOCS_HELP: &str = "\
Runs a command with its heap allocations tracked into --db (the allocation log that `loupe data` \
views use to name heap objects by allocation site) and lists the allocation sites: calls, bytes, \
blocks still live at exit. Tracking is by eBPF uprobes (root; every process the command forks), or \
with --preload by an LD_PRELOAD shim (no privileges; processes that keep the environment).

Examples:
  loupe data allocs --db d.db -- ./my-program
  loupe data allocs --db d.db --preload --format json -- ./my-program";

#[derive(Args, Debug)]
pub struct AllocsArgs {
    #[command(flatten)]
    pub db: DbArg,
    /// Track with the LD_PRELOAD shim instead of uprobes.
    #[arg(long)]
    pub preload: bool,
    /// Show at most this many allocation sites.
    #[arg(long, default_value_t = 20)]
    pub limit: usize,
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    #[command(flatten)]
    pub output: OutputFlag,
    /// Command to run (after `--`).
    #[arg(last = true, required = true)]
    pub command: Vec<String>,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlowFormat {
    Text,
    Json,
    Dot,
    Svg,
}

#[derive(Args, Debug)]
pub struct FlowArgs {
    #[command(flatten)]
    pub db: DbArg,
    /// Show at most this many paths (text).
    #[arg(long, default_value_t = 10)]
    pub limit: usize,
    #[arg(long, value_enum, default_value_t = FlowFormat::Text)]
    pub format: FlowFormat,
    #[command(flatten)]
    pub output: OutputFlag,
}

fn parse_range(s: &str) -> Result<(u64, u64), String> {
    let (o, l) = s.split_once(':').ok_or_else(|| format!("{s:?}: expected OFFSET:LEN, e.g. 16:8"))?;
    let num = |x: &str| x.strip_prefix("0x").map_or_else(|| x.parse(), |h| u64::from_str_radix(h, 16)).map_err(|e| format!("{x:?}: {e}"));
    let (o, l) = (num(o)?, num(l)?);
    if !matches!(l, 1 | 2 | 4 | 8) || o % l != 0 {
        return Err(format!("{s:?}: LEN must be 1, 2, 4 or 8 and OFFSET a multiple of it"));
    }
    Ok((o, l))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_offset_ranges_and_rejects_misaligned_ones() {
        // Checks OFFSET:LEN parsing: decimal and hex, LEN in {1,2,4,8}, OFFSET aligned to LEN.
        assert_eq!(parse_range("16:8"), Ok((16, 8)));
        assert_eq!(parse_range("0x18:4"), Ok((24, 4)));
        assert!(parse_range("4:8").is_err());
        assert!(parse_range("0:3").is_err());
        assert!(parse_range("8").is_err());
    }
}
