//! `loupe completions` and `loupe man`: shell completions and man pages
//! generated from the one flag definition.

use clap::Args;
use std::path::PathBuf;

pub const COMPLETIONS_HELP: &str = "Examples:\n  loupe completions bash > /etc/bash_completion.d/loupe\n  \
loupe completions zsh > \"${fpath[1]}/_loupe\"\n  loupe completions fish > ~/.config/fish/completions/loupe.fish";

pub const MAN_HELP: &str = "Examples:\n  loupe man /usr/local/share/man/man1 && man loupe-top\n\n\
Writes loupe.1 and one page per command (loupe-top.1, loupe-data-profile.1, ...), from the same definitions as --help.";

#[derive(Args, Debug)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

#[derive(Args, Debug)]
pub struct ManArgs {
    /// Directory to write the pages into (created if missing).
    pub dir: PathBuf,
}
