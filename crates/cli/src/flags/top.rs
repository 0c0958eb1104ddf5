//! `loupe top`.

use super::{By, CgroupFlag, CommFlag, DbArg, EpochFlag, Format, ImageFlag, OutputFlag, PidFlag};
use clap::Args;

pub const TOP_HELP: &str = "Examples:\n  loupe top --by image\n  loupe top --by procedure --comm postgres --limit 30\n  loupe top --by line --image selftime --format json\n  loupe top --children\n  loupe top --callers c_work\n\n\
Percentages are of all samples of the event in the selected epochs and processes, including the [unknown] image.";

#[derive(Args, Debug)]
pub struct TopArgs {
    #[command(flatten)]
    pub db: DbArg,
    /// Group samples by image, procedure, source line or instruction address, or by a label of the processes'
    /// cgroups: label:unit (systemd unit), label:container (container id), label:pod (Kubernetes pod uid); with
    /// --source also by host or any shipped label:KEY.
    #[arg(long, default_value = "procedure", value_parser = parse_top_by, value_name = "BY")]
    pub by: TopBy,
    #[command(flatten)]
    pub source: super::SourceArgs,
    #[command(flatten)]
    pub epoch: EpochFlag,
    #[command(flatten)]
    pub pid: PidFlag,
    #[command(flatten)]
    pub comm: CommFlag,
    #[command(flatten)]
    pub image: ImageFlag,
    #[command(flatten)]
    pub cgroup: CgroupFlag,
    /// Events to show (default: every event in the database); the first one sorts.
    #[arg(short = 'e', long = "event")]
    pub events: Vec<String>,
    /// Show at most this many rows.
    #[arg(long, default_value_t = 40)]
    pub limit: usize,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    #[command(flatten)]
    pub output: OutputFlag,
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

/// `top --by`: the common groupings, a label (of the processes' cgroups locally, any shipped label in a fleet),
/// or the host (a fleet only).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TopBy {
    Plain(By),
    Host,
    Label(String),
}

fn parse_top_by(s: &str) -> Result<TopBy, String> {
    if s == "host" {
        return Ok(TopBy::Host);
    }
    if let Some(key) = s.strip_prefix("label:").filter(|k| !k.is_empty()) {
        return Ok(TopBy::Label(key.to_string()));
    }
    clap::ValueEnum::from_str(s, false)
        .map(TopBy::Plain)
        .map_err(|_| format!("expected image, procedure, line, instruction, host or label:KEY, got {s:?}"))
}
