//! Progress on stderr for commands that can run for more than a moment
//! (top, diff and stats over big databases, calc of a large procedure,
//! annotate of a big one, export, `optimize run`, data profiles and
//! histories, locks): a spinner naming the stage and the time spent, or a
//! bar where the work is counted. Drawn only when stderr is a terminal and
//! the command is not answering `loupe serve`, so pipes, files, JSON
//! consumers and logs never see it; `LOUPE_PROGRESS=0` turns it off in a
//! terminal too. Never drawn while a profiled program runs in the
//! foreground: its output is its own.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;
use std::time::Duration;

/// A spinner or bar, cleared when dropped.
pub struct Progress(ProgressBar);

impl Progress {
    /// A spinner showing `what` and the time since it started.
    pub fn spinner(what: &str) -> Progress {
        let bar = ProgressBar::with_draw_target(None, target());
        bar.set_style(ProgressStyle::with_template("{spinner} {msg} ({elapsed})").expect("a valid template"));
        bar.set_message(what.to_string());
        if !bar.is_hidden() {
            bar.enable_steady_tick(Duration::from_millis(120));
        }
        Progress(bar)
    }

    /// A bar of `len` units of `what` done.
    pub fn bar(len: u64, what: &str) -> Progress {
        let bar = ProgressBar::with_draw_target(Some(len), target());
        bar.set_style(ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} ({elapsed}, {eta} left)").expect("a valid template"));
        bar.set_message(what.to_string());
        Progress(bar)
    }

    /// Names the stage the work is in now.
    pub fn stage(&self, what: &str) {
        self.0.set_message(what.to_string());
    }

    /// A line on stderr above the spinner (as `eprintln!` when none is drawn).
    pub fn println(&self, line: &str) {
        if self.0.is_hidden() {
            eprintln!("{line}");
        } else {
            self.0.println(line);
        }
    }

    pub fn inc(&self, n: u64) {
        self.0.inc(n);
    }

    /// Whether anything is drawn.
    #[cfg(test)]
    pub fn is_shown(&self) -> bool {
        !self.0.is_hidden()
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.0.finish_and_clear();
    }
}

fn target() -> ProgressDrawTarget {
    if shown() {
        ProgressDrawTarget::stderr()
    } else {
        ProgressDrawTarget::hidden()
    }
}

fn shown() -> bool {
    std::env::var_os("LOUPE_PROGRESS").is_none_or(|v| v != "0") && !crate::output::serving() && std::io::stderr().is_terminal()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_is_drawn_while_answering_the_server() {
        // Checks that a command run for `loupe serve` (compact JSON on its thread) never draws progress, terminal or not.
        std::thread::spawn(|| {
            crate::output::set_serving(true);
            assert!(!Progress::spinner("x").is_shown());
            assert!(!Progress::bar(10, "x").is_shown());
        })
        .join()
        .unwrap();
    }
}
