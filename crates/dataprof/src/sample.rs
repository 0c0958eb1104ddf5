//! One access sample as perf writes it (read by `loupe_perf`'s sample
//! parser), and the PMU's data-source word. Pure functions over bytes.

use crate::regs::Regs;
use loupe_model::CpuMode;
use loupe_perf::sys::{SAMPLE_ADDR, SAMPLE_CPU, SAMPLE_DATA_SRC, SAMPLE_IP, SAMPLE_REGS_USER, SAMPLE_TID, SAMPLE_TIME, SAMPLE_WEIGHT};
use loupe_perf::{parse_sample, Layout};

/// Timer path: registers, no hardware address.
pub const TIMER_TYPE: u64 = SAMPLE_IP | SAMPLE_TID | SAMPLE_TIME | SAMPLE_CPU | SAMPLE_REGS_USER;
/// Memory-sampling PMU path (PEBS load latency, IBS op): the hardware gives
/// the address, its latency and where it hit.
pub const PMU_TYPE: u64 = TIMER_TYPE | SAMPLE_ADDR | SAMPLE_WEIGHT | SAMPLE_DATA_SRC;

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

/// The access sample of a whole `PERF_RECORD_SAMPLE` (header included) laid
/// out as `layout` says; `None` when it is not a readable sample.
pub fn read(layout: &Layout, rec: &[u8]) -> Option<RawSample> {
    let s = parse_sample(layout, rec).ok()?;
    let user = s.mode() == CpuMode::User;
    let regs = s.regs_user.filter(|r| user && r.abi != 0).map(|r| Regs::from_masked(r.mask, &r.values.iter().collect::<Vec<u64>>()));
    Some(RawSample {
        pid: s.pid.unwrap_or(0),
        tid: s.tid.unwrap_or(0),
        time: s.time.unwrap_or(0),
        cpu: s.cpu.unwrap_or(0),
        ip: s.ip.unwrap_or(0),
        user,
        regs,
        addr: s.addr,
        weight: s.weight,
        data_src: s.data_src,
    })
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
const MISC_USER: u16 = 2;

#[cfg(test)]
pub(crate) fn build(misc: u16, words: &[u64]) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(&loupe_perf::sys::RECORD_SAMPLE.to_ne_bytes());
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
    use loupe_perf::Format;

    /// The recorder's layout for `sample_type`, with its register mask.
    fn layout(sample_type: u64) -> Layout {
        Layout::new(Format { sample_type, regs_user: regs::MASK, ..Format::default() })
    }

    fn pid_tid(pid: u32, tid: u32) -> u64 {
        pid as u64 | (tid as u64) << 32
    }

    #[test]
    fn timer_sample_with_user_registers() {
        // Checks IP, pid/tid, time, CPU and the masked registers (AX..IP, R8..R15) come out of a literal user-mode record.
        let mut words = vec![0x401000, pid_tid(7, 8), 123_456, 1 /* cpu 1, res 0 */, 2 /* abi 64 */];
        words.extend(100..117u64);
        let s = read(&layout(TIMER_TYPE), &build(MISC_USER, &words)).unwrap();
        assert_eq!((s.pid, s.tid, s.time, s.cpu, s.ip, s.user), (7, 8, 123_456, 1, 0x401000, true));
        let r = s.regs.unwrap();
        assert_eq!((r.0[regs::AX], r.0[regs::IP], r.0[regs::R8 + 7]), (Some(100), Some(108), Some(116)));
        assert_eq!(s.addr, None);
    }

    #[test]
    fn kernel_sample_has_no_registers_to_use() {
        // Checks a kernel-mode record (misc 1) with abi 0 parses, user=false and no registers.
        let s = read(&layout(TIMER_TYPE), &build(1, &[0xffff_ffff_8100_0000, pid_tid(1, 1), 5, 0, 0])).unwrap();
        assert!(!s.user && s.regs.is_none());
    }

    #[test]
    fn pmu_sample_carries_address_weight_and_source() {
        // Checks ADDR sits after TIME, WEIGHT and DATA_SRC after the registers, as perf_event.h orders them.
        let src = 0x2 | (0x40 | 0x2) << 5 | 0x10 << 19; // load, L3 hit, snoop HITM
        let mut words = vec![0x401000, pid_tid(3, 4), 99, 0xdead_b000, 0, 2];
        words.extend(0..17u64);
        words.extend([250, src]);
        let s = read(&layout(PMU_TYPE), &build(MISC_USER, &words)).unwrap();
        assert_eq!((s.addr, s.weight, s.data_src), (Some(0xdead_b000), Some(250), Some(src)));
        let d = data_source(src);
        assert_eq!((d.load, d.store, d.level, d.hit, d.hitm), (true, false, "L3", true, true));
    }

    #[test]
    fn truncated_record_is_rejected() {
        // Checks a record cut inside the registers gives None rather than garbage.
        let words = [0x401000, pid_tid(7, 8), 1, 0, 2, 5, 6];
        assert_eq!(read(&layout(TIMER_TYPE), &build(MISC_USER, &words)), None);
    }

    #[test]
    fn data_source_of_a_ram_store() {
        // Checks a store (op 0x4) that missed to local RAM (lvl MISS|LOC_RAM) decodes as RAM, not hit.
        let d = data_source(0x4 | (0x4 | 0x80) << 5);
        assert_eq!((d.store, d.level, d.hit, d.hitm), (true, "RAM", false, false));
    }
}
