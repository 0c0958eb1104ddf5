//! `loupe optimize probe`: exact relative counts of the blocks of a
//! program's hottest functions, from execute breakpoints armed in short
//! windows (`loupe-probe`), kept in DB/probes/BUILD.json and used by every
//! export of that build in place of the sample estimates of those blocks.

use crate::flags::optimize::{ProbeArgs, ProfileArgs};
use crate::optimize::image_profile;
use crate::procedure::symbolizer;
use anyhow::{anyhow, bail, Context, Result};
use loupe_optimize::probing::Schedule;
use loupe_probe::{ElfAddr, Group, Run, Sampler, Tally};
use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Where a build's probe counts are kept.
pub fn tally_path(db: &Path, bid: &str) -> PathBuf {
    loupe_store::layout::probe_tally(db, bid)
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

/// A thread running the image, and what its ELF addresses are offset by.
#[derive(Clone, Copy, Debug)]
struct Target {
    tid: u32,
    bias: i64,
}

/// The parent of process `pid`, from /proc/PID/stat (after the command name, which may hold spaces).
fn parent(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.split_whitespace().nth(1)?.parse().ok()
}

/// Whether `pid` is `root` or one of its descendants.
fn descends_from(mut pid: u32, root: u32) -> bool {
    for _ in 0..64 {
        if pid == root {
            return true;
        }
        match parent(pid) {
            Some(p) if p > 1 => pid = p,
            _ => return false,
        }
    }
    false
}

/// The numbered entries of a /proc directory (processes, or a process's threads).
fn ids(dir: &str) -> Vec<u32> {
    std::fs::read_dir(dir).map_or(vec![], |d| d.flatten().filter_map(|e| e.file_name().to_str()?.parse().ok()).collect())
}

/// Threads of the processes (all, or `root` and its descendants) that map the file with inode `inode`.
fn targets(inode: u64, segments: &[(u64, u64, u64)], probe: ElfAddr, root: Option<u32>) -> Vec<Target> {
    let mut out = Vec::new();
    for pid in ids("/proc").into_iter().filter(|&p| root.is_none_or(|r| descends_from(p, r))) {
        let Ok(maps) = std::fs::read_to_string(format!("/proc/{pid}/maps")) else { continue };
        let Some(bias) = loupe_probe::load_bias(&loupe_model::maps::parse_maps(&maps), inode, segments, probe) else { continue };
        out.extend(ids(&format!("/proc/{pid}/task")).into_iter().map(|tid| Target { tid, bias }));
    }
    out
}

/// Files the samplers' instruction pointers under the probed block holding them.
fn drain(
    samplers: &mut HashMap<u32, (Sampler, i64)>,
    sched: &Schedule,
    into: &mut HashMap<u64, u64>,
    ips: &mut Vec<loupe_probe::RuntimeAddr>,
) {
    for (s, bias) in samplers.values_mut() {
        ips.clear();
        s.drain(ips);
        sched.file_samples(ips.iter().map(|ip| (ip.0 as i64 - *bias) as u64), into);
    }
}

pub fn probe(a: ProbeArgs) -> Result<u8> {
    eprintln!("loupe: {}", run_probe(a)?);
    Ok(0)
}

/// `seconds` of probing every running process of `image` (the build at the
/// path, its samples in `db`) at the default window, period and sample
/// rate: what the manager does before a build's first candidate.
pub fn probe_running(db: &Path, image: &Path, seconds: f64, functions: usize, half_life: f64) -> Result<String> {
    let profile = ProfileArgs {
        db: crate::flags::DbArg { db: db.to_path_buf() },
        image: image.to_path_buf(),
        epoch: "all".into(),
        half_life,
        cold_fraction: 0.01,
        no_skid: false,
        infer: false,
        no_probes: true,
        file: None,
    };
    run_probe(ProbeArgs { profile, seconds, window_us: 1000, period_ms: 50, sample_hz: 2000, functions, command: vec![] })
}

/// Probes as `a` says and adds the counts to the build's tally; returns the summary.
fn run_probe(mut a: ProbeArgs) -> Result<String> {
    let mut syms = symbolizer(&a.profile.db.db);
    // Blocks and candidate references from the samples alone: the same every run, whatever earlier probes counted.
    a.profile.no_probes = true;
    let ip = image_profile(&a.profile, &mut syms).context("probing needs the image's profile to choose blocks: record it first")?;
    let db = a.profile.db.db.clone();
    let mut tally = tally_of(&db, &ip.build_id).unwrap_or_else(|| Tally { build_id: ip.build_id.clone(), ..Default::default() });
    let armed0 = tally.armed_secs;
    let mut run = Run { label: if a.command.is_empty() { "running".into() } else { a.command.join(" ") }, ..Default::default() };
    let Some(mut sched) = Schedule::new(&ip.functions, a.functions, &tally, &run.label) else {
        bail!("no sampled function of {} to probe", a.profile.image.display());
    };
    let probe_at = ElfAddr(ip.functions.iter().take(a.functions).find(|f| !f.blocks.is_empty()).map_or(0, |f| f.start));
    let file = a.profile.file();
    let inode = std::fs::metadata(file).with_context(|| format!("cannot read {}", file.display()))?.ino();
    let segments = loupe_probe::segments(file).with_context(|| format!("cannot read the segments of {}", file.display()))?;
    let mut child = match a.command.split_first() {
        Some((cmd, args)) => Some(std::process::Command::new(cmd).args(args).spawn().with_context(|| format!("cannot run {cmd}"))?),
        None => None,
    };
    let only = child.as_ref().map(|c| c.id());
    eprintln!(
        "loupe: probing {} blocks of {} functions of {} ({} references still to choose): {} us windows every {} ms on average",
        sched.blocks,
        sched.functions,
        a.profile.image.display(),
        sched.calibrating(),
        a.window_us,
        a.period_ms
    );
    let (t0, mut rng) = (Instant::now(), t0_seed());
    // A random first group: short runs probed one after another still cover every group.
    sched.start_after(rng as usize);
    let (mut turn, mut windows, mut failed) = (0usize, 0u64, 0u64);
    let mut found: Vec<Target> = vec![];
    let mut scanned = Instant::now() - Duration::from_secs(10);
    let mut samplers: HashMap<u32, (Sampler, i64)> = HashMap::new();
    let mut block_samples: HashMap<u64, u64> = HashMap::new();
    let mut ips = Vec::new();
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
            for t in &found {
                if let (std::collections::hash_map::Entry::Vacant(v), true) = (samplers.entry(t.tid), a.sample_hz > 0) {
                    if let Ok(s) = Sampler::open(t.tid, 1_000_000_000 / a.sample_hz) {
                        let _ = s.enable();
                        v.insert((s, t.bias));
                    }
                }
            }
            drain(&mut samplers, &sched, &mut block_samples, &mut ips);
        }
        if let (Some(t), Some(w)) = (found.get(turn % found.len().max(1)).copied(), sched.next_window()) {
            let rt: Vec<_> = w.addrs.iter().map(|&va| loupe_probe::runtime(va, t.bias)).collect();
            let w0 = Instant::now();
            // No timer samples of the thread while its breakpoints trap.
            let sampler = samplers.get(&t.tid).map(|(s, _)| s);
            let _ = sampler.map(Sampler::disable);
            let counted = Group::open(t.tid, &rt).and_then(|grp| grp.window(Duration::from_micros(a.window_us)));
            let _ = sampler.map(Sampler::enable);
            match counted {
                Ok(counts) => {
                    sched.counted(&w, &counts, &mut run, &mut tally);
                    tally.armed_secs += w0.elapsed().as_secs_f64();
                    windows += 1;
                }
                // The thread ended, or its debug registers are taken (a debugger): look again.
                Err(_) => {
                    failed += 1;
                    found.clear();
                }
            }
            turn += 1;
        }
        std::thread::sleep(Duration::from_micros(loupe_perf::jittered(a.period_ms * 1000, 0.5, &mut rng)));
    }
    if let Some(mut c) = child {
        let st = c.wait()?;
        if !st.success() {
            eprintln!("loupe: the probed command exited with {st}");
        }
    }
    drain(&mut samplers, &sched, &mut block_samples, &mut ips);
    run.reference_samples = sched.reference_samples(&tally, &block_samples);
    let sampled: u64 = run.reference_samples.iter().map(|&(_, n)| n).sum();
    if windows == 0 {
        bail!("no window was counted: no thread running {} was found ({failed} failed attempts)", a.profile.image.display());
    }
    let counted: u64 = run.pairs.iter().map(|p| p.windows).sum();
    tally.runs.push(run);
    let path = tally_path(&db, &ip.build_id);
    tally.save(&path).map_err(|e| anyhow!("cannot write {}: {e}", path.display()))?;
    let wall = t0.elapsed().as_secs_f64();
    Ok(format!(
        "{windows} windows over {wall:.1} s ({counted} block counts against a reference), armed {:.1}% of the time; \
         {} of {} references chosen, {sampled} timer samples in them between windows; counts in {}",
        100.0 * (tally.armed_secs - armed0) / wall,
        sched.functions - sched.calibrating(),
        sched.functions,
        path.display()
    ))
}

fn t0_seed() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64)
}
