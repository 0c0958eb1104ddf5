//! `loupe top`.

use super::{By, CommFlag, DbArg, EpochFlag, Format, ImageFlag, OutputFlag, PidFlag};
use clap::Args;

pub const TOP_HELP: &str = "Examples:\n  loupe top --by image\n  loupe top --by procedure --comm postgres --limit 30\n  loupe top --by line --image selftime --format json\n  loupe top --children\n  loupe top --callers c_work\n\n\
Percentages are of all samples of the event in the selected epochs and processes, including the [unknown] image.";

#[derive(Args, Debug)]
pub struct TopArgs {
    #[command(flatten)]
    pub db: DbArg,
    /// Group samples by image, procedure, source line or instruction address.
    #[arg(long, value_enum, default_value_t = By::Procedure)]
    pub by: By,
    #[command(flatten)]
    pub epoch: EpochFlag,
    #[command(flatten)]
    pub pid: PidFlag,
    #[command(flatten)]
    pub comm: CommFlag,
    #[command(flatten)]
    pub image: ImageFlag,
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
