//! The collector: turns the kernel's sample stream into per-image profiles.
//!
//! Data flow (DCPI §4.3): perf records -> [`Collector::process`] keeps
//! per-process image maps current and maps each (pid, pc) to (image, offset)
//! -> [`aggregate::Aggregator`] counts -> [`Collector::take_profiles`] hands
//! profiles to the store. [`daemon`] drives it from live samplers.
//!
//! Samples that cannot be attributed go to the `[unknown]` image (offset =
//! raw pc) and are counted, never dropped.

pub mod aggregate;
pub mod branches;
pub mod budget;
mod cgroups;
pub mod clock;
pub mod daemon;
pub mod error;
pub mod framepointers;
pub mod images;
pub mod jit;
pub mod kernel;
pub mod kstacks;
pub mod offcpu;
pub mod privilege;
pub mod process;
pub mod pyframes;
pub mod python;
pub mod rowspace;
pub mod stacks;
pub mod unwind;
pub mod unwindtable;

use aggregate::{Aggregator, Slot};
use images::{FileProbe, ImageTable};
use loupe_model::{BuildId, CpuMode, EventName, ImageId, ImageKind, Profile, ANON_IMAGE};
use loupe_perf::{Mmap, Record, Sample};
use process::{Mapping, Processes};
use std::collections::{HashMap, HashSet};
use std::fs;
use std::path::{Path, PathBuf};

/// Counters the daemon reports per interval (DCPI Table VI's columns and more).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Stats {
    pub samples: u64,
    pub kernel_samples: u64,
    pub unknown_samples: u64,
    pub lost_records: u64,
    pub mmaps: u64,
    pub execs: u64,
    pub forks: u64,
    pub exits: u64,
    pub proc_scans: u64,
    pub images_preserved: u64,
}

/// Facts about the running kernel taken at start.
pub struct KernelInfo {
    pub text_base: Option<u64>,
    pub build_id: Option<BuildId>,
    pub modules: Vec<kernel::Module>,
}

impl KernelInfo {
    pub fn read() -> KernelInfo {
        KernelInfo {
            text_base: kernel::text_base_from_file(Path::new("/proc/kallsyms")),
            build_id: fs::read("/sys/kernel/notes").ok().and_then(|n| loupe_symbolize::build_id::of_notes(&n)),
            modules: kernel::parse_modules(&fs::read_to_string("/proc/modules").unwrap_or_default()),
        }
    }
}

pub struct Collector {
    images: ImageTable,
    procs: Processes,
    agg: Aggregator,
    probe: Box<dyn FileProbe + Send>,
    events: Vec<EventName>,
    kernel: KernelInfo,
    kernel_image: u32,
    unknown_image: u32,
    /// `[anon]`: anonymous executable memory of processes without JIT files.
    anon_image: u32,
    module_images: Vec<u32>,
    vdso: ImageId,
    /// Where copies of replaced/deleted binaries go (`DB/images`).
    images_dir: Option<PathBuf>,
    /// Pids whose /proc scan was already tried this drain.
    scanned: HashSet<u32>,
    drain: u64,
    stats: Stats,
    swapper: u32,
    /// Image files watched for deletion or replacement while a live
    /// process maps them.
    watches: HashMap<u32, images::Watch>,
    /// Images already copied into the image cache.
    preserved: HashSet<u32>,
    last_watch_check: std::time::Instant,
    /// Call-stack collection, when on (see [`stacks`]).
    stacks: Option<Box<stacks::StackState>>,
    /// Branch-record (LBR) collection, when on (see [`branches`]).
    branches: Option<Box<branches::BranchState>>,
    /// Processes that name their JIT code (see [`jit`]).
    jit: jit::JitState,
    /// Python frames of CPython processes (see [`pyframes`]).
    py: pyframes::PyState,
    /// Each process's cgroup path (see [`cgroups`]).
    cgroups: cgroups::ProcessCgroups,
    /// Off-CPU time, when on (see [`offcpu`]).
    off_cpu: Option<Box<offcpu::OffCpuState>>,
}

impl Collector {
    pub fn new(events: Vec<EventName>, kernel: KernelInfo, images_dir: Option<PathBuf>) -> Collector {
        let (vdso, vdso_bytes) = images::own_vdso();
        if let (Some(dir), Some(bytes), Some(b)) = (&images_dir, vdso_bytes, &vdso.build_id) {
            let dest = dir.join(b.to_hex());
            if !dest.exists() && loupe_files::create_dir_all(dir).is_ok() {
                let _ = loupe_files::write(&dest, bytes);
            }
        }
        let mut images = ImageTable::default();
        let kernel_image = images.intern(ImageId::kernel(kernel.build_id.clone())).0;
        let unknown_image = images.intern(ImageId::unknown()).0;
        let anon = ImageId { kind: ImageKind::Anonymous, path: ANON_IMAGE.into(), build_id: None, content_hash: None };
        let anon_image = images.intern(anon).0;
        let module_images = kernel
            .modules
            .iter()
            .map(|m| {
                let id = ImageId { kind: ImageKind::KernelModule, path: format!("[{}]", m.name), build_id: None, content_hash: None };
                images.intern(id).0
            })
            .collect();
        let mut agg = Aggregator::default();
        let swapper = agg.intern_comm("swapper");
        Collector {
            images,
            procs: Processes::default(),
            agg,
            probe: Box::new(images::Fs),
            events,
            kernel,
            kernel_image,
            unknown_image,
            anon_image,
            module_images,
            vdso,
            images_dir,
            scanned: HashSet::new(),
            drain: 0,
            stats: Stats::default(),
            swapper,
            watches: HashMap::new(),
            preserved: HashSet::new(),
            last_watch_check: std::time::Instant::now(),
            stacks: None,
            branches: None,
            jit: jit::JitState::default(),
            py: pyframes::PyState::default(),
            off_cpu: None,
            cgroups: Default::default(),
        }
    }

    /// Keeps copies of the perf maps and jitdumps of sampled processes in
    /// `dir` (`DB/jit`) at every flush.
    pub fn keep_jit_files_in(&mut self, dir: PathBuf) {
        self.jit.keep_in(dir);
    }

    /// What kept Python frames from being read (said once per cause), how
    /// many stacks had them read and how many reads failed (a frame chain
    /// changing while read, a process exiting).
    pub fn python_notes(&self) -> (&[String], u64, u64) {
        (&self.py.notes, self.py.stacks_read, self.py.read_failures)
    }

    /// Of the stacks with Python frames, those whose frames the BPF
    /// program read at sample time.
    pub fn python_stacks_read_in_kernel(&self) -> u64 {
        self.py.read_in_kernel
    }

    /// Whether the rings should be drained every few milliseconds instead
    /// of at their watermark: Python stacks are read at drain time, and
    /// one that changed since its sample is attributed as read.
    pub fn wants_prompt_drain(&self) -> bool {
        self.py.active()
    }

    /// Map and jitdump files copied into the database so far.
    pub fn jit_files_kept(&self) -> u64 {
        self.jit.copies
    }

    /// Cgroup paths of processes seen or changed since the last call.
    pub fn take_cgroups(&mut self) -> std::collections::BTreeMap<u32, String> {
        self.cgroups.take_new()
    }

    pub fn stats(&self) -> Stats {
        self.stats
    }

    pub fn live_processes(&self) -> usize {
        self.procs.len()
    }

    pub fn aggregated_entries(&self) -> usize {
        self.agg.entries()
    }

    pub fn image_count(&self) -> usize {
        self.images.len()
    }

    /// Reads the maps of every running process (those alive before the
    /// sampler started never produce mmap records).
    pub fn scan_all(&mut self) {
        let Ok(dir) = fs::read_dir("/proc") else { return };
        let pids: Vec<u32> = dir.flatten().filter_map(|e| e.file_name().to_str()?.parse().ok()).collect();
        for pid in pids {
            self.scan_pid(pid);
        }
    }

    /// (Re)builds one process's maps from /proc. False if it is gone.
    pub fn scan_pid(&mut self, pid: u32) -> bool {
        self.stats.proc_scans += 1;
        let Ok(text) = fs::read_to_string(format!("/proc/{pid}/maps")) else { return false };
        self.cgroups.scan(pid);
        let comm = fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        let comm = self.agg.intern_comm(comm.trim_end());
        let mut maps = Vec::new();
        for l in loupe_model::maps::parse_exec_mappings(&text) {
            if jit::is_jitdump(&l.path) {
                self.jit.saw_jitdump(pid, &l.path);
                continue;
            }
            let probe_path = images::map_files_path(pid, l.start, l.end);
            let (image, _) = self.images.resolve(self.probe.as_mut(), &l.path, None, &probe_path, l.inode, &self.vdso);
            self.watch(image, pid, l.start, l.end, &probe_path);
            let pgoff = self.pgoff(image, l.start, l.pgoff);
            maps.push(Mapping { start: l.start, end: l.end, pgoff, image });
        }
        self.procs.comm(pid, comm, true);
        self.invalidate_unwinder(pid);
        let p = self.procs.get_or_insert(pid);
        for m in maps {
            p.map(m);
        }
        true
    }

    /// A new image is preserved at once if its file is already gone or
    /// different, and watched otherwise; a known one just records a fresher
    /// live mapping to copy from later.
    fn watch(&mut self, image: u32, pid: u32, start: u64, end: u64, mapped: &Path) {
        if self.images_dir.is_none() || self.images.get(image).kind != ImageKind::Elf || self.images.get(image).build_id.is_none() {
            return;
        }
        if self.preserved.contains(&image) {
            return;
        }
        if let Some(w) = self.watches.get_mut(&image) {
            (w.pid, w.start, w.end) = (pid, start, end);
            return;
        }
        // New, or mapped again after its watch was dropped with the last
        // process known to map it: preserved now if already replaced.
        if !self.preserve(image, mapped) {
            let sig = images::file_sig(Path::new(&self.images.get(image).path));
            self.watches.insert(image, images::Watch { sig, pid, start, end });
        }
    }

    /// Copies watched images whose files changed on disk, from a process
    /// that still maps them. At most once a second; called after every
    /// side-band drain, not only at the end of a (4 s) BPF drain, so a
    /// program deleted and exiting within one BPF interval is still copied.
    pub fn check_watches(&mut self) {
        if self.last_watch_check.elapsed() < std::time::Duration::from_secs(1) {
            return;
        }
        self.last_watch_check = std::time::Instant::now();
        // Only images some live process maps are watched: a file stat'ed
        // every second for every image ever seen (thousands on a build
        // machine) cost a tenth of the daemon's CPU, and a gone process
        // leaves nothing to copy from.
        let procs = &self.procs;
        self.watches.retain(|_, w| procs.get(w.pid).is_some());
        let changed: Vec<(u32, images::Watch)> = self
            .watches
            .iter()
            .filter(|(i, w)| images::file_sig(Path::new(&self.images.get(**i).path)) != w.sig)
            .map(|(i, w)| (*i, w.clone()))
            .collect();
        for (image, w) in changed {
            self.watches.remove(&image);
            self.preserve(image, &images::map_files_path(w.pid, w.start, w.end));
        }
    }

    fn preserve(&mut self, image: u32, mapped: &Path) -> bool {
        if let Some(dir) = &self.images_dir {
            if images::preserve_if_replaced(self.images.get(image), mapped, dir) {
                self.stats.images_preserved += 1;
                self.preserved.insert(image);
                return true;
            }
        }
        false
    }

    /// Applies one record from the kernel.
    pub fn process(&mut self, rec: &Record) {
        self.cgroups.see(rec);
        match rec {
            Record::Sample(s) => self.sample(s),
            Record::Mmap(m) => self.mmap(m),
            // A thread renaming itself does not rename its process.
            Record::Comm { pid, tid, exec: false, .. } if pid != tid => {}
            Record::Comm { pid, comm, exec, .. } => {
                let c = self.agg.intern_comm(comm);
                self.procs.comm(*pid, c, *exec);
                if *exec {
                    self.invalidate_unwinder(*pid);
                    self.py.forget(*pid);
                }
                self.stats.execs += *exec as u64;
            }
            Record::Fork { pid, ppid, .. } => {
                self.procs.fork(*pid, *ppid);
                self.stats.forks += 1;
            }
            Record::Exit { pid, tid, .. } => {
                self.procs.exit(*pid, *tid, self.drain);
                self.stats.exits += (pid == tid) as u64;
            }
            Record::Lost { lost, .. } => self.stats.lost_records += lost,
            _ => {}
        }
    }

    fn mmap(&mut self, m: &Mmap) {
        const PROT_EXEC: u32 = 4;
        if m.prot & PROT_EXEC == 0 && m.prot != 0 {
            return;
        }
        self.stats.mmaps += 1;
        if jit::is_jitdump(&m.filename) {
            self.jit.saw_jitdump(m.pid, &m.filename);
            return;
        }
        let probe_path = images::map_files_path(m.pid, m.addr, m.addr + m.len);
        let fallback = if Path::new(&probe_path).exists() { probe_path } else { PathBuf::from(&m.filename) };
        let bid = m.build_id.clone().map(BuildId);
        let (image, _) = self.images.resolve(self.probe.as_mut(), &m.filename, bid, &fallback, 0, &self.vdso);
        self.watch(image, m.pid, m.addr, m.addr + m.len, &fallback);
        self.invalidate_unwinder(m.pid);
        self.py.mapped(m.pid, &m.filename);
        let pgoff = self.pgoff(image, m.addr, m.pgoff);
        self.procs.get_or_insert(m.pid).map(Mapping { start: m.addr, end: m.addr + m.len, pgoff, image });
    }

    /// Offsets into anonymous memory are addresses (what JIT maps give,
    /// and what a private anonymous mapping's pgoff already says in MMAP2
    /// records, though not in /proc/PID/maps).
    fn pgoff(&self, image: u32, start: u64, pgoff: u64) -> u64 {
        if self.images.get(image).kind == ImageKind::Anonymous {
            start
        } else {
            pgoff
        }
    }

    fn sample(&mut self, s: &Sample) {
        let kernel = matches!(s.mode, CpuMode::Kernel);
        self.attribute(s.pid, s.ip, kernel, s.event_index as u16, 1, s.period);
        if self.stacks.is_some() {
            self.sample_stack(s);
        }
        if self.branches.is_some() && !s.branches.is_empty() {
            self.sample_branches(s);
        }
    }

    fn invalidate_unwinder(&mut self, pid: u32) {
        if let Some(st) = &mut self.stacks {
            st.unwinders.invalidate(pid);
            st.changed.insert(pid);
        }
    }

    /// The aggregator's id for `pid`'s name ("swapper" when the process is
    /// unknown): ids live as long as the collector.
    pub(crate) fn comm_id(&self, pid: u32) -> u32 {
        self.procs.get(pid).map_or(self.swapper, |p| p.comm)
    }

    /// Counts `count` samples of one (pid, pc, event) — one sample from the
    /// stream, or an aggregated bucket from the BPF tables.
    pub fn attribute(&mut self, pid: u32, ip: u64, kernel: bool, event: u16, count: u64, period: u64) {
        self.stats.samples += count;
        if kernel || ip >= kernel::KERNEL_SPACE_START {
            self.stats.kernel_samples += count;
            let comm = self.comm_id(pid);
            let (image, offset) = self.kernel_location(ip);
            self.agg.add(Slot { image, event, pid, comm, offset }, count, period);
            return;
        }
        match self.user_location(pid, ip) {
            Some((image, offset, comm)) => self.agg.add(Slot { image, event, pid, comm, offset }, count, period),
            None => {
                self.stats.unknown_samples += count;
                let comm = self.comm_id(pid);
                self.agg.add(Slot { image: self.unknown_image, event, pid, comm, offset: ip }, count, period);
            }
        }
    }

    pub(crate) fn kernel_location(&self, ip: u64) -> (u32, u64) {
        for (m, &img) in self.kernel.modules.iter().zip(&self.module_images) {
            if ip >= m.base && ip < m.base + m.size {
                return (img, ip - m.base);
            }
        }
        (self.kernel_image, ip.wrapping_sub(self.kernel.text_base.unwrap_or(0)))
    }

    /// Finds the image; on a miss, re-reads the process's maps once per
    /// drain (a missed mmap record, or a process older than the sampler).
    fn user_location(&mut self, pid: u32, ip: u64) -> Option<(u32, u64, u32)> {
        let hit = |c: &Collector| {
            let p = c.procs.get(pid)?;
            let m = p.lookup(ip)?;
            Some((m.image, m.offset_of(ip), p.comm))
        };
        if let Some(h) = hit(self) {
            return Some(h);
        }
        if self.scanned.insert(pid) && self.scan_pid(pid) {
            return hit(self);
        }
        None
    }

    /// Marks the end of one drain of the kernel buffers: exited processes
    /// are reaped a couple of drains later.
    pub fn end_drain(&mut self) {
        self.drain += 1;
        self.scanned.clear();
        self.check_watches();
        self.procs.reap(self.drain);
        let procs = &self.procs;
        self.jit.forget_gone(self.drain, |pid| procs.get(pid).is_some());
        self.py.retain(|pid| procs.get(pid).is_some());
        if let Some(st) = &mut self.stacks {
            let procs = &self.procs;
            st.unwinders.retain(|pid| procs.get(pid).is_some());
        }
    }

    /// Hands over the profiles of the images `select` picks (by index).
    pub fn take_profiles(&mut self, select: impl Fn(u32) -> bool) -> Vec<Profile> {
        self.move_jit_samples();
        let images = &self.images;
        let events = &self.events;
        self.agg.take(select, |i| images.get(i).clone(), |e| events[e as usize].clone())
    }
}
