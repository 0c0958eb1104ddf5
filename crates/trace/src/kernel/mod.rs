//! The OS layer and Loupe's own samples as individual events, on the same
//! clock as the application's (`use_clockid` = CLOCK_MONOTONIC): page faults
//! (software event, period 1, with the faulting address), context switches
//! away from the traced threads (`sched:sched_switch`), system calls
//! (`raw_syscalls:sys_enter`), block I/O of the whole machine
//! (`block:block_rq_issue`/`block_rq_complete`, which complete in interrupt
//! context and so cannot be tied to a process) and Loupe's profiling samples
//! (cpu-clock). All events of one CPU share one perf ring (the others are
//! redirected into the first with `PERF_EVENT_IOC_SET_OUTPUT`), so each CPU's
//! ring is time-ordered and becomes one CTF stream `ctf/kcpu<N>` of packets
//! laid out like the shared buffer's; records perf lost are counted in the
//! packets' events_discarded.
//!
//! Block I/O comes from a BPF program on the same tracepoints instead
//! ([`block_bpf`]) whenever it loads, since perf misses the completions taken
//! in the idle task's softirq; its records join their CPU's stream in time
//! order, and what its ring had no room for counts as lost on that CPU.

pub mod block_bpf;
pub mod sample;
pub mod tracefs;

use crate::buffer::{PACKET_HEADER, PACKET_MAGIC};
use crate::client::Client;
use crate::record::Value;
use crate::record::{encode, Record};
use crate::spec::{Event, Spec};
use block_bpf::BlockBpf;
use loupe_perf::ring::Ring;
use loupe_perf::sys::{self, PerfEventAttr};
use sample::{Parsed, Source};
use std::collections::HashMap;
use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd};

const USE_CLOCKID: u64 = 1 << 25;
/// Stream instance ids of kernel streams start here (CPU buffers use the CPU number).
pub const KERNEL_STREAM_BASE: u32 = 1000;
const RING_PAGES: usize = 512;
/// Events are written once they are this old (ns), so that the perf ring and
/// the BPF ring of a CPU, read one after the other, merge in time order: an
/// event is visible in its ring microseconds after its timestamp, far less.
const HOLD_NS: u64 = 50_000_000;

/// Why a `--kernel` list does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SelectError {
    #[error("unknown kernel event group '{0}' (faults, sched, syscalls, block, block-perf, samples, all)")]
    UnknownGroup(String),
    #[error("kernel event group 'samples' needs a sample rate above 0")]
    NoSampleRate,
}

/// Which kernel events to record.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Select {
    pub faults: bool,
    pub sched: bool,
    pub syscalls: bool,
    pub block: bool,
    /// Block events from perf even where the BPF program would load (to compare the two).
    pub block_perf: bool,
    /// Profiling samples per second of CPU time (0: none).
    pub sample_hz: u64,
}

impl Select {
    /// Parses `faults,sched,syscalls,block,samples` (or `all`); `samples` takes `sample_hz`;
    /// `block-perf` is `block` from perf rather than BPF.
    pub fn parse(list: &[String], sample_hz: u64) -> Result<Select, SelectError> {
        let mut s = Select::default();
        for item in list.iter().flat_map(|l| l.split(',')).map(str::trim).filter(|i| !i.is_empty()) {
            match item {
                "faults" => s.faults = true,
                "sched" => s.sched = true,
                "syscalls" => s.syscalls = true,
                "block" => s.block = true,
                "block-perf" => (s.block, s.block_perf) = (true, true),
                "samples" if sample_hz == 0 => return Err(SelectError::NoSampleRate),
                "samples" => s.sample_hz = sample_hz,
                "all" => s = Select { faults: true, sched: true, syscalls: true, block: true, sample_hz, ..s },
                other => return Err(SelectError::UnknownGroup(other.to_string())),
            }
        }
        Ok(s)
    }

    pub fn any(&self) -> bool {
        self.faults || self.sched || self.syscalls || self.block || self.sample_hz > 0
    }
}

/// An event read from a ring and not yet written: time, spec event name, values.
type Pending = (u64, &'static str, Vec<Value>);

/// One CPU's events from its rings (perf's and BPF's), held until they can be
/// written in time order.
#[derive(Default)]
struct Held {
    events: Vec<Pending>,
    /// How many leading events are known to be in time order.
    sorted: usize,
    /// Time of the last event released (a stream's times never go back).
    last_time: u64,
}

impl Held {
    /// The held events stamped at or before `horizon`, in time order (equal
    /// times in the order they came). One that comes later than an event
    /// already released after it (more than [`HOLD_NS`] late) gets that
    /// event's time rather than break the stream's order.
    fn release(&mut self, horizon: u64) -> Vec<Pending> {
        // Most calls add events in order after those held back: checking costs only the new ones.
        if !self.events[self.sorted.saturating_sub(1)..].is_sorted_by_key(|p| p.0) {
            self.events.sort_by_key(|p| p.0); // stable
        }
        let ready = self.events.partition_point(|p| p.0 <= horizon);
        let mut out: Vec<Pending> = self.events.drain(..ready).collect();
        self.sorted = self.events.len();
        for e in &mut out {
            e.0 = e.0.max(self.last_time);
            self.last_time = e.0;
        }
        out
    }
}

struct CpuStream {
    cpu: u32,
    _fds: Vec<OwnedFd>,
    /// None when only BPF events go to this CPU's stream.
    ring: Option<Ring>,
    held: Held,
    packet: Vec<u8>,
    seq: u64,
    lost: u64,
    /// Block events the BPF ring had no room for on this CPU.
    bpf_drops: u64,
    /// Samples that could not become events (see [`Parsed::Unreadable`]).
    unreadable: u64,
    out: std::io::BufWriter<std::fs::File>,
}

/// The kernel events of one process tree, one perf ring per CPU.
pub struct Kernel {
    streams: Vec<CpuStream>,
    sources: HashMap<u64, Source>,
    spec: Spec,
    sub_size: usize,
    /// Events written, per spec event name.
    pub counts: HashMap<String, u64>,
    /// What was asked for but could not be opened, and why.
    pub skipped: Vec<String>,
    /// The block events' BPF program, if it loaded.
    bpf: Option<BlockBpf>,
    /// BPF records that could not become events (short, unknown kind, CPU without a stream).
    bpf_unreadable: u64,
    /// Why block events come from perf although BPF was tried (None: from BPF, or not asked for).
    pub block_fallback: Option<String>,
}

/// How to open one source: its perf attr and whether it follows the process (else the whole CPU).
fn attr_of(src: &Source, sample_hz: u64) -> (PerfEventAttr, bool) {
    let per_task = !matches!(src, Source::BlockIssue(_) | Source::BlockComplete(_));
    let (type_, config, period) = match src {
        Source::Fault => (sys::PERF_TYPE_SOFTWARE, 2, 1), // PERF_COUNT_SW_PAGE_FAULTS
        Source::Sample => (sys::PERF_TYPE_SOFTWARE, 0, 1_000_000_000 / sample_hz.max(1)), // cpu-clock, period in ns
        Source::Switch(tp) | Source::Syscall(tp) | Source::BlockIssue(tp) | Source::BlockComplete(tp) => (PERF_TYPE_TRACEPOINT, tp.id, 1),
    };
    let flags = if per_task { sys::flag::DISABLED | sys::flag::INHERIT | sys::flag::ENABLE_ON_EXEC } else { 0 } | USE_CLOCKID;
    let attr = PerfEventAttr {
        type_,
        size: sys::ATTR_SIZE,
        config,
        sample_period_or_freq: period,
        sample_type: sample::SAMPLE_TYPE,
        flags,
        clockid: libc::CLOCK_MONOTONIC,
        ..Default::default()
    };
    (attr, per_task)
}

const PERF_TYPE_TRACEPOINT: u32 = 2;

impl Kernel {
    /// Opens the selected events on `pid` (enabled when it execs; block
    /// events at once, machine-wide) and creates `dir/kcpu<N>` per online CPU.
    /// A source that cannot be opened is left out and named in `skipped`.
    /// Block events come from BPF if its program loads, else from perf (said in `block_fallback`).
    pub fn open(pid: i32, sel: Select, spec: &Spec, dir: &std::path::Path, sub_size: usize) -> std::io::Result<Kernel> {
        let (bpf, block_fallback) = match sel.block && !sel.block_perf {
            // libbpf finds the tracepoints through tracefs: mount it first if nothing has.
            true => match tracefs::root().map_err(|e| e.to_string()).and_then(|_| BlockBpf::open().map_err(|e| e.to_string())) {
                Ok(b) => (Some(b), None),
                Err(e) => (None, Some(e)),
            },
            false => (None, None),
        };
        let (wanted, mut skipped) = sample::sources(Select { block: sel.block && bpf.is_none(), ..sel });
        let mut streams = Vec::new();
        let mut sources = HashMap::new();
        let mut dead: Vec<String> = Vec::new();
        for cpu in loupe_perf::online_cpus() {
            let mut fds: Vec<OwnedFd> = Vec::new();
            for src in &wanted {
                if dead.contains(&src.name().to_string()) {
                    continue;
                }
                let (attr, per_task) = attr_of(src, sel.sample_hz);
                let fd = match sys::perf_event_open(&attr, if per_task { pid } else { -1 }, cpu as i32, -1) {
                    Ok(fd) => fd,
                    Err(e) => {
                        skipped.push(format!("{}: {e}", src.name()));
                        dead.push(src.name().to_string());
                        continue;
                    }
                };
                sources.insert(sys::event_id(fd.as_raw_fd())?, src.clone());
                fds.push(fd);
            }
            let ring = match fds.first() {
                Some(leader) => {
                    // The leader's ring must exist before others can be redirected into it.
                    let ring = Ring::map(leader.as_raw_fd(), RING_PAGES)?;
                    for fd in &fds[1..] {
                        sys::ioctl(fd.as_raw_fd(), sys::IOC_SET_OUTPUT, leader.as_raw_fd() as libc::c_ulong)?;
                    }
                    Some(ring)
                }
                None if bpf.is_some() => None,
                None => continue,
            };
            let out = std::io::BufWriter::new(std::fs::File::create(dir.join(format!("kcpu{cpu}")))?);
            streams.push(CpuStream {
                cpu,
                _fds: fds,
                ring,
                held: Held::default(),
                packet: Vec::new(),
                seq: 0,
                lost: 0,
                bpf_drops: 0,
                unreadable: 0,
                out,
            });
        }
        let counts = HashMap::new();
        Ok(Kernel { streams, sources, spec: spec.clone(), sub_size, counts, skipped, bpf, bpf_unreadable: 0, block_fallback })
    }

    /// Where block events come from: "bpf", "perf", or None if not recorded.
    pub fn block_source(&self) -> Option<&'static str> {
        if self.bpf.is_some() {
            Some("bpf")
        } else if self.sources.values().any(|s| matches!(s, Source::BlockIssue(_) | Source::BlockComplete(_))) {
            Some("perf")
        } else {
            None
        }
    }

    /// Hands the BPF ring's events to their CPUs' streams and takes its per-CPU drop counts.
    fn take_bpf(&mut self) -> std::io::Result<()> {
        let Some(b) = &mut self.bpf else { return Ok(()) };
        let (events, bad) = b.drain().map_err(std::io::Error::other)?;
        self.bpf_unreadable += bad;
        for (cpu, time, name, values) in events {
            match self.streams.iter_mut().find(|s| s.cpu == cpu) {
                Some(s) => s.held.events.push((time, name, values)),
                None => self.bpf_unreadable += 1,
            }
        }
        for s in &mut self.streams {
            s.bpf_drops = b.drops(s.cpu);
        }
        Ok(())
    }

    /// Moves what the rings hold into packets, handing each event to the
    /// online `clients` that want records; events younger than `HOLD_NS`
    /// wait for the next call, except with `last`, which also writes the open packets.
    pub fn drain(&mut self, last: bool, clients: &mut [&mut dyn Client]) -> std::io::Result<()> {
        // Taken before any ring is read: whatever is stamped before it is in its ring by then.
        let horizon = if last { u64::MAX } else { crate::buffer::now().saturating_sub(HOLD_NS) };
        self.take_bpf()?;
        let online = clients.iter().any(|c| c.wants_records());
        let events: HashMap<String, &Event> = self.spec.events.iter().map(|e| (e.full_name(), e)).collect();
        for s in &mut self.streams {
            let (mut lost, mut unreadable) = (0, 0);
            if let Some(ring) = &mut s.ring {
                ring.read(|r| match sample::parse(r, &self.sources) {
                    Some(Parsed::Event { time, name, values }) => s.held.events.push((time, name, values)),
                    Some(Parsed::Lost(n)) => lost += n,
                    Some(Parsed::Unreadable) => unreadable += 1,
                    None => {}
                });
            }
            s.lost += lost;
            for (time, name, values) in s.held.release(horizon) {
                let Some(ev) = events.get(name) else {
                    unreadable += 1;
                    continue;
                };
                let rec = encode(ev, time, &values);
                if online {
                    let r = Record { ts: time, id: ev.id, fields: values };
                    clients.iter_mut().filter(|c| c.wants_records()).for_each(|c| c.record(s.cpu as usize, &r));
                }
                if s.packet.len().max(PACKET_HEADER) + rec.len() > self.sub_size {
                    finish(s, &self.spec, self.sub_size)?;
                }
                if s.packet.is_empty() {
                    s.packet.resize(PACKET_HEADER, 0);
                    s.packet[16..24].copy_from_slice(&time.to_le_bytes());
                }
                s.packet.extend_from_slice(&rec);
                *self.counts.entry(name.to_string()).or_default() += 1;
            }
            s.unreadable += unreadable;
            if last {
                finish(s, &self.spec, self.sub_size)?;
                s.out.flush()?;
            }
        }
        Ok(())
    }

    /// Records perf lost (ring full) and block events BPF lost (ring full, or
    /// not run: another BPF program was running on the CPU), over all CPUs.
    pub fn lost(&self) -> u64 {
        let bpf_misses = self.bpf.as_ref().map_or(0, |b| b.misses());
        self.streams.iter().map(|s| s.lost + s.bpf_drops).sum::<u64>() + bpf_misses
    }

    /// Samples read but not written as events (unknown source, short data, event not in the spec), over all CPUs.
    pub fn unreadable(&self) -> u64 {
        self.streams.iter().map(|s| s.unreadable).sum::<u64>() + self.bpf_unreadable
    }
}

/// Completes the open packet's CTF header and context, pads it and writes it.
fn finish(s: &mut CpuStream, spec: &Spec, sub_size: usize) -> std::io::Result<()> {
    if s.packet.is_empty() {
        return Ok(());
    }
    let p = &mut s.packet;
    p[0..4].copy_from_slice(&PACKET_MAGIC.to_le_bytes());
    p[8..12].copy_from_slice(&(KERNEL_STREAM_BASE + s.cpu).to_le_bytes());
    p[12..16].copy_from_slice(&s.cpu.to_le_bytes());
    p[48..56].copy_from_slice(&s.seq.to_le_bytes());
    p.resize(sub_size, 0);
    // End time, sizes and drops as the consumer of the shared buffer completes its packets;
    // CTF readers need the content to end where the last record's fields do.
    crate::buffer::seal(p, s.lost + s.bpf_drops + s.unreadable);
    crate::ctf::trim_content(spec, p);
    s.out.write_all(p)?;
    s.seq += 1;
    p.clear();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    // Held events come out in time order up to the horizon, ties in arrival order; the rest wait; one that
    // arrives older than an event already released takes that event's time.
    #[test]
    fn held_events_release_in_order() {
        let mut h = Held::default();
        for (t, n) in [(30, "c"), (10, "a"), (50, "e"), (10, "b")] {
            h.events.push((t, n, vec![]));
        }
        let names = |v: Vec<Pending>| v.into_iter().map(|p| (p.0, p.1)).collect::<Vec<_>>();
        assert_eq!(names(h.release(30)), vec![(10, "a"), (10, "b"), (30, "c")]);
        h.events.push((40, "d", vec![]));
        h.events.push((20, "late", vec![]));
        assert_eq!(names(h.release(45)), vec![(30, "late"), (40, "d")]);
        assert_eq!(names(h.release(u64::MAX)), vec![(50, "e")]);
        assert!(h.release(u64::MAX).is_empty());
    }

    // Group names select sources; `all` selects everything; `block-perf` is block from perf; unknown names are refused by name.
    #[test]
    fn select_parse() {
        let s = Select::parse(&["faults,sched".into(), "samples".into()], 500).unwrap();
        assert_eq!(s, Select { faults: true, sched: true, sample_hz: 500, ..Select::default() });
        assert!(Select::parse(&["all".into()], 0).unwrap().block);
        let perf = Select::parse(&["block-perf".into()], 0).unwrap();
        assert!(perf.block && perf.block_perf && !Select::parse(&["block".into()], 0).unwrap().block_perf);
        assert!(!Select::parse(&[], 100).unwrap().any());
        assert_eq!(Select::parse(&["faults,disk".into()], 1), Err(SelectError::UnknownGroup("disk".into())));
        assert_eq!(Select::parse(&["samples".into()], 0), Err(SelectError::NoSampleRate));
    }
}
