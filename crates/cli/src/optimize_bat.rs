//! Samples of Loupe's BOLT outputs of an image, mapped back to the image
//! through BOLT's address translation table (`loupe_optimize::bat`), so an
//! optimized binary's runs keep feeding the original's profile. Only
//! outputs the decision log says Loupe made from this very build are used
//! (build-id of the original -> candidate's build-id), found beside the
//! image (IMAGE.loupe-bolt) or, for an installed candidate whose original
//! is IMAGE.loupe-orig, at the image's own path.

use crate::optimize::{build_id_of, sample_sets};
use anyhow::Result;
use loupe_optimize::bat::Translator;
use loupe_optimize::combine::SampleSet;
use loupe_store::{Database, EpochId};
use loupe_symbolize::Symbolizer;
use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

/// Candidate build-ids the decision log records as made from `orig_bid`.
fn made_from(db_dir: &Path, orig_bid: &str) -> BTreeSet<String> {
    let text = std::fs::read_to_string(db_dir.join("optimize/decisions.jsonl")).unwrap_or_default();
    text.lines()
        .filter_map(|l| serde_json::from_str::<loupe_optimize::manage::Decision>(l).ok())
        .filter(|d| !orig_bid.is_empty() && d.build_id.eq_ignore_ascii_case(orig_bid))
        .filter_map(|d| d.candidate_build_id.map(|c| c.to_ascii_lowercase()))
        .collect()
}

/// Where Loupe leaves or installs a candidate of `image`.
fn candidate_files(image: &Path) -> Vec<PathBuf> {
    let s = image.display().to_string();
    let mut v = vec![PathBuf::from(format!("{s}.loupe-bolt"))];
    if let Some(installed) = s.strip_suffix(".loupe-orig") {
        v.push(PathBuf::from(installed));
    }
    v
}

/// Sample sets of the optimized builds of `image` (build `orig_bid`),
/// translated to `image`'s addresses and filed under `orig_bid`.
pub(crate) fn optimized_sets(
    db_dir: &Path,
    db: &Database,
    epochs: &[EpochId],
    image: &Path,
    orig_bid: &str,
    syms: &mut Symbolizer,
) -> Result<Vec<SampleSet>> {
    let made = made_from(db_dir, orig_bid);
    let mut out = Vec::new();
    for file in candidate_files(image) {
        let Ok(bid) = build_id_of(&file) else { continue };
        if !made.contains(&bid.to_ascii_lowercase()) {
            continue;
        }
        let t = match Translator::open(&file, image) {
            Ok(t) => t,
            Err(e) => {
                eprintln!("loupe: cannot map samples of {} back: {e}", file.display());
                continue;
            }
        };
        let sets = sample_sets(db, epochs, &file.display().to_string(), &|b| b.eq_ignore_ascii_case(&bid), syms)?;
        let (mut mapped, mut lost) = (0u64, 0u64);
        for mut s in sets.into_iter().filter(|s| s.build_id.eq_ignore_ascii_case(&bid)) {
            let mut samples: HashMap<u64, u64> = HashMap::new();
            for (va, n) in s.samples {
                match t.to_original(va) {
                    Some(o) => *samples.entry(o).or_insert(0) += n,
                    None => lost += n,
                }
            }
            mapped += samples.values().sum::<u64>();
            s.samples = samples;
            s.build_id = orig_bid.to_string();
            out.push(s);
        }
        if mapped + lost > 0 {
            eprintln!("loupe: {mapped} sample(s) of optimized build {} ({}) mapped back through BOLT's address table, {lost} in code it has no original for", bid, file.display());
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
}
