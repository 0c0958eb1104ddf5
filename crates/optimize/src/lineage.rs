//! The optimized builds Loupe made from an original, and their samples
//! mapped back to it through BOLT's address translation table
//! ([`crate::bat`]), so an optimized binary's runs keep feeding the
//! original's profile. Only outputs the decision log says Loupe made from
//! this very build are used (build-id of the original -> candidate's
//! build-id), found beside the image (IMAGE.loupe-bolt) or, for an
//! installed candidate whose original is IMAGE.loupe-orig, at the image's
//! own path. The caller reads the log and the database; this module decides.

use crate::bat::Translator;
use crate::combine::SampleSet;
use crate::error::{Error, ErrorKind, Result};
use crate::manage::Decision;
use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Candidate build-ids (lower case) that the decision log `log` (JSON
/// lines; unreadable ones are skipped) records as made from `orig_bid`.
pub fn made_from(log: &str, orig_bid: &str) -> BTreeSet<String> {
    log.lines()
        .filter_map(|l| serde_json::from_str::<Decision>(l).ok())
        .filter(|d| !orig_bid.is_empty() && d.build_id.eq_ignore_ascii_case(orig_bid))
        .filter_map(|d| d.candidate_build_id.map(|c| c.to_ascii_lowercase()))
        .collect()
}

/// Where Loupe leaves or installs a candidate of `image`: the paths its
/// samples are filed under.
pub fn candidate_files(image: &Path) -> Vec<PathBuf> {
    let s = image.display().to_string();
    let mut v = vec![PathBuf::from(format!("{s}.loupe-bolt"))];
    v.extend(installed_path(image));
    v
}

/// The path an installed optimized version of `image` runs at, when
/// `image` is the saved original (PATH.loupe-orig).
pub fn installed_path(image: &Path) -> Option<PathBuf> {
    image.display().to_string().strip_suffix(".loupe-orig").map(PathBuf::from)
}

/// The translator from build `bid` (the file `file`) to the original
/// `original` (build `orig_bid`), or why there is none: only builds in
/// `made` (what the decision log says Loupe made from this very original)
/// are mapped.
pub fn mapping(made: &BTreeSet<String>, file: &Path, original: &Path, orig_bid: &str, bid: &str) -> Result<Arc<Translator>> {
    if !made.contains(&bid.to_ascii_lowercase()) {
        return Err(Error::new(ErrorKind::Input, format!("no decision records Loupe making build {bid} from {orig_bid}")));
    }
    Translator::open_cached(file, original)
}

/// What translating sample sets gave: the sets at the original's
/// addresses, the samples mapped and those in code the table has no
/// original for.
#[derive(Debug, Default)]
pub struct Translated {
    pub sets: Vec<SampleSet>,
    pub mapped: u64,
    pub lost: u64,
}

/// Sets of an optimized build translated to the original's addresses and
/// filed under `orig_bid`.
pub fn translate_sets(t: &Translator, sets: Vec<SampleSet>, orig_bid: &str) -> Translated {
    let mut out = Translated::default();
    for mut s in sets {
        let mut samples: HashMap<u64, u64> = HashMap::new();
        for (va, n) in s.samples {
            match t.sample_to_original(va) {
                Some(o) => *samples.entry(o).or_insert(0) += n,
                None => out.lost += n,
            }
        }
        out.mapped += samples.values().sum::<u64>();
        s.samples = samples;
        s.build_id = orig_bid.to_string();
        out.sets.push(s);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decision(bid: &str, cand: Option<&str>) -> String {
        let d = Decision {
            unix_time: 0,
            image: "/x".into(),
            build_id: bid.into(),
            candidate_build_id: cand.map(String::from),
            replaces: None,
            action: "installed".into(),
            reason: String::new(),
            measurement: None,
        };
        serde_json::to_string(&d).unwrap()
    }

    // A candidate is looked for beside the image, and at the installed path when the image is the saved original.
    #[test]
    fn where_candidates_are() {
        assert_eq!(candidate_files(Path::new("/x/lua")), vec![PathBuf::from("/x/lua.loupe-bolt")]);
        assert_eq!(
            candidate_files(Path::new("/x/lua.loupe-orig")),
            vec![PathBuf::from("/x/lua.loupe-orig.loupe-bolt"), PathBuf::from("/x/lua")]
        );
    }

    // Only candidates logged as made from this original (any case), not those of other builds, nor decisions
    // without a candidate, nor lines that are not decisions.
    #[test]
    fn made_from_reads_the_log() {
        let log = [decision("AA11", Some("BB22")), decision("cc33", Some("dd44")), decision("aa11", None), "garbage".into()].join("\n");
        assert_eq!(made_from(&log, "aa11").into_iter().collect::<Vec<_>>(), vec!["bb22".to_string()]);
        assert!(made_from(&log, "").is_empty());
    }

    // No mapping without a decision recording Loupe made the build from this original, nor from a file
    // without BOLT's table; the reasons say which.
    #[test]
    fn mapping_needs_a_record_and_a_table() {
        let exe = std::env::current_exe().unwrap();
        let e = mapping(&BTreeSet::new(), &exe, &exe, "aa11", "bb22").err().unwrap();
        assert_eq!(e.to_string(), "no decision records Loupe making build bb22 from aa11");
        let made = made_from(&decision("AA11", Some("BB22")), "aa11");
        let e = mapping(&made, &exe, &exe, "aa11", "BB22").err().unwrap();
        assert!(e.to_string().contains("no .note.bolt_bat section"), "{e}");
        assert_eq!(e.kind(), ErrorKind::Format);
    }

    // Samples of the optimized build move to the original's addresses through the hand-built table (0x1004 ->
    // 0x5004; 0x1018 and 0x101a, past code that decodes alike only to 0x1018, both -> 0x5040), are filed under the
    // original build, and those outside any function the table knows (0x3000) are counted lost.
    #[test]
    fn samples_map_back_through_the_table() {
        let t = crate::bat::hand_built_translator();
        let set = SampleSet {
            build_id: "bb22".into(),
            age_secs: 5.0,
            samples: HashMap::from([(0x1004, 3), (0x1018, 2), (0x101a, 1), (0x3000, 7)]),
        };
        let got = translate_sets(&t, vec![set], "aa11");
        assert_eq!((got.mapped, got.lost), (6, 7));
        assert_eq!(got.sets.len(), 1);
        assert_eq!((got.sets[0].build_id.as_str(), got.sets[0].age_secs), ("aa11", 5.0));
        assert_eq!(got.sets[0].samples, HashMap::from([(0x5004, 3), (0x5040, 3)]));
    }
}
