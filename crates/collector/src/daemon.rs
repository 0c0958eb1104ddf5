//! The collection loop shared by `loupe daemon` and `loupe record`: drain the
//! kernel's buffers, map and aggregate, merge into the database.
//!
//! Flushing is incremental (the next step DCPI §4.3.1 planned): the images
//! are split into [`FLUSH_SLICES`] groups and one group is merged every
//! `flush_every / FLUSH_SLICES`, so disk work is spread evenly and any
//! sample reaches the disk within one `flush_every`.

use crate::{Collector, KernelInfo, Stats};
use loupe_bpf::{AggEntry, BpfAggregator};
use loupe_model::EventName;
use loupe_perf::{Record, Sampler, SamplerConfig};
use loupe_store::{Database, EpochId};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Groups the images are split into for incremental flushing.
pub const FLUSH_SLICES: u64 = 10;

/// How often the BPF tables are drained (DCPI drained every few seconds;
/// longer intervals aggregate more but hold more in the kernel).
const BPF_DRAIN_EVERY: Duration = Duration::from_secs(1);

/// Keys per BPF table generation.
const BPF_TABLE_ENTRIES: u32 = 16384;

/// Which sample path to use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackendChoice {
    /// BPF when the kernel and privileges allow, else streaming.
    Auto,
    /// Every sample through the perf ring buffers, aggregated in the daemon.
    Stream,
    /// In-kernel aggregation; an error if BPF cannot be used.
    Bpf,
}

/// Longest the loop sleeps in `poll`; bounds the reaction time to control
/// commands and signals.
const POLL_TIMEOUT: Duration = Duration::from_millis(250);

pub type Result<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// One interval's worth of daemon accounting.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct IntervalReport {
    pub seconds: f64,
    pub stats: Stats,
    pub kernel_lost: u64,
    pub live_processes: usize,
    pub aggregated_entries: usize,
    pub images: usize,
    pub daemon_cpu_seconds: f64,
    pub cpu_us_per_sample: f64,
    pub rss_kib: u64,
    pub flush_bytes: u64,
    pub sample_period: u64,
    pub backend: &'static str,
    /// BPF backend: samples the program saw, entries that reached user
    /// space (table entries + evictions), evictions, drops, and the
    /// aggregation factor (samples per entry moved).
    pub bpf_samples: u64,
    pub bpf_entries_drained: u64,
    pub bpf_evicted: u64,
    pub bpf_dropped: u64,
    pub aggregation_factor: f64,
    /// Call stacks since start (count, DWARF unwinds, stopped before the root), when on.
    pub stacks: Option<crate::stacks::StackStats>,
}

/// A sampler feeding a collector feeding a database.
pub struct Engine {
    pub sampler: Sampler,
    pub collector: Collector,
    pub db: Database,
    records: Vec<Record>,
    flush_every: Duration,
    next_slice_at: Instant,
    slice: u64,
    pub flush_bytes: u64,
    pub problems: Vec<String>,
    pub started: Instant,
    bpf: Option<BpfAggregator>,
    entries: Vec<AggEntry>,
    last_drain: Instant,
    /// Entries moved out of the BPF tables so far.
    pub bpf_entries_drained: u64,
    /// Which backend runs, and why, for the user.
    pub backend_note: String,
}

impl Engine {
    pub fn new(cfg: &SamplerConfig, db: Database, flush_every: Duration, choice: BackendChoice) -> Result<Engine> {
        let events: Vec<EventName> = cfg.events.iter().map(|e| EventName::new(&e.name)).collect();
        let sampler = Sampler::open(cfg)?;
        // Call stacks ride on the streaming path (the BPF tables hold flat buckets).
        let (bpf, backend_note) = match cfg.callchain {
            true => (None, "stream (call stacks: kernel chains, user stacks unwound in the daemon)".to_string()),
            false => open_backend(&sampler, choice)?,
        };
        let mut collector = Collector::new(events, KernelInfo::read(), Some(db.images_dir()));
        if cfg.callchain {
            collector.enable_stacks();
        }
        let epoch = db.current_epoch()?;
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
        db.set_epoch_meta(epoch, "kernel", release.trim())?;
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        db.set_epoch_meta(epoch, "host", host.trim())?;
        Ok(Engine {
            sampler,
            collector,
            db,
            records: Vec::with_capacity(16 * 1024),
            flush_every,
            next_slice_at: Instant::now() + flush_every / FLUSH_SLICES as u32,
            slice: 0,
            flush_bytes: 0,
            problems: Vec::new(),
            started: Instant::now(),
            bpf,
            entries: Vec::new(),
            last_drain: Instant::now(),
            bpf_entries_drained: 0,
            backend_note,
        })
    }

    pub fn bpf(&self) -> Option<&BpfAggregator> {
        self.bpf.as_ref()
    }

    /// Waits for data (or the poll timeout), then drains and attributes it.
    pub fn step(&mut self) -> Result<()> {
        self.sampler.poll(POLL_TIMEOUT)?;
        if self.bpf.is_none() || self.last_drain.elapsed() >= BPF_DRAIN_EVERY {
            self.drain()?;
        }
        if Instant::now() >= self.next_slice_at {
            self.flush_slice()?;
        }
        Ok(())
    }

    /// Moves everything in the kernel buffers into the aggregator, in time
    /// order across CPUs so an exit on one CPU never precedes the process's
    /// last sample on another.
    /// With BPF, side-band records come first, then the aggregated
    /// buckets, so mappings made in this interval are known.
    pub fn drain(&mut self) -> Result<()> {
        self.last_drain = Instant::now();
        self.records.clear();
        self.sampler.drain(&mut self.records);
        self.records.sort_by_key(|r| r.time().unwrap_or(0));
        for r in &self.records {
            self.collector.process(r);
        }
        if let Some(bpf) = &mut self.bpf {
            self.entries.clear();
            bpf.drain(&mut self.entries)?;
            self.bpf_entries_drained += self.entries.len() as u64;
            for e in &self.entries {
                self.collector.attribute(e.pid, e.ip, e.kernel, e.event_index, e.count, e.period);
            }
        }
        self.collector.end_drain();
        self.sampler.rerandomize();
        Ok(())
    }

    fn flush_slice(&mut self) -> Result<()> {
        let k = self.slice % FLUSH_SLICES;
        self.slice += 1;
        self.next_slice_at += self.flush_every / FLUSH_SLICES as u32;
        let profiles = self.collector.take_profiles(|i| i as u64 % FLUSH_SLICES == k);
        if k == 0 {
            self.store_stacks()?;
        }
        self.store(profiles)
    }

    /// Drains the kernel and merges every image now (`loupe flush`, exit).
    pub fn flush_all(&mut self) -> Result<()> {
        self.drain()?;
        if self.bpf.is_some() {
            // The other generation filled while the first was drained.
            self.drain()?;
        }
        let profiles = self.collector.take_profiles(|_| true);
        self.store_stacks()?;
        self.store(profiles)
    }

    fn store_stacks(&mut self) -> Result<()> {
        let stacks = self.collector.take_stacks();
        if stacks.is_empty() {
            return Ok(());
        }
        let report = self.db.merge_stacks(self.db.current_epoch()?, &stacks)?;
        self.flush_bytes += report.bytes_written;
        self.problems.extend(report.problems.iter().map(|p| p.to_string()));
        Ok(())
    }

    fn store(&mut self, profiles: Vec<loupe_model::Profile>) -> Result<()> {
        if profiles.is_empty() {
            return Ok(());
        }
        let epoch = self.db.current_epoch()?;
        let report = self.db.merge(epoch, &profiles)?;
        self.flush_bytes += report.bytes_written;
        self.problems.extend(report.problems.iter().map(|p| p.to_string()));
        Ok(())
    }

    /// Flushes into the current epoch, then starts a new one.
    pub fn new_epoch(&mut self) -> Result<EpochId> {
        self.flush_all()?;
        Ok(self.db.new_epoch()?)
    }
}

/// Loads and attaches the BPF aggregator when chosen and possible.
fn open_backend(sampler: &Sampler, choice: BackendChoice) -> Result<(Option<BpfAggregator>, String)> {
    if choice == BackendChoice::Stream {
        return Ok((None, "stream (chosen with --backend stream)".into()));
    }
    let attached = BpfAggregator::load(BPF_TABLE_ENTRIES).and_then(|mut b| {
        let fds: Vec<(usize, i32)> = sampler.event_fds().collect();
        b.attach(&fds)?;
        Ok(b)
    });
    match (attached, choice) {
        (Ok(b), _) => Ok((Some(b), format!("bpf (in-kernel per-CPU aggregation, {BPF_TABLE_ENTRIES} keys per table)"))),
        (Err(e), BackendChoice::Bpf) => Err(format!("the BPF backend cannot run here: {e}").into()),
        (Err(e), _) => Ok((None, format!("stream (BPF unavailable: {e})"))),
    }
}

/// The daemon's unix socket in the database directory.
pub fn socket_path(db: &Path) -> PathBuf {
    db.join("daemon.sock")
}

/// Sends one command to a running daemon and returns its one-line answer.
pub fn send_command(db: &Path, command: &str) -> std::io::Result<String> {
    let mut s = UnixStream::connect(socket_path(db))?;
    s.set_read_timeout(Some(Duration::from_secs(120)))?;
    writeln!(s, "{command}")?;
    let mut line = String::new();
    BufReader::new(s).read_line(&mut line)?;
    Ok(line.trim_end().to_string())
}

/// Holds the daemon's exclusive lock on a database for its lifetime.
pub struct DaemonLock {
    _file: std::fs::File,
}

impl DaemonLock {
    pub fn acquire(db: &Path) -> Result<DaemonLock> {
        use std::os::fd::AsRawFd;
        let path = db.join("daemon.lock");
        let mut file = std::fs::OpenOptions::new().create(true).truncate(false).read(true).write(true).open(&path)?;
        // SAFETY: flock on an fd we own; no memory is involved.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if rc != 0 {
            let pid = std::fs::read_to_string(&path).unwrap_or_default();
            return Err(format!("another loupe daemon (pid {}) is already running on {}", pid.trim(), db.display()).into());
        }
        file.set_len(0)?;
        write!(file, "{}", std::process::id())?;
        Ok(DaemonLock { _file: file })
    }
}

/// What `run_daemon` needs beyond the sampler configuration.
pub struct DaemonOptions {
    pub db: PathBuf,
    pub flush_every: Duration,
    /// Print an [`IntervalReport`] as a JSON line to stderr this often.
    pub stats_every: Option<Duration>,
    pub backend: BackendChoice,
}

/// Runs until `stop` is set (SIGTERM/SIGINT), serving control commands on
/// the socket; flushes everything before returning.
pub fn run_daemon(cfg: &SamplerConfig, opts: &DaemonOptions, stop: &AtomicBool) -> Result<IntervalReport> {
    let db = Database::create(&opts.db)?;
    let _lock = DaemonLock::acquire(&opts.db)?;
    let sock = socket_path(&opts.db);
    let _ = std::fs::remove_file(&sock);
    let listener = UnixListener::bind(&sock).map_err(|e| format!("cannot create control socket {}: {e}", sock.display()))?;
    listener.set_nonblocking(true)?;
    let mut engine = Engine::new(cfg, db, opts.flush_every, opts.backend)?;
    eprintln!("loupe: backend {}", engine.backend_note);
    engine.collector.scan_all();
    engine.sampler.enable()?;
    let mut meter = Meter::start();
    let mut last_stats = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        engine.step()?;
        serve_commands(&listener, &mut engine, &meter);
        if let Some(every) = opts.stats_every {
            if last_stats.elapsed() >= every {
                last_stats = Instant::now();
                let report = meter.report(&engine);
                eprintln!("{}", serde_json::to_string(&report).unwrap_or_default());
                meter = Meter::start_from(&engine);
            }
        }
    }
    engine.sampler.disable()?;
    engine.flush_all()?;
    let _ = std::fs::remove_file(&sock);
    Ok(Meter::report_total(&engine))
}

fn serve_commands(listener: &UnixListener, engine: &mut Engine, meter: &Meter) {
    while let Ok((stream, _)) = listener.accept() {
        let _ = stream.set_nonblocking(false);
        let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
        let mut line = String::new();
        let mut reader = BufReader::new(&stream);
        if reader.read_line(&mut line).is_err() {
            continue;
        }
        let answer = match line.trim() {
            "flush" => engine.flush_all().map(|_| "ok flushed".to_string()),
            "epoch" => engine.new_epoch().map(|e| format!("ok epoch {e}")),
            "stats" => Ok(serde_json::to_string(&meter.report(engine)).unwrap_or_default()),
            other => Ok(format!("error unknown command {other:?}")),
        };
        let answer = answer.unwrap_or_else(|e| format!("error {e}"));
        let _ = writeln!(&stream, "{answer}");
    }
}

/// Measures the daemon's own CPU time and the samples it handled.
struct Meter {
    at: Instant,
    cpu: f64,
    stats: Stats,
    lost: u64,
    bpf: loupe_bpf::Counters,
    drained: u64,
}

impl Meter {
    fn start() -> Meter {
        Meter { at: Instant::now(), cpu: own_cpu_seconds(), stats: Stats::default(), lost: 0, bpf: Default::default(), drained: 0 }
    }

    fn start_from(e: &Engine) -> Meter {
        Meter {
            stats: e.collector.stats(),
            lost: e.sampler.lost(),
            bpf: e.bpf().map(|b| b.counters()).unwrap_or_default(),
            drained: e.bpf_entries_drained,
            ..Meter::start()
        }
    }

    fn report(&self, e: &Engine) -> IntervalReport {
        let now = e.collector.stats();
        let d = Stats {
            samples: now.samples - self.stats.samples,
            kernel_samples: now.kernel_samples - self.stats.kernel_samples,
            unknown_samples: now.unknown_samples - self.stats.unknown_samples,
            lost_records: now.lost_records - self.stats.lost_records,
            mmaps: now.mmaps - self.stats.mmaps,
            execs: now.execs - self.stats.execs,
            forks: now.forks - self.stats.forks,
            exits: now.exits - self.stats.exits,
            proc_scans: now.proc_scans - self.stats.proc_scans,
            images_preserved: now.images_preserved - self.stats.images_preserved,
        };
        let cpu = own_cpu_seconds() - self.cpu;
        let bpf = e.bpf().map(|b| b.counters()).unwrap_or_default();
        let moved = e.bpf_entries_drained - self.drained;
        let bpf_samples = bpf.samples - self.bpf.samples;
        IntervalReport {
            backend: if e.bpf().is_some() { "bpf" } else { "stream" },
            bpf_samples,
            bpf_entries_drained: moved,
            bpf_evicted: bpf.evicted - self.bpf.evicted,
            bpf_dropped: bpf.dropped - self.bpf.dropped,
            aggregation_factor: if moved > 0 { bpf_samples as f64 / moved as f64 } else { 0.0 },
            seconds: self.at.elapsed().as_secs_f64(),
            stats: d,
            kernel_lost: e.sampler.lost() - self.lost,
            live_processes: e.collector.live_processes(),
            aggregated_entries: e.collector.aggregated_entries(),
            images: e.collector.image_count(),
            daemon_cpu_seconds: cpu,
            cpu_us_per_sample: if d.samples > 0 { cpu * 1e6 / d.samples as f64 } else { 0.0 },
            rss_kib: own_rss_kib(),
            flush_bytes: e.flush_bytes,
            sample_period: e.sampler.mean_period(0),
            stacks: e.collector.stack_stats(),
        }
    }

    /// Totals since the engine started (CPU since process start).
    fn report_total(e: &Engine) -> IntervalReport {
        Meter { at: e.started, cpu: 0.0, ..Meter::start() }.report(e)
    }
}

/// User + system CPU time of this process so far.
pub fn own_cpu_seconds() -> f64 {
    // SAFETY: getrusage writes into the zeroed struct we pass.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut ru);
        ru
    };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// Resident set size of this process, from /proc/self/status.
pub fn own_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status.lines().find_map(|l| l.strip_prefix("VmRSS:")).and_then(|v| v.split_whitespace().next()?.parse().ok()).unwrap_or(0)
}
