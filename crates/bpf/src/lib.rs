//! In-kernel sample aggregation with eBPF: DCPI's per-CPU driver hash
//! table (§4.2), rebuilt.
//!
//! A `perf_event` program runs on every sample of the sampling events and
//! counts `(tgid, event, mode, pc) -> (count, period sum)` in a
//! `BPF_MAP_TYPE_PERCPU_HASH`: each CPU updates only its own value slot, so
//! the hot path (a key already present) is a lock-free lookup and a plain
//! add. Two generations of tables exist; the program fills the one named
//! by `generation` in its `.bss`, and [`BpfAggregator::drain`] flips the
//! flag, waits a short grace period (programs run to completion in
//! interrupt context, in microseconds), then empties the other table with
//! `lookup_and_delete_batch`. The program never waits on the daemon. A
//! straggler that still updates the old table after the grace period is not
//! lost: its entry stays in that table until the next drain of it.
//!
//! A sample whose key cannot be placed (table full) goes to a BPF ring
//! buffer as a single sample (an *eviction*); if the ring buffer is full
//! too, it is counted as *dropped*. So, exactly:
//! `samples = drained counts + evictions + drops` (checked by the tests).
//!
//! The program returns 0, which tells the kernel not to also write the
//! sample into the perf ring buffer; side-band records (mmap, comm, fork,
//! exit) keep flowing there for image mapping.
//!
//! Counter codes come from `src/codes.in`, which build.rs turns into both
//! the C header and Rust constants.

mod codes {
    include!(concat!(env!("OUT_DIR"), "/codes.rs"));
}
mod skel {
    #![allow(clippy::all, dead_code, non_camel_case_types, missing_docs, unsafe_op_in_unsafe_fn)]
    include!(concat!(env!("OUT_DIR"), "/aggregate.skel.rs"));
}

use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{Link, MapCore, MapFlags, PerfEventOpts, RingBufferBuilder};
use skel::{AggregateSkel, AggregateSkelBuilder};
use std::cell::RefCell;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd};
use std::rc::Rc;
use std::time::Duration;

/// One aggregated (process, event, mode, pc) bucket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AggEntry {
    pub pid: u32,
    pub event_index: u16,
    pub kernel: bool,
    pub ip: u64,
    pub count: u64,
    pub period: u64,
}

/// BPF-side counters, summed over CPUs, cumulative.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    pub samples: u64,
    pub entries_created: u64,
    pub evicted: u64,
    pub dropped: u64,
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Error(String);

fn err(what: &str, e: impl std::fmt::Display) -> Error {
    Error(format!("{what}: {e}"))
}

const KEY_SIZE: usize = 16;
const VALUE_SIZE: usize = 16;
const BATCH: u32 = 4096;
/// How long programs that read the old generation get to finish.
const GRACE: Duration = Duration::from_millis(2);

pub struct BpfAggregator {
    skel: AggregateSkel<'static>,
    links: Vec<Link>,
    ncpus: usize,
    max_entries: u32,
    /// Generation the program fills now.
    generation: u32,
}

/// Why BPF cannot be used here, if it cannot: checked before loading so
/// the daemon can say it in one line and fall back to streaming.
pub fn unavailable_reason() -> Option<String> {
    if !std::path::Path::new("/sys/kernel/btf/vmlinux").exists() {
        return Some("the kernel has no BTF (/sys/kernel/btf/vmlinux)".into());
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 && !has_bpf_caps() {
        return Some("needs root or CAP_BPF + CAP_PERFMON".into());
    }
    None
}

fn has_bpf_caps() -> bool {
    // CapEff bits: CAP_PERFMON = 38, CAP_BPF = 39.
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let eff = status.lines().find_map(|l| l.strip_prefix("CapEff:")).and_then(|v| u64::from_str_radix(v.trim(), 16).ok()).unwrap_or(0);
    eff & (1 << 38) != 0 && eff & (1 << 39) != 0
}

impl BpfAggregator {
    /// Loads the program with tables of `max_entries_per_cpu` keys.
    pub fn load(max_entries_per_cpu: u32) -> Result<BpfAggregator, Error> {
        if let Some(why) = unavailable_reason() {
            return Err(Error(why));
        }
        // The skeleton borrows its object storage for its whole life; the
        // aggregator lives as long as the daemon, so the storage is leaked.
        let storage: &'static mut MaybeUninit<libbpf_rs::OpenObject> = Box::leak(Box::new(MaybeUninit::uninit()));
        let mut open = AggregateSkelBuilder::default().open(storage).map_err(|e| err("opening the BPF object", e))?;
        for m in [&mut open.maps.counts0, &mut open.maps.counts1] {
            m.set_max_entries(max_entries_per_cpu).map_err(|e| err("sizing the BPF tables", e))?;
        }
        let skel = open.load().map_err(|e| err("loading the BPF program (verifier)", e))?;
        let ncpus = libbpf_rs::num_possible_cpus().map_err(|e| err("counting CPUs", e))?;
        Ok(BpfAggregator { skel, links: Vec::new(), ncpus, max_entries: max_entries_per_cpu, generation: 0 })
    }

    /// Attaches to sampling perf events, given as (event index, fd); the
    /// index comes back in each entry through the BPF attach cookie.
    pub fn attach(&mut self, fds: &[(usize, i32)]) -> Result<(), Error> {
        for &(index, fd) in fds {
            let opts = PerfEventOpts { cookie: index as u64, ..Default::default() };
            // libbpf's perf-event link closes the fd it is given when it is
            // dropped; give it its own duplicate so the sampler's fd stays valid.
            // SAFETY: dup of a descriptor the caller keeps open for this call.
            let dup = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
            if dup < 0 {
                return Err(err("duplicating a perf event fd", std::io::Error::last_os_error()));
            }
            let link = self.skel.progs.on_sample.attach_perf_event_with_opts(dup, opts).map_err(|e| {
                // SAFETY: closing the duplicate nobody took ownership of.
                unsafe { libc::close(dup) };
                err("attaching to a perf event", e)
            })?;
            self.links.push(link);
        }
        Ok(())
    }

    /// Flips the generation, waits out the grace period, and moves the old
    /// generation's entries and any evictions into `out`.
    pub fn drain(&mut self, out: &mut Vec<AggEntry>) -> Result<(), Error> {
        let old = self.generation;
        self.generation ^= 1;
        if let Some(bss) = self.skel.maps.bss_data.as_deref_mut() {
            // SAFETY: `generation` is a u32 in the mmap'ed .bss that the
            // program reads; a volatile store makes the flip visible at once.
            unsafe { std::ptr::write_volatile(&mut bss.generation, self.generation) };
        }
        std::thread::sleep(GRACE);
        let table = if old == 0 { &self.skel.maps.counts0 } else { &self.skel.maps.counts1 };
        drain_table(table.as_fd().as_raw_fd(), self.ncpus, out)?;
        self.drain_evictions(out)
    }

    fn drain_evictions(&mut self, out: &mut Vec<AggEntry>) -> Result<(), Error> {
        let got: Rc<RefCell<Vec<AggEntry>>> = Rc::default();
        let sink = Rc::clone(&got);
        let mut b = RingBufferBuilder::new();
        b.add(&self.skel.maps.evictions, move |data: &[u8]| {
            // struct eviction: the key, then the sample's period.
            let period = data.get(KEY_SIZE..KEY_SIZE + 8).unwrap_or(&[0; 8]);
            if let Some(e) = parse_entry(&data[..KEY_SIZE.min(data.len())], &[&1u64.to_ne_bytes()[..], period].concat()) {
                sink.borrow_mut().push(e);
            }
            0
        })
        .map_err(|e| err("eviction ring buffer", e))?;
        let rb = b.build().map_err(|e| err("eviction ring buffer", e))?;
        rb.consume().map_err(|e| err("reading evictions", e))?;
        drop(rb);
        out.append(&mut got.borrow_mut());
        Ok(())
    }

    pub fn counters(&self) -> Counters {
        let sum = |stat: u32| -> u64 {
            let values = self.skel.maps.stats.lookup_percpu(&stat.to_ne_bytes(), MapFlags::ANY).ok().flatten().unwrap_or_default();
            values.iter().map(|v| u64::from_ne_bytes(v[..8].try_into().unwrap_or([0; 8]))).sum()
        };
        Counters {
            samples: sum(codes::STAT_SAMPLES),
            entries_created: sum(codes::STAT_CREATED),
            evicted: sum(codes::STAT_EVICTED),
            dropped: sum(codes::STAT_DROPPED),
        }
    }

    /// Memory the BPF maps reserve: two tables of per-CPU values, the
    /// eviction ring, the counters.
    pub fn map_memory_bytes(&self) -> u64 {
        let table = self.max_entries as u64 * (KEY_SIZE as u64 + 16 + VALUE_SIZE as u64 * self.ncpus as u64);
        2 * table + self.skel.maps.evictions.max_entries() as u64 + 8 * codes::STAT_COUNT as u64 * self.ncpus as u64
    }

    pub fn table_capacity(&self) -> u32 {
        self.max_entries
    }
}

/// Decodes a key and a (count, period) value.
fn parse_entry(key: &[u8], value: &[u8]) -> Option<AggEntry> {
    let u64_at = |b: &[u8], i: usize| Some(u64::from_ne_bytes(b.get(i..i + 8)?.try_into().ok()?));
    Some(AggEntry {
        pid: u32::from_ne_bytes(key.get(0..4)?.try_into().ok()?),
        event_index: u16::from_ne_bytes(key.get(4..6)?.try_into().ok()?),
        kernel: *key.get(6)? != 0,
        ip: u64_at(key, 8)?,
        count: u64_at(value, 0)?,
        period: u64_at(value, 8)?,
    })
}

/// Empties one per-CPU table in batches, summing each key's CPU slots.
fn drain_table(fd: i32, ncpus: usize, out: &mut Vec<AggEntry>) -> Result<(), Error> {
    let per_key = VALUE_SIZE * ncpus;
    let mut keys = vec![0u8; BATCH as usize * KEY_SIZE];
    let mut values = vec![0u8; BATCH as usize * per_key];
    let (mut cursor_in, mut cursor_out) = ([0u8; 16], [0u8; 16]);
    let mut first = true;
    loop {
        let mut count = BATCH;
        let opts = libbpf_sys::bpf_map_batch_opts { sz: std::mem::size_of::<libbpf_sys::bpf_map_batch_opts>() as _, ..Default::default() };
        // SAFETY: buffers are sized for BATCH keys and BATCH per-CPU values;
        // the cursors are larger than the kernel's u32 batch token.
        let rc = unsafe {
            libbpf_sys::bpf_map_lookup_and_delete_batch(
                fd,
                if first { std::ptr::null_mut() } else { cursor_in.as_mut_ptr().cast() },
                cursor_out.as_mut_ptr().cast(),
                keys.as_mut_ptr().cast(),
                values.as_mut_ptr().cast(),
                &mut count,
                &opts,
            )
        };
        let errno = if rc < 0 { std::io::Error::last_os_error().raw_os_error().unwrap_or(0) } else { 0 };
        if rc < 0 && errno != libc::ENOENT {
            if errno == libc::EFAULT && count == 0 {
                return Ok(());
            }
            return Err(err("draining a BPF table", std::io::Error::from_raw_os_error(errno)));
        }
        for i in 0..count as usize {
            let key = &keys[i * KEY_SIZE..(i + 1) * KEY_SIZE];
            let vals = &values[i * per_key..(i + 1) * per_key];
            let (mut n, mut period) = (0u64, 0u64);
            for c in vals.chunks_exact(VALUE_SIZE) {
                n += u64::from_ne_bytes(c[..8].try_into().expect("8 bytes"));
                period += u64::from_ne_bytes(c[8..16].try_into().expect("8 bytes"));
            }
            if n > 0 {
                if let Some(e) = parse_entry(key, &[n.to_ne_bytes(), period.to_ne_bytes()].concat()) {
                    out.push(e);
                }
            }
        }
        if rc < 0 {
            return Ok(());
        }
        cursor_in = cursor_out;
        first = false;
    }
}
