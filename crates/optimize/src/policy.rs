//! When a program deserves re-optimization (the decisions Morph's Manager
//! left to "trivial heuristics", §5): enough of the machine's time, a
//! mature profile, an installed version that still earns its place, and
//! usage that has not drifted away from the profile it was built from.
//! Pure: the manager gathers an `Observation`, this says what to do.

use std::collections::BTreeMap;

#[derive(Clone, Debug)]
pub struct Policy {
    /// Smallest share of all sampled time (0.05 = 5%) worth optimizing for.
    pub min_share: f64,
    /// Aged samples the profile needs before it is used. Measured
    /// (BENCHMARKS.md, Figure 3 density curve at 1000 Hz): the taken jumps
    /// left in Lua and SQLite after BOLT with a sampled profile kept
    /// falling from 2,000 to 10,000 to 30,000 samples (the densest
    /// measured; branch agreement with the complete profile stopped
    /// improving near 10,000); below that BOLT lays out whatever a few
    /// thousand samples happened to hit.
    pub min_samples: f64,
    /// Largest drift (total variation distance between function shares,
    /// 0..1) tolerated before the installed version is re-profiled.
    pub max_drift: f64,
    /// Seconds after which an installed version is measured again.
    pub recheck_secs: f64,
    /// After a discarded candidate, wait for this many times its samples.
    pub retry_factor: f64,
    /// Re-optimize a current installed version once the mapped profile
    /// holds this many times the samples it was built from (0: never).
    /// Measured (BENCHMARKS.md, Figure 3 fifth pass): a 300k-sample
    /// profile recovered 76% of the complete profile's gain in Lua where
    /// 30k recovered 57%, and 32% against 10% in SQLite.
    pub regrow_factor: f64,
}

impl Default for Policy {
    fn default() -> Self {
        Policy { min_share: 0.05, min_samples: 30000.0, max_drift: 0.25, recheck_secs: 86400.0, retry_factor: 2.0, regrow_factor: 0.0 }
    }
}

/// What the manager knows of an optimized version at the program's path.
#[derive(Clone, Debug, Default)]
pub struct Installed {
    /// When this manager last measured it faster than the original (never
    /// when it was installed by someone else).
    pub verified_unix: Option<u64>,
    /// Function shares of the profile it was built from.
    pub fingerprint: BTreeMap<String, f64>,
    /// Why its samples cannot be mapped back to the original's addresses
    /// (no BOLT address table, or not known to be made from this original);
    /// `None` when they can, so a drift re-optimizes from them.
    pub no_mapping: Option<String>,
    /// Samples of the profile it was built from (`None` when not known:
    /// installed by someone else, or by a manager that did not record it).
    pub built_from_samples: Option<f64>,
}

#[derive(Clone, Debug, Default)]
pub struct Observation {
    pub now_unix: u64,
    /// The program's share of all samples in the window.
    pub share: f64,
    /// Aged samples of the original build: the profile's maturity.
    pub profile_samples: f64,
    /// Samples of the build now at the path, by function (for drift).
    pub recent: BTreeMap<String, f64>,
    pub installed: Option<Installed>,
    /// Aged samples of the profile a re-optimization would use: the
    /// installed build's samples since it was installed, mapped back to
    /// the original, plus the original build's own in that time.
    pub mapped_samples: f64,
    /// Profile samples behind the last candidate that was discarded.
    pub last_discard_samples: Option<f64>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    Wait,
    /// Build, check, measure and maybe install a candidate.
    Optimize,
    /// Measure the installed version against the original; roll back if it is not faster.
    Guard,
    /// Put the original back and collect a fresh profile.
    Reprofile,
    /// Keep the installed version running; build a new candidate from the
    /// original and the installed version's samples mapped back to it.
    Reoptimize,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Verdict {
    pub action: Action,
    pub reason: String,
    /// For a `Reoptimize` because the profile grew (not drift): the
    /// samples behind the installed version, which the candidate must beat.
    pub regrow_from: Option<f64>,
}

fn verdict(action: Action, reason: String) -> Verdict {
    Verdict { action, reason, regrow_from: None }
}

/// Shares summing to 1 (empty when there is nothing).
pub fn normalize(m: &BTreeMap<String, f64>) -> BTreeMap<String, f64> {
    let t: f64 = m.values().sum();
    if t <= 0.0 {
        return BTreeMap::new();
    }
    m.iter().map(|(k, v)| (k.clone(), v / t)).collect()
}

/// Total variation distance between two distributions over function
/// names: the share of time that moved from one set of functions to
/// another (0 same usage, 1 disjoint).
pub fn drift(a: &BTreeMap<String, f64>, b: &BTreeMap<String, f64>) -> f64 {
    let (a, b) = (normalize(a), normalize(b));
    let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    keys.into_iter().map(|k| (a.get(k).unwrap_or(&0.0) - b.get(k).unwrap_or(&0.0)).abs()).sum::<f64>() / 2.0
}

/// The next step for one program.
pub fn next(p: &Policy, o: &Observation) -> Verdict {
    let recent: f64 = o.recent.values().sum();
    if let Some(inst) = &o.installed {
        let due = match inst.verified_unix {
            None => Some("installed version not yet measured by the manager".to_string()),
            Some(t) if o.now_unix.saturating_sub(t) as f64 >= p.recheck_secs => {
                Some(format!("re-check due ({} s since the last)", o.now_unix - t))
            }
            Some(_) => None,
        };
        if let Some(why) = due {
            if recent > 0.0 {
                return verdict(Action::Guard, why);
            }
            return verdict(Action::Wait, format!("{why}, but it has not run yet"));
        }
        let d = drift(&inst.fingerprint, &o.recent);
        if recent >= p.min_samples && d > p.max_drift {
            let drifted = format!(
                "usage drifted: {:.0}% of the time moved between functions since the profile behind the installed version (limit {:.0}%)",
                d * 100.0,
                p.max_drift * 100.0
            );
            return on_drift(p, o, drifted, inst.no_mapping.as_deref());
        }
        if let Some(v) = regrow(p, o, inst) {
            return v;
        }
        if recent <= 0.0 {
            // No drift to speak of (an empty usage is "50%" away from any).
            return verdict(Action::Wait, "installed version current (not sampled since it was installed)".to_string());
        }
        return verdict(Action::Wait, format!("installed version current (drift {:.0}% over {recent:.0} samples)", d * 100.0));
    }
    if o.share < p.min_share {
        return verdict(
            Action::Wait,
            format!("{:.1}% of sampled time, below the {:.1}% worth optimizing", o.share * 100.0, p.min_share * 100.0),
        );
    }
    if o.profile_samples < p.min_samples {
        return verdict(Action::Wait, format!("profile not mature: {:.0} of {:.0} samples", o.profile_samples, p.min_samples));
    }
    if let Some(n) = o.last_discard_samples {
        let want = n * p.retry_factor;
        if o.profile_samples < want {
            return verdict(Action::Wait, format!("last candidate (from {n:.0} samples) was discarded; waiting for {want:.0} samples"));
        }
    }
    verdict(Action::Optimize, format!("{:.1}% of sampled time, profile of {:.0} samples", o.share * 100.0, o.profile_samples))
}

/// Usage drifted away from an installed version: re-optimize from its
/// mapped samples once they make a mature profile (and, after a discarded
/// re-optimization, `retry_factor` times as many); when they cannot be
/// mapped, put the original back and profile afresh.
fn on_drift(p: &Policy, o: &Observation, drifted: String, no_mapping: Option<&str>) -> Verdict {
    if let Some(why) = no_mapping {
        return verdict(Action::Reprofile, format!("{drifted}; its samples cannot be mapped to the original ({why})"));
    }
    let n = o.mapped_samples;
    if n < p.min_samples {
        return verdict(Action::Wait, format!("{drifted}, but the mapped profile is not mature: {n:.0} of {:.0} samples", p.min_samples));
    }
    if let Some(last) = o.last_discard_samples {
        let want = last * p.retry_factor;
        if n < want {
            return verdict(
                Action::Wait,
                format!("{drifted}; the last re-optimization (from {last:.0} samples) was discarded, waiting for {want:.0}"),
            );
        }
    }
    verdict(Action::Reoptimize, format!("{drifted}; re-optimizing from {n:.0} samples mapped back to the original"))
}

/// A current installed version whose mapped profile has grown to
/// `regrow_factor` times the samples it was built from: re-optimize from
/// the denser profile (after a discarded attempt, once `retry_factor`
/// times its samples are there). `None` when it does not apply.
fn regrow(p: &Policy, o: &Observation, inst: &Installed) -> Option<Verdict> {
    let n0 = inst.built_from_samples.filter(|&n0| n0 > 0.0)?;
    if p.regrow_factor <= 0.0 || inst.no_mapping.is_some() {
        return None;
    }
    let (n, want) = (o.mapped_samples, n0 * p.regrow_factor);
    if n < want || n < p.min_samples {
        return None;
    }
    let grown = format!(
        "profile grew: {n:.0} samples mapped back to the original, {:.1}x the {n0:.0} behind the installed version (regrow at {:.0}x)",
        n / n0,
        p.regrow_factor
    );
    if let Some(last) = o.last_discard_samples {
        let again = last * p.retry_factor;
        if n < again {
            return Some(verdict(
                Action::Wait,
                format!("{grown}; the last re-optimization (from {last:.0} samples) was discarded, waiting for {again:.0}"),
            ));
        }
    }
    Some(Verdict { action: Action::Reoptimize, reason: format!("{grown}; re-optimizing"), regrow_from: Some(n0) })
}

/// The manager's CPU budget as a token bucket: `fraction` of one CPU
/// accrues per wall second, up to `burst` CPU seconds; work is started
/// only while the balance is positive, and its CPU is charged after.
#[derive(Clone, Debug)]
pub struct CpuBudget {
    pub fraction: f64,
    pub burst: f64,
    balance: f64,
    last_wall: f64,
}

impl CpuBudget {
    /// A full bucket at wall time `now`.
    pub fn new(fraction: f64, burst: f64, now: f64) -> CpuBudget {
        CpuBudget { fraction, burst, balance: burst, last_wall: now }
    }

    fn refill(&mut self, now: f64) {
        self.balance = (self.balance + (now - self.last_wall).max(0.0) * self.fraction).min(self.burst);
        self.last_wall = now;
    }

    /// May work start now? Otherwise how many wall seconds until it may.
    pub fn allows(&mut self, now: f64) -> Result<(), f64> {
        self.refill(now);
        if self.balance > 0.0 {
            Ok(())
        } else {
            Err(-self.balance / self.fraction.max(1e-9))
        }
    }

    pub fn charge(&mut self, now: f64, cpu_secs: f64) {
        self.refill(now);
        self.balance -= cpu_secs;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shares(v: &[(&str, f64)]) -> BTreeMap<String, f64> {
        v.iter().map(|(k, x)| (k.to_string(), *x)).collect()
    }

    fn policy() -> Policy {
        Policy { min_share: 0.05, min_samples: 1000.0, max_drift: 0.25, recheck_secs: 100.0, retry_factor: 2.0, regrow_factor: 10.0 }
    }

    // Drift: identical usage 0, disjoint 1, half the time moved 0.5; scale does not matter.
    #[test]
    fn drift_is_total_variation() {
        assert_eq!(drift(&shares(&[("a", 3.0)]), &shares(&[("a", 30.0)])), 0.0);
        assert_eq!(drift(&shares(&[("a", 1.0)]), &shares(&[("b", 1.0)])), 1.0);
        assert_eq!(drift(&shares(&[("a", 1.0)]), &shares(&[("a", 1.0), ("b", 1.0)])), 0.5);
    }

    // Not installed: too small a share waits, an immature profile waits, a mature one optimizes.
    #[test]
    fn optimize_when_worth_it_and_mature() {
        let p = policy();
        let mut o = Observation { share: 0.01, profile_samples: 5000.0, ..Default::default() };
        assert!(next(&p, &o).reason.contains("below the 5.0%"));
        o.share = 0.3;
        o.profile_samples = 999.0;
        assert!(next(&p, &o).reason.contains("not mature"));
        o.profile_samples = 1000.0;
        assert_eq!(next(&p, &o).action, Action::Optimize);
        // After a discarded candidate from 1000 samples: wait for 2000.
        o.last_discard_samples = Some(1000.0);
        assert_eq!(next(&p, &o).action, Action::Wait);
        o.profile_samples = 2000.0;
        assert_eq!(next(&p, &o).action, Action::Optimize);
    }

    // Installed: unverified and used -> guard; verified and fresh -> wait;
    // stale -> guard; drifted over enough samples and not mappable -> reprofile.
    #[test]
    fn installed_versions() {
        let p = policy();
        let fp = shares(&[("run", 0.8), ("step", 0.2)]);
        let mut o = Observation {
            now_unix: 1000,
            share: 0.3,
            recent: shares(&[("run", 800.0), ("step", 200.0)]),
            installed: Some(Installed { verified_unix: None, fingerprint: fp.clone(), no_mapping: None, built_from_samples: None }),
            ..Default::default()
        };
        assert_eq!(next(&p, &o).action, Action::Guard);
        let no_table = Some("no BOLT address table".to_string());
        o.installed =
            Some(Installed { verified_unix: Some(950), fingerprint: fp.clone(), no_mapping: no_table.clone(), built_from_samples: None });
        assert_eq!(next(&p, &o).action, Action::Wait);
        o.installed =
            Some(Installed { verified_unix: Some(900), fingerprint: fp.clone(), no_mapping: no_table.clone(), built_from_samples: None });
        assert_eq!(next(&p, &o).action, Action::Guard);
        o.installed = Some(Installed { verified_unix: Some(950), fingerprint: fp, no_mapping: no_table, built_from_samples: None });
        o.recent = shares(&[("run", 300.0), ("other", 700.0)]);
        let v = next(&p, &o);
        assert_eq!(v.action, Action::Reprofile, "{v:?}");
        // (0.8-0.3 + 0.2 + 0.7) / 2 of the time moved.
        assert!(v.reason.contains("70%") && v.reason.contains("no BOLT address table"), "{v:?}");
        // The same drift over too few samples is not evidence yet.
        o.recent = shares(&[("run", 30.0), ("other", 70.0)]);
        assert_eq!(next(&p, &o).action, Action::Wait);
        // Not sampled since it was installed: no drift claimed (an empty usage is 50% from any).
        o.recent = BTreeMap::new();
        let v = next(&p, &o);
        assert_eq!(v.action, Action::Wait);
        assert!(v.reason.contains("not sampled since it was installed") && !v.reason.contains('%'), "{v:?}");
    }

    // Drift with mappable samples keeps the installed version: re-optimize once the mapped profile is
    // mature, wait below min_samples, and after a discarded re-optimization wait for retry_factor times
    // its samples. Without drift nothing happens however many samples there are.
    #[test]
    fn drift_reoptimizes_when_mappable() {
        let p = policy();
        let fp = shares(&[("run_a", 0.9), ("main", 0.1)]);
        let mut o = Observation {
            now_unix: 1000,
            share: 0.3,
            recent: shares(&[("run_a", 250.0), ("run_b", 700.0), ("main", 50.0)]),
            installed: Some(Installed { verified_unix: Some(990), fingerprint: fp, no_mapping: None, built_from_samples: None }),
            mapped_samples: 999.0,
            ..Default::default()
        };
        // (0.9-0.25 + 0.7 + 0.1-0.05) / 2 = 70% moved.
        let v = next(&p, &o);
        assert_eq!(v.action, Action::Wait, "{v:?}");
        assert!(v.reason.contains("70%") && v.reason.contains("999 of 1000"), "{v:?}");
        o.mapped_samples = 1000.0;
        let v = next(&p, &o);
        assert_eq!(v.action, Action::Reoptimize, "{v:?}");
        assert!(v.reason.contains("1000 samples mapped back"), "{v:?}");
        o.last_discard_samples = Some(1000.0);
        assert_eq!(next(&p, &o).action, Action::Wait);
        o.mapped_samples = 2000.0;
        assert_eq!(next(&p, &o).action, Action::Reoptimize);
        o.recent = shares(&[("run_a", 900.0), ("main", 100.0)]);
        assert_eq!(next(&p, &o).action, Action::Wait);
    }

    // Regrow: a current installed version built from 1000 samples re-optimizes once 10000 are mapped
    // back (not at 9999, not with regrow_factor 0, not without the count); drift still comes first; after a
    // discarded regrow from 10000 it waits for 20000.
    #[test]
    fn regrow_reoptimizes_when_profile_is_denser() {
        let p = policy();
        let fp = shares(&[("run", 0.8), ("step", 0.2)]);
        let inst = Installed { verified_unix: Some(990), fingerprint: fp, no_mapping: None, built_from_samples: Some(1000.0) };
        let mut o = Observation {
            now_unix: 1000,
            share: 0.3,
            recent: shares(&[("run", 800.0), ("step", 200.0)]),
            installed: Some(inst.clone()),
            mapped_samples: 9999.0,
            ..Default::default()
        };
        assert_eq!(next(&p, &o).action, Action::Wait);
        o.mapped_samples = 10000.0;
        let v = next(&p, &o);
        assert_eq!(v.action, Action::Reoptimize, "{v:?}");
        assert_eq!(v.regrow_from, Some(1000.0));
        assert!(v.reason.contains("profile grew: 10000 samples") && v.reason.contains("10.0x the 1000"), "{v:?}");
        let off = Policy { regrow_factor: 0.0, ..policy() };
        assert_eq!(next(&off, &o).action, Action::Wait);
        o.installed = Some(Installed { built_from_samples: None, ..inst.clone() });
        assert_eq!(next(&p, &o).action, Action::Wait);
        o.installed = Some(Installed { no_mapping: Some("no BOLT address table".into()), ..inst.clone() });
        assert_eq!(next(&p, &o).action, Action::Wait);
        // Drift: (0.8-0.3 + 0.2 + 0.7) / 2 = 70% moved; its verdict, not the regrow's.
        o.installed = Some(inst);
        o.recent = shares(&[("run", 300.0), ("other", 700.0)]);
        let v = next(&p, &o);
        assert_eq!(v.action, Action::Reoptimize, "{v:?}");
        assert!(v.reason.contains("usage drifted: 70%") && v.regrow_from.is_none(), "{v:?}");
        o.recent = shares(&[("run", 800.0), ("step", 200.0)]);
        o.last_discard_samples = Some(10000.0);
        let v = next(&p, &o);
        assert_eq!(v.action, Action::Wait, "{v:?}");
        assert!(v.reason.contains("waiting for 20000"), "{v:?}");
        o.mapped_samples = 20000.0;
        assert_eq!(next(&p, &o).action, Action::Reoptimize);
    }

    // Budget: a quarter CPU accrues 2.5 s per 10 s; work that spent 10 s of
    // CPU from a 5 s bucket must wait (10 - 5) / 0.25 = 20 s.
    #[test]
    fn cpu_budget() {
        let mut b = CpuBudget::new(0.25, 5.0, 0.0);
        assert!(b.allows(0.0).is_ok());
        b.charge(0.0, 10.0);
        assert_eq!(b.allows(0.0), Err(20.0));
        assert_eq!(b.allows(10.0), Err(10.0));
        assert!(b.allows(20.5).is_ok());
        // Never more than the burst accrues.
        let mut idle = CpuBudget::new(0.25, 5.0, 0.0);
        idle.charge(1e6, 6.0);
        assert!(idle.allows(1e6).is_err());
    }
}
