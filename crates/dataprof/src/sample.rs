//! One access sample as perf writes it, and the PMU's data-source word.
//! Pure functions over bytes.

use crate::regs::Regs;

/// `sample_type` bits this crate asks for.
pub const SAMPLE_IP: u64 = 1 << 0;
pub const SAMPLE_TID: u64 = 1 << 1;
pub const SAMPLE_TIME: u64 = 1 << 2;
pub const SAMPLE_ADDR: u64 = 1 << 3;
pub const SAMPLE_CPU: u64 = 1 << 7;
pub const SAMPLE_REGS_USER: u64 = 1 << 12;
pub const SAMPLE_WEIGHT: u64 = 1 << 14;
pub const SAMPLE_DATA_SRC: u64 = 1 << 15;

/// Timer path: registers, no hardware address.
pub const TIMER_TYPE: u64 = SAMPLE_IP | SAMPLE_TID | SAMPLE_TIME | SAMPLE_CPU | SAMPLE_REGS_USER;
/// Memory-sampling PMU path (PEBS load latency, IBS op): the hardware gives
/// the address, its latency and where it hit.
pub const PMU_TYPE: u64 = TIMER_TYPE | SAMPLE_ADDR | SAMPLE_WEIGHT | SAMPLE_DATA_SRC;

const MISC_CPUMODE_MASK: u16 = 7;
const MISC_USER: u16 = 2;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawSample {
    pub pid: u32,
    pub tid: u32,
    pub time: u64,
    pub cpu: u32,
    pub ip: u64,
    pub user: bool,
    /// User registers when the sample hit user mode.
    pub regs: Option<Regs>,
    /// PMU path only.
    pub addr: Option<u64>,
    pub weight: Option<u64>,
    pub data_src: Option<u64>,
}

struct Cursor<'a>(&'a [u8], usize);

impl Cursor<'_> {
    fn u64(&mut self) -> Option<u64> {
        let v = u64::from_ne_bytes(self.0.get(self.1..self.1 + 8)?.try_into().ok()?);
        self.1 += 8;
        Some(v)
    }
    fn u32(&mut self) -> Option<u32> {
        let v = u32::from_ne_bytes(self.0.get(self.1..self.1 + 4)?.try_into().ok()?);
        self.1 += 4;
        Some(v)
    }
}

/// Parses a whole `PERF_RECORD_SAMPLE` (header included) of `sample_type`
/// with `regs_mask`; `None` when it is too short.
pub fn parse(rec: &[u8], sample_type: u64, regs_mask: u64) -> Option<RawSample> {
    let mut c = Cursor(rec, 0);
    let _kind = c.u32()?;
    let misc = u16::from_ne_bytes(rec.get(4..6)?.try_into().ok()?);
    c.1 = 8;
    let ip = c.u64()?;
    let (pid, tid) = (c.u32()?, c.u32()?);
    let time = c.u64()?;
    let addr = if sample_type & SAMPLE_ADDR != 0 { Some(c.u64()?) } else { None };
    let cpu = c.u32()?;
    let _res = c.u32()?;
    let mut regs = None;
    if sample_type & SAMPLE_REGS_USER != 0 {
        let abi = c.u64()?;
        if abi != 0 {
            let n = regs_mask.count_ones() as usize;
            let values = (0..n).map(|_| c.u64()).collect::<Option<Vec<u64>>>()?;
            regs = Some(Regs::from_masked(regs_mask, &values));
        }
    }
    let weight = if sample_type & SAMPLE_WEIGHT != 0 { Some(c.u64()?) } else { None };
    let data_src = if sample_type & SAMPLE_DATA_SRC != 0 { Some(c.u64()?) } else { None };
    let user = misc & MISC_CPUMODE_MASK == MISC_USER;
    Some(RawSample { pid, tid, time, cpu, ip, user, regs: if user { regs } else { None }, addr, weight, data_src })
}

/// Where a PMU-sampled access was served from (`perf_mem_data_src`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct DataSource {
    pub load: bool,
    pub store: bool,
    /// "L1", "LFB", "L2", "L3", "RAM", "remote RAM", "remote cache", "I/O", "uncached" or "?".
    pub level: &'static str,
    pub hit: bool,
    /// Snoop found the line modified in another core's cache (HITM): a sharing miss.
    pub hitm: bool,
    pub locked: bool,
}

/// Decodes the `perf_mem_data_src` bit fields (mem_op:5, mem_lvl:14,
/// mem_snoop:5, mem_lock:2, ...).
pub fn data_source(v: u64) -> DataSource {
    let op = v & 0x1f;
    let lvl = (v >> 5) & 0x3fff;
    let snoop = (v >> 19) & 0x1f;
    let lock = (v >> 24) & 0x3;
    const LEVELS: [(u64, &str); 11] = [
        (0x8, "L1"),
        (0x10, "LFB"),
        (0x20, "L2"),
        (0x40, "L3"),
        (0x80, "RAM"),
        (0x100, "remote RAM"),
        (0x200, "remote RAM"),
        (0x400, "remote cache"),
        (0x800, "remote cache"),
        (0x1000, "I/O"),
        (0x2000, "uncached"),
    ];
    let level = LEVELS.iter().find(|(bit, _)| lvl & bit != 0).map_or("?", |(_, n)| n);
    DataSource { load: op & 0x2 != 0, store: op & 0x4 != 0, level, hit: lvl & 0x2 != 0, hitm: snoop & 0x10 != 0, locked: lock & 0x2 != 0 }
}

#[cfg(test)]
pub(crate) fn build(misc: u16, words: &[u64]) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(&9u32.to_ne_bytes());
    b.extend_from_slice(&misc.to_ne_bytes());
    b.extend_from_slice(&((8 + words.len() * 8) as u16).to_ne_bytes());
    for w in words {
        b.extend_from_slice(&w.to_ne_bytes());
    }
    b
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::regs;

    fn pid_tid(pid: u32, tid: u32) -> u64 {
        pid as u64 | (tid as u64) << 32
    }

    #[test]
    fn timer_sample_with_user_registers() {
        // Checks IP, pid/tid, time, CPU and the masked registers (AX..IP, R8..R15) come out of a literal user-mode record.
        let mut words = vec![0x401000, pid_tid(7, 8), 123_456, 1 /* cpu 1, res 0 */, 2 /* abi 64 */];
        words.extend(100..117u64);
        let s = parse(&build(MISC_USER, &words), TIMER_TYPE, regs::MASK).unwrap();
        assert_eq!((s.pid, s.tid, s.time, s.cpu, s.ip, s.user), (7, 8, 123_456, 1, 0x401000, true));
        let r = s.regs.unwrap();
        assert_eq!((r.0[regs::AX], r.0[regs::IP], r.0[regs::R8 + 7]), (Some(100), Some(108), Some(116)));
        assert_eq!(s.addr, None);
    }

    #[test]
    fn kernel_sample_has_no_registers_to_use() {
        // Checks a kernel-mode record (misc 1) with abi 0 parses, user=false and no registers.
        let s = parse(&build(1, &[0xffff_ffff_8100_0000, pid_tid(1, 1), 5, 0, 0]), TIMER_TYPE, regs::MASK).unwrap();
        assert!(!s.user && s.regs.is_none());
    }

    #[test]
    fn pmu_sample_carries_address_weight_and_source() {
        // Checks ADDR sits after TIME, WEIGHT and DATA_SRC after the registers, as perf_event.h orders them.
        let src = 0x2 | (0x40 | 0x2) << 5 | 0x10 << 19; // load, L3 hit, snoop HITM
        let mut words = vec![0x401000, pid_tid(3, 4), 99, 0xdead_b000, 0, 2];
        words.extend(0..17u64);
        words.extend([250, src]);
        let s = parse(&build(MISC_USER, &words), PMU_TYPE, regs::MASK).unwrap();
        assert_eq!((s.addr, s.weight, s.data_src), (Some(0xdead_b000), Some(250), Some(src)));
        let d = data_source(src);
        assert_eq!((d.load, d.store, d.level, d.hit, d.hitm), (true, false, "L3", true, true));
    }

    #[test]
    fn truncated_record_is_rejected() {
        // Checks a record cut inside the registers gives None rather than garbage.
        let words = [0x401000, pid_tid(7, 8), 1, 0, 2, 5, 6];
        assert_eq!(parse(&build(MISC_USER, &words), TIMER_TYPE, regs::MASK), None);
    }

    #[test]
    fn data_source_of_a_ram_store() {
        // Checks a store (op 0x4) that missed to local RAM (lvl MISS|LOC_RAM) decodes as RAM, not hit.
        let d = data_source(0x4 | (0x4 | 0x80) << 5);
        assert_eq!((d.store, d.level, d.hit, d.hitm), (true, "RAM", false, false));
    }
}
