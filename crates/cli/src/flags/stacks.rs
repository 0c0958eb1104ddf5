//! `loupe flame` and `loupe export`.

use super::Selection;
use clap::{Args, ValueEnum};
use std::path::PathBuf;

pub const FLAME_HELP: &str = "Examples:\n  loupe flame -o cpu.svg\n  loupe flame --comm postgres --epoch all -o pg.html\n\n\
Inlined functions are expanded from DWARF and marked `(inlined)`. Stacks whose unwind stopped before the thread's root \
sit under an `[unwind stopped]` frame; the subtitle gives their share. Click a box to zoom, Ctrl-F to search.";

pub const EXPORT_HELP: &str = "Examples:\n  loupe export --format pprof -o cpu.pb.gz && go tool pprof -top cpu.pb.gz\n  \
loupe export --format collapsed | inferno-flamegraph > cpu.svg\n  loupe export --format collapsed --root comm   (a process frame on top, as stackcollapse-perf)\n  loupe export --format perfetto --pid 4242 -o trace.pftrace   (open in ui.perfetto.dev)\n  \
loupe export --format speedscope --since 3600 -o cpu.speedscope.json\n\n\
The database keeps counts per epoch, so --since/--until select whole epochs.";

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlameFormat {
    Svg,
    Html,
    /// The merged call tree, root first (docs/serve.md).
    Json,
}

#[derive(Args, Debug)]
pub struct FlameArgs {
    #[command(flatten)]
    pub select: Selection,
    #[command(flatten)]
    pub source: super::SourceArgs,
    /// Output file (default: stdout).
    #[arg(short, long)]
    pub output: Option<PathBuf>,
    /// svg, html (the SVG in a page) or json (the call tree); default from the output's extension.
    #[arg(long, value_enum)]
    pub format: Option<FlameFormat>,
    /// Title at the top of the graph.
    #[arg(long, default_value = "Loupe flame graph")]
    pub title: String,
    /// Leaves at the top, callers below them (JSON only).
    #[arg(long)]
    pub inverted: bool,
    /// Fold, under each frame, the children holding less than this share of all the samples (0 to 1, e.g.
    /// 0.0005) into one last `(other)` child with their samples; every other figure stays exact (JSON only;
    /// default: the whole tree).
    #[arg(long, value_name = "SHARE", value_parser = share)]
    pub min_share: Option<f64>,
}

fn share(s: &str) -> Result<f64, String> {
    let x: f64 = s.parse().map_err(|e| format!("{s:?}: {e}"))?;
    if (0.0..=1.0).contains(&x) {
        Ok(x)
    } else {
        Err(format!("{s} is not a share between 0 and 1"))
    }
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

/// `--root`: the frame above each collapsed stack's root.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum RootFrame {
    /// None (the default).
    #[default]
    None,
    /// The process's command name, as stackcollapse-perf writes it.
    Comm,
    /// `comm-pid`, as stackcollapse-perf --pid.
    Pid,
}

impl From<RootFrame> for loupe_analysis::export::Root {
    fn from(r: RootFrame) -> Self {
        match r {
            RootFrame::None => Self::None,
            RootFrame::Comm => Self::Comm,
            RootFrame::Pid => Self::Pid,
        }
    }
}

#[derive(Args, Debug)]
pub struct ExportArgs {
    #[command(flatten)]
    pub select: Selection,
    #[command(flatten)]
    pub source: super::SourceArgs,
    #[arg(long, value_enum)]
    pub format: ExportFormat,
    /// Output file (default: stdout).
    #[arg(short, long)]
    pub output: Option<PathBuf>,
    /// collapsed: a process frame above each stack's root (comm, comm-pid or none).
    #[arg(long, value_enum, default_value_t = RootFrame::None)]
    pub root: RootFrame,
}
