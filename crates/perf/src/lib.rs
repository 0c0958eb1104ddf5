//! perf_event_open for Loupe: per-CPU sampling events, their ring buffers,
//! and the records they carry.
//!
//! Design constraint: nothing here interprets samples; it delivers owned,
//! parsed [`Record`]s in ring order and leaves attribution to the collector.
//! Record parsing is a pure function over bytes ([`record::parse`]; samples
//! of any `sample_type` by [`sample::parse_sample`]).
//!
//! ```no_run
//! use loupe_perf::{Sampler, SamplerConfig};
//! let mut s = Sampler::open(&SamplerConfig::default()).unwrap();
//! s.enable().unwrap();
//! let mut records = Vec::new();
//! s.poll(std::time::Duration::from_millis(100)).unwrap();
//! s.drain(&mut records);
//! ```

mod child;
pub mod counting;
mod events;
pub mod record;
pub mod ring;
pub mod sample;
pub mod sys;

pub use child::GatedChild;
pub use events::{close_matches, is_hardware, known_events, parse_event, probe_events, probe_events_for, EventSpec, Exclude};
pub use record::{Mmap, Record, Sample, UserRegs};
pub use sample::{parse_sample, BranchEntry, Format, Layout, SampleError, SampleErrorKind};

use ring::Ring;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;
use std::time::Duration;
use sys::PerfEventAttr;

#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// perf_event_paranoid or missing capabilities.
    Permission,
    UnknownEvent {
        name: String,
        known: Vec<String>,
    },
    NotSupported {
        event: String,
    },
    TooManyFiles,
    /// A branch stack was asked for and the CPU (or the VM's virtual PMU)
    /// has none: no LBR, BRS or BRBE.
    NoBranchStack,
    /// A process to attach to does not exist.
    NoSuchProcess,
    Io,
}

/// One-line, actionable error.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct Error {
    kind: ErrorKind,
    message: String,
}

impl Error {
    pub fn new(kind: ErrorKind, message: String) -> Error {
        Error { kind, message }
    }
    pub fn kind(&self) -> &ErrorKind {
        &self.kind
    }
    fn io(what: &str, e: std::io::Error) -> Error {
        Error::new(ErrorKind::Io, format!("{what}: {e}"))
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    SystemWide,
    /// That process and all its descendants.
    Process {
        pid: i32,
    },
    /// Running processes (perf's `-p`): every thread they have when the
    /// sampler opens, and the threads and children those create later.
    Attach {
        pids: Vec<i32>,
    },
    /// One thread, on whichever CPU it runs: one event and one ring in all
    /// (what a measurement of the calling thread needs, on any number of CPUs).
    Thread {
        tid: i32,
    },
}

#[derive(Clone, Debug)]
pub struct SamplerConfig {
    pub events: Vec<EventSpec>,
    /// Mean samples per second per CPU per event.
    pub freq_hz: u64,
    pub target: Target,
    pub callchain: bool,
    /// Bytes of user stack copied with each sample (with the user
    /// registers) for DWARF unwinding in the collector; 0 = none.
    pub user_stack_bytes: u32,
    /// Data pages per CPU ring, a power of two.
    pub ring_pages: usize,
    pub enable_on_exec: bool,
    /// Period jitter: each period is uniform in [P(1-r), P(1+r)].
    pub randomize: f64,
    /// `branch_sample_type` for the hardware events' samples (see
    /// [`sys::branch`]); 0 = no branch stack. Software events never carry one.
    pub branch_stack: u64,
    /// Stamp records with CLOCK_MONOTONIC (what eBPF's `bpf_ktime_get_ns`
    /// reads) instead of the perf clock, so they order against eBPF events.
    pub monotonic_clock: bool,
    /// Sample user space only (`exclude_kernel`, `exclude_hv`: perf's `:u`),
    /// what `kernel.perf_event_paranoid = 2` allows without CAP_PERFMON.
    pub exclude_kernel: bool,
}

impl Default for SamplerConfig {
    fn default() -> Self {
        SamplerConfig {
            events: vec![parse_event("cpu-clock").expect("known event")],
            freq_hz: 1000,
            target: Target::SystemWide,
            callchain: false,
            user_stack_bytes: 0,
            ring_pages: 128,
            enable_on_exec: false,
            randomize: 0.1,
            branch_stack: 0,
            monotonic_clock: false,
            exclude_kernel: false,
        }
    }
}

struct Event {
    fd: OwnedFd,
    index: usize,
    /// Nominal period; `None` for events sampled in frequency mode.
    period: Option<u64>,
    /// Whether a change of rate moves the period (not for tracepoints: each hit is a sample).
    scales: bool,
}

pub struct Sampler {
    events: Vec<Event>,
    rings: Vec<Ring>,
    cpus: Vec<u32>,
    layout: Layout,
    rng: u64,
    randomize: f64,
    samples: u64,
    lost: u64,
    malformed: u64,
    period_sums: Vec<(u64, u64)>,
    /// Mean samples/s per CPU the nominal periods correspond to.
    freq_hz: u64,
    /// Whether the events count their lost samples (`FORMAT_LOST`).
    lost_count: bool,
}

/// CPU time of the calling thread (CLOCK_THREAD_CPUTIME_ID), in ns: what
/// cpu-clock samples of the thread are proportional to.
pub fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec for the call's duration.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The threads of a process now, from /proc/PID/task (none if it is gone).
pub fn threads_of(pid: i32) -> Vec<i32> {
    let Ok(rd) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return Vec::new() };
    rd.flatten().filter_map(|e| e.file_name().to_str()?.parse().ok()).collect()
}

/// The processes descended from `pids` now (children, their children...),
/// from the parent pids in /proc/*/stat.
pub fn descendants_of(pids: &[i32]) -> Vec<i32> {
    let Ok(rd) = std::fs::read_dir("/proc") else { return Vec::new() };
    let all: Vec<(i32, i32)> = rd
        .flatten()
        .filter_map(|e| {
            let pid: i32 = e.file_name().to_str()?.parse().ok()?;
            Some((pid, parent_in_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)?))
        })
        .collect();
    let mut found: Vec<i32> = Vec::new();
    let mut frontier: Vec<i32> = pids.to_vec();
    while let Some(p) = frontier.pop() {
        for &(child, parent) in &all {
            if parent == p && !found.contains(&child) && !pids.contains(&child) {
                found.push(child);
                frontier.push(child);
            }
        }
    }
    found
}

/// The parent pid in a /proc/PID/stat line (after the command name,
/// which may itself hold ") ": the state, then the parent).
fn parent_in_stat(stat: &str) -> Option<i32> {
    let (_, rest) = stat.rsplit_once(") ")?;
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// Whether a process has ended: gone from /proc, or a zombie waiting for its parent.
pub fn has_exited(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the parenthesized command name, which may itself hold ") ".
        Ok(stat) => stat.rsplit_once(") ").is_none_or(|(_, rest)| rest.starts_with('Z') || rest.starts_with('X')),
        Err(_) => true,
    }
}

/// CPUs that are online, from sysfs (`0-3,5`).
pub fn online_cpus() -> Vec<u32> {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap_or_else(|_| "0".into());
    parse_cpu_list(text.trim())
}

pub fn parse_cpu_list(s: &str) -> Vec<u32> {
    s.split(',')
        .filter_map(|part| match part.split_once('-') {
            Some((a, b)) => Some((a.parse().ok()?..=b.parse().ok()?).collect::<Vec<u32>>()),
            None => Some(vec![part.parse().ok()?]),
        })
        .flatten()
        .collect()
}

/// Nominal sampling period for an event at `freq` samples/s: nanoseconds
/// for the clocks, cycles for cycle counters. Other events sample in
/// frequency mode (the kernel adapts the period) and are not randomized.
fn nominal_period(e: &EventSpec, freq: u64) -> Option<u64> {
    match (e.type_, e.config) {
        (sys::PERF_TYPE_TRACEPOINT, _) => Some(1),
        (sys::PERF_TYPE_SOFTWARE, 0 | 1) => Some((1_000_000_000 / freq).max(1000)),
        (sys::PERF_TYPE_HARDWARE, 0 | 1 | 6 | 9) => Some((cpu_hz() / freq).max(10_000)),
        _ => None,
    }
}

fn cpu_hz() -> u64 {
    let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let mhz: f64 = info.lines().find_map(|l| l.strip_prefix("cpu MHz")?.split(':').nth(1)?.trim().parse().ok()).unwrap_or(2000.0);
    (mhz * 1e6) as u64
}

/// What a branch-stack open that the hardware refused means, for the user.
pub const NO_BRANCH_STACK: &str = "this CPU or VM exposes no branch stack (LBR)";

fn open_error(e: &EventSpec, err: std::io::Error, branches: bool) -> Error {
    match err.raw_os_error() {
        Some(libc::ENOENT) | Some(libc::EOPNOTSUPP) | Some(libc::ENODEV) if branches => {
            Error::new(ErrorKind::NoBranchStack, format!("{NO_BRANCH_STACK} ({} with a branch stack: {err})", e.name))
        }
        Some(libc::EACCES) | Some(libc::EPERM) => {
            let paranoid = std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid").unwrap_or_default();
            Error::new(
                ErrorKind::Permission,
                format!(
                    "perf_event_open failed: permission denied (kernel.perf_event_paranoid = {}); run as root, grant CAP_PERFMON (and CAP_SYS_ADMIN for kernel samples), or lower it: sysctl -w kernel.perf_event_paranoid=-1",
                    paranoid.trim()
                ),
            )
        }
        Some(libc::ENOENT) | Some(libc::EOPNOTSUPP) | Some(libc::ENODEV) => Error::new(
            ErrorKind::NotSupported { event: e.name.clone() },
            format!("event {} is not supported on this machine ({}; no hardware PMU?)", e.name, err),
        ),
        Some(libc::EMFILE) => {
            Error::new(ErrorKind::TooManyFiles, "perf_event_open: too many open files; raise the limit (ulimit -n)".into())
        }
        _ => Error::io(&format!("perf_event_open({})", e.name), err),
    }
}

impl Sampler {
    pub fn open(cfg: &SamplerConfig) -> Result<Sampler, Error> {
        let cpus = online_cpus();
        let branch_events: Vec<usize> = if cfg.branch_stack == 0 {
            Vec::new()
        } else {
            cfg.events.iter().enumerate().filter(|(_, e)| is_hardware(e)).map(|(i, _)| i).collect()
        };
        if cfg.branch_stack != 0 && branch_events.is_empty() {
            let names: Vec<&str> = cfg.events.iter().map(|e| e.name.as_str()).collect();
            return Err(Error::new(
                ErrorKind::NotSupported { event: names.join(",") },
                format!("a branch stack (LBR) comes with samples of a hardware event such as cycles; {} has none", names.join(", ")),
            ));
        }
        let mut s = Sampler {
            events: Vec::new(),
            rings: Vec::new(),
            cpus: cpus.clone(),
            layout: Layout::default(),
            rng: seed(),
            randomize: cfg.randomize.clamp(0.0, 0.5),
            samples: 0,
            lost: 0,
            malformed: 0,
            period_sums: vec![(0, 0); cfg.events.len()],
            freq_hz: cfg.freq_hz,
            lost_count: true,
        };
        if let Target::Thread { tid } = cfg.target {
            s.cpus.clear();
            s.open_cpu(cfg, tid, -1, None)?;
            return Ok(s);
        }
        let pid = match cfg.target {
            Target::Process { pid } => pid,
            _ => -1,
        };
        let formats: Vec<Format> = cfg.events.iter().map(|e| Format::of(&s.attr(cfg, e, None, false))).collect();
        s.layout.format = formats.first().copied().unwrap_or_default();
        s.layout.per_event = formats.into_iter().enumerate().collect();
        if let Target::Attach { pids } = &cfg.target {
            s.attach(cfg, pids)?;
            return Ok(s);
        }
        for &cpu in &cpus {
            s.open_cpu(cfg, pid, cpu as i32, None)?;
        }
        Ok(s)
    }

    /// Opens per-thread events, on every CPU, for each thread of `pids`,
    /// all of a CPU's writing into one ring. `inherit` covers only tasks
    /// created after the open, so existing threads each need their own;
    /// the task lists are read again until no thread appeared meanwhile.
    fn attach(&mut self, cfg: &SamplerConfig, pids: &[i32]) -> Result<(), Error> {
        let mut done: std::collections::HashSet<i32> = std::collections::HashSet::new();
        let mut leaders: Vec<Option<i32>> = vec![None; self.cpus.len()];
        loop {
            let fresh: Vec<i32> = pids.iter().flat_map(|&p| threads_of(p)).filter(|t| !done.contains(t)).collect();
            if fresh.is_empty() {
                break;
            }
            for tid in fresh {
                for (i, &cpu) in self.cpus.clone().iter().enumerate() {
                    match self.open_cpu(cfg, tid, cpu as i32, leaders[i]) {
                        Ok(leader) => leaders[i] = Some(leader),
                        // The thread ended between the listing and the open.
                        Err(_) if !Path::new(&format!("/proc/{tid}")).exists() => break,
                        Err(e) => return Err(e),
                    }
                }
                done.insert(tid);
            }
        }
        if done.is_empty() {
            let list: Vec<String> = pids.iter().map(|p| p.to_string()).collect();
            return Err(Error::new(ErrorKind::NoSuchProcess, format!("no such process: {}", list.join(", "))));
        }
        Ok(())
    }

    /// Opens the events of one task (or all, -1) on one CPU; the first maps
    /// a ring unless `ring_of` names an event whose ring they all share.
    /// Returns the fd that owns the ring.
    fn open_cpu(&mut self, cfg: &SamplerConfig, pid: i32, cpu: i32, ring_of: Option<i32>) -> Result<i32, Error> {
        let mut leader: Option<i32> = None;
        for (index, e) in cfg.events.iter().enumerate() {
            let period = nominal_period(e, cfg.freq_hz);
            let mut attr = self.attr(cfg, e, period, leader.is_none());
            let fd = loop {
                match sys::perf_event_open(&attr, pid, cpu, -1) {
                    Err(err) if err.raw_os_error() == Some(libc::EINVAL) && attr.read_format != 0 => {
                        // Kernels before 6.0 have no lost-sample count.
                        attr.read_format = 0;
                        self.lost_count = false;
                    }
                    Err(err) if err.raw_os_error() == Some(libc::EINVAL) && attr.flags & sys::flag::BUILD_ID != 0 => {
                        // Kernels before 5.12 have no build-ids in MMAP2.
                        attr.flags &= !sys::flag::BUILD_ID;
                    }
                    r => break r,
                }
            }
            .map_err(|err| open_error(e, err, attr.sample_type & sys::SAMPLE_BRANCH_STACK != 0))?;
            let raw = fd.as_raw_fd();
            match leader.or(ring_of) {
                None => {
                    self.rings.push(Ring::map(raw, cfg.ring_pages).map_err(|err| Error::io("mmap of perf ring buffer", err))?);
                    leader = Some(raw);
                }
                Some(l) => {
                    sys::ioctl(raw, sys::IOC_SET_OUTPUT, l as libc::c_ulong).map_err(|err| Error::io("PERF_EVENT_IOC_SET_OUTPUT", err))?;
                    leader.get_or_insert(l);
                }
            }
            let id = sys::event_id(raw).map_err(|err| Error::io("PERF_EVENT_IOC_ID", err))?;
            self.layout.ids.push((id, index));
            self.events.push(Event { fd, index, period, scales: !e.is_tracepoint() });
        }
        Ok(ring_of.or(leader).unwrap_or(-1))
    }

    fn attr(&self, cfg: &SamplerConfig, e: &EventSpec, period: Option<u64>, sideband: bool) -> PerfEventAttr {
        use sys::flag::*;
        let mut flags = SAMPLE_ID_ALL | WATERMARK;
        flags |= if cfg.enable_on_exec { ENABLE_ON_EXEC | DISABLED } else { DISABLED };
        if matches!(cfg.target, Target::Process { .. } | Target::Attach { .. }) {
            flags |= INHERIT;
        }
        if e.exclude.user {
            flags |= EXCLUDE_USER;
        }
        if e.exclude.kernel {
            // As perf's `:u`: the hypervisor is not user space either.
            flags |= EXCLUDE_KERNEL | EXCLUDE_HV;
        }
        if sideband {
            flags |= MMAP | MMAP2 | COMM | COMM_EXEC | TASK | BUILD_ID;
        }
        if cfg.monotonic_clock {
            flags |= USE_CLOCKID;
        }
        if cfg.exclude_kernel {
            flags |= EXCLUDE_KERNEL | EXCLUDE_HV;
        }
        let mut sample_type =
            sys::SAMPLE_IDENTIFIER | sys::SAMPLE_IP | sys::SAMPLE_TID | sys::SAMPLE_TIME | sys::SAMPLE_CPU | sys::SAMPLE_PERIOD;
        if cfg.callchain {
            sample_type |= sys::SAMPLE_CALLCHAIN;
        }
        let mut branch_sample_type = 0;
        if cfg.branch_stack != 0 && is_hardware(e) {
            sample_type |= sys::SAMPLE_BRANCH_STACK;
            branch_sample_type = cfg.branch_stack;
        }
        let (mut sample_regs_user, mut sample_stack_user) = (0, 0);
        if cfg.user_stack_bytes > 0 {
            sample_type |= sys::SAMPLE_REGS_USER | sys::SAMPLE_STACK_USER;
            sample_regs_user = sys::USER_REGS_MASK;
            // The kernel wants a multiple of 8.
            sample_stack_user = cfg.user_stack_bytes.next_multiple_of(8);
        }
        let rate = match period {
            Some(p) => p,
            None => {
                flags |= FREQ;
                cfg.freq_hz
            }
        };
        PerfEventAttr {
            type_: e.type_,
            size: sys::ATTR_SIZE,
            config: e.config,
            sample_period_or_freq: rate,
            sample_type,
            flags,
            // Wake the reader when a quarter of the ring is full.
            wakeup_events_or_watermark: (cfg.ring_pages * ring::page_size() / 4) as u32,
            sample_max_stack: 127,
            read_format: if self.lost_count { sys::FORMAT_LOST } else { 0 },
            sample_regs_user,
            sample_stack_user,
            branch_sample_type,
            clockid: if cfg.monotonic_clock { libc::CLOCK_MONOTONIC } else { 0 },
            ..Default::default()
        }
    }

    pub fn enable(&self) -> Result<(), Error> {
        self.each_ioctl(sys::IOC_ENABLE, "PERF_EVENT_IOC_ENABLE")
    }

    pub fn disable(&self) -> Result<(), Error> {
        self.each_ioctl(sys::IOC_DISABLE, "PERF_EVENT_IOC_DISABLE")
    }

    /// Duplicates of the events' descriptors, for another thread to pause
    /// sampling with (`loupe record --count` stops it while breakpoints trap).
    pub fn dup_fds(&self) -> std::io::Result<Vec<std::os::fd::OwnedFd>> {
        self.events.iter().map(|e| e.fd.try_clone()).collect()
    }

    fn each_ioctl(&self, req: libc::c_ulong, what: &str) -> Result<(), Error> {
        for e in &self.events {
            sys::ioctl(e.fd.as_raw_fd(), req, 0).map_err(|err| Error::io(what, err))?;
        }
        Ok(())
    }

    /// Blocks until a ring passes its watermark or `timeout` runs out.
    pub fn poll(&self, timeout: Duration) -> Result<(), Error> {
        let mut fds: Vec<libc::pollfd> = self
            .events
            .iter()
            .step_by(self.period_sums.len().max(1))
            .map(|e| libc::pollfd { fd: e.fd.as_raw_fd(), events: libc::POLLIN, revents: 0 })
            .collect();
        // SAFETY: `fds` is a valid array of pollfd of the length passed.
        let rc = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout.as_millis() as i32) };
        if rc < 0 {
            let err = std::io::Error::last_os_error();
            if err.kind() != std::io::ErrorKind::Interrupted {
                return Err(Error::io("poll", err));
            }
        }
        Ok(())
    }

    /// Moves every complete record out of every ring.
    pub fn drain(&mut self, out: &mut Vec<Record>) {
        let layout = &self.layout;
        let (mut samples, mut lost, mut malformed) = (0, 0, 0);
        let sums = &mut self.period_sums;
        for ring in &mut self.rings {
            ring.read(|bytes| match record::parse(bytes, layout) {
                Some(r) => {
                    match &r {
                        Record::Sample(s) => {
                            samples += 1;
                            if let Some(x) = sums.get_mut(s.event_index) {
                                x.0 += s.period;
                                x.1 += 1;
                            }
                        }
                        Record::Lost { lost: n, .. } => lost += n,
                        _ => {}
                    }
                    out.push(r);
                }
                None => malformed += 1,
            });
        }
        self.samples += samples;
        self.lost += lost;
        self.malformed += malformed;
    }

    /// Gives every event a fresh random period (DCPI §4.1.1).
    pub fn rerandomize(&mut self) {
        for e in &self.events {
            if let Some(p) = e.period {
                let next = jittered(p, self.randomize, &mut self.rng);
                let _ = sys::set_period(e.fd.as_raw_fd(), next);
            }
        }
    }

    /// Changes the mean sampling rate of every periodic event (the overhead
    /// budget moves it as load changes); takes effect at once with a fresh
    /// random period. Events in frequency mode keep their kernel-chosen rate.
    pub fn set_freq(&mut self, freq_hz: u64) {
        let freq_hz = freq_hz.max(1);
        let old = self.freq_hz;
        for e in self.events.iter_mut().filter(|e| e.scales) {
            if let Some(p) = e.period.as_mut() {
                *p = (*p as u128 * old as u128 / freq_hz as u128).max(1000) as u64;
            }
        }
        self.freq_hz = freq_hz;
        self.rerandomize();
    }

    /// Mean samples/s per CPU per periodic event.
    pub fn freq(&self) -> u64 {
        self.freq_hz
    }

    pub fn cpus(&self) -> &[u32] {
        &self.cpus
    }

    pub fn samples_seen(&self) -> u64 {
        self.samples
    }

    /// Records the kernel could not write because the ring was full, as
    /// its PERF_RECORD_LOST records said. Losses after the last record the
    /// kernel wrote are not in it yet; [`Sampler::lost_by_kernel`] has them.
    pub fn lost(&self) -> u64 {
        self.lost
    }

    /// Samples the kernel could not write because the ring was full, from
    /// each event's own counter (a read() with `FORMAT_LOST`, kernel 6.0+;
    /// `None` before): the count PERF_RECORD_LOST reports later.
    pub fn lost_by_kernel(&self) -> Option<u64> {
        if !self.lost_count {
            return None;
        }
        let mut total = 0;
        for e in &self.events {
            let mut buf = [0u64; 2];
            // SAFETY: reading at most 16 bytes into a 16-byte buffer we own.
            let n = unsafe { libc::read(e.fd.as_raw_fd(), buf.as_mut_ptr().cast(), 16) };
            if n != 16 {
                return None;
            }
            total += buf[1];
        }
        Some(total)
    }

    pub fn malformed(&self) -> u64 {
        self.malformed
    }

    /// Mean period of the samples of one event so far.
    pub fn mean_period(&self, event_index: usize) -> u64 {
        self.period_sums.get(event_index).map_or(0, |(sum, n)| if *n > 0 { sum / n } else { 0 })
    }

    /// Event index of each open fd (for callers that attach programs to them).
    pub fn event_fds(&self) -> impl Iterator<Item = (usize, i32)> + '_ {
        self.events.iter().map(|e| (e.index, e.fd.as_raw_fd()))
    }
}

/// Whether this machine records branch stacks with `branch_sample_type`:
/// opens (and closes) a cycles event of this process that asks for one.
/// The error says what is missing: [`ErrorKind::NoBranchStack`] when the
/// CPU or VM has no LBR (or no PMU at all), a permission error otherwise.
pub fn probe_branch_stack(branch_sample_type: u64) -> Result<(), Error> {
    let cycles = parse_event("cycles")?;
    let attr = PerfEventAttr {
        type_: cycles.type_,
        size: sys::ATTR_SIZE,
        config: cycles.config,
        sample_period_or_freq: 1_000_000,
        sample_type: sys::SAMPLE_IP | sys::SAMPLE_BRANCH_STACK,
        branch_sample_type,
        flags: sys::flag::DISABLED,
        ..Default::default()
    };
    sys::perf_event_open(&attr, 0, -1, -1).map(drop).map_err(|err| open_error(&cycles, err, true))
}

fn seed() -> u64 {
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    t ^ ((std::process::id() as u64) << 32) | 1
}

/// splitmix64: small, fast, good enough to decorrelate periods.
fn next_random(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e3779b97f4a7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d049bb133111eb);
    z ^ (z >> 31)
}

/// A period uniform in [p(1-r), p(1+r)].
pub fn jittered(p: u64, r: f64, state: &mut u64) -> u64 {
    let span = (p as f64 * r) as u64;
    if span == 0 {
        return p;
    }
    p - span + next_random(state) % (2 * span + 1)
}

#[cfg(test)]
mod tests {

    #[test]
    fn parent_pid_is_read_past_a_command_name_with_parentheses() {
        // Checks parent_in_stat on literal /proc/PID/stat lines, one whose command name holds ") ".
        assert_eq!(parent_in_stat("4242 (sh) S 4100 4242 4100 0 -1"), Some(4100));
        assert_eq!(parent_in_stat("77 (a) b (c) R 1 77 77 0"), Some(1));
        assert_eq!(parent_in_stat("garbage"), None);
    }

    #[test]
    fn descendants_include_a_child_and_its_child() {
        // Checks descendants_of on this test's own sh -c 'sleep' tree: the shell and its sleep, not the test itself.
        let mut sh = std::process::Command::new("/bin/sh").args(["-c", "sleep 5; true"]).spawn().unwrap();
        let me = std::process::id() as i32;
        let shell = sh.id() as i32;
        let started = std::time::Instant::now();
        let mut d = descendants_of(&[me]);
        while d.len() < 2 && started.elapsed() < std::time::Duration::from_secs(5) {
            std::thread::sleep(std::time::Duration::from_millis(20));
            d = descendants_of(&[me]);
        }
        sh.kill().unwrap();
        sh.wait().unwrap();
        assert!(d.contains(&shell) && d.len() >= 2 && !d.contains(&me), "{d:?}");
    }

    use super::*;

    #[test]
    fn jitter_stays_in_bounds_and_is_centered() {
        // Checks the randomized period's range and mean.
        let mut st = 1;
        let v: Vec<u64> = (0..10_000).map(|_| jittered(1_000_000, 0.1, &mut st)).collect();
        assert!(v.iter().all(|&x| (900_000..=1_100_000).contains(&x)));
        let mean = v.iter().sum::<u64>() as f64 / v.len() as f64;
        assert!((mean - 1_000_000.0).abs() < 5_000.0, "{mean}");
        assert!(v.iter().collect::<std::collections::HashSet<_>>().len() > 9000);
    }

    #[test]
    fn cpu_lists_parse() {
        // Checks sysfs cpu list syntax.
        assert_eq!(parse_cpu_list("0-2,5"), vec![0, 1, 2, 5]);
        assert_eq!(parse_cpu_list("0"), vec![0]);
    }

    /// Spins until this thread has had `ms` of CPU time (not wall time: on a loaded machine a wall-clock burn gets
    /// a fraction of it, and fewer samples), capped at 20x in wall time.
    fn burn(ms: u64) -> u32 {
        let cpu = || Duration::from_nanos(thread_cpu_ns());
        let (t, c0) = (std::time::Instant::now(), cpu());
        let mut x = 0u64;
        while cpu() - c0 < Duration::from_millis(ms) && t.elapsed() < Duration::from_millis(20 * ms) {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            std::hint::black_box(x);
        }
        // SAFETY: gettid has no preconditions.
        unsafe { libc::gettid() as u32 }
    }

    #[test]
    fn system_wide_sampling_sees_a_busy_thread_and_new_mappings() {
        // Checks live sampling: rate, the busy thread's tid, and an MMAP2 for a file mapped after start.
        let mut s = Sampler::open(&SamplerConfig::default()).expect("open sampler (run as root)");
        s.enable().unwrap();
        let f = tempfile_exec();
        let tid = std::thread::spawn(|| burn(500)).join().unwrap();
        s.disable().unwrap();
        let mut recs = Vec::new();
        s.drain(&mut recs);
        s.rerandomize();
        let busy = recs.iter().filter(|r| matches!(r, Record::Sample(x) if x.tid == tid)).count();
        // 500 ms of the thread's CPU time at 1000 samples/s: about 500 samples.
        assert!(busy > 350, "only {busy} samples of the busy thread");
        assert!(recs.iter().any(|r| matches!(r, Record::Mmap(m) if m.filename == f)), "no MMAP2 for {f}");
        assert!(s.mean_period(0) >= 900_000 && s.mean_period(0) <= 1_100_000);
    }

    /// Maps /bin/true executable into this process and returns its path.
    fn tempfile_exec() -> String {
        let path = std::ffi::CString::new("/bin/true").unwrap();
        // SAFETY: plain open/mmap of a readable file; the mapping is leaked on purpose.
        unsafe {
            let fd = libc::open(path.as_ptr(), libc::O_RDONLY);
            assert!(fd >= 0);
            let p = libc::mmap(std::ptr::null_mut(), 4096, libc::PROT_READ | libc::PROT_EXEC, libc::MAP_PRIVATE, fd, 0);
            assert_ne!(p, libc::MAP_FAILED);
            libc::close(fd);
        }
        std::fs::canonicalize("/bin/true").unwrap().to_string_lossy().into_owned()
    }

    #[test]
    fn branch_stack_probe_names_what_is_missing() {
        // Checks the LBR probe against the machine: without a hardware PMU (this VM) it must fail with
        // NoBranchStack and the specific message; with one it either works or fails the same specific way.
        let pmu = probe_events().iter().any(|(e, r)| e.name == "cycles" && r.is_ok());
        match probe_branch_stack(sys::branch::ANY | sys::branch::USER) {
            Ok(()) => assert!(pmu, "a branch stack opened without a cycles counter"),
            Err(e) => {
                assert_eq!(e.kind(), &ErrorKind::NoBranchStack, "{e}");
                let msg = e.to_string();
                assert!(msg.starts_with("this CPU or VM exposes no branch stack (LBR) (cycles with a branch stack: "), "{msg}");
                assert!(!msg.contains('\n'));
            }
        }
    }

    #[test]
    fn branch_stack_needs_a_hardware_event() {
        // Checks that asking for branches with only software events is refused before any open, by name.
        let cfg = SamplerConfig { branch_stack: sys::branch::ANY | sys::branch::USER, ..Default::default() };
        let msg = Sampler::open(&cfg).err().expect("refused").to_string();
        assert!(msg.contains("hardware event such as cycles") && msg.contains("cpu-clock"), "{msg}");
    }

    #[test]
    fn process_target_samples_only_that_tree() {
        // Checks inherit + enable_on_exec: samples come only from the gated child and its children.
        let mut child = GatedChild::spawn("/bin/sh", &["-c".into(), "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done".into()]).unwrap();
        let cfg = SamplerConfig { target: Target::Process { pid: child.pid }, enable_on_exec: true, ..Default::default() };
        let mut s = Sampler::open(&cfg).unwrap();
        child.release().unwrap();
        assert_eq!(child.wait().unwrap(), 0);
        let mut recs = Vec::new();
        s.drain(&mut recs);
        let pids: std::collections::HashSet<u32> =
            recs.iter().filter_map(|r| if let Record::Sample(x) = r { Some(x.pid) } else { None }).collect();
        assert!(!pids.is_empty(), "no samples");
        assert_eq!(pids, [child.pid as u32].into_iter().collect());
    }
}
