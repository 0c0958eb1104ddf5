//! Event names as perf spells them (`cycles`, `cpu-clock:u`,
//! `sched:sched_switch`), and which ones this machine supports.

use crate::sys::{self, PerfEventAttr, PERF_TYPE_HARDWARE, PERF_TYPE_HW_CACHE, PERF_TYPE_SOFTWARE, PERF_TYPE_TRACEPOINT};
use crate::{Error, ErrorKind};
use std::path::Path;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventSpec {
    /// The canonical name, with its modifier as typed (`cycles:u`): samples are counted under it.
    pub name: String,
    pub type_: u32,
    pub config: u64,
    /// perf's `:u` and `:k`: which privilege levels are counted.
    pub exclude: Exclude,
}

/// Privilege levels an event does not count (`perf_event_attr`'s `exclude_user`/`exclude_kernel`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Exclude {
    pub user: bool,
    pub kernel: bool,
}

impl EventSpec {
    /// A plain event counting every privilege level.
    pub fn new(name: &str, type_: u32, config: u64) -> EventSpec {
        EventSpec { name: name.into(), type_, config, exclude: Exclude::default() }
    }

    /// Tracepoints count occurrences: every hit is a sample, whatever the rate asked for.
    pub fn is_tracepoint(&self) -> bool {
        self.type_ == PERF_TYPE_TRACEPOINT
    }
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
    EVENTS.iter().map(|&(n, _, t, c)| EventSpec::new(n, t, c)).collect()
}

/// Where tracefs is mounted: its own mount point, or under debugfs on older systems.
const TRACEFS: &[&str] = &["/sys/kernel/tracing", "/sys/kernel/debug/tracing"];

/// An event as perf spells it: a name or alias (`cs`), a tracepoint
/// (`sched:sched_switch`, its id read from tracefs), each with an optional
/// `:u` (user only) or `:k` (kernel only) modifier.
pub fn parse_event(text: &str) -> Result<EventSpec, Error> {
    let tracefs = TRACEFS.iter().map(Path::new).find(|p| p.join("events").is_dir());
    parse_event_in(text, tracefs)
}

fn parse_event_in(text: &str, tracefs: Option<&Path>) -> Result<EventSpec, Error> {
    let (base, exclude) = split_modifier(text);
    let mut spec = match base.split_once(':') {
        Some((sub, name)) => tracepoint(sub, name, tracefs)?,
        None => EVENTS
            .iter()
            .find(|(n, aliases, _, _)| *n == base || aliases.contains(&base))
            .map(|&(n, _, t, c)| EventSpec::new(n, t, c))
            .ok_or_else(|| {
                let known: Vec<String> = EVENTS.iter().map(|e| e.0.to_string()).collect();
                unknown_event(base, known.clone(), close_matches(base, &known))
            })?,
    };
    if let Some(x) = exclude {
        spec.name = format!("{}:{}", spec.name, if x.user { "k" } else { "u" });
        spec.exclude = x;
    }
    Ok(spec)
}

/// `cycles:u` -> (`cycles`, exclude kernel); `sched:sched_switch` has no modifier.
fn split_modifier(text: &str) -> (&str, Option<Exclude>) {
    match text.rsplit_once(':') {
        Some((base, "u")) => (base, Some(Exclude { user: false, kernel: true })),
        Some((base, "k")) => (base, Some(Exclude { user: true, kernel: false })),
        _ => (text, None),
    }
}

fn tracepoint(sub: &str, name: &str, tracefs: Option<&Path>) -> Result<EventSpec, Error> {
    let full = format!("{sub}:{name}");
    let Some(root) = tracefs else {
        return Err(Error::new(
            ErrorKind::NotSupported { event: full.clone() },
            format!("tracepoint {full}: tracefs is not mounted (mount -t tracefs nodev /sys/kernel/tracing)"),
        ));
    };
    let events = root.join("events");
    let id_file = events.join(sub).join(name).join("id");
    match std::fs::read_to_string(&id_file) {
        Ok(text) => match text.trim().parse() {
            Ok(id) => Ok(EventSpec::new(&full, PERF_TYPE_TRACEPOINT, id)),
            Err(_) => {
                Err(Error::new(ErrorKind::Io, format!("tracepoint {full}: {} holds {:?}, not an id", id_file.display(), text.trim())))
            }
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(unknown_tracepoint(&events, sub, name)),
        Err(e) => Err(Error::io(&format!("tracepoint {full}: cannot read {}", id_file.display()), e)),
    }
}

/// The error for an unknown tracepoint: the subsystem's tracepoints, or
/// the subsystems (as `sub:*`) when it has none, nearest first.
fn unknown_tracepoint(events: &Path, sub: &str, name: &str) -> Error {
    let names = |dir: &Path| -> Vec<String> {
        let Ok(rd) = std::fs::read_dir(dir) else { return Vec::new() };
        let mut v: Vec<String> = rd.flatten().filter(|e| e.path().is_dir()).filter_map(|e| e.file_name().into_string().ok()).collect();
        v.sort();
        v
    };
    let full = format!("{sub}:{name}");
    match names(&events.join(sub)) {
        v if !v.is_empty() => {
            let close = close_matches(name, &v).into_iter().map(|n| format!("{sub}:{n}")).collect();
            unknown_event(&full, v.into_iter().map(|n| format!("{sub}:{n}")).collect(), close)
        }
        _ => {
            let subs = names(events);
            let close = close_matches(sub, &subs).into_iter().map(|s| format!("{s}:*")).collect();
            unknown_event(&full, subs.into_iter().map(|s| format!("{s}:*")).collect(), close)
        }
    }
}

/// The error for a name that is not an event, with the closest known names first.
fn unknown_event(name: &str, known: Vec<String>, close: Vec<String>) -> Error {
    let hint = if close.is_empty() { String::new() } else { format!(" (did you mean {}?)", close.join(", ")) };
    let list = if known.len() > 40 { format!("{} of them, under /sys/kernel/tracing/events", known.len()) } else { known.join(", ") };
    Error::new(ErrorKind::UnknownEvent { name: name.into(), known }, format!("unknown event {name:?}{hint}; known events: {list}"))
}

/// Up to three names within a third of the name's length in edits, or that contain it, nearest first.
pub fn close_matches(name: &str, known: &[String]) -> Vec<String> {
    let mut scored: Vec<(usize, &String)> = known
        .iter()
        .map(|k| (edit_distance(name, k), k))
        .filter(|(d, k)| *d <= (name.len() / 3).max(2) || (name.len() >= 3 && k.contains(name)))
        .collect();
    scored.sort();
    scored.into_iter().take(3).map(|(_, k)| k.clone()).collect()
}

/// Levenshtein distance over bytes (event names are ASCII).
fn edit_distance(a: &str, b: &str) -> usize {
    let b = b.as_bytes();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.bytes().enumerate() {
        let mut diag = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let next = (diag + usize::from(ca != cb)).min(row[j] + 1).min(row[j + 1] + 1);
            diag = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()]
}

/// Events counted by the PMU (generic and cache events), which a machine without one lacks.
pub fn is_hardware(e: &EventSpec) -> bool {
    e.type_ == PERF_TYPE_HARDWARE || e.type_ == PERF_TYPE_HW_CACHE
}

/// Whether opening hardware event `e` failed the way it does on a machine
/// without a PMU (the kernel has no such event type or config).
pub(crate) fn no_pmu(e: &EventSpec, err: &std::io::Error) -> bool {
    is_hardware(e) && matches!(err.raw_os_error(), Some(libc::ENOENT) | Some(libc::EOPNOTSUPP) | Some(libc::ENODEV))
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
            let r =
                r.map(drop).map_err(|err| if no_pmu(&e, &err) { "not supported: no hardware PMU".to_string() } else { err.to_string() });
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
        assert!(msg.contains("\"cpu-clocks\" (did you mean cpu-clock?); known events: "), "{msg}");
        assert!(matches!(e.kind(), ErrorKind::UnknownEvent { .. }));
    }

    #[test]
    fn modifiers_exclude_the_other_level() {
        // Checks perf's :u and :k: the name keeps the modifier and the opposite level is excluded.
        let u = parse_event("cpu-clock:u").unwrap();
        assert_eq!((u.name.as_str(), u.config, u.exclude), ("cpu-clock:u", 0, Exclude { user: false, kernel: true }));
        let k = parse_event("cs:k").unwrap();
        assert_eq!((k.name.as_str(), k.exclude), ("context-switches:k", Exclude { user: true, kernel: false }));
        assert_eq!(parse_event("cycles").unwrap().exclude, Exclude::default());
    }

    #[test]
    fn tracepoints_read_their_id_and_unknown_ones_list_neighbours() {
        // Checks tracepoint parsing against a tracefs tree made here: the id file's number, and close names on a typo.
        let dir = tempfile::tempdir().unwrap();
        for (n, id) in [("sched_switch", 316), ("sched_wakeup", 318)] {
            std::fs::create_dir_all(dir.path().join("events/sched").join(n)).unwrap();
            std::fs::write(dir.path().join("events/sched").join(n).join("id"), format!("{id}\n")).unwrap();
        }
        let t = parse_event_in("sched:sched_switch:u", Some(dir.path())).unwrap();
        assert_eq!((t.name.as_str(), t.type_, t.config), ("sched:sched_switch:u", PERF_TYPE_TRACEPOINT, 316));
        assert!(t.is_tracepoint());
        let msg = parse_event_in("sched:sched_swich", Some(dir.path())).unwrap_err().to_string();
        assert!(msg.contains("did you mean sched:sched_switch"), "{msg}");
        let msg = parse_event_in("shed:sched_switch", Some(dir.path())).unwrap_err().to_string();
        assert!(msg.contains("did you mean sched:*"), "{msg}");
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
