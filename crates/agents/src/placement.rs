//! The placement agent. Threads of one process whose sampled accesses show
//! a cache line written by one thread and used by another on another CPU
//! (DProf's sharing classification, dataprof.md) pay for the line's moves
//! between caches. True sharing (the same bytes) is cheapest with the
//! threads on CPUs that share a cache; false sharing (different bytes of
//! one line), which placement cannot remove, is cheapest with the threads
//! apart, each on its own cache. Either is applied with `sched_setaffinity`
//! per thread, measured and kept or reverted: packing threads onto fewer
//! CPUs can also cost more than the moves saved, and only the trial tells.

use crate::error::Result;
use crate::observe;
use crate::sys::{self, CacheDomain};
use crate::target::{stat_fields, Target};
use crate::{Action, Agent, Observation, Proposal};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

pub struct Placement {
    scratch: PathBuf,
    pub observe: Duration,
    pub freq_hz: u64,
    /// A thread is busy when it used this share of the busiest thread's CPU
    /// time while observed (relative: on a loaded machine every thread
    /// gets little).
    pub busy_share: f64,
    /// Fewer bouncing lines than this say nothing.
    pub min_lines: usize,
}

impl Placement {
    pub fn new(scratch: PathBuf) -> Placement {
        Placement { scratch, observe: Duration::from_secs(1), freq_hz: 2000, busy_share: 0.25, min_lines: 1 }
    }
}

/// One sampled access, as the sharing analysis needs it.
#[derive(Clone, Copy, Debug)]
pub struct Access {
    pub tid: u32,
    pub cpu: u32,
    pub addr: u64,
    pub size: u64,
    pub write: bool,
}

/// Lines two threads used from two CPUs: by whether some such pair touched
/// the same bytes (true sharing) or only other bytes of the line (false
/// sharing). A write need not have been sampled: a store retires into the
/// store buffer at once, so timer samples seldom land on one, while a line
/// only ever read by both would not be worth a sample from each; the lines
/// where a write was seen are counted apart.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Sharing {
    pub true_lines: usize,
    /// Of all the shared lines, those where a sampled access wrote.
    pub written_lines: usize,
    pub false_lines: usize,
    /// The threads involved.
    pub threads: BTreeSet<u32>,
    /// A few of the lines (address of the line), for the log.
    pub examples: Vec<String>,
}

pub fn sharing(accesses: &[Access]) -> Sharing {
    let mut lines: BTreeMap<u64, Vec<Access>> = BTreeMap::new();
    for a in accesses {
        lines.entry(a.addr / 64).or_default().push(*a);
    }
    let mut s = Sharing::default();
    for (line, acc) in &lines {
        let (mut any, mut overlap) = (false, false);
        for (i, w) in acc.iter().enumerate() {
            for o in acc[i + 1..].iter().filter(|o| o.tid != w.tid && o.cpu != w.cpu) {
                any = true;
                s.threads.insert(w.tid);
                s.threads.insert(o.tid);
                overlap |= w.addr < o.addr + o.size.max(1) && o.addr < w.addr + w.size.max(1);
            }
        }
        if any {
            s.written_lines += acc.iter().any(|a| a.write) as usize;
            if overlap {
                s.true_lines += 1
            } else {
                s.false_lines += 1
            }
            if s.examples.len() < 8 {
                s.examples.push(format!("{:#x} ({})", line * 64, if overlap { "true" } else { "false" }));
            }
        }
    }
    s
}

/// The CPUs to give each thread: all of them on the smallest cache domain
/// holding `near` (threads sharing data), or one lowest-level domain each,
/// round robin (threads falsely sharing).
pub fn plan(threads: &[u32], together: bool, near: u32, domains: &[CacheDomain]) -> BTreeMap<u32, Vec<u32>> {
    let lowest = domains.iter().map(|d| d.level).min().unwrap_or(0);
    if together {
        let set = domains
            .iter()
            .filter(|d| d.cpus.contains(&near))
            .min_by_key(|d| (d.level, d.cpus.len()))
            .map(|d| d.cpus.clone())
            .unwrap_or(vec![near]);
        return threads.iter().map(|&t| (t, set.clone())).collect();
    }
    let firsts: Vec<&CacheDomain> = domains.iter().filter(|d| d.level == lowest).collect();
    threads.iter().enumerate().map(|(i, &t)| (t, firsts.get(i % firsts.len().max(1)).map(|d| d.cpus.clone()).unwrap_or_default())).collect()
}

/// Per-thread CPU ticks, last CPU and context switches.
fn thread_state(pid: u32, tid: u32) -> Option<(u64, u32, u64)> {
    let dir = format!("/proc/{pid}/task/{tid}");
    let stat = std::fs::read_to_string(format!("{dir}/stat")).ok()?;
    let (_, ticks) = stat_fields(&stat)?;
    let rest = &stat[stat.rfind(')')? + 2..];
    let cpu = rest.split_whitespace().nth(36)?.parse().ok()?;
    let status = std::fs::read_to_string(format!("{dir}/status")).ok()?;
    let switches =
        status.lines().filter(|l| l.contains("ctxt_switches:")).filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok()).sum();
    Some((ticks, cpu, switches))
}

impl Agent for Placement {
    fn name(&self) -> &'static str {
        "placement"
    }

    fn unavailable(&self) -> Option<String> {
        let n = sys::online_cpus().len();
        (n < 2).then(|| format!("{n} online CPU: nowhere to place threads"))
    }

    fn observe(&mut self, t: &Target, stop: &AtomicBool) -> Result<Observation> {
        let tids = t.threads();
        if tids.len() < 2 {
            return Ok(Observation::LeaveAlone { why: "one thread: nothing to place".into(), evidence: Value::Null });
        }
        let tids: Vec<u32> = tids.into_iter().take(16).collect();
        let before: BTreeMap<u32, (u64, u32, u64)> = tids.iter().filter_map(|&x| Some((x, thread_state(t.pid, x)?))).collect();
        let started = Instant::now();
        let (recs, taken) = observe::sample_accesses(&self.scratch, &tids, self.observe, self.freq_hz, stop)?;
        let secs = started.elapsed().as_secs_f64();
        let ticks = crate::target::clock_ticks();
        let mut threads = Vec::new();
        let mut shares = Vec::new();
        for (&tid, &(t0, _, s0)) in &before {
            let Some((t1, cpu, s1)) = thread_state(t.pid, tid) else { continue };
            let share = t1.saturating_sub(t0) as f64 / ticks / secs;
            threads.push(json!({"tid": tid, "cpu_share": (share * 100.0).round() / 100.0, "last_cpu": cpu,
                "switches_per_s": (s1.saturating_sub(s0) as f64 / secs).round(), "cpus_allowed": sys::affinity(tid).unwrap_or_default()}));
            shares.push((tid, cpu, share));
        }
        let top = shares.iter().map(|s| s.2).fold(0.0, f64::max);
        let busy: Vec<(u32, u32)> = shares.iter().filter(|s| s.2 > 0.0 && s.2 >= self.busy_share * top).map(|s| (s.0, s.1)).collect();
        let busy_tids: BTreeSet<u32> = busy.iter().map(|b| b.0).collect();
        let accesses: Vec<Access> = recs
            .iter()
            .filter(|r| busy_tids.contains(&r.tid))
            .map(|r| Access { tid: r.tid, cpu: r.cpu, addr: r.addr, size: r.size as u64, write: r.kind.writes() })
            .collect();
        let sh = sharing(&accesses);
        let domains = sys::cache_domains();
        let evidence = json!({"threads": threads, "samples_taken": taken, "samples_with_address": recs.len(), "sharing": sh,
            "cache_domains": domains});
        if busy.len() < 2 {
            return Ok(Observation::LeaveAlone {
                why: format!("{} busy thread(s) of {}: no threads to place together or apart", busy.len(), before.len()),
                evidence,
            });
        }
        let together = sh.true_lines >= self.min_lines;
        if !together && sh.false_lines < self.min_lines {
            let why = format!(
                "no sampled cache line is used by two of its {} busy threads from two CPUs ({} addresses sampled)",
                busy.len(),
                accesses.len()
            );
            return Ok(Observation::LeaveAlone { why, evidence });
        }
        let movers: Vec<u32> = busy.iter().map(|b| b.0).filter(|x| sh.threads.contains(x)).collect();
        let movers = if movers.len() >= 2 { movers } else { busy.iter().map(|b| b.0).collect() };
        let near = busy[0].1;
        let target = plan(&movers, together, near, &domains);
        let original: BTreeMap<u32, Vec<u32>> = movers.iter().map(|&x| (x, sys::affinity(x).unwrap_or_default())).collect();
        if target == original {
            return Ok(Observation::LeaveAlone { why: "its threads are already placed so".into(), evidence });
        }
        let what = if together {
            format!(
                "place threads {movers:?} together on CPUs {:?} (they share a cache there): {} line(s) truly shared between CPUs",
                target.values().next().cloned().unwrap_or_default(),
                sh.true_lines
            )
        } else {
            format!("place threads {movers:?} apart, one cache each: {} line(s) falsely shared between CPUs", sh.false_lines)
        };
        let mut evidence = evidence;
        evidence["placement"] = json!(target);
        Ok(Observation::Propose(Proposal { what, evidence, action: Box::new(Pin { target, original }) }))
    }

    fn undo(&mut self, _t: &Target, way_back: &Value) -> Result<Value> {
        let original: BTreeMap<u32, Vec<u32>> = serde_json::from_value(way_back["affinity"].clone())
            .map_err(|e| crate::Error::new(crate::ErrorKind::Revert, format!("unreadable way back {way_back}: {e}")))?;
        set_all(&original, crate::ErrorKind::Revert)
    }
}

/// Threads pinned to CPU sets, with the sets they had.
pub struct Pin {
    target: BTreeMap<u32, Vec<u32>>,
    original: BTreeMap<u32, Vec<u32>>,
}

fn set_all(sets: &BTreeMap<u32, Vec<u32>>, kind: crate::ErrorKind) -> Result<Value> {
    let mut gone = Vec::new();
    for (&tid, cpus) in sets {
        match sys::set_affinity(tid, cpus) {
            Ok(()) => {}
            // A thread that ended needs nothing.
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => gone.push(tid),
            Err(e) => return Err(crate::Error::new(kind, format!("sched_setaffinity({tid}, {cpus:?}): {e}"))),
        }
    }
    Ok(json!({"affinity": sets, "threads_gone": gone}))
}

impl Action for Pin {
    fn way_back(&self) -> Value {
        json!({"affinity": self.original})
    }

    fn apply(&mut self) -> Result<Value> {
        set_all(&self.target, crate::ErrorKind::Apply)
    }

    fn revert(&mut self) -> Result<Value> {
        set_all(&self.original, crate::ErrorKind::Revert)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acc(tid: u32, cpu: u32, addr: u64, write: bool) -> Access {
        Access { tid, cpu, addr, size: 8, write }
    }

    // Same bytes from two threads on two CPUs: true sharing; other bytes of the line: false;
    // one thread alone or two threads on one CPU: nothing. Writes seen are counted apart.
    #[test]
    fn classifies_lines() {
        let s = sharing(&[
            acc(1, 0, 0x1000, true),
            acc(2, 1, 0x1000, false),
            acc(1, 0, 0x2000, true),
            acc(2, 1, 0x2008, false),
            acc(1, 0, 0x3000, true),
            acc(1, 1, 0x3000, false),
            acc(1, 0, 0x4000, true),
            acc(2, 0, 0x4000, false),
            acc(1, 0, 0x5000, false),
            acc(2, 1, 0x5000, false),
        ]);
        assert_eq!((s.true_lines, s.false_lines, s.written_lines), (2, 1, 2));
        assert_eq!(s.threads, [1, 2].into_iter().collect());
    }

    fn domains() -> Vec<CacheDomain> {
        vec![
            CacheDomain { level: 1, cpus: vec![0, 1] },
            CacheDomain { level: 1, cpus: vec![2, 3] },
            CacheDomain { level: 3, cpus: vec![0, 1, 2, 3] },
        ]
    }

    // Together: the smallest domain holding the CPU; apart: one lowest-level domain each, round robin.
    #[test]
    fn plans_placements() {
        let p = plan(&[10, 11], true, 2, &domains());
        assert_eq!(p[&10], vec![2, 3]);
        assert_eq!(p[&11], vec![2, 3]);
        let p = plan(&[10, 11, 12], false, 0, &domains());
        assert_eq!((p[&10].clone(), p[&11].clone(), p[&12].clone()), (vec![0, 1], vec![2, 3], vec![0, 1]));
    }

    // This VM's shape (private L1/L2, one L3 of two CPUs): together means one CPU.
    #[test]
    fn two_cpu_vm_together_is_one_cpu() {
        let d = vec![
            CacheDomain { level: 1, cpus: vec![0] },
            CacheDomain { level: 1, cpus: vec![1] },
            CacheDomain { level: 3, cpus: vec![0, 1] },
        ];
        assert_eq!(plan(&[5, 6], true, 1, &d)[&5], vec![1]);
    }
}
