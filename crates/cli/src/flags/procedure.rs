//! `loupe annotate` and `loupe calc`: one procedure of one image.

use super::{CommFlag, DbArg, EpochFlag, Format, OutputFlag, PidFlag};
use clap::Args;

pub const ANNOTATE_HELP: &str = "Examples:\n  loupe annotate --image selftime --procedure hot_alpha\n  \
loupe annotate --image libc.so.6 --procedure memcpy --source --epoch all --format json\n\n\
Addresses are ELF virtual addresses, as objdump prints them. With --source, the hottest source lines are marked with *.";

pub const CALC_HELP: &str = "Examples:\n  loupe calc --image calcwork --procedure chase\n  \
loupe calc --image ./a.out --procedure main --format json > main.json\n\n\
Execution counts are estimated from the samples alone: the procedure's control-flow graph, frequency classes by cycle \
equivalence, and each instruction's minimum cycles from llvm-mca's model of this CPU (Debian package llvm-19). \
Bubbles above an instruction name the possible causes of its dynamic stall and the instruction to blame: \
d D-cache miss, D DTLB miss, f divider busy, p branch mispredict, i I-cache miss, w store buffer full. \
The clock event's period (ns) becomes cycles with the core clock recorded with the profile (measured here for older databases, or --cpu-ghz). \
Hardware event samples of the same image (branch-misses, L1-dcache-load-misses, dTLB-load-misses, L1-icache-load-misses), \
when the database has them, bound each culprit to events x period x the event's penalty, and rule it out when it left no \
sample where its stall would have left several (DCPI §6.3); causes no event counts stay possible, not bounded.";

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
    #[command(flatten)]
    pub epoch: EpochFlag,
    #[command(flatten)]
    pub pid: PidFlag,
    #[command(flatten)]
    pub comm: CommFlag,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    #[command(flatten)]
    pub output: OutputFlag,
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
