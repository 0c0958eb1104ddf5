//! `loupe data`: DProf's views of where memory time goes, by data type and
//! field rather than by code.

use crate::flags::{DbArg, Format};
use anyhow::{bail, Result};
use clap::{Args, Subcommand};

#[derive(Args, Debug)]
pub struct DataArgs {
    #[command(subcommand)]
    pub cmd: DataCommand,
}

#[derive(Subcommand, Debug)]
pub enum DataCommand {
    /// Data types and fields sorted by sampled memory cost (DProf's data profile).
    #[command(after_help = "Examples:\n  loupe record --data --db d.db -- ./my-program\n  loupe data profile --db d.db\n  \
loupe data profile --db d.db --format json")]
    Profile(ViewArgs),
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
}

pub fn run(a: DataArgs) -> Result<u8> {
    match a.cmd {
        DataCommand::Profile(v) => profile(v),
    }
}

fn profile(v: ViewArgs) -> Result<u8> {
    bail!("{}: no access samples (not implemented yet; record with `loupe record --data`)", v.db.db.display())
}
