//! The machine model behind `loupe calc`: llvm-mca for the host CPU, and
//! the clock rate that converts a clock event's period to cycles.

use anyhow::{bail, Context, Result};
use loupe_calc::mca::{self, MachineModel};
use std::io::Write;
use std::process::{Command, Stdio};

pub struct LlvmMca {
    program: String,
    mcpu: String,
    version: String,
}

impl LlvmMca {
    /// Finds llvm-mca (`llvm-mca-19` first) and resolves `-mcpu=native` to
    /// the CPU name LLVM detects on this host.
    pub fn find(program: Option<&str>, mcpu: &str) -> Result<LlvmMca> {
        let candidates: Vec<&str> = match program {
            Some(p) => vec![p],
            None => vec!["llvm-mca-19", "llvm-mca"],
        };
        for p in candidates {
            let Ok(out) = Command::new(p).arg("--version").output() else { continue };
            let text = String::from_utf8_lossy(&out.stdout).to_string();
            let version = text.lines().find(|l| l.contains("LLVM version")).unwrap_or("").trim().to_string();
            let host = text.lines().find_map(|l| l.trim().strip_prefix("Host CPU:")).map(|s| s.trim().to_string());
            let mcpu = match (mcpu, host) {
                ("native", Some(h)) if h != "(unknown)" => h,
                ("native", _) => bail!("{p} does not know this CPU; pass --mcpu (e.g. znver4, skylake)"),
                (m, _) => m.to_string(),
            };
            return Ok(LlvmMca { program: p.to_string(), mcpu, version });
        }
        bail!("llvm-mca not found (install Debian's llvm-19, or pass --llvm-mca PATH)")
    }

    fn run(&self, input: &str, iters: usize) -> Result<(bool, String, String)> {
        let mut child = Command::new(&self.program)
            .args([format!("-mcpu={}", self.mcpu), format!("-iterations={iters}")])
            .args([format!("-timeline-max-iterations={iters}"), "-timeline-max-cycles=0".into()])
            .args(["-all-views=false", "-timeline", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("running {}", self.program))?;
        let mut stdin = child.stdin.take().expect("piped");
        let text = input.to_string();
        let writer = std::thread::spawn(move || stdin.write_all(text.as_bytes()));
        let out = child.wait_with_output()?;
        let _ = writer.join();
        Ok((out.status.success(), String::from_utf8_lossy(&out.stdout).into(), String::from_utf8_lossy(&out.stderr).into()))
    }
}

impl LlvmMca {
    /// One llvm-mca run over `blocks` simulated for `iters` iterations.
    /// Lines llvm-mca cannot assemble (rare AT&T spellings) are scheduled
    /// as `nop` and the run repeated.
    fn schedule_runs(&self, blocks: &[Vec<String>], iters: usize) -> loupe_calc::Result<Vec<Vec<f64>>> {
        let model_error = |m: String| loupe_calc::Error::new(loupe_calc::ErrorKind::Model, m);
        let (text, _) = mca::input(blocks);
        let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
        let sizes: Vec<usize> = blocks.iter().map(Vec::len).collect();
        for _ in 0..64 {
            let (ok, out, err) = self.run(&(lines.join("\n") + "\n"), iters).map_err(|e| model_error(format!("{e:#}")))?;
            if ok {
                return mca::parse_timeline(&out, &sizes, iters);
            }
            let bad: Vec<usize> = err
                .lines()
                .filter(|l| l.contains("error"))
                .filter_map(|l| l.strip_prefix("<stdin>:")?.split(':').next()?.parse::<usize>().ok())
                .collect();
            if bad.is_empty() {
                return Err(model_error(format!("{} failed: {}", self.program, err.lines().next().unwrap_or(""))));
            }
            for l in bad {
                if let Some(x) = lines.get_mut(l - 1) {
                    *x = "nop".into();
                }
            }
        }
        Err(model_error(format!("{} kept rejecting the input", self.program)))
    }
}

impl MachineModel for LlvmMca {
    /// Blocks are grouped by [`mca::iterations`] (one llvm-mca run per
    /// count), and the groups split into one run per CPU, run at once.
    fn schedule(&mut self, blocks: &[Vec<String>]) -> loupe_calc::Result<Vec<Vec<f64>>> {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let mut jobs: Vec<(usize, Vec<usize>)> = Vec::new();
        for iters in [mca::ITERATIONS, mca::LONG_ITERATIONS] {
            let group: Vec<usize> = (0..blocks.len()).filter(|&b| mca::iterations(blocks[b].len()) == iters).collect();
            let total: usize = group.iter().map(|&b| blocks[b].len()).sum();
            let share = total.div_ceil(cpus).max(1);
            let mut job = Vec::new();
            let mut size = 0;
            for b in group {
                job.push(b);
                size += blocks[b].len();
                if size >= share {
                    jobs.push((iters, std::mem::take(&mut job)));
                    size = 0;
                }
            }
            if !job.is_empty() {
                jobs.push((iters, job));
            }
        }
        let this = &*self;
        let results: Vec<loupe_calc::Result<Vec<Vec<f64>>>> = std::thread::scope(|s| {
            let handles: Vec<_> = jobs
                .iter()
                .map(|(iters, job)| {
                    let part: Vec<Vec<String>> = job.iter().map(|&b| blocks[b].clone()).collect();
                    s.spawn(move || this.schedule_runs(&part, *iters))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|_| Err(loupe_calc::Error::new(loupe_calc::ErrorKind::Model, "llvm-mca thread panicked"))))
                .collect()
        });
        let mut out = vec![Vec::new(); blocks.len()];
        for ((_, job), r) in jobs.iter().zip(results) {
            for (&b, m) in job.iter().zip(r?) {
                out[b] = m;
            }
        }
        Ok(out)
    }

    fn describe(&self) -> String {
        format!("{} ({}), -mcpu={}", self.program, self.version, self.mcpu)
    }
}

pub use loupe_collector::clock::measure_ghz;
