//! Every flag of the `loupe` binary and its help text, defined once, one
//! file per command (after ripgrep's `flags/defs.rs`); `--help` is
//! generated from here, with examples. A leaf: nothing here names a command
//! module, and the commands take their argument types from here. The filter
//! flags several commands share (`--epoch`, `--pid`, `--comm`, `--image`,
//! `--event`) are declared once, in `select`, and flattened where they apply.

use clap::{Args, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;

mod agents;
mod collect;
mod data;
mod diff;
mod fleet;
mod locks;
mod ops;
pub mod optimize;
mod procedure;
mod select;
mod serve;
mod stacks;
mod top;
mod trace;
mod wall;

pub use agents::*;
pub use collect::*;
pub use data::*;
pub use diff::*;
pub use fleet::*;
pub use locks::*;
pub use ops::*;
pub use procedure::*;
pub use select::*;
pub use serve::*;
pub use stacks::*;
pub use top::*;
pub use trace::*;
pub use wall::*;

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
    /// Also look for separate debug files in DIR (repeatable; before /usr/lib/debug): DIR/.build-id/xx/rest.debug,
    /// or the file's .gnu_debuglink name in DIR or under DIR/<the file's directory>.
    #[arg(long, global = true, value_name = "DIR")]
    pub debuginfo: Vec<PathBuf>,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Profile the whole machine for a while, or one command and all its children.
    #[command(after_help = RECORD_HELP)]
    Record(RecordArgs),
    /// Run the collector until stopped, merging into the database every --flush-every seconds.
    #[command(after_help = DAEMON_HELP)]
    Daemon(DaemonArgs),
    /// Ask the running daemon to merge everything it holds into the database now.
    Flush(DbArg),
    /// Start a new epoch (through the running daemon if there is one).
    Epoch(DbArg),
    /// List the epochs of a database.
    Epochs(EpochsArgs),
    /// Samples per image, procedure or source line, sorted descending (DCPI's dcpiprof).
    #[command(after_help = TOP_HELP)]
    Top(TopArgs),
    /// Show which sampling events this machine supports.
    #[command(
        after_help = "Tracepoints (`-e subsystem:name`, e.g. sched:sched_switch) are listed by the kernel under /sys/kernel/tracing/events."
    )]
    Events(EventsArgs),
    /// Differential profile of two runs or sets of runs (McKenney): buckets sorted by how they changed.
    #[command(after_help = DIFF_HELP)]
    Diff(DiffArgs),
    /// Which procedures vary most across N runs (DCPI's dcpistats): range%, sum, mean, std-dev, min, max.
    #[command(after_help = STATS_HELP)]
    Stats(StatsArgs),
    /// Lock hold and wait times per lock (pthread mutexes and rwlocks), for a command or every process.
    #[command(after_help = LOCKS_HELP)]
    Locks(LocksArgs),
    /// Disassembly of one procedure with samples per instruction, source lines interleaved (like perf annotate).
    #[command(after_help = ANNOTATE_HELP)]
    Annotate(AnnotateArgs),
    /// Per-instruction execution counts, CPI and stall culprits of one procedure (DCPI's dcpicalc).
    #[command(after_help = CALC_HELP)]
    Calc(CalcArgs),
    /// Write an interactive flame graph (SVG or HTML) of the recorded call stacks.
    #[command(after_help = FLAME_HELP)]
    Flame(FlameArgs),
    /// Export call stacks for other tools: pprof, collapsed stacks, Perfetto, speedscope.
    #[command(after_help = EXPORT_HELP)]
    Export(ExportArgs),
    /// Vertical event tracing: event specs, generated stubs, record, dump, export.
    Trace(TraceArgs),
    /// Re-optimize a program from its profile (Morph): export BOLT or LLVM profiles, run llvm-bolt, validate, install, roll back.
    Optimize(optimize::OptimizeArgs),
    /// Wall-clock time per thread: on-CPU plus off-CPU time by reason (a recording with --off-cpu).
    #[command(after_help = WALL_HELP)]
    Wall(WallArgs),
    /// Data profiling (DProf): memory cost by data type and field, miss classes, working set.
    #[command(after_help = SOURCE_NOTE)]
    Data(DataArgs),
    /// The fleet store in ClickHouse: create its schema (`loupe fleet init`).
    #[command(after_help = FLEET_HELP)]
    Fleet(FleetArgs),
    /// Store profiles from other agents in the fleet store (`loupe ingest pprof FILE --ship URL`).
    Ingest(IngestArgs),
    /// Serve the web UI and a JSON API (the CLI's `--format json` of each command) over HTTP.
    #[command(after_help = SERVE_HELP)]
    Serve(ServeArgs),
    /// Agents that act on what Loupe measures (huge pages, thread placement, Morph), measure the effect, keep or revert.
    #[command(after_help = AGENTS_HELP)]
    Agents(AgentsArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    #[command(after_help = COMPLETIONS_HELP)]
    Completions(CompletionsArgs),
    /// Write man pages for loupe and every command into a directory.
    #[command(after_help = MAN_HELP)]
    Man(ManArgs),
}

#[derive(Args, Debug, Clone)]
pub struct DbArg {
    /// Profile database directory.
    #[arg(long, default_value = "loupe.db", env = "LOUPE_DB")]
    pub db: PathBuf,
}

/// `-o/--output`: where a command writes its result.
#[derive(Args, Debug, Clone, Default)]
pub struct OutputFlag {
    /// Write the result to FILE (created 0600) instead of standard output.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct EpochsArgs {
    #[command(flatten)]
    pub db: DbArg,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    #[command(flatten)]
    pub output: OutputFlag,
}

#[derive(Args, Debug)]
pub struct EventsArgs {
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    #[command(flatten)]
    pub output: OutputFlag,
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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn flag_definitions_pass_clap_checks() {
        // Checks what clap only asserts in debug builds: unique ids and short names, valid defaults and groups.
        Cli::command().debug_assert();
    }

    #[test]
    fn shared_filter_flags_land_in_each_command() {
        // Checks that the filter flags declared once in `select` parse into every command that flattens them.
        let Command::Flame(f) =
            Cli::parse_from(["loupe", "flame", "--epoch", "all", "--pid", "3", "--comm", "x", "--image", "libc", "-e", "cycles"]).command
        else {
            panic!("not flame")
        };
        let s = f.select;
        assert_eq!((s.epoch.as_str(), &s.pid[..], &s.comm[..]), ("all", &[3][..], &["x".to_string()][..]));
        assert_eq!((s.image.as_deref(), s.event.as_deref()), (Some("libc"), Some("cycles")));
        let Command::Stats(st) = Cli::parse_from(["loupe", "stats", "a", "b", "--comm", "y", "-e", "cycles"]).command else {
            panic!("not stats")
        };
        assert_eq!((&st.sel.comm[..], st.sel.event.as_deref(), st.sel.image.as_deref()), (&["y".to_string()][..], Some("cycles"), None));
        let Command::Calc(c) = Cli::parse_from(["loupe", "calc", "--image", "a.out", "--procedure", "main", "--pid", "7"]).command else {
            panic!("not calc")
        };
        assert_eq!((c.proc_.epoch.as_str(), &c.proc_.pid[..], c.event.as_str()), ("current", &[7][..], "cpu-clock"));
    }
}
