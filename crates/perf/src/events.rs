//! Event names as perf spells them, and which ones this machine supports.

use crate::sys::{self, PerfEventAttr, PERF_TYPE_HARDWARE, PERF_TYPE_HW_CACHE, PERF_TYPE_SOFTWARE};
use crate::{Error, ErrorKind};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventSpec {
    pub name: String,
    pub type_: u32,
    pub config: u64,
}

/// (canonical name, aliases, type, config)
const EVENTS: &[(&str, &[&str], u32, u64)] = &[
    ("cpu-clock", &[], PERF_TYPE_SOFTWARE, 0),
    ("task-clock", &[], PERF_TYPE_SOFTWARE, 1),
    ("page-faults", &["faults"], PERF_TYPE_SOFTWARE, 2),
    ("context-switches", &["cs"], PERF_TYPE_SOFTWARE, 3),
    ("cpu-migrations", &["migrations"], PERF_TYPE_SOFTWARE, 4),
    ("minor-faults", &[], PERF_TYPE_SOFTWARE, 5),
    ("major-faults", &[], PERF_TYPE_SOFTWARE, 6),
    ("cycles", &["cpu-cycles"], PERF_TYPE_HARDWARE, 0),
    ("instructions", &[], PERF_TYPE_HARDWARE, 1),
    ("cache-references", &[], PERF_TYPE_HARDWARE, 2),
    ("cache-misses", &[], PERF_TYPE_HARDWARE, 3),
    ("branch-instructions", &["branches"], PERF_TYPE_HARDWARE, 4),
    ("branch-misses", &[], PERF_TYPE_HARDWARE, 5),
    ("bus-cycles", &[], PERF_TYPE_HARDWARE, 6),
    ("stalled-cycles-frontend", &["idle-cycles-frontend"], PERF_TYPE_HARDWARE, 7),
    ("stalled-cycles-backend", &["idle-cycles-backend"], PERF_TYPE_HARDWARE, 8),
    ("ref-cycles", &[], PERF_TYPE_HARDWARE, 9),
    // Cache events (`perf list hwcache`): the misses `loupe calc` bounds stall culprits with.
    ("L1-dcache-load-misses", &[], PERF_TYPE_HW_CACHE, cache_miss(0)),
    ("L1-icache-load-misses", &[], PERF_TYPE_HW_CACHE, cache_miss(1)),
    ("LLC-load-misses", &[], PERF_TYPE_HW_CACHE, cache_miss(2)),
    ("dTLB-load-misses", &[], PERF_TYPE_HW_CACHE, cache_miss(3)),
    ("iTLB-load-misses", &[], PERF_TYPE_HW_CACHE, cache_miss(4)),
];

/// A PERF_TYPE_HW_CACHE config: cache id | op READ (0) << 8 | result MISS (1) << 16 (`linux/perf_event.h`).
const fn cache_miss(cache: u64) -> u64 {
    cache | (1 << 16)
}

pub fn known_events() -> Vec<EventSpec> {
    EVENTS.iter().map(|&(n, _, t, c)| EventSpec { name: n.into(), type_: t, config: c }).collect()
}

pub fn parse_event(name: &str) -> Result<EventSpec, Error> {
    EVENTS
        .iter()
        .find(|(n, aliases, _, _)| *n == name || aliases.contains(&name))
        .map(|&(n, _, t, c)| EventSpec { name: n.into(), type_: t, config: c })
        .ok_or_else(|| {
            let known: Vec<String> = EVENTS.iter().map(|e| e.0.to_string()).collect();
            Error::new(
                ErrorKind::UnknownEvent { name: name.into(), known: known.clone() },
                format!("unknown event {name:?}; known events: {}", known.join(", ")),
            )
        })
}

/// Events counted by the PMU (generic and cache events), which a machine without one lacks.
pub fn is_hardware(e: &EventSpec) -> bool {
    e.type_ == PERF_TYPE_HARDWARE || e.type_ == PERF_TYPE_HW_CACHE
}

/// Tries to open each known event as a counter on CPU 0 for the whole
/// machine (or for this process when that is not allowed).
pub fn probe_events() -> Vec<(EventSpec, Result<(), String>)> {
    probe_events_for(false)
}

/// [`probe_events`] counting user space only when `exclude_kernel` (what an
/// unprivileged process may open), so that the answer is about the events,
/// not about privileges.
pub fn probe_events_for(exclude_kernel: bool) -> Vec<(EventSpec, Result<(), String>)> {
    let mut flags = sys::flag::DISABLED;
    if exclude_kernel {
        flags |= sys::flag::EXCLUDE_KERNEL | sys::flag::EXCLUDE_HV;
    }
    known_events()
        .into_iter()
        .map(|e| {
            let attr = PerfEventAttr { type_: e.type_, size: sys::ATTR_SIZE, config: e.config, flags, ..Default::default() };
            let r = sys::perf_event_open(&attr, -1, 0, -1).or_else(|_| sys::perf_event_open(&attr, 0, -1, -1));
            let r = r.map(drop).map_err(|err| match err.raw_os_error() {
                Some(libc::ENOENT) | Some(libc::EOPNOTSUPP) | Some(libc::ENODEV) if is_hardware(&e) => {
                    "not supported: no hardware PMU".to_string()
                }
                _ => err.to_string(),
            });
            (e, r)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aliases_resolve_and_unknown_lists_known() {
        // Checks alias lookup and that an unknown name's error lists the real names.
        assert_eq!(parse_event("cs").unwrap().name, "context-switches");
        let e = parse_event("cpu-clocks").unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("cpu-clocks") && msg.contains("cpu-clock,") && msg.contains("branch-misses"), "{msg}");
        assert!(matches!(e.kind(), ErrorKind::UnknownEvent { .. }));
    }

    #[test]
    fn cache_events_encode_as_perf_does() {
        // Checks the cache-event configs against linux/perf_event.h: DTLB (3) | OP_READ (0) << 8 | RESULT_MISS (1) << 16 = 0x10003.
        let d = parse_event("dTLB-load-misses").unwrap();
        assert_eq!((d.type_, d.config), (3, 0x10003));
        assert_eq!(parse_event("L1-dcache-load-misses").unwrap().config, 0x10000);
        assert!(is_hardware(&d));
    }

    #[test]
    fn cpu_clock_is_available_here() {
        // Checks the probe on a real kernel: the software clock always works.
        let p = probe_events();
        let clock = p.iter().find(|(e, _)| e.name == "cpu-clock").unwrap();
        assert!(clock.1.is_ok(), "{:?}", clock.1);
    }
}
