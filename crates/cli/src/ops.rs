//! `loupe completions` and `loupe man`: generated from the clap definitions
//! in `flags`, so they never drift from `--help`.

use crate::flags::{Cli, CompletionsArgs, ManArgs};
use anyhow::{Context, Result};
use clap::CommandFactory;
use std::path::Path;

pub fn completions(a: CompletionsArgs) -> Result<u8> {
    let mut cmd = Cli::command();
    clap_complete::generate(a.shell, &mut cmd, "loupe", &mut std::io::stdout().lock());
    Ok(0)
}

pub fn man(a: ManArgs) -> Result<u8> {
    std::fs::create_dir_all(&a.dir).with_context(|| format!("creating {}", a.dir.display()))?;
    let mut cmd = Cli::command();
    cmd.build();
    let written = write_pages(&cmd, "loupe", &a.dir)?;
    eprintln!("loupe: wrote {written} man pages into {}", a.dir.display());
    Ok(0)
}

/// The page of `cmd` as `name.1`, then one per subcommand (`name-sub.1`), depth first.
fn write_pages(cmd: &clap::Command, name: &str, dir: &Path) -> Result<usize> {
    let mut bytes = Vec::new();
    clap_mangen::Man::new(cmd.clone()).title(name.to_uppercase()).render(&mut bytes)?;
    let path = dir.join(format!("{name}.1"));
    std::fs::write(&path, bytes).with_context(|| format!("writing {}", path.display()))?;
    let mut written = 1;
    for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
        written += write_pages(sub, &format!("{name}-{}", sub.get_name()), dir)?;
    }
    Ok(written)
}
