//! Composite profile of one image (Morph §3.3): sample sets from several
//! runs and epochs summed in proportion to their activity ("direct
//! combining"), each weighted down by its age so usage that stopped fades.
//! A set from another build of the program is never mixed in.

use crate::error::{Error, ErrorKind, Result};
use std::collections::{BTreeMap, HashMap};

/// PC samples of one image in one epoch (or one run).
#[derive(Clone, Debug)]
pub struct SampleSet {
    /// Build-id (hex) of the image that produced the samples.
    pub build_id: String,
    /// Seconds between when the set was collected and now.
    pub age_secs: f64,
    /// Samples per ELF virtual address.
    pub samples: HashMap<u64, u64>,
}

#[derive(Clone, Debug, Default)]
pub struct Combined {
    /// Aged sample weight per virtual address.
    pub samples: BTreeMap<u64, f64>,
    /// Raw samples that went in (before aging).
    pub raw: u64,
    /// Sets used, and sets refused because they came from another build.
    pub used: usize,
    pub refused: usize,
}

impl Combined {
    pub fn total(&self) -> f64 {
        self.samples.values().sum()
    }
}

/// Weight of a set `age_secs` old when weights halve every `half_life_secs`
/// (no aging when the half-life is infinite or not positive).
pub fn age_weight(age_secs: f64, half_life_secs: f64) -> f64 {
    if !half_life_secs.is_finite() || half_life_secs <= 0.0 {
        return 1.0;
    }
    0.5f64.powf(age_secs.max(0.0) / half_life_secs)
}

/// Combines the sets of build `build_id`; others are counted as refused.
pub fn combine(build_id: &str, sets: &[SampleSet], half_life_secs: f64) -> Combined {
    let mut c = Combined::default();
    for s in sets {
        if !s.build_id.eq_ignore_ascii_case(build_id) {
            c.refused += 1;
            continue;
        }
        c.used += 1;
        let w = age_weight(s.age_secs, half_life_secs);
        for (&va, &n) in &s.samples {
            c.raw += n;
            *c.samples.entry(va).or_insert(0.0) += n as f64 * w;
        }
    }
    c
}

/// The guard of Morph's "module was updated" check, by build-id rather
/// than path: a profile of `profile` may only be applied to a file whose
/// build-id is `file`.
pub fn check_build_id(profile: &str, file: Option<&str>) -> Result<()> {
    let refuse = |m: String| Err(Error::new(ErrorKind::Input, m));
    match file {
        None => refuse("the binary has no build-id note; cannot prove the profile belongs to it (link with -Wl,--build-id)".into()),
        Some(f) if f.eq_ignore_ascii_case(profile) => Ok(()),
        Some(f) => refuse(format!("the profile is of build {profile} but the binary is build {f}: refusing to apply it")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(id: &str, age: f64, s: &[(u64, u64)]) -> SampleSet {
        SampleSet { build_id: id.into(), age_secs: age, samples: s.iter().copied().collect() }
    }

    // Two fresh runs sum directly; a set one half-life old counts half.
    #[test]
    fn direct_combining_with_aging() {
        let c = combine(
            "ab",
            &[set("ab", 0.0, &[(0x10, 4)]), set("ab", 0.0, &[(0x10, 6), (0x20, 2)]), set("ab", 3600.0, &[(0x20, 8)])],
            3600.0,
        );
        assert_eq!(c.samples[&0x10], 10.0);
        assert_eq!(c.samples[&0x20], 2.0 + 4.0);
        assert_eq!((c.used, c.refused, c.raw), (3, 0, 20));
    }

    // Samples of another build never enter the profile.
    #[test]
    fn other_builds_are_refused() {
        let c = combine("AB", &[set("ab", 0.0, &[(0x10, 4)]), set("cd", 0.0, &[(0x10, 100)])], 0.0);
        assert_eq!(c.samples[&0x10], 4.0);
        assert_eq!((c.used, c.refused), (1, 1));
    }

    // Weights: none without a half-life, a quarter after two half-lives.
    #[test]
    fn weights() {
        assert_eq!(age_weight(1e9, 0.0), 1.0);
        assert_eq!(age_weight(7200.0, 3600.0), 0.25);
    }

    // The build-id guard accepts only the same build.
    #[test]
    fn guard() {
        assert!(check_build_id("abcd", Some("ABCD")).is_ok());
        assert!(check_build_id("abcd", Some("abce")).unwrap_err().to_string().contains("refusing"));
        assert!(check_build_id("abcd", None).is_err());
    }
}
