//! Finding a memory-sampling PMU event (Intel PEBS load latency
//! `cpu/mem-loads/`, AMD IBS op `ibs_op//`) from sysfs. The sampler tries
//! it first and falls back to timer samples with instruction
//! interpretation when there is none or it does not open.

use std::path::Path;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PmuEvent {
    pub name: String,
    pub type_: u32,
    pub config: u64,
    pub config1: u64,
    /// `precise_ip` the event needs (PEBS: 2).
    pub precise: u8,
}

/// Encodes an event string (`event=0xcd,umask=0x1,ldlat=3`) with the PMU's
/// `format/` entries (`config:0-7`, `config1:0-15`) into (config, config1).
pub fn encode(spec: &str, formats: &[(String, String)]) -> Option<(u64, u64)> {
    let (mut config, mut config1) = (0u64, 0u64);
    for term in spec.trim().split(',').filter(|t| !t.is_empty()) {
        let (name, value) = term.split_once('=').unwrap_or((term, "1"));
        let value = match value.strip_prefix("0x") {
            Some(h) => u64::from_str_radix(h, 16).ok()?,
            None => value.parse().ok()?,
        };
        let fmt = &formats.iter().find(|(n, _)| n == name)?.1;
        let (field, bits) = fmt.trim().split_once(':')?;
        let (lo, hi) = match bits.split_once('-') {
            Some((a, b)) => (a.parse::<u32>().ok()?, b.parse::<u32>().ok()?),
            None => (bits.parse().ok()?, bits.parse().ok()?),
        };
        let width = hi - lo + 1;
        let mask = if width >= 64 { u64::MAX } else { (1u64 << width) - 1 };
        let placed = (value & mask) << lo;
        match field {
            "config" => config |= placed,
            "config1" => config1 |= placed,
            _ => return None,
        }
    }
    Some((config, config1))
}

fn formats(dev: &Path) -> Vec<(String, String)> {
    let Ok(dir) = std::fs::read_dir(dev.join("format")) else { return Vec::new() };
    dir.flatten().filter_map(|e| Some((e.file_name().into_string().ok()?, std::fs::read_to_string(e.path()).ok()?))).collect()
}

fn pmu_type(dev: &Path) -> Option<u32> {
    std::fs::read_to_string(dev.join("type")).ok()?.trim().parse().ok()
}

/// The memory-sampling event this machine advertises, if any.
pub fn detect() -> Option<PmuEvent> {
    detect_in(Path::new("/sys/bus/event_source/devices"))
}

pub fn detect_in(root: &Path) -> Option<PmuEvent> {
    let cpu = root.join("cpu");
    if let Ok(spec) = std::fs::read_to_string(cpu.join("events/mem-loads")) {
        // A load-latency threshold of 30 cycles keeps L1 hits out, as `perf mem` does.
        let spec = format!("{},ldlat=30", spec.trim().split(',').filter(|t| !t.starts_with("ldlat")).collect::<Vec<_>>().join(","));
        let (config, config1) = encode(&spec, &formats(&cpu))?;
        return Some(PmuEvent { name: "cpu/mem-loads,ldlat=30/".into(), type_: pmu_type(&cpu)?, config, config1, precise: 2 });
    }
    let ibs = root.join("ibs_op");
    let type_ = pmu_type(&ibs)?;
    Some(PmuEvent { name: "ibs_op//".into(), type_, config: 0, config1: 0, precise: 0 })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect()
    }

    #[test]
    fn intel_mem_loads_encoding() {
        // Checks event=0xcd,umask=0x1,ldlat=30 with Intel's formats gives config 0x1cd and config1 30.
        let fmts = f(&[("event", "config:0-7\n"), ("umask", "config:8-15"), ("ldlat", "config1:0-15")]);
        assert_eq!(encode("event=0xcd,umask=0x1,ldlat=30", &fmts), Some((0x1cd, 30)));
        assert_eq!(encode("event=0xcd,bogus=1", &fmts), None);
    }

    #[test]
    fn detects_from_a_sysfs_tree() {
        // Checks detection reads cpu/events/mem-loads, replaces its ldlat and takes the PMU type; none without either PMU.
        let d = tempfile::tempdir().unwrap();
        let cpu = d.path().join("cpu");
        std::fs::create_dir_all(cpu.join("events")).unwrap();
        std::fs::create_dir_all(cpu.join("format")).unwrap();
        assert_eq!(detect_in(d.path()), None);
        std::fs::write(cpu.join("events/mem-loads"), "event=0xcd,umask=0x1,ldlat=3\n").unwrap();
        std::fs::write(cpu.join("format/event"), "config:0-7").unwrap();
        std::fs::write(cpu.join("format/umask"), "config:8-15").unwrap();
        std::fs::write(cpu.join("format/ldlat"), "config1:0-15").unwrap();
        std::fs::write(cpu.join("type"), "4\n").unwrap();
        let e = detect_in(d.path()).unwrap();
        assert_eq!((e.type_, e.config, e.config1, e.precise), (4, 0x1cd, 30, 2));
    }
}
