//! The collection loop shared by `loupe daemon` and `loupe record`: drain the
//! kernel's buffers, map and aggregate, merge into the database.
//!
//! Flushing is incremental (the next step DCPI §4.3.1 planned): the images
//! are split into [`FLUSH_SLICES`] groups and one group is merged every
//! `flush_every / FLUSH_SLICES`, so disk work is spread evenly and any
//! sample reaches the disk within one `flush_every`.

use crate::budget::{self, InterruptCost};
use crate::clock;
use crate::kstacks::{KernelAggregator, KernelStacks};
use crate::{Collector, KernelInfo, Stats};
use loupe_bpf::stacks::StackAggregator;
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

/// How often the BPF tables are drained: longer intervals aggregate more
/// (a hot pc repeats more often within one) but hold more in the kernel.
/// Side-band records are still read as they come, so the perf rings never
/// overflow under process churn.
const BPF_DRAIN_EVERY: Duration = Duration::from_secs(4);

/// The drain interval for a flush interval: samples wait in the kernel
/// tables at most a quarter of `flush_every`, so a crash still loses at most
/// about one flush interval.
fn bpf_drain_every(flush_every: Duration) -> Duration {
    (flush_every / 4).clamp(Duration::from_millis(250), BPF_DRAIN_EVERY)
}

/// Keys per BPF table generation: room for every sample of one drain
/// interval on every CPU at the configured rate, within bounds.
fn bpf_table_entries(cfg: &SamplerConfig) -> u32 {
    let per_interval = loupe_perf::online_cpus().len() as u64 * cfg.freq_hz * cfg.events.len() as u64 * BPF_DRAIN_EVERY.as_secs();
    per_interval.clamp(16 * 1024, 1 << 20) as u32
}

/// Which sample path to use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackendChoice {
    /// BPF when the kernel and privileges allow, else streaming.
    Auto,
    /// Every sample through the perf ring buffers, aggregated in the daemon.
    Stream,
    /// In-kernel aggregation (with call stacks walked in the kernel when
    /// stacks are on); an error if BPF cannot be used.
    Bpf,
}

/// Longest the loop sleeps in `poll`; bounds the reaction time to control
/// commands and signals.
const POLL_TIMEOUT: Duration = Duration::from_millis(250);
/// The wait while Python processes are sampled (see `Collector::wants_prompt_drain`).
const PROMPT_POLL: Duration = Duration::from_millis(1);

pub use crate::error::{Error, ErrorKind, Result};

/// One interval's worth of daemon accounting.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct IntervalReport {
    pub seconds: f64,
    pub stats: Stats,
    pub kernel_lost: u64,
    /// Every loss in the interval, by cause.
    pub losses: Losses,
    pub live_processes: usize,
    pub aggregated_entries: usize,
    pub images: usize,
    pub daemon_cpu_seconds: f64,
    pub cpu_us_per_sample: f64,
    /// CPU spent before sampling began (loading the BPF object and the
    /// kernel's BTF, the /proc scan), not in the figures above; the same in
    /// every report.
    pub startup_cpu_seconds: f64,
    /// CPU spent measuring the core clock since the start (about 0.1 s at
    /// the first flush, every 10 minutes and at each epoch's end, for
    /// `calc`'s cycles), not in the figures above either: reported apart.
    pub clock_cpu_seconds: f64,
    pub rss_kib: u64,
    pub flush_bytes: u64,
    pub sample_period: u64,
    /// Mean samples/s per CPU per event in force at the end of the interval.
    pub rate_hz: u64,
    pub backend: &'static str,
    /// BPF backend: samples the program saw, entries that reached user
    /// space (table entries + evictions), evictions, drops, and the
    /// aggregation factor (samples per entry moved).
    pub bpf_samples: u64,
    pub bpf_entries_drained: u64,
    pub bpf_evicted: u64,
    pub bpf_dropped: u64,
    pub aggregation_factor: f64,
    /// BPF: the kernel's count of program runs and their mean run time
    /// (DCPI Table VI's interrupt handler cost, without entry and exit).
    pub bpf_runs: u64,
    pub bpf_handler_ns_per_sample: f64,
    /// Stacks walked in the kernel: where the program's samples went since
    /// start (counted, or to the perf ring with stack copies, by reason).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bpf_stacks: Option<loupe_bpf::stacks::StackCounters>,
    /// Stacks walked in the kernel: per image without frame pointers, its
    /// mappings left out of the program's ranges, and chains cut there.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stack_fallbacks: Option<std::collections::BTreeMap<String, crate::kstacks::ImageFallbacks>>,
    /// The overhead budget, when one is set.
    pub budget: Option<BudgetReport>,
    /// Call stacks since start (count, DWARF unwinds, stopped before the root), when on.
    pub stacks: Option<crate::stacks::StackStats>,
    /// Branch records (LBR) since start, when on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub branches: Option<crate::branches::BranchStats>,
}

/// How the overhead budget chose the rate.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct BudgetReport {
    pub max_overhead_pct: f64,
    /// Interrupt cost per sample now: the measured entry and exit plus the
    /// BPF handler's mean run time in the last interval.
    pub interrupt_us: f64,
    pub daemon_us: f64,
    pub rate_hz: u64,
    pub ceiling_hz: u64,
    /// Estimated cost of sampling at `rate_hz`, percent of each CPU.
    pub estimated_overhead_pct: f64,
    /// The start-up measurement of the interrupt's cost.
    pub interrupt: InterruptCost,
}

/// What the collection lost, by cause. `records` is what the closing line
/// and `loupe top` call lost: records the kernel could not write and
/// samples the BPF program could not count.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Losses {
    /// Records dropped because a perf ring was full (PERF_RECORD_LOST's counts).
    pub ring_overrun: u64,
    /// Samples the BPF program could not count: its table and its overflow ring were full.
    pub map_full: u64,
    /// Times the kernel throttled a sampling event (PERF_RECORD_THROTTLE):
    /// that CPU takes no samples until the next tick.
    pub throttled: u64,
    /// Unwind-table walks in the kernel stopped early, by reason (no table,
    /// expression, read fault, depth limit): not lost, those samples took
    /// stack copies (or, at the depth limit, were kept cut short).
    pub unwind_stopped: [u64; 4],
}

impl Losses {
    pub fn records(&self) -> u64 {
        self.ring_overrun + self.map_full
    }

    fn since(self, earlier: Losses) -> Losses {
        Losses {
            ring_overrun: self.ring_overrun - earlier.ring_overrun,
            map_full: self.map_full - earlier.map_full,
            throttled: self.throttled - earlier.throttled,
            unwind_stopped: std::array::from_fn(|i| self.unwind_stopped[i] - earlier.unwind_stopped[i]),
        }
    }

    fn plus(self, other: Losses) -> Losses {
        Losses {
            ring_overrun: self.ring_overrun + other.ring_overrun,
            map_full: self.map_full + other.map_full,
            throttled: self.throttled + other.throttled,
            unwind_stopped: std::array::from_fn(|i| self.unwind_stopped[i] + other.unwind_stopped[i]),
        }
    }

    /// The closing line's words: "0 lost", or "12 lost (12 ring overruns)", and throttling when any.
    pub fn describe(&self) -> String {
        let mut causes = Vec::new();
        if self.ring_overrun > 0 {
            causes.push(format!("{} in full perf rings", thousands(self.ring_overrun)));
        }
        if self.map_full > 0 {
            causes.push(format!("{} in full BPF tables", thousands(self.map_full)));
        }
        let mut text = format!("{} lost", thousands(self.records()));
        if !causes.is_empty() {
            text += &format!(" ({})", causes.join(", "));
        }
        if self.throttled > 0 {
            text += &format!(", sampling throttled by the kernel {} times", thousands(self.throttled));
        }
        let stopped: u64 = self.unwind_stopped.iter().sum();
        if stopped > 0 {
            let words = ["no table", "expression", "read fault", "depth limit"];
            let why: Vec<String> =
                words.iter().zip(self.unwind_stopped).filter(|(_, n)| *n > 0).map(|(w, n)| format!("{} {w}", thousands(n))).collect();
            text += &format!(", {} unwind-table walks stopped early ({})", thousands(stopped), why.join(", "));
        }
        text
    }
}

/// 12345 as "12,345".
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Receives what each flush merges, beside the database (`--ship`).
pub trait FlushSink: Send {
    /// Profiles just merged into the database.
    fn profiles(&mut self, profiles: &[loupe_model::Profile]);
    /// Call stacks just merged into the database (fleet shipping sends them too).
    fn stacks(&mut self, _stacks: &[loupe_model::stacks::StackProfile]) {}
    /// Every image has been merged once since the last call: a batch ends.
    fn flushed(&mut self);
}

/// A sampler feeding a collector feeding a database.
pub struct Engine {
    /// Also gets every merged profile, when set.
    pub sink: Option<Box<dyn FlushSink>>,
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
    /// When the core clock was last measured ([`Engine::record_clock`]).
    last_clock: Instant,
    bpf: Option<KernelAggregator>,
    entries: Vec<AggEntry>,
    last_drain: Instant,
    /// Entries moved out of the BPF tables so far.
    pub bpf_entries_drained: u64,
    /// Which backend runs, and why, for the user.
    pub backend_note: String,
    /// CPU time the clock measurements after start-up spent spinning.
    pub clock_cpu_seconds: f64,
    /// CPU time spent before sampling began.
    pub startup_cpu_seconds: f64,
    /// Throttle records read from the rings.
    throttles: u64,
    /// Losses counted when the current epoch began (or this engine started),
    /// and those an earlier collector stored with it.
    epoch_base: Losses,
    epoch_stored: Losses,
    /// When this engine started the current epoch (or took it over).
    pub epoch_started: Instant,
    /// Off-CPU time (`--off-cpu`), and the entries of its last drain.
    off_cpu: Option<loupe_bpf::offcpu::OffCpuAggregator>,
    off_entries: Vec<loupe_bpf::offcpu::OffCpuEntry>,
}

impl Engine {
    pub fn new(cfg: &SamplerConfig, db: Database, flush_every: Duration, choice: BackendChoice) -> Result<Engine> {
        let events: Vec<EventName> = cfg.events.iter().map(|e| EventName::new(&e.name)).collect();
        let sampler = Sampler::open(cfg)?;
        // Branch stacks reach the daemon only through the rings. Call stacks
        // are walked in the kernel; what it cannot walk reaches the daemon
        // through the rings with stack copies.
        let (bpf, backend_note) = match choice {
            BackendChoice::Bpf if cfg.branch_stack != 0 => {
                return Err("--backend bpf aggregates in the kernel; branch records (--lbr) need the stream backend".into())
            }
            _ if cfg.branch_stack != 0 => (None, "stream (branch records from the LBR are read from the rings)".to_string()),
            // The kernel runs only tracing programs on tracepoint events, not the perf_event programs that aggregate.
            BackendChoice::Bpf if cfg.events.iter().any(|e| e.is_tracepoint()) => {
                return Err("--backend bpf aggregates samples of counting events; tracepoint events need the stream backend".into())
            }
            _ if cfg.events.iter().any(|e| e.is_tracepoint()) => (None, "stream (tracepoint samples are read from the rings)".to_string()),
            _ => open_backend(&sampler, choice, cfg, bpf_table_entries(cfg), Some(db.root().join(UNWIND_DIR)))?,
        };
        let mut collector = Collector::new(events, KernelInfo::read(), Some(db.images_dir()));
        if let Some(KernelAggregator::Stacks(k)) = &bpf {
            match k.aggregator().python_samples() {
                Ok(p) => collector.read_python_in_kernel(p),
                Err(e) => eprintln!("loupe: warning: Python frames of streamed samples are read when drained ({e})"),
            }
        }
        collector.keep_jit_files_in(loupe_store::layout::jit_dir(db.root()));
        if cfg.callchain {
            collector.enable_stacks();
        }
        if cfg.branch_stack != 0 {
            collector.enable_branches();
        }
        let epoch = db.current_epoch()?;
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        db.update_epoch_meta(epoch, |m| (m.kernel, m.host) = (Some(release.trim().into()), Some(host.trim().into())))?;
        let mut engine = Engine {
            sink: None,
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
            clock_cpu_seconds: 0.0,
            startup_cpu_seconds: 0.0,
            last_clock: Instant::now(),
            throttles: 0,
            epoch_base: Losses::default(),
            epoch_stored: Losses::default(),
            epoch_started: Instant::now(),
            off_cpu: None,
            off_entries: Vec::new(),
        };
        engine.epoch_stored = engine.stored_losses()?;
        // The epoch's first clock reading is taken at the first flush, not
        // here: its 0.1 s of spinning was half of start-up's CPU.
        engine.last_clock = Instant::now().checked_sub(CLOCK_EVERY).unwrap_or(engine.last_clock);
        Ok(engine)
    }

    /// Measures the core clock now and stores it with the current epoch
    /// (all readings of the epoch and their median, [`loupe_store::Clock`]),
    /// for `loupe calc` to turn periods in ns into cycles.
    pub fn record_clock(&mut self) -> Result<()> {
        let cpu_before = own_cpu_seconds();
        let ghz = clock::measure_ghz();
        // A one-off measurement (0.1 s at start, exit and each epoch), not
        // the running cost per sample.
        self.clock_cpu_seconds += own_cpu_seconds() - cpu_before;
        let epoch = self.db.current_epoch()?;
        let tsc = clock::tsc_mhz();
        self.db.update_epoch_meta(epoch, |m| {
            m.clock.add_reading(ghz);
            m.clock.tsc_mhz = tsc.or(m.clock.tsc_mhz);
        })?;
        self.last_clock = Instant::now();
        Ok(())
    }

    /// Also sums off-CPU and per-thread on-CPU time in the kernel (event
    /// `off-cpu`): of the processes `follow` and their descendants, else
    /// (empty) of every thread. User chains are walked by the stack
    /// program's unwind tables when it has them, else by frame pointers.
    pub fn enable_off_cpu(&mut self, follow: &[u32]) -> Result<()> {
        let tables = match &self.bpf {
            Some(KernelAggregator::Stacks(k)) => k.unwind_tables(),
            _ => None,
        };
        let mut off = loupe_bpf::offcpu::OffCpuAggregator::load(!follow.is_empty(), tables)?;
        for &pid in follow {
            off.follow(pid)?;
        }
        off.attach()?;
        self.collector.enable_off_cpu();
        self.off_cpu = Some(off);
        Ok(())
    }

    pub fn off_cpu(&self) -> Option<&loupe_bpf::offcpu::OffCpuAggregator> {
        self.off_cpu.as_ref()
    }

    pub fn bpf(&self) -> Option<&KernelAggregator> {
        self.bpf.as_ref()
    }

    /// Samples the kernel has taken so far (BPF: the program's counter;
    /// stream: records read from the rings, so drain first).
    pub fn samples_taken(&self) -> u64 {
        match &self.bpf {
            Some(b) => b.counters().samples,
            None => self.sampler.samples_seen(),
        }
    }

    /// The BPF program's mean run time per sample since `since`, in seconds.
    fn handler_seconds(&self, since: loupe_bpf::RunStats) -> Option<f64> {
        self.bpf.as_ref()?.run_stats().since(since).1.map(|ns| ns / 1e9)
    }

    /// The kernel's counts for the BPF program (zero without BPF).
    fn run_stats(&self) -> loupe_bpf::RunStats {
        self.bpf.as_ref().map(|b| b.run_stats()).unwrap_or_default()
    }

    /// Every loss since this engine started. Ring overruns are the
    /// kernel's own per-event counts where it keeps them: the
    /// PERF_RECORD_LOST records of the last ones may not be written yet.
    pub fn losses(&self) -> Losses {
        let reported = self.sampler.lost();
        Losses {
            ring_overrun: self.sampler.lost_by_kernel().map_or(reported, |k| k.max(reported)),
            map_full: self.bpf.as_ref().map_or(0, |b| b.counters().dropped),
            throttled: self.throttles,
            unwind_stopped: self
                .bpf
                .as_ref()
                .and_then(|b| b.stack_counters())
                .map_or([0; 4], |c| [c.streamed_no_table, c.streamed_expression, c.streamed_read_fault, c.unwind_depth]),
        }
    }

    /// The losses stored with the current epoch (by an earlier collector).
    fn stored_losses(&self) -> Result<Losses> {
        let epoch = self.db.current_epoch()?;
        let info = self.db.epochs()?.into_iter().find(|e| e.id == epoch);
        Ok(info.map_or_else(Losses::default, |e| {
            let l = e.meta.losses;
            Losses { ring_overrun: l.ring_overrun, map_full: l.map_full, throttled: l.throttled, unwind_stopped: l.unwind_stopped }
        }))
    }

    /// Losses in the current epoch, earlier collectors' included.
    pub fn epoch_losses(&self) -> Losses {
        self.epoch_stored.plus(self.losses().since(self.epoch_base))
    }

    /// The closing line of a collection that ran `took`: "12,345 samples
    /// in 10.0 s (...), 0 lost -> DB epoch N".
    pub fn closing_line(&self, took: Duration) -> String {
        let s = self.collector.stats();
        let epoch = self.db.current_epoch().map(|e| e.to_string()).unwrap_or_else(|_| "?".into());
        format!(
            "{} samples in {:.1} s ({} kernel, {} unknown), {} -> {} epoch {}",
            thousands(s.samples),
            took.as_secs_f64(),
            thousands(s.kernel_samples),
            thousands(s.unknown_samples),
            self.losses().describe(),
            self.db.root().display(),
            epoch
        )
    }

    /// Stores the current epoch's losses with it, when they changed.
    fn store_losses(&mut self) -> Result<()> {
        let now = self.epoch_losses();
        let stored = self.stored_losses()?;
        if now == stored {
            return Ok(());
        }
        let epoch = self.db.current_epoch()?;
        self.db.update_epoch_meta(epoch, |m| {
            m.losses = loupe_store::meta::EpochLosses {
                ring_overrun: now.ring_overrun,
                map_full: now.map_full,
                throttled: now.throttled,
                unwind_stopped: now.unwind_stopped,
            }
        })?;
        Ok(())
    }

    /// Waits for data (or the poll timeout), then drains and attributes it.
    pub fn step(&mut self) -> Result<()> {
        // Never sleep past a slice: with short flush intervals (slices 100 ms
        // apart at --flush-every 1) a 250 ms poll stretched every interval
        // 2.5 times, and a kill -9 lost that much.
        let until_slice = self.next_slice_at.saturating_duration_since(Instant::now());
        self.sampler.poll(if self.collector.wants_prompt_drain() { PROMPT_POLL } else { POLL_TIMEOUT.min(until_slice) })?;
        if self.bpf.is_none() || self.last_drain.elapsed() >= bpf_drain_every(self.flush_every) {
            self.drain()?;
        } else {
            self.drain_sideband();
        }
        // Late (a loaded machine, a slow disk): catch up, at most one interval's slices at once.
        let slice = self.flush_every / FLUSH_SLICES as u32;
        for _ in 0..FLUSH_SLICES {
            if Instant::now() < self.next_slice_at {
                break;
            }
            self.flush_slice()?;
        }
        if Instant::now() >= self.next_slice_at {
            self.next_slice_at = Instant::now() + slice;
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
        self.drain_sideband();
        if let Some(bpf) = &mut self.bpf {
            self.bpf_entries_drained += bpf.drain(&mut self.collector, &mut self.entries)?;
        }
        if let Some(off) = &mut self.off_cpu {
            self.off_entries.clear();
            off.drain(&mut self.off_entries)?;
            self.collector.count_off_cpu(&self.off_entries);
        }
        self.collector.end_drain();
        self.sampler.rerandomize();
        Ok(())
    }

    /// Reads and applies the perf rings' records (all of them with the
    /// stream backend; mmap/comm/fork/exit only with BPF) without ending a
    /// drain: processes that exit stay until two full drains later, so the
    /// BPF buckets holding their last samples still resolve.
    fn drain_sideband(&mut self) {
        self.records.clear();
        self.sampler.drain(&mut self.records);
        self.records.sort_by_key(|r| r.time().unwrap_or(0));
        for r in &self.records {
            self.throttles += matches!(r, Record::Throttle { unthrottle: false, .. }) as u64;
            self.collector.process(r);
        }
        self.collector.check_watches();
        if let Some(bpf) = &mut self.bpf {
            bpf.sync(&mut self.collector);
        }
    }

    fn flush_slice(&mut self) -> Result<()> {
        let k = self.slice % FLUSH_SLICES;
        self.slice += 1;
        self.next_slice_at += self.flush_every / FLUSH_SLICES as u32;
        let profiles = self.collector.take_profiles(|i| i as u64 % FLUSH_SLICES == k);
        if k == 0 {
            self.store_stacks()?;
            self.store_branches()?;
            self.store_losses()?;
            self.store_thread_times()?;
            if self.last_clock.elapsed() >= CLOCK_EVERY {
                self.record_clock()?;
            }
        }
        self.store(profiles)?;
        if k == FLUSH_SLICES - 1 {
            self.sink_flushed();
        }
        Ok(())
    }

    fn sink_flushed(&mut self) {
        if let Some(s) = &mut self.sink {
            s.flushed();
        }
    }

    /// Drains the kernel and merges every image now (`loupe flush`, exit).
    pub fn flush_all(&mut self) -> Result<()> {
        self.drain()?;
        if self.bpf.is_some() || self.off_cpu.is_some() {
            // The other generation filled while the first was drained.
            self.drain()?;
        }
        let profiles = self.collector.take_profiles(|_| true);
        self.store_stacks()?;
        self.store_branches()?;
        self.store_losses()?;
        self.store_thread_times()?;
        self.store(profiles)?;
        self.sink_flushed();
        Ok(())
    }

    /// The last flush of a recording (exit, or the end of an epoch): every
    /// image merged and a closing clock reading. A plain `loupe flush`
    /// leaves the clock alone: its 0.1 s of spinning would stall draining.
    pub fn flush_final(&mut self) -> Result<()> {
        self.flush_all()?;
        self.record_clock()
    }

    fn store_stacks(&mut self) -> Result<()> {
        let stacks = self.collector.take_stacks();
        if stacks.is_empty() {
            return Ok(());
        }
        let report = self.db.merge_stacks(self.db.current_epoch()?, &stacks)?;
        self.flush_bytes += report.bytes_written;
        self.problems.extend(report.problems.iter().map(|p| p.to_string()));
        if let Some(s) = &mut self.sink {
            s.stacks(&stacks);
        }
        Ok(())
    }

    /// Adds the per-thread times summed since the last store to the epoch's.
    /// And the cgroups of processes seen since the last store.
    fn store_thread_times(&mut self) -> Result<()> {
        let times = self.collector.take_thread_times();
        let cgroups = self.collector.take_cgroups();
        if times.is_empty() && cgroups.is_empty() {
            return Ok(());
        }
        self.db.update_epoch_meta(self.db.current_epoch()?, |m| {
            for (k, t) in &times {
                m.threads.entry(*k).or_default().add(t);
            }
            m.cgroups.extend(cgroups);
        })?;
        Ok(())
    }

    fn store_branches(&mut self) -> Result<()> {
        let branches = self.collector.take_branches();
        if branches.is_empty() {
            return Ok(());
        }
        let report = self.db.merge_branches(self.db.current_epoch()?, &branches)?;
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
        if let Some(s) = &mut self.sink {
            s.profiles(&profiles);
        }
        Ok(())
    }

    /// Flushes into the current epoch, then starts a new one.
    pub fn new_epoch(&mut self) -> Result<EpochId> {
        self.flush_final()?;
        let epoch = self.db.new_epoch()?;
        self.epoch_started = Instant::now();
        (self.epoch_base, self.epoch_stored) = (self.losses(), Losses::default());
        self.record_clock()?;
        merge_closed_in_background(self.db.root());
        Ok(epoch)
    }
}

/// Sums the closed epochs into the store's merged forms on a niced thread,
/// so the first question about a day (`--epoch all`, a range) after an epoch
/// closes reads a few merged blocks, not every epoch (issue 23). A failure
/// only leaves the next reader to read (and merge) the epochs itself.
pub fn merge_closed_in_background(root: &std::path::Path) {
    let root = root.to_path_buf();
    let spawned = std::thread::Builder::new().name("loupe-merge".into()).spawn(move || {
        // SAFETY: setpriority on this thread's own id (Linux nices threads one by one).
        unsafe { libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t, 10) };
        if let Err(e) = Database::open(&root).and_then(|db| db.merge_closed()) {
            eprintln!("loupe: merging the closed epochs of {}: {e} (readers read them one by one)", root.display());
        }
    });
    if let Err(e) = spawned {
        eprintln!("loupe: no thread to merge the closed epochs: {e}");
    }
}

/// How often a long-running daemon measures the core clock again (0.1 s
/// of CPU each time: 0.02% of one CPU).
const CLOCK_EVERY: Duration = Duration::from_secs(600);
/// How often the budget re-chooses the rate from fresh costs, and the
/// first time, soon after start: until then it knows only the interrupt's
/// cost, not the daemon's or the BPF handler's.
const BUDGET_RECHECK: Duration = Duration::from_secs(10);
const BUDGET_FIRST_RECHECK: Duration = Duration::from_secs(2);
/// How long the main loop may stall in its first seconds (building the
/// first images' unwind tables, under load) without the rings overflowing,
/// before the daemon's cost per sample is known.
const BUDGET_START_STALL: Duration = Duration::from_secs(2);
const MIN_RATE_HZ: u64 = 10;

/// Chooses the sampling rate from measured costs (`--max-overhead`).
pub struct Budget {
    pub fraction: f64,
    /// The highest rate allowed: --freq, lowered after an interval that lost records.
    pub ceiling_hz: u64,
    /// Until the first re-check has measured the daemon's cost: the rate at
    /// which the rings hold [`BUDGET_START_STALL`] of records.
    start_cap: Option<u64>,
    pub interrupt: InterruptCost,
    /// Interrupt cost per sample now, seconds: the measured entry and exit,
    /// plus the BPF handler's run time in the last interval.
    interrupt_s: f64,
    /// Smoothed daemon CPU seconds per sample.
    daemon_s: f64,
    at: Instant,
    next_after: Duration,
    /// Own CPU seconds at the window's start, less the clock's readings.
    cpu: f64,
    samples: u64,
    lost: u64,
    run_stats: loupe_bpf::RunStats,
    pub last: BudgetReport,
}

impl Budget {
    /// Measures the interrupt's cost on this thread with the collection's
    /// sample format `cfg` (before sampling starts: part of start-up) and
    /// sets the first rate.
    pub fn start(engine: &mut Engine, cfg: &SamplerConfig, max_overhead_pct: f64) -> Budget {
        let interrupt = budget::measure_interrupt_cost(cfg).unwrap_or_else(|e| {
            eprintln!("loupe: warning: cannot measure the sampling interrupt's cost ({e}); the budget counts the daemon's CPU and the BPF handler only");
            InterruptCost::default()
        });
        // A record: the stack copy, the call chain, registers and the rest.
        let record_bytes = cfg.user_stack_bytes as u64 + if cfg.callchain { 1024 } else { 0 } + 256;
        let ring_bytes = (cfg.ring_pages * loupe_perf::ring::page_size()) as u64;
        let start_cap = ring_bytes * 1000 / (record_bytes * BUDGET_START_STALL.as_millis() as u64);
        let mut b = Budget {
            fraction: max_overhead_pct / 100.0,
            ceiling_hz: engine.sampler.freq(),
            start_cap: Some(start_cap.max(MIN_RATE_HZ)),
            interrupt,
            interrupt_s: interrupt.interrupt_us / 1e6,
            daemon_s: 0.0,
            at: Instant::now(),
            next_after: BUDGET_FIRST_RECHECK,
            cpu: own_cpu_seconds() - engine.clock_cpu_seconds,
            samples: engine.samples_taken(),
            lost: engine.losses().records(),
            run_stats: engine.run_stats(),
            last: BudgetReport::default(),
        };
        b.apply(engine);
        b
    }

    /// Re-measures the load-dependent costs and re-chooses the rate, every
    /// `BUDGET_RECHECK`. An interval that lost records lowers the ceiling
    /// to what the daemon kept up with.
    pub fn recheck(&mut self, engine: &mut Engine) {
        if self.at.elapsed() < self.next_after {
            return;
        }
        self.next_after = BUDGET_RECHECK;
        self.start_cap = None;
        // The clock's readings (0.1 s of spinning) are not a cost per sample.
        let cpu = own_cpu_seconds() - engine.clock_cpu_seconds;
        let (samples, lost) = (engine.samples_taken(), engine.losses().records());
        let n = samples.saturating_sub(self.samples);
        if n >= 100 {
            let d = (cpu - self.cpu) / n as f64;
            self.daemon_s = if self.daemon_s == 0.0 { d } else { 0.7 * self.daemon_s + 0.3 * d };
        }
        if let Some(handler) = engine.handler_seconds(self.run_stats) {
            // The handler's share moves with the table's miss rate; the
            // interrupt's entry and exit do not.
            self.interrupt_s = self.interrupt.interrupt_us / 1e6 + handler;
        }
        let ceiling = budget::ceiling_after_loss(self.ceiling_hz, engine.sampler.freq(), n, lost - self.lost, MIN_RATE_HZ);
        if ceiling < self.ceiling_hz {
            eprintln!(
                "loupe: warning: {} records lost in the last {:.0} s (the daemon did not drain the rings in time); at most {ceiling} samples/s per CPU from now on",
                lost - self.lost,
                self.at.elapsed().as_secs_f64()
            );
            self.ceiling_hz = ceiling;
        }
        self.run_stats = engine.run_stats();
        (self.at, self.cpu, self.samples, self.lost) = (Instant::now(), cpu, samples, lost);
        self.apply(engine);
    }

    fn apply(&mut self, engine: &mut Engine) {
        let ceiling = self.start_cap.map_or(self.ceiling_hz, |c| c.min(self.ceiling_hz));
        let rate = budget::rate_for_budget(self.fraction, self.interrupt_s, self.daemon_s, MIN_RATE_HZ, ceiling);
        let current = engine.sampler.freq();
        if rate.abs_diff(current) * 20 > current || current > self.ceiling_hz {
            engine.sampler.set_freq(rate);
        }
        let rate = engine.sampler.freq();
        self.last = BudgetReport {
            max_overhead_pct: self.fraction * 100.0,
            interrupt_us: self.interrupt_s * 1e6,
            daemon_us: self.daemon_s * 1e6,
            rate_hz: rate,
            ceiling_hz: self.ceiling_hz,
            estimated_overhead_pct: rate as f64 * (self.interrupt_s + self.daemon_s) * 100.0,
            interrupt: self.interrupt,
        };
    }

    pub fn describe(&self) -> String {
        let c = &self.interrupt;
        format!(
            "overhead budget {}%: one sample costs {:.1} µs of interrupt time here (measured on one thread: {} samples in {} window pairs, {:.3} s of CPU); \
sampling at {} samples/s per CPU (ceiling --freq {}), estimated {:.2}%",
            self.last.max_overhead_pct,
            c.interrupt_us,
            c.samples,
            c.pairs,
            c.cpu_seconds,
            self.last.rate_hz,
            self.ceiling_hz,
            self.last.estimated_overhead_pct
        )
    }
}

/// Loads and attaches the in-kernel program when chosen and possible: the
/// stack walker when call stacks are on, the flat aggregator otherwise.
fn open_backend(
    sampler: &Sampler,
    choice: BackendChoice,
    cfg: &SamplerConfig,
    entries: u32,
    table_dir: Option<std::path::PathBuf>,
) -> Result<(Option<KernelAggregator>, String)> {
    if choice == BackendChoice::Stream {
        return Ok((None, "stream (chosen with --backend stream)".into()));
    }
    let fds: Vec<(usize, i32)> = sampler.event_fds().collect();
    let attached = if cfg.callchain {
        let fp_only = cfg.user_stack_bytes == 0;
        StackAggregator::load(entries, stack_map_entries(cfg), fp_only, UNWIND_ROWS).and_then(|mut b| {
            enable_run_stats(b.enable_run_stats());
            b.attach(&fds)?;
            Ok(KernelAggregator::Stacks(Box::new(KernelStacks::new(b, fp_only, table_dir.clone()))))
        })
    } else {
        BpfAggregator::load(entries).and_then(|mut b| {
            enable_run_stats(b.enable_run_stats());
            b.attach(&fds)?;
            Ok(KernelAggregator::Flat(Box::new(b)))
        })
    };
    // libbpf enables an event when it attaches to it; sampling starts when
    // the caller says (or at exec, for a command).
    sampler.disable()?;
    let what = if !cfg.callchain {
        format!("bpf (in-kernel per-CPU aggregation, {entries} keys per table)")
    } else if cfg.user_stack_bytes == 0 {
        format!("bpf (call stacks walked by frame pointers and counted in the kernel, {entries} keys per table)")
    } else {
        format!("bpf (call stacks walked by frame pointers and counted in the kernel, {entries} keys per table; code without frame pointers walked there by unwind tables from .eh_frame, stack copies where they stop)")
    };
    match (attached, choice) {
        (Ok(b), _) => Ok((Some(b), what)),
        (Err(e), BackendChoice::Bpf) => Err(format!("the BPF backend cannot run here: {e}").into()),
        (Err(e), _) => Ok((None, format!("stream (BPF unavailable: {e})"))),
    }
}

/// Stacks each generation of the kernel's stack map holds (1 KiB each):
/// 1,024 per CPU per 1,000 samples/s, from 8 to 32 MiB a generation. New
/// stacks arrive with the number of busy CPUs and the rate; a full map
/// sends samples to the ring as stack copies (8 MiB a generation was too
/// small for 16 CPUs of deep recursion: a third of the samples took the
/// ring; 2 CPUs at 8,000/s sent a fifth there and lost some).
fn stack_map_entries(cfg: &SamplerConfig) -> u32 {
    let per_cpu = 1024 * cfg.freq_hz.div_ceil(1000).max(1) * cfg.events.len().max(1) as u64;
    (per_cpu * loupe_perf::online_cpus().len() as u64).clamp(8192, 32768) as u32
}
/// Unwind-table rows the kernel holds for every image together (16 bytes
/// each: 16 MiB of kernel memory; Debian's libc needs ~28,000, libLLVM and
/// ICU hundreds of thousands). Images past it get no table (counted).
const UNWIND_ROWS: u32 = 1 << 20;
/// Compiled unwind tables, by build-id, in the database directory.
const UNWIND_DIR: &str = "unwind";

/// Run-time statistics are asked for before attaching, so the kernel's run
/// count covers every run; without them only the handler cost is missing.
fn enable_run_stats(r: std::result::Result<(), loupe_bpf::Error>) {
    if let Err(e) = r {
        eprintln!("loupe: warning: no BPF run-time statistics ({e}); handler cost is not reported");
    }
}

/// The daemon's unix socket in the database directory.
pub fn socket_path(db: &Path) -> PathBuf {
    loupe_store::layout::daemon_socket(db)
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
        let mut file = loupe_files::open_rw(&path)?;
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
    /// Start a new epoch this often (None: only when asked).
    pub epoch_every: Option<Duration>,
    /// Print an [`IntervalReport`] as a JSON line to stderr this often.
    pub stats_every: Option<Duration>,
    pub backend: BackendChoice,
    /// Keep sampling cost under this percent of each CPU (`None`: sample at
    /// the configured rate regardless).
    pub max_overhead_pct: Option<f64>,
    /// Also sum every thread's off-CPU time in the kernel (event `off-cpu`).
    pub off_cpu: bool,
}

/// Runs until `stop` is set (SIGTERM/SIGINT), serving control commands on
/// the socket; flushes everything before returning.
pub fn run_daemon(cfg: &SamplerConfig, opts: &DaemonOptions, stop: &AtomicBool) -> Result<IntervalReport> {
    run_daemon_with(cfg, opts, stop, None)
}

/// [`run_daemon`], every merged profile also going to `sink`.
pub fn run_daemon_with(
    cfg: &SamplerConfig,
    opts: &DaemonOptions,
    stop: &AtomicBool,
    sink: Option<Box<dyn FlushSink>>,
) -> Result<IntervalReport> {
    let db = Database::create(&opts.db)?;
    let _lock = DaemonLock::acquire(&opts.db)?;
    let mut engine = Engine::new(cfg, db, opts.flush_every, opts.backend)?;
    engine.sink = sink;
    eprintln!("loupe: backend {}", engine.backend_note);
    engine.collector.scan_all();
    if opts.off_cpu {
        engine.enable_off_cpu(&[])?;
    }
    let mut budget = opts.max_overhead_pct.map(|pct| Budget::start(&mut engine, cfg, pct));
    engine.startup_cpu_seconds = own_cpu_seconds();
    engine.sampler.enable()?;
    if let Some(b) = &budget {
        eprintln!("loupe: {}", b.describe());
    }
    // The socket appears once sampling runs: clients (and tests) can take
    // it as the sign that the daemon is collecting.
    let sock = socket_path(&opts.db);
    let _ = std::fs::remove_file(&sock);
    let listener = UnixListener::bind(&sock).map_err(|e| format!("cannot create control socket {}: {e}", sock.display()))?;
    // Connecting needs write permission on the socket: its owner (and the
    // database's group, when shared) only.
    let mode = if loupe_files::file_mode(&sock) == loupe_files::FILE_MODE { 0o600 } else { 0o660 };
    std::fs::set_permissions(&sock, std::os::unix::fs::PermissionsExt::from_mode(mode))?;
    listener.set_nonblocking(true)?;
    let mut meter = Meter::start_from(&engine);
    let mut last_stats = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        engine.step()?;
        if let Some(b) = budget.as_mut() {
            b.recheck(&mut engine);
        }
        let budget_now = budget.as_ref().map(|b| b.last);
        serve_commands(&listener, &mut engine, &meter, budget_now);
        if opts.epoch_every.is_some_and(|every| engine.epoch_started.elapsed() >= every) {
            let epoch = engine.new_epoch()?;
            eprintln!("loupe: epoch {epoch} started (--epoch-every)");
        }
        if let Some(every) = opts.stats_every {
            if last_stats.elapsed() >= every {
                last_stats = Instant::now();
                let report = IntervalReport { budget: budget_now, ..meter.report(&engine) };
                eprintln!("{}", serde_json::to_string(&report).unwrap_or_default());
                meter = Meter::start_from(&engine);
            }
        }
    }
    engine.sampler.disable()?;
    engine.flush_final()?;
    let _ = std::fs::remove_file(&sock);
    eprintln!("loupe: {}", engine.closing_line(engine.started.elapsed()));
    Ok(IntervalReport { budget: budget.map(|b| b.last), ..Meter::report_total(&engine) })
}

fn serve_commands(listener: &UnixListener, engine: &mut Engine, meter: &Meter, budget: Option<BudgetReport>) {
    // A zero-timeout poll first: a non-blocking accept with nobody waiting
    // still allocates and frees a socket, several times a second.
    let mut pfd = libc::pollfd { fd: std::os::fd::AsRawFd::as_raw_fd(listener), events: libc::POLLIN, revents: 0 };
    // SAFETY: one valid pollfd, zero timeout.
    if unsafe { libc::poll(&mut pfd, 1, 0) } <= 0 {
        return;
    }
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
            "stats" => Ok(serde_json::to_string(&IntervalReport { budget, ..meter.report(engine) }).unwrap_or_default()),
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
    losses: Losses,
    bpf: loupe_bpf::Counters,
    drained: u64,
    runs: loupe_bpf::RunStats,
}

impl Meter {
    fn start() -> Meter {
        Meter {
            at: Instant::now(),
            cpu: own_cpu_seconds(),
            stats: Stats::default(),
            lost: 0,
            losses: Losses::default(),
            bpf: Default::default(),
            drained: 0,
            runs: Default::default(),
        }
    }

    fn start_from(e: &Engine) -> Meter {
        Meter {
            stats: e.collector.stats(),
            lost: e.sampler.lost(),
            losses: e.losses(),
            bpf: e.bpf().map(|b| b.counters()).unwrap_or_default(),
            drained: e.bpf_entries_drained,
            runs: e.run_stats(),
            cpu: own_cpu_seconds() - e.clock_cpu_seconds,
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
        // The clock's readings are reported apart (`clock_cpu_seconds`).
        let cpu = own_cpu_seconds() - e.clock_cpu_seconds - self.cpu;
        let bpf = e.bpf().map(|b| b.counters()).unwrap_or_default();
        let moved = e.bpf_entries_drained - self.drained;
        let bpf_samples = bpf.samples - self.bpf.samples;
        let (nruns, handler_ns) = e.run_stats().since(self.runs);
        IntervalReport {
            startup_cpu_seconds: e.startup_cpu_seconds,
            clock_cpu_seconds: e.clock_cpu_seconds,
            losses: e.losses().since(self.losses),
            bpf_runs: nruns,
            bpf_handler_ns_per_sample: handler_ns.unwrap_or(0.0),
            bpf_stacks: e.bpf().and_then(|b| b.stack_counters()),
            stack_fallbacks: e.bpf().and_then(|b| b.stack_fallbacks()),
            rate_hz: e.sampler.freq(),
            budget: None,
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
            branches: e.collector.branch_stats(),
        }
    }

    /// Totals since the engine started (CPU since process start).
    fn report_total(e: &Engine) -> IntervalReport {
        // Start-up and the clock's later measurements are not the daemon's
        // running cost per sample; start-up is reported apart.
        Meter { at: e.started, cpu: e.startup_cpu_seconds, ..Meter::start() }.report(e)
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    #[test]
    fn thousands_groups_digits() {
        // Checks the closing line's number format.
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(12_345), "12,345");
        assert_eq!(thousands(1_234_567), "1,234,567");
    }

    #[test]
    fn losses_describe_every_cause() {
        // Checks the closing line's loss words: "0 lost" alone when nothing was lost, each cause named otherwise.
        assert_eq!(Losses::default().describe(), "0 lost");
        let l = Losses { ring_overrun: 1200, map_full: 3, throttled: 2, unwind_stopped: [0; 4] };
        assert_eq!(l.describe(), "1,203 lost (1,200 in full perf rings, 3 in full BPF tables), sampling throttled by the kernel 2 times");
        let l = Losses { unwind_stopped: [1500, 0, 2, 1], ..Losses::default() };
        assert_eq!(l.describe(), "0 lost, 1,503 unwind-table walks stopped early (1,500 no table, 2 read fault, 1 depth limit)");
        assert_eq!(l.records(), 0, "a stopped walk falls back to a stack copy: nothing is lost");
    }

    #[test]
    fn ring_overruns_reported_are_the_kernels_count() {
        // Checks the loss accounting against the kernel's own per-event counters (PERF_FORMAT_LOST, read apart from
        // the record stream): rings far too small for 16 KiB stack copies overflow while every CPU is busy, and the
        // PERF_RECORD_LOST counts read, the engine's losses, the count stored with the epoch and the closing line
        // all equal the kernel's.
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipping privileged test: not root");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let db = Database::create(&dir.path().join("db")).unwrap();
        let cfg = SamplerConfig { callchain: true, user_stack_bytes: 16384, ring_pages: 16, freq_hz: 10_000, ..Default::default() };
        let mut engine = Engine::new(&cfg, db, Duration::from_secs(600), BackendChoice::Stream).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let busy: Vec<_> = (0..loupe_perf::online_cpus().len() + 1)
            .map(|_| {
                let stop = Arc::clone(&stop);
                std::thread::spawn(move || {
                    let mut x = 1u64;
                    while !stop.load(Ordering::Relaxed) {
                        x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
                    }
                })
            })
            .collect();
        // A 17 KiB record every 100 µs per CPU into 64 KiB rings, with every CPU busy: the rings overflow.
        engine.sampler.enable().unwrap();
        std::thread::sleep(Duration::from_millis(500));
        stop.store(true, Ordering::Relaxed);
        busy.into_iter().for_each(|t| t.join().unwrap());
        // The kernel writes a ring's PERF_RECORD_LOST before its next record that fits: let a few samples come at
        // 10/s until what the records said catches up with the counters, then stop sampling and check again (a
        // loss can slip in between; then go on).
        engine.sampler.set_freq(10);
        let t = Instant::now();
        let caught_up = |e: &Engine| e.sampler.lost_by_kernel().is_none_or(|k| k == e.sampler.lost());
        let mut was_caught_up = false;
        while t.elapsed() < Duration::from_secs(20) {
            engine.drain().unwrap();
            if caught_up(&engine) {
                engine.sampler.disable().unwrap();
                engine.drain().unwrap();
                if caught_up(&engine) {
                    was_caught_up = true;
                    break;
                }
                engine.sampler.enable().unwrap();
            }
            std::thread::sleep(Duration::from_millis(120));
        }
        engine.sampler.disable().unwrap();
        engine.flush_final().unwrap();
        let reported = engine.sampler.lost();
        let truth = engine.sampler.lost_by_kernel().unwrap_or(reported);
        eprintln!(
            "lost: {reported} reported in PERF_RECORD_LOST, {truth} counted by the kernel; {} samples read",
            engine.sampler.samples_seen()
        );
        assert!(truth > 0, "the rings did not overflow: the test proves nothing");
        if was_caught_up {
            assert_eq!(reported, truth, "PERF_RECORD_LOST counts against the kernel's counters");
        } else {
            // On a machine busy with other tests (this binary runs its tests in parallel) a ring may lose its last
            // records just before sampling stops, and the kernel reports them only with that ring's next record,
            // which may never come: the records then lag the counters, never exceed them. What the user sees
            // (below) takes the kernel's counters and must equal them exactly either way.
            assert!(reported > 0 && reported <= truth, "PERF_RECORD_LOST said {reported}, the kernel {truth}");
        }
        assert_eq!(engine.losses().ring_overrun, truth);
        let epoch = engine.db.current_epoch().unwrap();
        let info = engine.db.epochs().unwrap().into_iter().find(|e| e.id == epoch).unwrap();
        assert_eq!((info.meta.losses.ring_overrun, info.lost_samples()), (truth, truth));
        let line = engine.closing_line(Duration::from_secs(1));
        assert!(line.contains(&format!(", {} lost (", thousands(truth))), "{line}");
    }
}
