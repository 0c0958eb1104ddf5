//! Collecting access samples: per-CPU sampling events on a process tree,
//! each sample's instruction read from the process and interpreted
//! (or, with a memory-sampling PMU, its hardware address taken), appended to
//! the access log as it arrives.

use crate::error::{err, ErrorKind, Result};
use crate::interp::{self, Kind, NoAccess};
use crate::log::{AccessRecord, Source, Status, Writer};
use crate::pmu::{self, PmuEvent};
use crate::regs;
use crate::sample::{self, RawSample};
use loupe_perf::ring::{self, Ring};
use loupe_perf::sys::{self, PerfEventAttr};
use loupe_perf::{Format, Layout};
use std::collections::HashMap;
use std::fs::File;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const CLOCK_MONOTONIC: i32 = 1;
const PRECISE_SHIFT: u32 = 15;
const RING_PAGES: usize = 64;
/// One in this many loads when a PMU samples memory accesses.
const PMU_PERIOD: u64 = 10_007;

/// Which path the samples take; every view says which.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SamplePath {
    /// cpu-clock samples + instruction interpretation.
    Timer {
        freq_hz: u64,
    },
    Pmu(PmuEvent),
}

impl SamplePath {
    pub fn describe(&self) -> String {
        match self {
            SamplePath::Timer { freq_hz } => {
                format!("cpu-clock samples at {freq_hz} Hz per CPU, data address by instruction interpretation")
            }
            SamplePath::Pmu(e) => format!("{} samples (one in {PMU_PERIOD}), data address from the PMU", e.name),
        }
    }
}

#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct Summary {
    pub source: String,
    pub freq_hz: u64,
    pub samples: u64,
    pub with_address: u64,
    pub lost: u64,
    pub start_ns: u64,
    pub end_ns: u64,
    pub cpus: usize,
    /// CPU time the recording process used while sampling (all its threads,
    /// from the first drain to the end: start-up excluded), ns.
    pub self_cpu_ns: u64,
}

pub struct Recorder {
    fds: Vec<OwnedFd>,
    rings: Vec<Ring>,
    /// The sample format the events were opened with.
    layout: Layout,
    path: SamplePath,
    writer: Writer,
    db: PathBuf,
    code: CodeReader,
    maps_taken: HashMap<u32, Instant>,
    summary: Summary,
    batch: Vec<AccessRecord>,
    /// Process CPU time at the first drain.
    cpu_at_start: Option<u64>,
}

impl Recorder {
    /// Opens disabled events that follow `pid` and its descendants from its
    /// next exec (`None`: every process; call [`Recorder::enable`]).
    /// `try_pmu`: use a memory-sampling PMU event if the machine has one.
    pub fn open(db: &Path, pid: Option<i32>, freq_hz: u64, try_pmu: bool) -> Result<Recorder> {
        let cpus = loupe_perf::online_cpus();
        let writer = Writer::create(db).map_err(|e| err(ErrorKind::Log, format_args!("creating the access log in {}", db.display()), e))?;
        let pmu_event = if try_pmu { pmu::detect() } else { None };
        let mut rec = Recorder {
            fds: Vec::new(),
            rings: Vec::new(),
            layout: Layout::default(),
            path: SamplePath::Timer { freq_hz },
            writer,
            db: db.to_path_buf(),
            code: CodeReader::default(),
            maps_taken: HashMap::new(),
            summary: Summary { freq_hz, start_ns: monotonic_ns(), cpus: cpus.len(), ..Default::default() },
            batch: Vec::new(),
            cpu_at_start: None,
        };
        if let Some(e) = pmu_event {
            match rec.open_all(&cpus, pid, Some(&e), freq_hz) {
                Ok(()) => rec.path = SamplePath::Pmu(e),
                Err(err) => {
                    eprintln!("loupe: {} does not open ({err:#}); using timer samples with instruction interpretation", e.name);
                    rec.fds.clear();
                    rec.rings.clear();
                }
            }
        }
        if rec.fds.is_empty() {
            rec.open_all(&cpus, pid, None, freq_hz)?;
        }
        rec.summary.source = rec.path.describe();
        Ok(rec)
    }

    fn open_all(&mut self, cpus: &[u32], pid: Option<i32>, pmu: Option<&PmuEvent>, freq_hz: u64) -> Result<()> {
        let attr = attr(pmu, freq_hz, pid.is_some());
        let pid = pid.unwrap_or(-1);
        self.layout = Layout::new(Format::of(&attr));
        for &cpu in cpus {
            let fd = sys::perf_event_open(&attr, pid, cpu as i32, -1)
                .map_err(|e| err(ErrorKind::Sampling, format_args!("perf_event_open on CPU {cpu}"), e))?;
            let ring = Ring::map(fd.as_raw_fd(), RING_PAGES).map_err(|e| err(ErrorKind::Sampling, "mmap of the perf ring", e))?;
            self.fds.push(fd);
            self.rings.push(ring);
        }
        Ok(())
    }

    /// Starts system-wide sampling (a command's starts at its exec).
    pub fn enable(&self) -> Result<()> {
        for f in &self.fds {
            sys::ioctl(f.as_raw_fd(), sys::IOC_ENABLE, 0).map_err(|e| err(ErrorKind::Sampling, "PERF_EVENT_IOC_ENABLE", e))?;
        }
        Ok(())
    }

    pub fn path(&self) -> &SamplePath {
        &self.path
    }

    /// Waits up to `timeout` for data, then interprets and logs every sample.
    pub fn pump(&mut self, timeout: Duration) -> Result<()> {
        self.cpu_at_start.get_or_insert_with(self_cpu_ns);
        let mut fds: Vec<libc::pollfd> =
            self.fds.iter().map(|f| libc::pollfd { fd: f.as_raw_fd(), events: libc::POLLIN, revents: 0 }).collect();
        // SAFETY: `fds` is a valid array of pollfd of the length passed.
        unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout.as_millis() as i32) };
        self.drain()
    }

    fn drain(&mut self) -> Result<()> {
        let mut raw = Vec::new();
        let mut lost = 0;
        let layout = &self.layout;
        for ring in &mut self.rings {
            ring.read(|b| {
                let kind = u32::from_ne_bytes(b[0..4].try_into().expect("header"));
                if kind == sys::RECORD_SAMPLE {
                    raw.extend(sample::read(layout, b));
                } else if kind == sys::RECORD_LOST && b.len() >= 24 {
                    lost += u64::from_ne_bytes(b[16..24].try_into().expect("8 bytes"));
                }
            });
        }
        self.summary.lost += lost;
        for s in raw {
            self.snapshot_maps(s.pid);
            let r = self.interpret(&s);
            self.summary.samples += 1;
            self.summary.with_address += r.has_addr() as u64;
            self.batch.push(r);
        }
        self.writer.append(&self.batch).map_err(|e| err(ErrorKind::Log, "writing the access log", e))?;
        self.batch.clear();
        Ok(())
    }

    fn interpret(&mut self, s: &RawSample) -> AccessRecord {
        let source = if s.addr.is_some() { Source::Pmu } else { Source::Interpretation };
        let mut r = AccessRecord {
            time: s.time,
            ip: s.ip,
            addr: 0,
            base_offset: 0,
            data_src: s.data_src.unwrap_or(0),
            pid: s.pid,
            tid: s.tid,
            cpu: s.cpu,
            weight: s.weight.unwrap_or(0).min(u32::MAX as u64) as u32,
            size: 0,
            kind: Kind::Read,
            base: None,
            status: Status::Kernel,
            source,
            back: 0,
        };
        if !s.user {
            if let Some(a) = s.addr {
                r.addr = a;
                r.status = Status::Ok;
            }
            return r;
        }
        let Some(code) = self.code.read(&self.db, s.pid, s.ip) else {
            r.status = Status::NoCode;
            return r;
        };
        let regs = s.regs.unwrap_or_default();
        // With a PMU the hardware names the instruction (precise IP); without, time goes to the one retiring at the interrupt.
        let charged = if s.addr.is_some() {
            interp::access(&code.at, s.ip, &regs).map(|a| (a, 0))
        } else {
            interp::charged_access_from(&code.before, &code.at, s.ip, code.previous, &regs)
        };
        match charged {
            Ok((a, back)) => {
                // The PMU's address is the truth when there is one; the decoded operand still gives size, kind and base.
                r.addr = s.addr.unwrap_or(a.addr);
                r.size = a.size.min(u16::MAX as u32) as u16;
                r.kind = a.kind;
                r.base = a.base_dwarf;
                r.base_offset = a.base_offset.wrapping_add(r.addr.wrapping_sub(a.addr) as i64);
                r.status = Status::Ok;
                r.back = back;
            }
            Err(e) => {
                r.status = match e {
                    NoAccess::NoMemory => Status::NoMemory,
                    NoAccess::Unknown => Status::Unknown,
                    NoAccess::Invalid => Status::Invalid,
                };
                if let Some(a) = s.addr {
                    r.addr = a;
                    r.status = Status::Ok;
                }
            }
        }
        r
    }

    /// Keeps a copy of each process's map, refreshed at most every 200 ms
    /// (it tells code from data, names images and finds .bss).
    fn snapshot_maps(&mut self, pid: u32) {
        let now = Instant::now();
        if self.maps_taken.get(&pid).is_some_and(|t| now.duration_since(*t) < Duration::from_millis(200)) {
            return;
        }
        self.maps_taken.insert(pid, now);
        // An exited (zombie) process reads as empty: keep the last real map.
        let text = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
        if !text.is_empty() {
            let _ = std::fs::write(crate::log::data_dir(&self.db).join("maps").join(pid.to_string()), text);
        }
    }

    /// Drains the rest, disables the events and writes `data/meta.json`.
    pub fn finish(mut self) -> Result<Summary> {
        for f in &self.fds {
            let _ = sys::ioctl(f.as_raw_fd(), sys::IOC_DISABLE, 0);
        }
        self.drain()?;
        self.summary.end_ns = monotonic_ns();
        self.summary.self_cpu_ns = self_cpu_ns().saturating_sub(self.cpu_at_start.unwrap_or(0));
        let meta = Meta { summary: self.summary.clone(), caches: crate::cache::Geometry::read_sysfs() };
        let p = crate::log::data_dir(&self.db).join("meta.json");
        let text = serde_json::to_vec_pretty(&meta).map_err(|e| err(ErrorKind::Log, format_args!("writing {}", p.display()), e))?;
        std::fs::write(&p, text).map_err(|e| err(ErrorKind::Log, format_args!("writing {}", p.display()), e))?;
        Ok(self.summary)
    }
}

/// `data/meta.json`.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Meta {
    pub summary: Summary,
    pub caches: Vec<crate::cache::Geometry>,
}

impl Meta {
    pub fn read(db: &Path) -> Result<Meta> {
        let p = crate::log::data_dir(db).join("meta.json");
        let bytes =
            std::fs::read(&p).map_err(|e| err(ErrorKind::Meta, format_args!("{} (record with `loupe record --data`)", p.display()), e))?;
        serde_json::from_slice(&bytes).map_err(|e| err(ErrorKind::Meta, format_args!("{}: bad JSON", p.display()), e))
    }
}

fn attr(pmu: Option<&PmuEvent>, freq_hz: u64, command: bool) -> PerfEventAttr {
    use sys::flag::*;
    let mut flags = DISABLED | WATERMARK | USE_CLOCKID | EXCLUDE_HV;
    if command {
        flags |= ENABLE_ON_EXEC | INHERIT;
    }
    let (type_, config, config1, period, sample_type) = match pmu {
        Some(e) => {
            flags |= (e.precise as u64) << PRECISE_SHIFT;
            (e.type_, e.config, e.config1, PMU_PERIOD, sample::PMU_TYPE)
        }
        None => (sys::PERF_TYPE_SOFTWARE, 0, 0, (1_000_000_000 / freq_hz.max(1)).max(10_000), sample::TIMER_TYPE),
    };
    PerfEventAttr {
        type_,
        size: sys::ATTR_SIZE,
        config,
        config1,
        sample_period_or_freq: period,
        sample_type,
        flags,
        wakeup_events_or_watermark: (RING_PAGES * ring::page_size() / 4) as u32,
        sample_regs_user: regs::MASK,
        clockid: CLOCK_MONOTONIC,
        ..Default::default()
    }
}

/// User + system CPU of this process (every thread), ns.
fn self_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec through a valid pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec through a valid pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Instruction bytes around sampled PCs: from the live process
/// (/proc/PID/mem, right for JIT code too), else from the mapped file per
/// the saved map; with the start of the instruction ending at the PC.
#[derive(Default)]
struct CodeReader {
    mem: HashMap<u32, Option<File>>,
    cache: HashMap<(u32, u64), std::rc::Rc<Code>>,
}

struct Code {
    before: Vec<u8>,
    at: Vec<u8>,
    previous: Option<u64>,
}

/// Bytes read before the PC to find the instruction that ends at it.
const BEFORE: u64 = 48;

impl CodeReader {
    fn read(&mut self, db: &Path, pid: u32, ip: u64) -> Option<std::rc::Rc<Code>> {
        if let Some(c) = self.cache.get(&(pid, ip)) {
            return Some(c.clone());
        }
        let f = self.mem.entry(pid).or_insert_with(|| File::open(format!("/proc/{pid}/mem")).ok());
        let (before, at) = match f.as_ref().and_then(|f| read_around(f, ip)) {
            Some(x) => x,
            None => from_file(db, pid, ip)?,
        };
        let previous = interp::previous_start(&before, ip);
        let code = std::rc::Rc::new(Code { before, at, previous });
        self.cache.insert((pid, ip), code.clone());
        Some(code)
    }
}

/// `BEFORE` bytes before `at` (none when they are unreadable) and 16 from it.
fn read_around(f: &File, at: u64) -> Option<(Vec<u8>, Vec<u8>)> {
    let mut buf = [0u8; 16];
    let n = f.read_at(&mut buf, at).ok().filter(|&n| n > 0)?;
    let mut before = vec![0u8; BEFORE as usize];
    let start = at.saturating_sub(BEFORE);
    let m = f.read_at(&mut before, start).unwrap_or(0);
    let before = if m == before.len() { before } else { Vec::new() };
    Some((before, buf[..n].to_vec()))
}

fn from_file(db: &Path, pid: u32, ip: u64) -> Option<(Vec<u8>, Vec<u8>)> {
    let text = std::fs::read_to_string(crate::log::data_dir(db).join("maps").join(pid.to_string())).ok()?;
    let maps = crate::maps::parse(&text);
    let (_, m) = crate::maps::find(&maps, ip)?;
    let f = File::open(&m.path).ok()?;
    // Not before the mapping's start: the bytes there belong to another section.
    let off = ip - m.start + m.pgoff;
    let (mut before, at) = read_around(&f, off)?;
    let room = (ip - m.start) as usize;
    if room < before.len() {
        before.drain(..before.len() - room);
    }
    Some((before, at))
}
