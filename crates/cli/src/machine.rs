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

    fn run(&self, input: &str) -> Result<(bool, String, String)> {
        let mut child = Command::new(&self.program)
            .args([format!("-mcpu={}", self.mcpu), format!("-iterations={}", mca::ITERATIONS)])
            .args([format!("-timeline-max-iterations={}", mca::ITERATIONS), "-timeline-max-cycles=0".into()])
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

impl MachineModel for LlvmMca {
    /// Lines llvm-mca cannot assemble (rare AT&T spellings) are scheduled
    /// as `nop` and the run repeated.
    fn schedule(&mut self, blocks: &[Vec<String>]) -> Result<Vec<Vec<f64>>, String> {
        let (text, _) = mca::input(blocks);
        let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
        let sizes: Vec<usize> = blocks.iter().map(Vec::len).collect();
        for _ in 0..64 {
            let (ok, out, err) = self.run(&(lines.join("\n") + "\n")).map_err(|e| format!("{e:#}"))?;
            if ok {
                return mca::parse_timeline(&out, &sizes);
            }
            let bad: Vec<usize> = err
                .lines()
                .filter(|l| l.contains("error"))
                .filter_map(|l| l.strip_prefix("<stdin>:")?.split(':').next()?.parse::<usize>().ok())
                .collect();
            if bad.is_empty() {
                return Err(format!("{} failed: {}", self.program, err.lines().next().unwrap_or("")));
            }
            for l in bad {
                if let Some(x) = lines.get_mut(l - 1) {
                    *x = "nop".into();
                }
            }
        }
        Err(format!("{} kept rejecting the input", self.program))
    }

    fn describe(&self) -> String {
        format!("{} ({}), -mcpu={}", self.program, self.version, self.mcpu)
    }
}

/// Core clock in GHz, measured: a chain of dependent one-cycle adds runs
/// at one add per cycle on every x86-64 core. Timed in this thread's CPU
/// time, the clock `cpu-clock` samples count, so other busy processes do
/// not slow it; best of twenty ~5 ms runs. (The median of 41 runs was
/// tried: on the shared, loaded VM single runs read up to 4.4 GHz against a
/// median of 3.6, but on the quiet machine the median, 3.55, made the divide
/// chain's counts 10-20% low: the workload ran at the best run's clock.)
pub fn measure_ghz() -> f64 {
    let mut best = 0.0f64;
    for _ in 0..20 {
        let iters: u64 = 200_000;
        let t = thread_cpu_ns();
        add_chain(iters);
        let ns = (thread_cpu_ns() - t) as f64;
        if ns > 0.0 {
            best = best.max(iters as f64 * 100.0 / ns);
        }
    }
    best
}

fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec for the call's duration.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

#[cfg(target_arch = "x86_64")]
fn add_chain(iters: u64) {
    let mut x = 0u64;
    let mut n = iters;
    // SAFETY: register-only arithmetic and a local loop; no memory, no stack.
    unsafe {
        std::arch::asm!(
            "2:",
            ".rept 100",
            "add {x}, 1",
            ".endr",
            "dec {n}",
            "jnz 2b",
            x = inout(reg) x,
            n = inout(reg) n,
            options(nomem, nostack),
        );
    }
    std::hint::black_box((x, n));
}

#[cfg(not(target_arch = "x86_64"))]
fn add_chain(_: u64) {
    unimplemented!("loupe calc models x86-64 only")
}
