//! The `loupe` binary: flags, commands and output formatting.
// Doc comments here are clap's help texts, printed as written: `<spec>` is a placeholder, not HTML.
#![allow(rustdoc::invalid_html_tags)]

mod annotate;
mod calc;
mod cgroup;
mod collect;
mod config;
mod data;
mod diff;
mod flags;
mod fleet;
mod locks;
mod machine;
mod objects;
mod ops;
mod optimize;
mod optimize_bat;
mod optimize_lbr;
mod optimize_manage;
mod optimize_probe;
mod procedure;
mod stacks;
mod symbols;
mod top;
mod trace;
mod wall;

use clap::Parser;
use flags::{Cli, Command};
use std::io::Write;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args = match config::expand(std::env::args_os().collect()) {
        Ok(args) => args,
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "loupe: {e}");
            return ExitCode::from(2);
        }
    };
    if let Some(text) = config::print_daemon_config(&args) {
        print!("{text}");
        return ExitCode::SUCCESS;
    }
    let cli = Cli::parse_from(args);
    symbols::set_debug_dirs(cli.debuginfo);
    let result = match cli.command {
        Command::Record(a) => collect::record(a),
        Command::Daemon(a) => collect::daemon(a),
        Command::Flush(a) => collect::flush(a),
        Command::Epoch(a) => collect::epoch(a),
        Command::Epochs(a) => collect::epochs(a),
        Command::Top(a) => top::run(a),
        Command::Events(a) => collect::events(a),
        Command::Calc(a) => calc::run(a),
        Command::Annotate(a) => annotate::run(a),
        Command::Diff(a) => diff::diff(a),
        Command::Stats(a) => diff::stats(a),
        Command::Locks(a) => locks::run(a),
        Command::Flame(a) => stacks::flame(a),
        Command::Export(a) => stacks::export(a),
        Command::Trace(a) => trace::run(a),
        Command::Optimize(a) => optimize::run(a),
        Command::Data(a) => data::run(a),
        Command::Fleet(a) => fleet::run(a),
        Command::Wall(a) => wall::run(a),
        Command::Completions(a) => ops::completions(a),
        Command::Man(a) => ops::man(a),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            // The whole chain on one line: "what failed: why: underlying cause".
            let _ = writeln!(std::io::stderr(), "loupe: {}", chain(&e));
            ExitCode::from(1)
        }
    }
}

fn chain(e: &anyhow::Error) -> String {
    e.chain().map(|c| c.to_string()).collect::<Vec<_>>().join(": ")
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| c.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe))
}
