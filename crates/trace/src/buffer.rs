//! The lock-free per-CPU shared-memory buffer (PEM §3.3, after K42 and LTTng).
//!
//! One file in `/dev/shm` holds, per CPU, a control block and a circular set
//! of `nsub` fixed-size sub-buffers ("packets") of variable-length records.
//! A writer reserves space with one compare-and-swap on the CPU's `head`
//! (a byte position that only grows) and reads the timestamp inside every
//! attempt, so timestamps never decrease along a buffer. After writing, it
//! adds the bytes to the packet's `commit` count; the consumer takes a packet
//! when its count reaches the packet size, copies it out, zeroes the count and
//! bumps `consumed`, which frees the slot. A writer that would enter a slot the
//! consumer has not freed drops its event and counts it; nothing is
//! overwritten. The C runtime (`sdk/c/loupe_trace.h`) implements the same
//! protocol on the same layout.
//!
//! ```text
//! file:     [global header, 4096 B][ctl cpu0][ctl cpu1]..[pad to 4096][data cpu0: nsub*S]..
//! global:   0 u64 magic "LOUPETRC"  8 u32 version  12 u32 ncpu  16 u32 nsub  20 u32 S
//!           24 u32 clockid  28 u32 ctl_stride  32 u64 ctl_offset  40 u64 data_offset
//!           48 u32 tsc_mult  52 u32 tsc_shift  56 u64 tsc_base  64 u64 ns_base
//!           (the TSC clock of [`crate::tsc`]; tsc_mult 0 = writers use clock_gettime)
//! ctl:      0 u64 head   64 u64 dropped   128 u64 consumed   192 u64 commit[nsub]
//! packet:   0 u32 magic 0xC1FC1FC1  4 u32 stream id (0)  8 u32 stream instance (cpu)
//!           12 u32 cpu  16 u64 ts_begin  24 u64 ts_end  32 u64 content size (bits)
//!           40 u64 packet size (bits)  48 u64 sequence number  56 u64 events discarded
//!           64.. records, then zeros
//! ```
//! The packet header is a CTF 1.8 packet header and context (see
//! [`crate::ctf`]): the writer that opens a packet fills magic, ts_begin,
//! sequence, cpu and the drops so far; [`Buffer::take`] fills ts_end, the
//! sizes and the drop count at the time the packet is taken, so packets go
//! to disk as they are and babeltrace2 reads them.

use crate::tsc::TscClock;
use std::fs::{File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

pub const MAGIC: u64 = u64::from_le_bytes(*b"LOUPETRC");
pub const VERSION: u32 = 1;
pub const PACKET_MAGIC: u32 = 0xC1FC_1FC1;
pub const PACKET_HEADER: usize = 64;
const GLOBAL: usize = 4096;
const OFF_HEAD: usize = 0;
const OFF_DROPPED: usize = 64;
const OFF_CONSUMED: usize = 128;
const OFF_COMMIT: usize = 192;
/// The environment variable naming the buffer file for traced programs.
pub const ENV: &str = "LOUPE_TRACE_SHM";

/// Sizes of a buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    pub ncpu: u32,
    pub nsub: u32,
    pub sub_size: u32,
}

impl Geometry {
    fn ctl_stride(&self) -> usize {
        (OFF_COMMIT + 8 * self.nsub as usize).next_multiple_of(64)
    }
    fn data_offset(&self) -> usize {
        (GLOBAL + self.ncpu as usize * self.ctl_stride()).next_multiple_of(4096)
    }
    fn len(&self) -> usize {
        self.data_offset() + self.ncpu as usize * self.nsub as usize * self.sub_size as usize
    }
    /// [`Geometry::len`] when it fits the address space: a header's counts may be anything.
    fn checked_len(&self) -> Option<usize> {
        let (ncpu, nsub) = (self.ncpu as usize, self.nsub as usize);
        let data_offset = ncpu.checked_mul(self.ctl_stride())?.checked_add(GLOBAL)?.checked_next_multiple_of(4096)?;
        let len = ncpu.checked_mul(nsub)?.checked_mul(self.sub_size as usize)?.checked_add(data_offset)?;
        (len <= isize::MAX as usize).then_some(len)
    }
    fn check(&self) -> io::Result<()> {
        let pow2 = |v: u32| v != 0 && v.is_power_of_two();
        let ok = self.ncpu > 0
            && pow2(self.nsub)
            && pow2(self.sub_size)
            && self.sub_size as usize >= PACKET_HEADER + crate::record::MAX_RECORD
            && self.checked_len().is_some();
        ok.then_some(()).ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, format!("bad buffer geometry {self:?}")))
    }
}

/// A mapped buffer file, used both by writers (logging) and by the consumer.
pub struct Buffer {
    base: *mut u8,
    len: usize,
    geo: Geometry,
    path: Option<PathBuf>,
    clock: Option<TscClock>,
    /// log2 of the sub-buffer size and nsub - 1: positions split with shifts and masks, not divisions.
    sub_shift: u32,
    nsub_mask: u64,
    /// The geometry's control-block stride and data offset, computed once (the logging path uses both).
    stride: usize,
    data_off: usize,
}

// SAFETY: all shared state is accessed through atomics or through byte
// ranges that the reservation protocol gives to one thread at a time.
unsafe impl Send for Buffer {}
// SAFETY: as above.
unsafe impl Sync for Buffer {}

/// CLOCK_MONOTONIC in nanoseconds: the clock perf_event_open uses by default
/// for user-visible timestamps when `use_clockid` asks for it, and the one
/// `loupe trace record` gives the kernel events.
#[inline]
pub fn now() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes into the timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

#[cfg(all(target_arch = "x86_64", target_env = "gnu"))]
extern "C" {
    /// glibc (2.35+): where this thread's `struct rseq` is, from the thread pointer, and its size (0: not registered).
    static __rseq_offset: isize;
    static __rseq_size: u32;
}

/// The CPU this thread runs on: `cpu_id` of its rseq area, which the kernel
/// keeps current (one load); sched_getcpu where rseq is not registered.
#[inline]
fn current_cpu() -> usize {
    #[cfg(all(target_arch = "x86_64", target_env = "gnu"))]
    // SAFETY: glibc's exported rseq symbols are plain data; when __rseq_size is nonzero the area at
    // thread pointer + __rseq_offset is this thread's registered struct rseq, cpu_id (u32) at offset 4.
    unsafe {
        if __rseq_size != 0 {
            let tp: *const u8;
            std::arch::asm!("mov {}, fs:0", out(reg) tp, options(nostack, readonly, preserves_flags));
            let cpu = (tp.offset(__rseq_offset).add(4) as *const u32).read_volatile();
            return cpu as usize;
        }
    }
    // SAFETY: sched_getcpu has no arguments.
    let c = unsafe { libc::sched_getcpu() };
    c.max(0) as usize
}

impl Buffer {
    /// Creates a new buffer file (the consumer's side) at `path`, sized for
    /// `geo`; writers attach with [`Buffer::open`].
    pub fn create(path: &Path, geo: Geometry) -> io::Result<Buffer> {
        Buffer::create_with_clock(path, geo, TscClock::calibrate())
    }

    /// [`Buffer::create`] with the writers' clock given: a TSC clock, or None for clock_gettime.
    pub fn create_with_clock(path: &Path, geo: Geometry, clock: Option<TscClock>) -> io::Result<Buffer> {
        geo.check()?;
        // Private like every Loupe file: writers are the traced command, run as the same user.
        let f = loupe_files::create_new(path)?;
        f.set_len(geo.len() as u64)?;
        let b = Buffer::map(&f, geo.len(), geo, Some(path.to_path_buf()))?;
        b.put_u32(8, VERSION);
        b.put_u32(12, geo.ncpu);
        b.put_u32(16, geo.nsub);
        b.put_u32(20, geo.sub_size);
        b.put_u32(24, libc::CLOCK_MONOTONIC as u32);
        b.put_u32(28, geo.ctl_stride() as u32);
        b.put_u64(32, GLOBAL as u64);
        b.put_u64(40, geo.data_offset() as u64);
        if let Some(c) = clock {
            b.put_u32(48, c.mult);
            b.put_u32(52, c.shift);
            b.put_u64(56, c.tsc_base);
            b.put_u64(64, c.ns_base);
        }
        // The magic last: a writer that sees it sees a complete header.
        b.atomic(0).store(MAGIC, Ordering::Release);
        let mut b = b;
        b.clock = b.read_clock();
        Ok(b)
    }

    /// Attaches to an existing buffer file (the writer's side).
    pub fn open(path: &Path) -> io::Result<Buffer> {
        let f = OpenOptions::new().read(true).write(true).open(path)?;
        let len = f.metadata()?.len() as usize;
        let probe = Buffer::map(&f, len.min(GLOBAL), Geometry { ncpu: 1, nsub: 1, sub_size: 1 }, None)?;
        if len < GLOBAL || probe.atomic(0).load(Ordering::Acquire) != MAGIC || probe.get_u32(8) != VERSION {
            return Err(io::Error::new(io::ErrorKind::InvalidData, format!("{} is not a loupe trace buffer", path.display())));
        }
        let geo = Geometry { ncpu: probe.get_u32(12), nsub: probe.get_u32(16), sub_size: probe.get_u32(20) };
        drop(probe);
        geo.check()?;
        if geo.len() != len {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "trace buffer size does not match its header"));
        }
        let mut b = Buffer::map(&f, len, geo, None)?;
        b.clock = b.read_clock();
        Ok(b)
    }

    /// The TSC clock the header publishes, if any.
    fn read_clock(&self) -> Option<TscClock> {
        let u64_at = |o: usize| self.get_u32(o) as u64 | (self.get_u32(o + 4) as u64) << 32;
        let c = TscClock { mult: self.get_u32(48), shift: self.get_u32(52), tsc_base: u64_at(56), ns_base: u64_at(64) };
        (c.mult != 0 && cfg!(target_arch = "x86_64")).then_some(c)
    }

    /// The writers' clock: the header's TSC clock, or CLOCK_MONOTONIC.
    pub fn clock(&self) -> Option<TscClock> {
        self.clock
    }

    #[inline]
    fn stamp(&self) -> u64 {
        match &self.clock {
            Some(c) => c.now(),
            None => now(),
        }
    }

    /// The buffer named by `$LOUPE_TRACE_SHM`, if any.
    pub fn from_env() -> Option<Buffer> {
        Buffer::open(Path::new(&std::env::var_os(ENV)?)).ok()
    }

    fn map(f: &File, len: usize, geo: Geometry, path: Option<PathBuf>) -> io::Result<Buffer> {
        use std::os::fd::AsRawFd;
        // SAFETY: a fresh shared mapping of a file we hold open; checked for failure.
        let p = unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, f.as_raw_fd(), 0) };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let (sub_shift, nsub_mask) = (geo.sub_size.max(1).trailing_zeros(), geo.nsub.max(1) as u64 - 1);
        let (stride, data_off) = (geo.ctl_stride(), geo.data_offset());
        Ok(Buffer { base: p as *mut u8, len, geo, path, clock: None, sub_shift, nsub_mask, stride, data_off })
    }

    pub fn geometry(&self) -> Geometry {
        self.geo
    }

    #[inline]
    fn atomic(&self, off: usize) -> &AtomicU64 {
        assert!(off + 8 <= self.len && off.is_multiple_of(8));
        // SAFETY: in bounds and 8-aligned (mmap is page-aligned); the mapping lives as long as self.
        unsafe { &*(self.base.add(off) as *const AtomicU64) }
    }

    fn put_u32(&self, off: usize, v: u32) {
        // SAFETY: in-bounds header write before the buffer is published.
        unsafe { (self.base.add(off) as *mut u32).write_unaligned(v) }
    }
    fn get_u32(&self, off: usize) -> u32 {
        assert!(off + 4 <= self.len);
        // SAFETY: in bounds; header words are written once before the magic.
        unsafe { (self.base.add(off) as *const u32).read_unaligned() }
    }
    fn put_u64(&self, off: usize, v: u64) {
        // SAFETY: in-bounds header write before the buffer is published.
        unsafe { (self.base.add(off) as *mut u64).write_unaligned(v) }
    }

    /// The control word at `off` (one of the OFF_ constants, or a commit counter) of `cpu`'s block.
    #[inline]
    fn ctl(&self, cpu: usize, off: usize) -> &AtomicU64 {
        assert!(cpu < self.geo.ncpu as usize);
        debug_assert!(off + 8 <= self.stride && off.is_multiple_of(8));
        // SAFETY: cpu < ncpu and off + 8 <= stride (the offsets are constants and commit counters of slots
        // below nsub, which the stride was sized for), so the word lies before the data area, inside the
        // mapping; GLOBAL, the stride (a multiple of 64) and off are multiples of 8, the mapping page-aligned.
        unsafe { &*(self.base.add(GLOBAL + cpu * self.stride + off) as *const AtomicU64) }
    }

    #[inline]
    fn slot_of(&self, pos: u64) -> u64 {
        (pos >> self.sub_shift) & self.nsub_mask
    }

    #[inline]
    fn slot_ptr(&self, cpu: usize, pos: u64) -> *mut u8 {
        let s = self.geo.sub_size as u64;
        let slot = self.slot_of(pos);
        let off = self.data_off + (cpu * self.geo.nsub as usize + slot as usize) * s as usize + (pos & (s - 1)) as usize;
        // SAFETY: slot < nsub and pos % s < s, so the offset is inside the data area.
        unsafe { self.base.add(off) }
    }

    /// Logs one record of `len` bytes (a multiple of 8) on the current CPU's
    /// buffer: `fill` gets the reserved bytes and the timestamp read in the
    /// winning reservation attempt. Returns false if the event was dropped.
    #[inline]
    pub fn log(&self, len: usize, fill: impl FnOnce(&mut [u8], u64)) -> bool {
        // A CPU number beyond the buffer's (CPUs brought online later) shares a buffer; no division otherwise.
        let (cpu, n) = (current_cpu(), self.geo.ncpu as usize);
        self.log_on(if cpu < n { cpu } else { cpu % n }, len, fill)
    }

    /// [`Buffer::log`] on a given CPU's buffer (tests use it to force contention).
    #[inline]
    pub fn log_on(&self, cpu: usize, len: usize, fill: impl FnOnce(&mut [u8], u64)) -> bool {
        let s = self.geo.sub_size as u64;
        // A record that cannot fit a packet is dropped and counted, never written across packets.
        if len as u64 > s - PACKET_HEADER as u64 || len < crate::record::HEADER {
            self.ctl(cpu, OFF_DROPPED).fetch_add(1, Ordering::Relaxed);
            return false;
        }
        let head = self.ctl(cpu, OFF_HEAD);
        // One load of the head; a failed CAS hands back the head it found, so each retry costs a timestamp and a CAS.
        let mut h = head.load(Ordering::Acquire);
        let (h, ts, pos, start) = loop {
            // A head within two packets of 2^64 bytes (only a corrupting writer puts it there) has no room to reserve.
            if h > u64::MAX - 2 * s {
                self.ctl(cpu, OFF_DROPPED).fetch_add(1, Ordering::Relaxed);
                return false;
            }
            let ts = self.stamp();
            let off = h & (s - 1);
            let (new, pos, start) = if off == 0 || off + len as u64 > s {
                let start = h.next_multiple_of(s);
                let consumed = self.ctl(cpu, OFF_CONSUMED).load(Ordering::Acquire);
                if start >> self.sub_shift >= consumed.saturating_add(self.geo.nsub as u64) {
                    self.ctl(cpu, OFF_DROPPED).fetch_add(1, Ordering::Relaxed);
                    return false;
                }
                (start + PACKET_HEADER as u64 + len as u64, start + PACKET_HEADER as u64, Some(start))
            } else {
                (h + len as u64, h, None)
            };
            match head.compare_exchange_weak(h, new, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => break (h, ts, pos, start),
                Err(now) => h = now,
            }
        };
        // SAFETY: [pos, pos+len) was reserved by the CAS above and lies in one packet.
        fill(unsafe { std::slice::from_raw_parts_mut(self.slot_ptr(cpu, pos), len) }, ts);
        let mut mine = len as u64;
        if let Some(start) = start {
            self.write_packet_header(cpu, start, ts);
            mine += PACKET_HEADER as u64;
            self.pad(cpu, h);
        }
        self.commit(cpu, pos, mine);
        true
    }

    fn write_packet_header(&self, cpu: usize, start: u64, ts: u64) {
        let mut hdr = [0u8; PACKET_HEADER];
        hdr[0..4].copy_from_slice(&PACKET_MAGIC.to_le_bytes());
        hdr[8..12].copy_from_slice(&(cpu as u32).to_le_bytes());
        hdr[12..16].copy_from_slice(&(cpu as u32).to_le_bytes());
        hdr[16..24].copy_from_slice(&ts.to_le_bytes());
        hdr[48..56].copy_from_slice(&(start / self.geo.sub_size as u64).to_le_bytes());
        hdr[56..64].copy_from_slice(&self.ctl(cpu, OFF_DROPPED).load(Ordering::Relaxed).to_le_bytes());
        // SAFETY: the packet header bytes belong to the reservation that started the packet.
        unsafe { std::ptr::copy_nonoverlapping(hdr.as_ptr(), self.slot_ptr(cpu, start), PACKET_HEADER) };
    }

    /// Closes the packet that `h` points into: zero its unused tail and
    /// commit it, so the consumer sees the packet complete.
    fn pad(&self, cpu: usize, h: u64) {
        let s = self.geo.sub_size as u64;
        let off = h % s;
        if off == 0 {
            return;
        }
        // SAFETY: [h, next boundary) was skipped by the reservation that moved head past it; nobody else writes it.
        unsafe { std::ptr::write_bytes(self.slot_ptr(cpu, h), 0, (s - off) as usize) };
        self.commit(cpu, h, s - off);
    }

    #[inline]
    fn commit(&self, cpu: usize, pos: u64, n: u64) {
        self.ctl(cpu, OFF_COMMIT + 8 * self.slot_of(pos) as usize).fetch_add(n, Ordering::Release);
    }

    /// Events dropped so far on `cpu` because the consumer was behind.
    pub fn dropped(&self, cpu: usize) -> u64 {
        self.ctl(cpu, OFF_DROPPED).load(Ordering::Relaxed)
    }

    /// Consumer: closes the current partial packet of `cpu` so that it can be
    /// taken once its writers commit (periodic flush and end of tracing).
    pub fn flush(&self, cpu: usize) {
        let s = self.geo.sub_size as u64;
        let head = self.ctl(cpu, OFF_HEAD);
        loop {
            let h = head.load(Ordering::Acquire);
            // A head in the last packet before 2^64 bytes (only a corrupting writer puts it there) cannot be closed.
            let Some(next) = h.checked_next_multiple_of(s).filter(|_| !h.is_multiple_of(s)) else { return };
            if head.compare_exchange(h, next, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
                self.pad(cpu, h);
                return;
            }
        }
    }

    /// Consumer: the next complete packet of `cpu`, copied into `out`
    /// (cleared first); returns false when none is complete. The slot is
    /// released to writers before returning.
    pub fn take(&self, cpu: usize, out: &mut Vec<u8>) -> bool {
        let s = self.geo.sub_size as u64;
        let consumed = self.ctl(cpu, OFF_CONSUMED);
        let c = consumed.load(Ordering::Relaxed);
        let commit = self.ctl(cpu, OFF_COMMIT + 8 * (c % self.geo.nsub as u64) as usize);
        if commit.load(Ordering::Acquire) != s {
            return false;
        }
        out.clear();
        // `consumed` is shared memory any writer may set: positions wrap (slot_ptr keeps the slot in range).
        // SAFETY: the packet is complete (every byte committed) and no writer can enter it until `consumed` moves.
        out.extend_from_slice(unsafe { std::slice::from_raw_parts(self.slot_ptr(cpu, c.wrapping_mul(s)), s as usize) });
        commit.store(0, Ordering::Relaxed);
        consumed.store(c.wrapping_add(1), Ordering::Release);
        seal(out, self.dropped(cpu));
        true
    }

    /// Removes the buffer file (the creator calls it when tracing ends;
    /// writers keep their mapping).
    pub fn unlink(&self) -> io::Result<()> {
        match &self.path {
            Some(p) => std::fs::remove_file(p),
            None => Ok(()),
        }
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        // SAFETY: unmapping the region mapped in `map`; no references outlive self.
        unsafe { libc::munmap(self.base as *mut libc::c_void, self.len) };
    }
}

/// Completes a taken packet's CTF context: end timestamp (the last record's),
/// content and packet sizes in bits, and the CPU's drop count now. Walks
/// only the record size fields; a size that does not fit ends the content.
pub fn seal(p: &mut [u8], dropped: u64) {
    let u64_at = |p: &[u8], o: usize| u64::from_le_bytes(p[o..o + 8].try_into().unwrap());
    let (mut at, mut ts_end) = (PACKET_HEADER, u64_at(p, 16));
    while at + crate::record::HEADER <= p.len() {
        let size = u16::from_le_bytes([p[at + 8], p[at + 9]]) as usize;
        if size == 0 || at + size > p.len() {
            break;
        }
        ts_end = u64_at(p, at);
        at += size;
    }
    p[24..32].copy_from_slice(&ts_end.to_le_bytes());
    p[32..40].copy_from_slice(&(8 * at as u64).to_le_bytes());
    let bits = 8 * p.len() as u64;
    p[40..48].copy_from_slice(&bits.to_le_bytes());
    p[56..64].copy_from_slice(&dropped.to_le_bytes());
}

/// A decoded packet header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PacketHeader {
    pub cpu: u32,
    pub seq: u64,
    pub ts_begin: u64,
    pub ts_end: u64,
    /// Bytes of header and records (the rest is padding).
    pub content: usize,
    /// Events dropped on this CPU up to when the packet was taken.
    pub dropped: u64,
}

/// Parses a packet's header; None if the magic is wrong.
pub fn packet_header(p: &[u8]) -> Option<PacketHeader> {
    let u64_at = |o: usize| u64::from_le_bytes(p[o..o + 8].try_into().unwrap());
    if p.len() < PACKET_HEADER || u32::from_le_bytes(p[0..4].try_into().unwrap()) != PACKET_MAGIC {
        return None;
    }
    Some(PacketHeader {
        cpu: u32::from_le_bytes(p[12..16].try_into().unwrap()),
        seq: u64_at(48),
        ts_begin: u64_at(16),
        ts_end: u64_at(24),
        content: (u64_at(32) / 8) as usize,
        dropped: u64_at(56),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn geo(nsub: u32) -> Geometry {
        Geometry { ncpu: 1, nsub, sub_size: 32768 }
    }

    fn rec(len: usize) -> impl FnOnce(&mut [u8], u64) {
        move |b, ts| {
            b.fill(0);
            b[0..8].copy_from_slice(&ts.to_le_bytes());
            b[8..10].copy_from_slice(&(len as u16).to_le_bytes());
        }
    }

    // With nobody consuming, exactly nsub packets fill and every later event is dropped and counted.
    #[test]
    fn drops_when_full_counted() {
        let dir = tempfile::tempdir().unwrap();
        let b = Buffer::create(&dir.path().join("b"), geo(2)).unwrap();
        let per_packet = (32768 - PACKET_HEADER) / 64;
        assert_eq!(per_packet, 511);
        let mut ok = 0;
        for _ in 0..3 * per_packet {
            ok += b.log_on(0, 64, rec(64)) as usize;
        }
        assert_eq!(ok, 2 * per_packet);
        assert_eq!(b.dropped(0), per_packet as u64);
        let mut out = Vec::new();
        assert!(b.take(0, &mut out));
        let h = packet_header(&out).unwrap();
        // Taken after the drops: the CTF context counts them.
        assert_eq!((h.seq, h.dropped, h.content), (0, per_packet as u64, PACKET_HEADER + 64 * per_packet));
        assert!(h.ts_end >= h.ts_begin);
        // The header and 511 records fill a packet exactly, so the second is complete without a flush.
        assert!(b.take(0, &mut out));
        assert_eq!(packet_header(&out).unwrap().seq, 1);
        assert!(!b.take(0, &mut out));
        // Space is free again after taking.
        assert!(b.log_on(0, 64, rec(64)));
    }

    // A flushed partial packet comes out with its records then zeros, and a writer reopening the file logs into it.
    #[test]
    fn flush_and_open() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("b");
        let b = Buffer::create(&path, geo(4)).unwrap();
        let w = Buffer::open(&path).unwrap();
        assert_eq!(w.geometry(), b.geometry());
        assert!(w.log_on(0, 16, rec(16)));
        assert!(w.log_on(0, 24, rec(24)));
        let mut out = Vec::new();
        assert!(!b.take(0, &mut out));
        b.flush(0);
        assert!(b.take(0, &mut out));
        assert_eq!(u16::from_le_bytes([out[72], out[73]]), 16);
        assert_eq!(u16::from_le_bytes([out[88], out[89]]), 24);
        assert!(out[104..].iter().all(|&x| x == 0));
        assert_eq!(packet_header(&out).unwrap().content, 104);
        assert!(Buffer::open(&dir.path().join("missing")).is_err());
    }

    // A consumer flushing a CPU whose head a writer set near u64::MAX (fuzz target trace_buffer's minimized
    // input: head 0xffff_ffff_ffff_8a2a) leaves the buffer as it is instead of overflowing.
    #[test]
    fn flush_of_a_head_near_u64_max_leaves_the_buffer_alone() {
        let dir = tempfile::tempdir().unwrap();
        let b = Buffer::create(&dir.path().join("b"), geo(2)).unwrap();
        b.ctl(0, OFF_HEAD).store(0xffff_ffff_ffff_8a2a, Ordering::Relaxed);
        b.flush(0);
        assert_eq!(b.ctl(0, OFF_HEAD).load(Ordering::Relaxed), 0xffff_ffff_ffff_8a2a);
        assert!(!b.take(0, &mut Vec::new()));
    }

    // A consumed count a writer set near u64::MAX (fuzz target trace_buffer) takes the slot it names and wraps,
    // and a writer whose head lies within two packets of 2^64 drops its event instead of overflowing the head.
    #[test]
    fn consumed_count_and_head_near_u64_max_wrap_or_drop() {
        let dir = tempfile::tempdir().unwrap();
        let b = Buffer::create(&dir.path().join("b"), geo(2)).unwrap();
        b.ctl(0, OFF_CONSUMED).store(u64::MAX, Ordering::Relaxed);
        b.ctl(0, OFF_COMMIT + 8).store(32768, Ordering::Relaxed);
        let mut out = Vec::new();
        assert!(b.take(0, &mut out));
        assert_eq!(out.len(), 32768);
        assert_eq!(b.ctl(0, OFF_CONSUMED).load(Ordering::Relaxed), 0);
        b.ctl(0, OFF_HEAD).store(u64::MAX - 100, Ordering::Relaxed);
        assert!(!b.log_on(0, 16, rec(16)));
        assert_eq!((b.dropped(0), b.ctl(0, OFF_HEAD).load(Ordering::Relaxed)), (1, u64::MAX - 100));
    }

    // A header whose counts make the buffer's size wrap around 2^64 (64 CPUs of 2^31 packets of 2 GiB: 2^68
    // bytes of data, which wraps to the file's 1 TiB + 16 KiB) is refused: a writer would log outside the mapping.
    #[test]
    fn header_whose_geometry_wraps_the_size_is_refused() {
        let huge = Geometry { ncpu: 64, nsub: 1 << 31, sub_size: 1 << 31 };
        assert!(huge.check().is_err());
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("b");
        let mut header = vec![0u8; GLOBAL];
        header[..8].copy_from_slice(&MAGIC.to_le_bytes());
        for (at, v) in [(8, VERSION), (12, huge.ncpu), (16, huge.nsub), (20, huge.sub_size)] {
            header[at..at + 4].copy_from_slice(&v.to_le_bytes());
        }
        std::fs::write(&path, &header).unwrap();
        // The size the wrapping sum gives (a sparse file: nothing is written past the header).
        let wrapped = huge.data_offset().wrapping_add((huge.ncpu as usize).wrapping_mul(1 << 62));
        assert_eq!(wrapped, (1 << 40) + 16384);
        std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(wrapped as u64).unwrap();
        let err = Buffer::open(&path).err().expect("refused");
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
    }
}
