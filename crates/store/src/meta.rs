//! Typed epoch metadata. On disk it stays the string map `epoch.json` has
//! always held (`{"started_unix", "meta": {key: text}}`), so databases
//! written before the types load unchanged and older binaries read newer
//! ones; the keys and how each value is written are known here only.

use std::collections::BTreeMap;

/// Key of the median core clock while recording, GHz.
const GHZ: &str = "cpu_ghz";
/// Key of every clock reading of the epoch, GHz, space-separated.
const READINGS: &str = "cpu_ghz_readings";
/// Key of the TSC's nominal rate, MHz.
const TSC: &str = "tsc_mhz";
const KERNEL: &str = "kernel";
/// Keys of what the collector lost in the epoch (see [`EpochLosses`]).
const LOST_RING: &str = "lost_ring_overrun";
const LOST_MAP_FULL: &str = "lost_map_full";
const THROTTLED: &str = "throttled";
/// Keys of the unwind-table walks stopped early, by reason (see [`EpochLosses::unwind_stopped`]).
const UNWIND_STOPPED: [&str; 4] =
    ["unwind_stopped_no_table", "unwind_stopped_expression", "unwind_stopped_read_fault", "unwind_stopped_depth_limit"];
const HOST: &str = "host";
/// Key of each process's cgroup path, `pid path` per line.
const CGROUPS: &str = "process_cgroups";
/// Key of the per-thread on-CPU and off-CPU times (see [`ThreadTime`]).
const THREADS: &str = "thread_times";

/// The core clock measured while the epoch was recorded (the collector
/// measures it at start, at exit and at each new epoch), which `calc`
/// needs to turn a clock event's period (ns) into cycles.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Clock {
    /// Every reading, GHz, as stored (4 decimals).
    pub readings: Vec<f64>,
    /// Their median, GHz: the rate the epoch's samples are converted at.
    pub ghz: Option<f64>,
    /// The TSC's nominal rate, MHz, for the record (it is not the core clock).
    pub tsc_mhz: Option<f64>,
}

impl Clock {
    /// Adds a reading and makes the median of all readings the epoch's clock.
    pub fn add_reading(&mut self, ghz: f64) {
        self.readings.push(ghz);
        if let Some(m) = median(&self.readings) {
            self.ghz = Some(m);
        }
    }
}

/// The median of clock readings (GHz), ignoring non-positive and non-finite
/// ones; None when there are none.
pub fn median(readings: &[f64]) -> Option<f64> {
    let mut v: Vec<f64> = readings.iter().copied().filter(|x| x.is_finite() && *x > 0.0).collect();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(v[n / 2]),
        _ => Some((v[n / 2 - 1] + v[n / 2]) / 2.0),
    }
}

/// What the collector lost in the epoch, counted since the epoch began
/// (every collector that wrote into it adds its own).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EpochLosses {
    /// Records the kernel dropped from full perf rings (PERF_RECORD_LOST).
    pub ring_overrun: u64,
    /// Samples the BPF program could not count (table and overflow ring full).
    pub map_full: u64,
    /// Times the kernel throttled sampling.
    pub throttled: u64,
    /// Stacks the in-kernel unwind-table walk could not finish, by reason:
    /// no table, an expression, a read fault (those samples kept their
    /// stacks through stack copies), the depth limit (kept, cut short).
    /// Not lost samples: a record of where unwinding falls back.
    pub unwind_stopped: [u64; 4],
}

impl EpochLosses {
    /// Samples (and records) lost, all causes together; throttling is not a loss of a taken sample.
    pub fn samples(&self) -> u64 {
        self.ring_overrun + self.map_full
    }
}

/// One thread's scheduler time in the epoch (`record --off-cpu`), ns: what
/// it ran and why it was off the CPU, so their sum is its wall-clock time.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ThreadTime {
    pub comm: String,
    pub on_cpu_ns: u64,
    /// Off-CPU ns by reason, in the order of [`OFF_CPU_REASONS`].
    pub off_cpu_ns: [u64; 5],
}

/// The off-CPU reasons in the order [`ThreadTime::off_cpu_ns`] holds them.
pub const OFF_CPU_REASONS: [&str; 5] = ["sleep", "lock", "io", "uninterruptible", "runnable"];

impl ThreadTime {
    pub fn add(&mut self, other: &ThreadTime) {
        self.on_cpu_ns += other.on_cpu_ns;
        for (a, b) in self.off_cpu_ns.iter_mut().zip(other.off_cpu_ns) {
            *a += b;
        }
        if self.comm.is_empty() {
            self.comm = other.comm.clone();
        }
    }

    pub fn off_cpu_total(&self) -> u64 {
        self.off_cpu_ns.iter().sum()
    }
}

/// Per (pid, tid).
pub type ThreadTimes = BTreeMap<(u32, u32), ThreadTime>;

/// `pid tid on sleep lock io uninterruptible runnable comm` per line (comm last: it may hold spaces).
fn threads_to_text(t: &ThreadTimes) -> String {
    let line = |((pid, tid), x): (&(u32, u32), &ThreadTime)| {
        let o = x.off_cpu_ns;
        format!("{pid} {tid} {} {} {} {} {} {} {}", x.on_cpu_ns, o[0], o[1], o[2], o[3], o[4], x.comm.replace('\n', " "))
    };
    t.iter().map(line).collect::<Vec<_>>().join("\n")
}

/// Reads [`threads_to_text`]'s lines; None when one does not parse.
fn threads_from_text(text: &str) -> Option<ThreadTimes> {
    let mut out = ThreadTimes::new();
    for l in text.lines() {
        let mut w = l.splitn(9, ' ');
        let mut num = || w.next()?.parse::<u64>().ok();
        let (pid, tid, on) = (num()? as u32, num()? as u32, num()?);
        let off = [num()?, num()?, num()?, num()?, num()?];
        let comm = w.next().unwrap_or("").to_string();
        out.insert((pid, tid), ThreadTime { comm, on_cpu_ns: on, off_cpu_ns: off });
    }
    Some(out)
}

/// What is recorded about an epoch besides its samples.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EpochMeta {
    /// Kernel release of the recording machine.
    pub kernel: Option<String>,
    /// Host name of the recording machine.
    pub host: Option<String>,
    pub clock: Clock,
    pub losses: EpochLosses,
    /// Per-thread scheduler times, when recorded with off-CPU time.
    pub threads: ThreadTimes,
    /// Each process's cgroup path (the last one seen, for a pid reused in the epoch).
    pub cgroups: BTreeMap<u32, String>,
    /// Keys this version does not know (written by a newer one, or by
    /// [`crate::Database::set_epoch_meta`]), kept as they are.
    pub other: BTreeMap<String, String>,
}

impl EpochMeta {
    /// Reads the stored map; a value that does not parse is left out of its
    /// typed field and kept in `other`, so nothing is lost on rewrite.
    pub(crate) fn from_map(mut map: BTreeMap<String, String>) -> EpochMeta {
        let mut take_u64 = |key: &str| -> u64 {
            let Some(v) = map.get(key).and_then(|v| v.parse().ok()) else { return 0 };
            map.remove(key);
            v
        };
        let losses = EpochLosses {
            ring_overrun: take_u64(LOST_RING),
            map_full: take_u64(LOST_MAP_FULL),
            throttled: take_u64(THROTTLED),
            unwind_stopped: UNWIND_STOPPED.map(&mut take_u64),
        };
        let mut take_f64 = |key: &str| -> Option<f64> {
            let v = map.get(key)?.parse().ok()?;
            map.remove(key);
            Some(v)
        };
        let ghz = take_f64(GHZ);
        let tsc_mhz = take_f64(TSC);
        let readings = map.remove(READINGS).map_or_else(Vec::new, |t| t.split_whitespace().filter_map(|w| w.parse().ok()).collect());
        let threads = match map.get(THREADS).map(|t| threads_from_text(t)) {
            Some(Some(t)) => {
                map.remove(THREADS);
                t
            }
            _ => ThreadTimes::new(),
        };
        let cgroups = map
            .remove(CGROUPS)
            .map(|t| t.lines().filter_map(|l| l.split_once(' ')).filter_map(|(p, c)| Some((p.parse().ok()?, c.to_string()))).collect())
            .unwrap_or_default();
        EpochMeta {
            kernel: map.remove(KERNEL),
            host: map.remove(HOST),
            clock: Clock { readings, ghz, tsc_mhz },
            losses,
            threads,
            cgroups,
            other: map,
        }
    }

    /// The map stored on disk, in the formats the collector always wrote.
    pub(crate) fn to_map(&self) -> BTreeMap<String, String> {
        let mut map = self.other.clone();
        let mut put = |k: &str, v: Option<String>| {
            if let Some(v) = v {
                map.insert(k.to_string(), v);
            }
        };
        put(KERNEL, self.kernel.clone());
        put(HOST, self.host.clone());
        let c = &self.clock;
        put(READINGS, (!c.readings.is_empty()).then(|| c.readings.iter().map(|g| format!("{g:.4}")).collect::<Vec<_>>().join(" ")));
        put(GHZ, c.ghz.map(|g| format!("{g:.4}")));
        put(TSC, c.tsc_mhz.map(|t| format!("{t:.3}")));
        // Only what happened: an epoch that lost nothing keeps the map older versions wrote.
        let l = &self.losses;
        for (key, n) in [(LOST_RING, l.ring_overrun), (LOST_MAP_FULL, l.map_full), (THROTTLED, l.throttled)] {
            put(key, (n > 0).then(|| n.to_string()));
        }
        for (key, n) in UNWIND_STOPPED.iter().zip(l.unwind_stopped) {
            put(key, (n > 0).then(|| n.to_string()));
        }
        put(THREADS, (!self.threads.is_empty()).then(|| threads_to_text(&self.threads)));
        let cgroups = self.cgroups.iter().map(|(p, c)| format!("{p} {}", c.replace('\n', " "))).collect::<Vec<_>>().join("\n");
        put(CGROUPS, (!self.cgroups.is_empty()).then_some(cgroups));
        map
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn old_string_map_reads_typed_and_writes_back_the_same() {
        // Checks that the map an older collector wrote becomes typed fields and is written back byte for byte.
        let old = map(&[
            ("cpu_ghz", "3.6512"),
            ("cpu_ghz_readings", "3.6400 3.6512 3.7000"),
            ("host", "box"),
            ("kernel", "6.8.0-1"),
            ("tsc_mhz", "2600.000"),
            ("team", "db"),
        ]);
        let m = EpochMeta::from_map(old.clone());
        assert_eq!((m.clock.ghz, m.clock.tsc_mhz), (Some(3.6512), Some(2600.0)));
        assert_eq!(m.clock.readings, vec![3.64, 3.6512, 3.7]);
        assert_eq!((m.kernel.as_deref(), m.host.as_deref()), (Some("6.8.0-1"), Some("box")));
        assert_eq!(m.other, map(&[("team", "db")]));
        assert_eq!(m.to_map(), old);
    }

    #[test]
    fn unparsable_values_are_kept_not_lost() {
        // Checks that a clock value that is not a number stays in `other` and is written back unchanged.
        let m = EpochMeta::from_map(map(&[("cpu_ghz", "fast"), ("cpu_ghz_readings", "3.5 x 3.7")]));
        assert_eq!(m.clock.ghz, None);
        assert_eq!(m.clock.readings, vec![3.5, 3.7]);
        assert_eq!(m.to_map().get("cpu_ghz").map(String::as_str), Some("fast"));
    }

    #[test]
    fn thread_times_and_cgroups_round_trip_through_the_map() {
        // Checks that per-thread times and process cgroups, spaces included, are written and read back unchanged.
        let mut m = EpochMeta::default();
        m.threads.insert((7, 8), ThreadTime { comm: "my worker".into(), on_cpu_ns: 5, off_cpu_ns: [1, 2, 3, 4, 5] });
        m.threads.insert((7, 7), ThreadTime { comm: "main".into(), on_cpu_ns: 9, off_cpu_ns: [0; 5] });
        m.cgroups.insert(7, "/system.slice/a b.service".into());
        let back = EpochMeta::from_map(m.to_map());
        assert_eq!(back.threads, m.threads);
        assert_eq!(back.cgroups, m.cgroups);
        assert!(back.other.is_empty());
    }

    #[test]
    fn readings_keep_their_median() {
        // Checks the median of odd and even counts of readings, skipping non-positive ones.
        let mut c = Clock::default();
        for g in [3.7, 3.5, 3.9] {
            c.add_reading(g);
        }
        assert_eq!(c.ghz, Some(3.7));
        assert_eq!(median(&[3.6, 3.8, 0.0]), Some(3.7));
        assert_eq!(median(&[3.6, 3.8]), Some(3.7));
        assert_eq!(median(&[]), None);
    }
}
