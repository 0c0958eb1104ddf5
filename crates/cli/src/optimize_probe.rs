//! `loupe optimize probe`: exact relative counts of the blocks of a
//! program's hottest functions, from execute breakpoints armed in short
//! windows (`loupe-probe`), kept in DB/probes/BUILD.json and used by every
//! export of that build in place of the sample estimates of those blocks.

use crate::flags::optimize::{ProbeArgs, ProfileArgs};
use crate::optimize::image_profile;
use crate::procedure::symbolizer;
use anyhow::{anyhow, bail, Context, Result};
use loupe_optimize::blocks::Measured;
use loupe_probe::{ElfAddr, Group, Plan, Pooled, Run, Sampler, Tally};
use std::collections::{BTreeMap, HashMap};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Share of the reference's runs a block's ratio must have been counted
/// beside to be used: all of them (up to rounding). At 0.9, SQLite blocks
/// counted 0 under `insert` and `mixed` but never armed under `query`
/// (7% of the reference's samples), where they ran 21 M times, were taken
/// as measured zeros and split out cold.
const MIN_COVERAGE: f64 = 0.999;

/// Windows under every command a block counted 0 must have been armed in
/// for that 0 to be used. A window sees about a hundred executions of a
/// hot reference, one stretch of one phase: SQLite handlers run 4-21 M
/// times in training were 0 in their 1-6 windows per command and were
/// split out cold (against their 400-2,000 timer samples). Below this the
/// samples decide.
const MIN_ZERO_WINDOWS: u64 = 10;

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
        // The reference chosen by calibration, else the one counted most.
        let best = match t.references.get(&start).and_then(|r| by.get_key_value(r)) {
            Some(kv) => Some(kv),
            None => refs.max_by_key(|(_, blocks)| blocks.values().map(|x| x.reference_count).sum::<u64>()),
        };
        if let Some((r, blocks)) = best {
            // A ratio counted beside only part of what the reference ran (a command under which the block's
            // group was never armed) may miss where the block runs: left to the samples.
            let mut counts: BTreeMap<u64, (f64, u64)> = blocks
                .iter()
                .filter(|(_, x)| x.coverage >= MIN_COVERAGE && (x.ratio > 0.0 || x.min_windows >= MIN_ZERO_WINDOWS))
                .map(|(b, x)| (b.0, (x.ratio, x.reference_count)))
                .collect();
            // The reference alone says nothing: its ratio to itself is 1 by definition, and its count
            // would be its own samples' estimate, pinned (CPython's long_richcompare: no other ratio
            // covered `text.py`, and the entry's stall-inflated 341 against its successor's 131 sent
            // flow down a path run 18 times in 23 M). Left to the samples.
            if counts.keys().all(|&b| b == r.0) {
                continue;
            }
            let most = blocks.values().map(|x| x.reference_count).max().unwrap_or(0);
            counts.insert(r.0, (1.0, most));
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

/// Files the samplers' instruction pointers under the block holding them.
fn drain(
    samplers: &mut HashMap<u32, (Sampler, i64)>,
    extents: &BTreeMap<u64, u64>,
    into: &mut HashMap<u64, u64>,
    ips: &mut Vec<loupe_probe::RuntimeAddr>,
) {
    for (s, bias) in samplers.values_mut() {
        ips.clear();
        s.drain(ips);
        for ip in ips.iter() {
            let va = (ip.0 as i64 - *bias) as u64;
            if let Some((&start, &end)) = extents.range(..=va).next_back() {
                if va < end {
                    *into.entry(start).or_default() += 1;
                }
            }
        }
    }
}

/// Windows each candidate reference block of a function is counted in
/// before the most executed one is kept.
const CALIBRATION_WINDOWS: u64 = 4;

/// What the next window arms: a function's candidate references against
/// each other, or a planned group.
struct Schedule {
    /// Functions whose reference is not chosen yet: (start, candidates, all blocks).
    calibrating: Vec<(u64, Vec<ElfAddr>, Vec<ElfAddr>)>,
    plan: Plan,
    next: usize,
    /// This command's counts so far (earlier runs of it and this one): groups whose blocks are settled give
    /// their windows to the others.
    seen: Pooled,
}

impl Schedule {
    fn next_group(&mut self) -> Option<(Option<u64>, Vec<ElfAddr>)> {
        if let Some((start, cands, _)) = self.calibrating.first() {
            return Some((Some(*start), cands.clone()));
        }
        self.next = self.plan.next_unsettled(self.next, &self.seen)?;
        Some((None, self.plan.groups[self.next].addrs()))
    }

    /// Adds one window's counts of `addrs` (the reference first) to what decides which groups are settled.
    fn counted(&mut self, addrs: &[ElfAddr], counts: &[u64]) {
        let (Some(&r), Some(&rc)) = (addrs.first(), counts.first()) else { return };
        for (&b, &c) in addrs.iter().zip(counts).skip(1) {
            let a = self.seen.entry((r, b)).or_default();
            (a.0, a.1) = (a.0 + c, a.1 + rc);
        }
    }

    /// After a calibration window of `start`: once it has enough, its
    /// reference is the candidate counted most and its groups join the plan.
    fn calibrated(&mut self, start: u64, run: &Run, tally: &mut Tally) {
        let Some(i) = self.calibrating.iter().position(|c| c.0 == start) else { return };
        let first = self.calibrating[i].1[0];
        let pairs: Vec<&loupe_probe::Pair> =
            run.pairs.iter().filter(|p| p.reference == first && self.calibrating[i].1.contains(&p.block)).collect();
        let done = self.calibrating[i].1.len() == 1 || pairs.iter().all(|p| p.windows >= CALIBRATION_WINDOWS);
        if !done {
            return;
        }
        let rc = pairs.first().map_or(0, |p| p.reference_count);
        let best = pairs.iter().filter(|p| p.count > rc).max_by_key(|p| p.count).map_or(first, |p| p.block);
        let (start, _, blocks) = self.calibrating.remove(i);
        tally.references.insert(start, best);
        self.plan.add_function(best, &blocks);
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
    // Every block of the probed functions by its first address, to file the samples taken between windows.
    let mut extents: BTreeMap<u64, u64> = BTreeMap::new();
    let seen = tally.pooled(&run.label);
    let mut sched = Schedule { calibrating: vec![], plan: Plan::default(), next: 0, seen };
    let chosen = ip.functions.iter().take(a.functions).filter(|f| !f.blocks.is_empty()).collect::<Vec<_>>();
    for f in &chosen {
        let blocks: Vec<ElfAddr> = f.blocks.iter().map(|b| ElfAddr(f.start + b.offset)).collect();
        for (i, b) in blocks.iter().enumerate() {
            extents.insert(b.0, blocks.get(i + 1).map_or(f.start + f.size, |n| n.0));
        }
        // The reference should be the function's most executed block, so that every window counts it often;
        // samples do not say which that is, so the four blocks with the most are counted against each other.
        let mut by_count: Vec<&loupe_optimize::blocks::BlockCount> = f.blocks.iter().collect();
        by_count.sort_by(|x, y| y.count.total_cmp(&x.count));
        let candidates: Vec<ElfAddr> = by_count.iter().take(loupe_probe::SLOTS).map(|b| ElfAddr(f.start + b.offset)).collect();
        match tally.references.get(&f.start) {
            Some(&r) => sched.plan.add_function(r, &blocks),
            None => sched.calibrating.push((f.start, candidates, blocks)),
        }
    }
    if chosen.is_empty() {
        bail!("no sampled function of {} to probe", a.profile.image.display());
    }
    let file = a.profile.file();
    let inode = std::fs::metadata(file).with_context(|| format!("cannot read {}", file.display()))?.ino();
    let segments = loupe_probe::segments(file).with_context(|| format!("cannot read the segments of {}", file.display()))?;
    let probe_at = ElfAddr(chosen[0].start);
    let mut child = match a.command.split_first() {
        Some((cmd, args)) => Some(std::process::Command::new(cmd).args(args).spawn().with_context(|| format!("cannot run {cmd}"))?),
        None => None,
    };
    let only = child.as_ref().map(|c| c.id());
    let blocks: usize = chosen.iter().map(|f| f.blocks.len()).sum();
    eprintln!(
        "loupe: probing {blocks} blocks of {} functions of {} ({} references still to choose): {} us windows every {} ms on average",
        chosen.len(),
        a.profile.image.display(),
        sched.calibrating.len(),
        a.window_us,
        a.period_ms
    );
    let (t0, mut rng) = (Instant::now(), t0_seed());
    // A random first group: short runs probed one after another still cover every group.
    sched.next = rng as usize;
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
            drain(&mut samplers, &extents, &mut block_samples, &mut ips);
        }
        if let (Some(t), Some((calibrating, addrs))) = (found.get(turn % found.len().max(1)).copied(), sched.next_group()) {
            let rt: Vec<_> = addrs.iter().map(|&va| loupe_probe::runtime(va, t.bias)).collect();
            let w0 = Instant::now();
            // No timer samples of the thread while its breakpoints trap.
            let sampler = samplers.get(&t.tid).map(|(s, _)| s);
            let _ = sampler.map(Sampler::disable);
            let counted = Group::open(t.tid, &rt).and_then(|grp| grp.window(Duration::from_micros(a.window_us)));
            let _ = sampler.map(Sampler::enable);
            match counted {
                Ok(counts) => {
                    run.add_window(&addrs, &counts);
                    sched.counted(&addrs, &counts);
                    tally.armed_secs += w0.elapsed().as_secs_f64();
                    windows += 1;
                    if let Some(start) = calibrating {
                        sched.calibrated(start, &run, &mut tally);
                    }
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
    drain(&mut samplers, &extents, &mut block_samples, &mut ips);
    let mut refs: Vec<ElfAddr> = tally.references.values().copied().chain(sched.calibrating.iter().map(|c| c.1[0])).collect();
    refs.sort();
    refs.dedup();
    run.reference_samples = refs.into_iter().map(|r| (r, block_samples.get(&r.0).copied().unwrap_or(0))).collect();
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
        chosen.len() - sched.calibrating.len(),
        chosen.len(),
        path.display()
    ))
}

fn t0_seed() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_ratios_counted_under_every_command_and_zeros_over_enough_windows_are_used() {
        // Checks the two filters on a function at 0x100 with reference 0x100: block 0x110 counted under both
        // commands (used), 0x120 only under "a" (its ratio misses what "b" ran: left out), 0x130 at 0 in
        // MIN_ZERO_WINDOWS windows under each command (used: a measured zero), 0x140 at 0 in fewer windows
        // under "b" (left to the samples).
        let (r, b1, b2, b3, b4) = (ElfAddr(0x100), ElfAddr(0x110), ElfAddr(0x120), ElfAddr(0x130), ElfAddr(0x140));
        let mut runs = vec![];
        for label in ["a", "b"] {
            let mut run = Run { label: label.into(), reference_samples: vec![(r, 100)], ..Default::default() };
            for w in 0..MIN_ZERO_WINDOWS {
                run.add_window(&[r, b1, b3], &[100, 50, 0]);
                if label == "a" {
                    run.add_window(&[r, b2, b4], &[100, 10, 0]);
                } else if w == 0 {
                    run.add_window(&[r, b4], &[100, 0]);
                }
            }
            runs.push(run);
        }
        let t = Tally { runs, references: [(0x100, r)].into_iter().collect(), ..Default::default() };
        let m = measured_by_function(&t, &[(0x100, 0x100)]);
        let got: Vec<u64> = m[&0x100].counts.keys().copied().collect();
        assert_eq!(got, vec![0x100, 0x110, 0x130], "{m:?}");
        assert_eq!(m[&0x100].counts[&0x110].0, 0.5);
    }

    #[test]
    fn a_function_with_no_usable_ratio_is_left_to_its_samples() {
        // Checks a function whose only block ratio was counted under "a" while "b" also ran its reference
        // (timer samples): no ratio is used, and the reference alone is no measurement.
        let (r, b1) = (ElfAddr(0x100), ElfAddr(0x110));
        let mut a = Run { label: "a".into(), reference_samples: vec![(r, 100)], ..Default::default() };
        a.add_window(&[r, b1], &[100, 50]);
        let b = Run { label: "b".into(), reference_samples: vec![(r, 100)], ..Default::default() };
        let t = Tally { runs: vec![a, b], references: [(0x100, r)].into_iter().collect(), ..Default::default() };
        assert!(measured_by_function(&t, &[(0x100, 0x100)]).is_empty());
    }
}
