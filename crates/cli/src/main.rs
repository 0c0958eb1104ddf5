//! The `loupe` binary: flags, commands and output formatting.
// Doc comments here are clap's help texts, printed as written: `<spec>` is a placeholder, not HTML.
#![allow(rustdoc::invalid_html_tags)]

mod agents;
mod annotate;
mod calc;
mod cgroup;
mod collect;
mod config;
mod count;
mod data;
mod diff;
mod epochs;
mod flags;
mod fleet;
mod locks;
mod machine;
mod objects;
mod openapi;
mod openapi_schemas;
#[cfg(test)]
mod openapi_ts;
mod ops;
mod optimize;
mod optimize_bat;
mod optimize_lbr;
mod optimize_manage;
mod optimize_probe;
mod output;
mod procedure;
mod progress;
mod serve;
mod stack_cache;
mod stacks;
mod symbol_cache;
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
    let result = match output::path_of(&cli.command) {
        Some(path) => {
            let mut file = output::LazyFile::new(path);
            run(cli.command, &mut file).and_then(|code| file.finish().map(|()| code))
        }
        // Not locked for the whole run: threads of some commands (trace record --live) print too.
        None => run(cli.command, &mut std::io::stdout()),
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

/// Runs one command, its result written to `out` (progress and warnings go
/// to stderr); `loupe serve` runs the API's commands through here too.
pub(crate) fn run(command: Command, out: &mut dyn Write) -> anyhow::Result<u8> {
    match command {
        Command::Record(a) => collect::record(a),
        Command::Daemon(a) => collect::daemon(a),
        Command::Flush(a) => collect::flush(a),
        Command::Epoch(a) => collect::epoch(a),
        Command::Epochs(a) => collect::epochs(a, out),
        Command::Top(a) => top::run(a, out),
        Command::Events(a) => collect::events(a, out),
        Command::Calc(a) => calc::run(a, out),
        Command::Annotate(a) => annotate::run(a, out),
        Command::Diff(a) => diff::diff(a, out),
        Command::Stats(a) => diff::stats(a, out),
        Command::Locks(a) => locks::run(a, out),
        Command::Flame(a) => stacks::flame(a, out),
        Command::Export(a) => stacks::export(a, out),
        Command::Trace(a) => trace::run(a, out),
        Command::Optimize(a) => optimize::run(a, out),
        Command::Data(a) => data::run(a, out),
        Command::Serve(a) => serve::run(a),
        Command::Fleet(a) => fleet::run(a),
        Command::Ingest(a) => fleet::ingest(a),
        Command::Wall(a) => wall::run(a, out),
        Command::Agents(a) => agents::run(a, out),
        Command::Completions(a) => ops::completions(a),
        Command::Man(a) => ops::man(a),
    }
}

fn chain(e: &anyhow::Error) -> String {
    e.chain().map(|c| c.to_string()).collect::<Vec<_>>().join(": ")
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| c.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe))
}
