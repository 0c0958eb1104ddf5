//! `loupe optimize probe`: exact relative counts of the blocks of a
//! program's hottest functions, from execute breakpoints armed in short
//! windows (`loupe-probe`), kept in DB/probes/BUILD.json and used by every
//! export of that build in place of the sample estimates of those blocks.

use crate::optimize::{image_profile, ProfileArgs};
use crate::procedure::symbolizer;
use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use loupe_optimize::blocks::Measured;
use loupe_probe::{ElfAddr, Group, Plan, Tally};
use std::collections::{BTreeMap, HashMap};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub const HELP: &str = "Examples:\n  loupe optimize probe ./lua -- ./lua bench.lua\n  \
loupe optimize probe --seconds 60 /usr/local/bin/lua\n\n\
Timer samples cannot count short blocks on an out-of-order core (a block that retires beside others may never be \
sampled, one that stalls draws samples out of proportion), and without a branch stack (LBR) nothing else counts \
them. The debug registers can: an execute breakpoint traps on every execution. Probing arms four at a time (a \
function's reference block and three others) on a thread running IMAGE for --window-us, reads the counts and \
moves on; their ratios are exact relative execution counts of that stretch of the run, and windows at random \
times average to the whole run's. Blocks are those of the --functions hottest functions of the profile already in \
the database (record first). Every armed execution traps (about 10 us in a VM), so the program's slowdown is \
about the duty cycle, window / period. Counts add up across runs in DB/probes/BUILD.json; `optimize export`, \
`run` and the manager then take the measured blocks' counts from there, scaled to the samples, and infer the \
rest of the function's counts by minimum-cost flow around them.";

#[derive(Args, Debug)]
pub struct ProbeArgs {
    #[command(flatten)]
    pub profile: ProfileArgs,
    /// How long to probe running processes of IMAGE (with a command: until it exits).
    #[arg(long, default_value_t = 30.0)]
    pub seconds: f64,
    /// Microseconds the breakpoints stay armed per window.
    #[arg(long, default_value_t = 1000)]
    pub window_us: u64,
    /// Mean milliseconds between windows (each drawn from 0.5 to 1.5 times it, so windows do not lock to a
    /// period of the program).
    #[arg(long, default_value_t = 50)]
    pub period_ms: u64,
    /// How many of the profile's hottest functions to probe.
    #[arg(long, default_value_t = 16)]
    pub functions: usize,
    /// The command to run and probe (after --); without one, running processes of IMAGE are probed.
    #[arg(last = true)]
    pub command: Vec<String>,
}

/// Where a build's probe counts are kept.
pub fn tally_path(db: &Path, bid: &str) -> PathBuf {
    db.join("probes").join(format!("{bid}.json"))
}

/// The build's probe counts, if any; a corrupt file is named and left out.
pub fn tally_of(db: &Path, bid: &str) -> Option<Tally> {
    match Tally::load(&tally_path(db, bid)) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("loupe: skipping corrupt probe counts {e}");
            None
        }
    }
}

/// Per function start, its measured blocks: those counted against the
/// reference inside `[start, start + size)` that ran most often.
pub fn measured_by_function(t: &Tally, functions: &[(u64, u64)]) -> HashMap<u64, Measured> {
    let by = t.by_reference();
    let mut out = HashMap::new();
    for &(start, size) in functions {
        let refs = by.range(ElfAddr(start)..ElfAddr(start + size));
        let best = refs.max_by_key(|(_, blocks)| blocks.values().map(|&(_, r)| r).sum::<u64>());
        if let Some((r, blocks)) = best {
            let mut counts: BTreeMap<u64, (u64, u64)> = blocks.iter().map(|(b, &c)| (b.0, c)).collect();
            let most = blocks.values().map(|&(_, rc)| rc).max().unwrap_or(0);
            counts.insert(r.0, (most, most));
            out.insert(start, Measured { counts });
        }
    }
    out
}

/// A thread running the image, and what its ELF addresses are offset by.
#[derive(Clone, Copy, Debug)]
struct Target {
    tid: u32,
    bias: i64,
}

/// Threads of the processes (all, or `only`) that map the file with inode `inode`.
fn targets(inode: u64, segments: &[(u64, u64, u64)], probe: ElfAddr, only: Option<u32>) -> Vec<Target> {
    let pids: Vec<u32> = match only {
        Some(p) => vec![p],
        None => std::fs::read_dir("/proc").map_or(vec![], |d| d.flatten().filter_map(|e| e.file_name().to_str()?.parse().ok()).collect()),
    };
    let mut out = Vec::new();
    for pid in pids {
        let Ok(maps) = std::fs::read_to_string(format!("/proc/{pid}/maps")) else { continue };
        let Some(bias) = loupe_probe::load_bias(&loupe_probe::parse_maps(&maps), inode, segments, probe) else { continue };
        let tids = std::fs::read_dir(format!("/proc/{pid}/task"))
            .map_or(vec![], |d| d.flatten().filter_map(|e| e.file_name().to_str()?.parse().ok()).collect());
        out.extend(tids.into_iter().map(|tid| Target { tid, bias }));
    }
    out
}

/// xorshift64*: the windows' random spacing.
struct Jitter(u64);

impl Jitter {
    fn next(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64
    }
}

pub fn probe(a: ProbeArgs) -> Result<u8> {
    let mut syms = symbolizer(&a.profile.db.db);
    let ip = image_profile(&a.profile, &mut syms).context("probing needs the image's profile to choose blocks: record it first")?;
    let mut plan = Plan::default();
    for f in ip.functions.iter().take(a.functions) {
        let Some(reference) = f.blocks.iter().max_by(|x, y| x.count.total_cmp(&y.count)) else { continue };
        let blocks: Vec<ElfAddr> = f.blocks.iter().map(|b| ElfAddr(f.start + b.offset)).collect();
        plan.add_function(ElfAddr(f.start + reference.offset), &blocks);
    }
    if plan.groups.is_empty() {
        bail!("no sampled function of {} to probe", a.profile.image.display());
    }
    let file = a.profile.file();
    let inode = std::fs::metadata(file).with_context(|| format!("cannot read {}", file.display()))?.ino();
    let segments = loupe_probe::segments(file).with_context(|| format!("cannot read the segments of {}", file.display()))?;
    let probe_at = plan.groups[0].reference;
    let mut child = match a.command.split_first() {
        Some((cmd, args)) => Some(std::process::Command::new(cmd).args(args).spawn().with_context(|| format!("cannot run {cmd}"))?),
        None => None,
    };
    let only = child.as_ref().map(|c| c.id());
    eprintln!(
        "loupe: probing {} blocks of {} functions of {} in {} groups: {} us windows every {} ms on average",
        plan.breakpoints(),
        a.functions.min(ip.functions.len()),
        a.profile.image.display(),
        plan.groups.len(),
        a.window_us,
        a.period_ms
    );
    let mut tally = Tally { build_id: ip.build_id.clone(), ..Default::default() };
    let (t0, mut jitter) = (Instant::now(), Jitter(t0_seed() | 1));
    let (mut next, mut turn, mut windows, mut failed) = (0usize, 0usize, 0u64, 0u64);
    let mut counted = vec![false; plan.groups.len()];
    let mut found: Vec<Target> = vec![];
    let mut scanned = Instant::now() - Duration::from_secs(10);
    loop {
        if let Some(c) = child.as_mut() {
            if c.try_wait()?.is_some() {
                break;
            }
        } else if t0.elapsed().as_secs_f64() >= a.seconds {
            break;
        }
        if scanned.elapsed() > Duration::from_secs(1) || found.is_empty() {
            found = targets(inode, &segments, probe_at, only);
            scanned = Instant::now();
        }
        if let Some(t) = found.get(turn % found.len().max(1)).copied() {
            let g = &plan.groups[next % plan.groups.len()];
            let addrs = g.addrs();
            let rt: Vec<_> = addrs.iter().map(|&va| loupe_probe::runtime(va, t.bias)).collect();
            let w0 = Instant::now();
            match Group::open(t.tid, &rt).and_then(|grp| grp.window(Duration::from_micros(a.window_us))) {
                Ok(counts) => {
                    tally.add_window(&addrs, &counts);
                    counted[next % plan.groups.len()] = true;
                    tally.armed_secs += w0.elapsed().as_secs_f64();
                    windows += 1;
                    next += 1;
                }
                // The thread ended, or its debug registers are taken (a debugger): look again.
                Err(_) => {
                    failed += 1;
                    found.clear();
                }
            }
            turn += 1;
        }
        std::thread::sleep(Duration::from_secs_f64(a.period_ms as f64 * 1e-3 * (0.5 + jitter.next())));
    }
    if let Some(mut c) = child {
        let st = c.wait()?;
        if !st.success() {
            eprintln!("loupe: the probed command exited with {st}");
        }
    }
    if windows == 0 {
        bail!("no window was counted: no thread running {} was found ({failed} failed attempts)", a.profile.image.display());
    }
    let path = tally_path(&a.profile.db.db, &ip.build_id);
    let mut all = tally_of(&a.profile.db.db, &ip.build_id).unwrap_or_else(|| Tally { build_id: ip.build_id.clone(), ..Default::default() });
    all.merge(&tally);
    all.save(&path).map_err(|e| anyhow!("cannot write {}: {e}", path.display()))?;
    let traps: u64 = tally.pairs.iter().map(|p| p.count).sum();
    eprintln!(
        "loupe: {windows} windows over {:.1} s ({} of {} groups counted at least once, {traps} block executions counted), armed {:.1}% of the time; counts in {}",
        t0.elapsed().as_secs_f64(),
        counted.iter().filter(|&&c| c).count(),
        plan.groups.len(),
        100.0 * tally.armed_secs / t0.elapsed().as_secs_f64(),
        path.display()
    );
    Ok(0)
}

fn t0_seed() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64)
}
