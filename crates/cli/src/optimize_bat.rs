//! Samples of Loupe's BOLT outputs of an image, read from the database and
//! mapped back to the image through BOLT's address translation table
//! (`loupe_optimize::lineage` decides which builds and how), so an
//! optimized binary's runs keep feeding the original's profile. A version
//! the manager has since replaced is read from the database's image cache.

use crate::optimize::{build_id_of, sample_sets};
use anyhow::Result;
use loupe_optimize::bat::Translator;
use loupe_optimize::combine::SampleSet;
use loupe_optimize::lineage::{self, candidate_files};
use loupe_store::{Database, EpochId};
use loupe_symbolize::Symbolizer;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Candidate build-ids the database's decision log records as made from `orig_bid`.
pub(crate) fn made_from(db_dir: &Path, orig_bid: &str) -> BTreeSet<String> {
    let text = std::fs::read_to_string(loupe_store::layout::decisions_log(db_dir)).unwrap_or_default();
    lineage::made_from(&text, orig_bid)
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
            let got = lineage::translate_sets(&t, sets, orig_bid);
            (mapped, lost) = (mapped + got.mapped, lost + got.lost);
            out.extend(got.sets);
        }
        if mapped + lost > 0 {
            eprintln!("loupe: {mapped} sample(s) of optimized build {bid} mapped back through BOLT's address table, {lost} in code it has no original for");
        }
    }
    Ok(out)
}
