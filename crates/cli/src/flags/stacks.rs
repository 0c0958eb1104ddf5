//! `loupe flame` and `loupe export`.

use super::Selection;
use clap::{Args, ValueEnum};
use std::path::PathBuf;

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlameFormat {
    Svg,
    Html,
}

#[derive(Args, Debug)]
pub struct FlameArgs {
    #[command(flatten)]
    pub select: Selection,
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
    pub select: Selection,
    #[arg(long, value_enum)]
    pub format: ExportFormat,
    /// Output file (default: stdout).
    #[arg(short, long)]
    pub output: Option<PathBuf>,
}
