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

/// The machine model checked against this CPU at start (issue 30): loops
/// whose cycles per iteration are timed here, beside the model's figure
/// for the same instructions. calc states the error rather than correcting
/// by it: two loops do not say how a third block errs.
pub struct ModelCheck {
    /// (loop, modelled cycles per iteration, timed cycles per iteration).
    pub loops: Vec<(&'static str, f64, f64)>,
}

impl ModelCheck {
    /// Mean relative error of the model, modelled / timed - 1.
    pub fn error(&self) -> f64 {
        let n = self.loops.len().max(1) as f64;
        self.loops.iter().map(|(_, m, t)| m / t - 1.0).sum::<f64>() / n
    }

    /// One line: each loop's modelled and timed cycles and the mean error.
    pub fn describe(&self) -> String {
        let each: Vec<String> = self.loops.iter().map(|(n, m, t)| format!("{n} {m:.2} modelled / {t:.2} timed")).collect();
        format!("{} cycles per iteration; mean error {:+.0}%", each.join(", "), 100.0 * self.error())
    }
}

/// An xorshift step (a latency chain: mov, shift, xor, three times) and
/// eight independent adds (throughput bound), as the model reads them and
/// as [`timed_cycles`] runs them.
const XORSHIFT: [&str; 11] = [
    "movq %rax, %rcx",
    "shlq $13, %rcx",
    "xorq %rcx, %rax",
    "movq %rax, %rcx",
    "shrq $7, %rcx",
    "xorq %rcx, %rax",
    "movq %rax, %rcx",
    "shlq $17, %rcx",
    "xorq %rcx, %rax",
    "decq %rdx",
    "jne 0x0",
];
const ADDS: [&str; 10] = [
    "addq $1, %rax",
    "addq $1, %rcx",
    "addq $1, %rsi",
    "addq $1, %rdi",
    "addq $1, %r8",
    "addq $1, %r9",
    "addq $1, %r10",
    "addq $1, %r11",
    "decq %rdx",
    "jne 0x0",
];

/// Times both loops at `ghz` and schedules them on `model`.
pub fn check_model(model: &mut dyn MachineModel, ghz: f64) -> Result<ModelCheck> {
    let blocks: Vec<Vec<String>> = [&XORSHIFT[..], &ADDS[..]].iter().map(|b| b.iter().map(|s| s.to_string()).collect()).collect();
    let m = model.schedule(&blocks).map_err(|e| anyhow::anyhow!("checking the machine model: {e}"))?;
    let modelled = |k: usize| m.get(k).map_or(0.0, |v| v.iter().sum::<f64>());
    Ok(ModelCheck { loops: vec![("xorshift", modelled(0), timed_cycles(xorshift, ghz)), ("8 adds", modelled(1), timed_cycles(adds, ghz))] })
}

/// Cycles per iteration of `run`, best of 10 runs of 100,000 iterations in this thread's CPU time.
fn timed_cycles(run: fn(u64), ghz: f64) -> f64 {
    let iters = 100_000u64;
    let best = (0..10)
        .map(|_| {
            let t = loupe_perf::thread_cpu_ns();
            run(iters);
            loupe_perf::thread_cpu_ns() - t
        })
        .min()
        .unwrap_or(0);
    best as f64 * ghz / iters as f64
}

#[cfg(target_arch = "x86_64")]
fn xorshift(iters: u64) {
    let (mut x, mut n) = (0x9e37_79b9_7f4a_7c15u64, iters);
    // SAFETY: register-only arithmetic and a local loop; no memory, no stack.
    unsafe {
        std::arch::asm!(
            "2:",
            "mov {t}, {x}", "shl {t}, 13", "xor {x}, {t}",
            "mov {t}, {x}", "shr {t}, 7", "xor {x}, {t}",
            "mov {t}, {x}", "shl {t}, 17", "xor {x}, {t}",
            "dec {n}", "jnz 2b",
            x = inout(reg) x, n = inout(reg) n, t = out(reg) _,
            options(nomem, nostack),
        );
    }
    std::hint::black_box((x, n));
}

#[cfg(target_arch = "x86_64")]
fn adds(iters: u64) {
    let mut n = iters;
    let mut r = [0u64; 8];
    // SAFETY: register-only arithmetic and a local loop; no memory, no stack.
    unsafe {
        std::arch::asm!(
            "2:",
            "add {a}, 1", "add {b}, 1", "add {c}, 1", "add {d}, 1",
            "add {e}, 1", "add {f}, 1", "add {g}, 1", "add {h}, 1",
            "dec {n}", "jnz 2b",
            a = inout(reg) r[0], b = inout(reg) r[1], c = inout(reg) r[2], d = inout(reg) r[3],
            e = inout(reg) r[4], f = inout(reg) r[5], g = inout(reg) r[6], h = inout(reg) r[7],
            n = inout(reg) n,
            options(nomem, nostack),
        );
    }
    std::hint::black_box((r, n));
}

#[cfg(not(target_arch = "x86_64"))]
fn xorshift(_: u64) {}

#[cfg(not(target_arch = "x86_64"))]
fn adds(_: u64) {}
