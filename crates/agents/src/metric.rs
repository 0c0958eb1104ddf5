//! The metric a trial measures, as the configuration names it. Every form is
//! a cumulative amount read at the start and end of a window:
//!
//! * `counter:PATH` — the process's own count of work done, a decimal number
//!   it rewrites in a file (`{pid}` in PATH is the process id). Higher
//!   rates are better.
//! * `command:CMD` — a shell command (`LOUPE_PID` in its environment) that
//!   prints such a count. Higher rates are better.
//! * `cpu-per-work:PATH` — the process's CPU time per unit of the counter in
//!   PATH. Lower is better. Unlike a rate per second, it does not move with
//!   the CPU share a loaded machine leaves the process.

use crate::error::{Error, ErrorKind, Result};
use crate::target::Target;

#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub enum Metric {
    Counter(String),
    Command(String),
    CpuPerWork(String),
}

/// One reading: the work count, and the process's CPU seconds when needed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Reading {
    pub work: f64,
    pub cpu: f64,
    pub at: std::time::Instant,
}

impl Metric {
    pub fn parse(s: &str) -> Result<Metric> {
        match s.split_once(':') {
            Some(("counter", p)) if !p.is_empty() => Ok(Metric::Counter(p.into())),
            Some(("command", c)) if !c.is_empty() => Ok(Metric::Command(c.into())),
            Some(("cpu-per-work", p)) if !p.is_empty() => Ok(Metric::CpuPerWork(p.into())),
            _ => Err(Error::new(
                ErrorKind::Config,
                format!("metric `{s}`: expected counter:PATH, command:CMD or cpu-per-work:PATH ({{pid}} in PATH is the process id)"),
            )),
        }
    }

    /// Whether a larger value of [`Metric::value`] is better.
    pub fn higher_is_better(&self) -> bool {
        !matches!(self, Metric::CpuPerWork(_))
    }

    pub fn describe(&self) -> String {
        match self {
            Metric::Counter(p) => format!("work per second from the counter file {p}"),
            Metric::Command(c) => format!("work per second from the count `{c}` prints"),
            Metric::CpuPerWork(p) => format!("CPU seconds per unit of work (the process's CPU clock, work from {p})"),
        }
    }

    pub fn read(&self, t: &Target) -> Result<Reading> {
        let at = std::time::Instant::now();
        let work = match self {
            Metric::Counter(p) | Metric::CpuPerWork(p) => read_counter(&p.replace("{pid}", &t.pid.to_string()))?,
            Metric::Command(c) => run_command(c, t.pid)?,
        };
        let cpu = if matches!(self, Metric::CpuPerWork(_)) { t.cpu_seconds()? } else { 0.0 };
        Ok(Reading { work, cpu, at })
    }

    /// The window's value between two readings (NaN when no work was done
    /// and the metric is per unit of work).
    pub fn value(&self, a: &Reading, b: &Reading) -> f64 {
        let work = b.work - a.work;
        match self {
            Metric::CpuPerWork(_) => (b.cpu - a.cpu) / work,
            _ => work / b.at.duration_since(a.at).as_secs_f64().max(1e-9),
        }
    }
}

fn parse_count(text: &str) -> Option<f64> {
    text.split_whitespace().next()?.parse::<f64>().ok().filter(|v| v.is_finite())
}

/// A counter file; a read that races the writer's rewrite is retried.
fn read_counter(path: &str) -> Result<f64> {
    let mut last = String::new();
    for _ in 0..5 {
        match std::fs::read_to_string(path) {
            Ok(t) => match parse_count(&t) {
                Some(v) => return Ok(v),
                None => last = format!("`{}` is not a number", t.trim()),
            },
            Err(e) => last = e.to_string(),
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    Err(Error::new(ErrorKind::Metric, format!("counter {path}: {last}")))
}

fn run_command(cmd: &str, pid: u32) -> Result<f64> {
    let out = std::process::Command::new("/bin/sh")
        .args(["-c", cmd])
        .env("LOUPE_PID", pid.to_string())
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|e| Error::new(ErrorKind::Metric, format!("metric command `{cmd}`: {e}")))?;
    let text = String::from_utf8_lossy(&out.stdout);
    match (out.status.success(), parse_count(&text)) {
        (true, Some(v)) => Ok(v),
        (false, _) => Err(Error::new(ErrorKind::Metric, format!("metric command `{cmd}` failed: {}", out.status))),
        (true, None) => Err(Error::new(ErrorKind::Metric, format!("metric command `{cmd}` printed `{}`, not a number", text.trim()))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    // Each form parses; a bare path or an unknown kind is refused with the forms named.
    #[test]
    fn parses_forms() {
        assert_eq!(Metric::parse("counter:/run/x/{pid}").unwrap(), Metric::Counter("/run/x/{pid}".into()));
        assert_eq!(Metric::parse("command:cat /x").unwrap(), Metric::Command("cat /x".into()));
        assert!(!Metric::parse("cpu-per-work:/x").unwrap().higher_is_better());
        let e = Metric::parse("/x").unwrap_err();
        assert!(e.to_string().contains("counter:PATH"), "{e}");
    }

    // A rate is work over wall time; CPU per work is CPU delta over work delta.
    #[test]
    fn window_values() {
        let t0 = Instant::now();
        let a = Reading { work: 100.0, cpu: 1.0, at: t0 };
        let b = Reading { work: 300.0, cpu: 2.0, at: t0 + Duration::from_secs(2) };
        assert_eq!(Metric::Counter("p".into()).value(&a, &b), 100.0);
        assert_eq!(Metric::CpuPerWork("p".into()).value(&a, &b), 1.0 / 200.0);
    }

    // The counter the workloads write (right-aligned, newline) and a command's output read back.
    #[test]
    fn reads_counter_and_command() {
        let d = tempfile::tempdir().unwrap();
        let me = Target::read(std::process::id()).unwrap();
        std::fs::write(d.path().join(format!("{}.count", me.pid)), format!("{:>20}\n", 1234)).unwrap();
        let m = Metric::parse(&format!("counter:{}/{{pid}}.count", d.path().display())).unwrap();
        assert_eq!(m.read(&me).unwrap().work, 1234.0);
        let c = Metric::parse("command:echo $((LOUPE_PID * 2))").unwrap();
        assert_eq!(c.read(&me).unwrap().work, 2.0 * me.pid as f64);
        let missing = Metric::parse("counter:/nonexistent/loupe-count").unwrap().read(&me).unwrap_err();
        assert_eq!(missing.kind(), ErrorKind::Metric);
    }
}
