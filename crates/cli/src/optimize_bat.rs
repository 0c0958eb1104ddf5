//! Samples of Loupe's BOLT outputs of an image, mapped back to the image
//! through BOLT's address translation table (`loupe_optimize::bat`), so an
//! optimized binary's runs keep feeding the original's profile. Only
//! outputs the decision log says Loupe made from this very build are used
//! (build-id of the original -> candidate's build-id), found beside the
//! image (IMAGE.loupe-bolt) or, for an installed candidate whose original
//! is IMAGE.loupe-orig, at the image's own path; a version the manager has
//! since replaced is read from the database's image cache.

use crate::optimize::{build_id_of, sample_sets};
use anyhow::Result;
use loupe_optimize::bat::Translator;
use loupe_optimize::combine::SampleSet;
use loupe_store::{Database, EpochId};
use loupe_symbolize::Symbolizer;
use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Candidate build-ids the decision log records as made from `orig_bid`.
pub(crate) fn made_from(db_dir: &Path, orig_bid: &str) -> BTreeSet<String> {
    let text = std::fs::read_to_string(loupe_store::layout::decisions_log(db_dir)).unwrap_or_default();
    text.lines()
        .filter_map(|l| serde_json::from_str::<loupe_optimize::manage::Decision>(l).ok())
        .filter(|d| !orig_bid.is_empty() && d.build_id.eq_ignore_ascii_case(orig_bid))
        .filter_map(|d| d.candidate_build_id.map(|c| c.to_ascii_lowercase()))
        .collect()
}

/// Where Loupe leaves or installs a candidate of `image`: the paths its
/// samples are filed under.
pub(crate) fn candidate_files(image: &Path) -> Vec<PathBuf> {
    let s = image.display().to_string();
    let mut v = vec![PathBuf::from(format!("{s}.loupe-bolt"))];
    v.extend(installed_path(image));
    v
}

/// The path an installed optimized version of `image` runs at, when
/// `image` is the saved original (PATH.loupe-orig).
pub(crate) fn installed_path(image: &Path) -> Option<PathBuf> {
    image.display().to_string().strip_suffix(".loupe-orig").map(PathBuf::from)
}

/// The translator from build `bid` (the file `file`) to the original
/// `original` (build `orig_bid`), or why there is none: only builds the
/// decision log says Loupe made from this very original are mapped.
pub(crate) fn mapping(db_dir: &Path, file: &Path, original: &Path, orig_bid: &str, bid: &str) -> Result<Arc<Translator>, String> {
    if !made_from(db_dir, orig_bid).contains(&bid.to_ascii_lowercase()) {
        return Err(format!("no decision records Loupe making build {bid} from {orig_bid}"));
    }
    Translator::open_cached(file, original)
}

/// Sets of an optimized build translated to the original's addresses and
/// filed under `orig_bid`; also the samples mapped and those in code the
/// table has no original for.
pub(crate) fn translate_sets(t: &Translator, sets: Vec<SampleSet>, orig_bid: &str) -> (Vec<SampleSet>, u64, u64) {
    let (mut mapped, mut lost) = (0u64, 0u64);
    let mut out = Vec::new();
    for mut s in sets {
        let mut samples: HashMap<u64, u64> = HashMap::new();
        for (va, n) in s.samples {
            match t.sample_to_original(va) {
                Some(o) => *samples.entry(o).or_insert(0) += n,
                None => lost += n,
            }
        }
        mapped += samples.values().sum::<u64>();
        s.samples = samples;
        s.build_id = orig_bid.to_string();
        out.push(s);
    }
    (out, mapped, lost)
}

/// The file of Loupe-made build `bid`: a candidate beside the image or
/// installed over it, else its copy in the database's image cache (a
/// replaced version, whose samples stay in the database).
pub(crate) fn build_file(db_dir: &Path, image: &Path, bid: &str) -> Option<PathBuf> {
    let on_disk = candidate_files(image).into_iter().find(|f| build_id_of(f).is_ok_and(|b| b.eq_ignore_ascii_case(bid)));
    on_disk.or_else(|| Some(loupe_store::layout::cached_image(db_dir, bid)).filter(|p| p.is_file()))
}

/// Every optimized build Loupe made from build `orig_bid` of `image` whose
/// file can be found, with its translator to the original's ELF file
/// `original`; a build whose file has no usable table is named and left out.
pub(crate) fn translators(db_dir: &Path, image: &Path, original: &Path, orig_bid: &str) -> Vec<(String, Arc<Translator>)> {
    let mut out = Vec::new();
    for bid in made_from(db_dir, orig_bid) {
        let Some(file) = build_file(db_dir, image, &bid) else { continue };
        match Translator::open_cached(&file, original) {
            Ok(t) => out.push((bid, t)),
            Err(e) => eprintln!("loupe: cannot map what {} recorded back: {e}", file.display()),
        }
    }
    out
}

/// Sample sets of the optimized builds of `image` (build `orig_bid`, whose
/// ELF file is `original`), translated to `image`'s addresses and filed
/// under `orig_bid`.
pub(crate) fn optimized_sets(
    db_dir: &Path,
    db: &Database,
    epochs: &[EpochId],
    image: &Path,
    original: &Path,
    orig_bid: &str,
    syms: &mut Symbolizer,
) -> Result<Vec<SampleSet>> {
    let mut out = Vec::new();
    for (bid, t) in translators(db_dir, image, original, orig_bid) {
        let (mut mapped, mut lost) = (0u64, 0u64);
        for at in candidate_files(image) {
            let sets = sample_sets(db, epochs, &at.display().to_string(), &|b| b.eq_ignore_ascii_case(&bid), syms)?;
            let sets = sets.into_iter().filter(|s| s.build_id.eq_ignore_ascii_case(&bid)).collect();
            let (sets, m, l) = translate_sets(&t, sets, orig_bid);
            (mapped, lost) = (mapped + m, lost + l);
            out.extend(sets);
        }
        if mapped + lost > 0 {
            eprintln!("loupe: {mapped} sample(s) of optimized build {bid} mapped back through BOLT's address table, {lost} in code it has no original for");
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    // A candidate is looked for beside the image, and at the installed path when the image is the saved original.
    #[test]
    fn where_candidates_are() {
        assert_eq!(candidate_files(Path::new("/x/lua")), vec![PathBuf::from("/x/lua.loupe-bolt")]);
        assert_eq!(
            candidate_files(Path::new("/x/lua.loupe-orig")),
            vec![PathBuf::from("/x/lua.loupe-orig.loupe-bolt"), PathBuf::from("/x/lua")]
        );
    }

    // No mapping without a decision recording Loupe made the build from this original, nor from a file
    // without BOLT's table; the reasons say which.
    #[test]
    fn mapping_needs_a_record_and_a_table() {
        let d = tempfile::tempdir().unwrap();
        let exe = std::env::current_exe().unwrap();
        let e = mapping(d.path(), &exe, &exe, "aa11", "bb22").err().unwrap();
        assert!(e.contains("no decision records Loupe making build bb22 from aa11"), "{e}");
        let rec = loupe_optimize::manage::Decision {
            unix_time: 0,
            image: "/x".into(),
            build_id: "AA11".into(),
            candidate_build_id: Some("BB22".into()),
            replaces: None,
            action: "installed".into(),
            reason: String::new(),
            measurement: None,
        };
        std::fs::create_dir_all(d.path().join("optimize")).unwrap();
        std::fs::write(d.path().join("optimize/decisions.jsonl"), serde_json::to_string(&rec).unwrap() + "\n").unwrap();
        assert_eq!(made_from(d.path(), "aa11").into_iter().collect::<Vec<_>>(), vec!["bb22".to_string()]);
        let e = mapping(d.path(), &exe, &exe, "aa11", "bb22").err().unwrap();
        assert!(e.contains("no .note.bolt_bat section"), "{e}");
    }
}
