//! The manager's configuration (which programs, how to check and time
//! them, the policy's thresholds) and its state between passes, both JSON.

use crate::error::{Error, ErrorKind, Result};
use crate::policy::Policy;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Seconds between passes over the programs.
    pub interval: f64,
    pub min_share: f64,
    pub min_samples: f64,
    pub max_drift: f64,
    pub recheck_secs: f64,
    pub retry_factor: f64,
    pub regrow_factor: f64,
    /// Age in seconds at which an epoch's samples count half (0: no aging).
    pub half_life: f64,
    pub cold_fraction: f64,
    /// Block counts by minimum-cost flow (`optimize export --infer`).
    pub infer: bool,
    /// Seconds of `optimize probe` (execute breakpoints) on the program's
    /// running processes before the first candidate of a build is built,
    /// when the database has no probe counts of it yet (0: never).
    pub probe_seconds: f64,
    /// How many of the profile's hottest functions that probe counts
    /// (BENCHMARKS.md, fourteenth pass: 48 reached the complete profile's
    /// gain on Lua, SQLite and gawk where 16-24 did not on gawk).
    pub probe_functions: usize,
    /// Niceness of the manager and of everything it runs (19: only idle time).
    pub nice: i32,
    pub programs: Vec<Program>,
}

impl Default for Config {
    fn default() -> Self {
        let p = Policy::default();
        Config {
            interval: 60.0,
            min_share: p.min_share,
            min_samples: p.min_samples,
            max_drift: p.max_drift,
            recheck_secs: p.recheck_secs,
            retry_factor: p.retry_factor,
            regrow_factor: p.regrow_factor,
            half_life: 7.0 * 86400.0,
            cold_fraction: 0.01,
            infer: false,
            probe_seconds: 0.0,
            probe_functions: 16,
            nice: 19,
            programs: Vec::new(),
        }
    }
}

impl Config {
    pub fn policy(&self) -> Policy {
        Policy {
            min_share: self.min_share,
            min_samples: self.min_samples,
            max_drift: self.max_drift,
            recheck_secs: self.recheck_secs,
            retry_factor: self.retry_factor,
            regrow_factor: self.regrow_factor,
        }
    }

    /// Parses and checks the file's text.
    pub fn parse(text: &str) -> Result<Config> {
        let bad = |m: String| Error::new(ErrorKind::Input, m);
        let c: Config = serde_json::from_str(text).map_err(|e| bad(format!("bad configuration: {e}")))?;
        if c.programs.is_empty() {
            return Err(bad("bad configuration: no programs".into()));
        }
        for p in &c.programs {
            if !p.path.starts_with('/') {
                return Err(bad(format!("bad configuration: program path {:?} is not absolute", p.path)));
            }
            if p.rounds < 5 {
                return Err(bad(format!(
                    "bad configuration: {} has rounds {} (at least 5: fewer can never pass the sign test)",
                    p.path, p.rounds
                )));
            }
        }
        if c.probe_seconds > 0.0 && c.probe_functions == 0 {
            return Err(bad("bad configuration: probe_seconds without a function to probe (probe_functions is 0)".into()));
        }
        if c.interval.is_nan() || c.interval <= 0.0 {
            return Err(bad("bad configuration: interval must be positive".into()));
        }
        Ok(c)
    }
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Program {
    /// Absolute path users run the program by.
    pub path: String,
    /// Shell command that must behave the same on a candidate ({} = binary).
    pub check: String,
    /// Shell command timed on original and candidate in alternation.
    pub bench: String,
    #[serde(default = "default_rounds")]
    pub rounds: usize,
    #[serde(default = "default_min_gain")]
    pub min_gain: f64,
    /// BOLT optimization options instead of the defaults.
    #[serde(default)]
    pub bolt_opts: Option<Vec<String>>,
}

fn default_rounds() -> usize {
    10
}

fn default_min_gain() -> f64 {
    0.01
}

/// What the manager remembers of one program.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct ProgramState {
    /// Build-id of the program as its user built it.
    pub original_build: String,
    /// The profile uses epochs from this one on (moved on re-profiling).
    pub from_epoch: u32,
    pub installed: Option<InstalledState>,
    pub last_discard_samples: Option<f64>,
    /// Last waiting reason logged, without its numbers (to log changes only).
    pub last_wait: String,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct InstalledState {
    pub build: String,
    pub verified_unix: Option<u64>,
    pub fingerprint: BTreeMap<String, f64>,
    /// Samples of the installed build are counted from this epoch on.
    pub since_epoch: u32,
    /// Samples of the profile it was built from (absent in older state
    /// files and for versions installed by someone else: no regrow).
    #[serde(default)]
    pub built_from_samples: Option<f64>,
}

pub type State = BTreeMap<String, ProgramState>;

/// A reason without its digits: "profile not mature: 10 of 20" and
/// "... 15 of 20" are the same wait.
pub fn reason_kind(reason: &str) -> String {
    reason.chars().filter(|c| !c.is_ascii_digit() && *c != '.').collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    // Defaults fill what the file leaves out; per-program fields too.
    #[test]
    fn parses_with_defaults() {
        let c = Config::parse(r#"{"min_samples": 300, "programs": [{"path": "/bin/x", "check": "{} 1", "bench": "{} 2"}]}"#).unwrap();
        assert_eq!(c.min_samples, 300.0);
        assert_eq!(c.interval, 60.0);
        assert_eq!((c.programs[0].rounds, c.programs[0].min_gain), (10, 0.01));
        assert!(c.programs[0].bolt_opts.is_none());
        assert_eq!(c.regrow_factor, 0.0);
        assert!(!c.infer);
        assert!(Config::parse(r#"{"infer": true, "programs": [{"path": "/x", "check": "", "bench": ""}]}"#).unwrap().infer);
        let probing = Config::parse(r#"{"probe_seconds": 5, "programs": [{"path": "/x", "check": "", "bench": ""}]}"#).unwrap();
        assert_eq!((probing.probe_seconds, probing.probe_functions), (5.0, 16));
        let wide = Config::parse(r#"{"probe_seconds": 5, "probe_functions": 48, "programs": [{"path": "/x", "check": "", "bench": ""}]}"#);
        assert_eq!(wide.unwrap().probe_functions, 48);
        assert_eq!(
            Config::parse(r#"{"regrow_factor": 10, "programs": [{"path": "/x", "check": "", "bench": ""}]}"#)
                .unwrap()
                .policy()
                .regrow_factor,
            10.0
        );
    }

    // A state file written before `built_from_samples` existed still reads (no count: no regrow).
    #[test]
    fn old_state_reads() {
        let s: InstalledState =
            serde_json::from_str(r#"{"build": "ab", "verified_unix": 5, "fingerprint": {}, "since_epoch": 3}"#).unwrap();
        assert_eq!((s.since_epoch, s.built_from_samples), (3, None));
    }

    // Bad files are refused with the reason: relative path, too few rounds, unknown key, no programs.
    #[test]
    fn refuses_bad_files() {
        let e = |t: &str| Config::parse(t).unwrap_err().to_string();
        assert!(e(r#"{"programs": [{"path": "x", "check": "", "bench": ""}]}"#).contains("not absolute"));
        assert!(e(r#"{"programs": [{"path": "/x", "check": "", "bench": "", "rounds": 3}]}"#).contains("at least 5"));
        assert!(e(r#"{"min_sample": 3, "programs": []}"#).contains("unknown field"));
        assert!(e(r#"{"programs": []}"#).contains("no programs"));
    }

    // Waits differing only in their numbers are one kind.
    #[test]
    fn kinds() {
        assert_eq!(reason_kind("profile not mature: 10 of 20.5"), reason_kind("profile not mature: 15 of 20"));
        assert_ne!(reason_kind("profile not mature"), reason_kind("below the share"));
    }
}
