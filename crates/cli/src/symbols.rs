//! The analysis crate's `SymbolSource`, backed by ELF/DWARF/kallsyms.

use loupe_analysis::{SymInfo, SymbolSource, Unnamed};
use loupe_model::{ImageId, ImageOffset};
use loupe_symbolize::{Reason, Symbolizer, SymbolizerOptions};
use std::path::{Path, PathBuf};

pub struct Symbols {
    inner: Symbolizer,
}

impl Symbols {
    /// Looks for replaced or deleted binaries in the database's image cache
    /// before the usual places.
    pub fn for_db(db: &Path) -> Symbols {
        Symbols::for_dbs(&[db])
    }

    /// The same over several databases (diff and stats read more than one).
    pub fn for_dbs(dbs: &[&Path]) -> Symbols {
        let mut opts = options();
        opts.image_cache_dirs.extend(dbs.iter().map(|db| loupe_store::layout::images_dir(db)));
        opts.jit_dirs.extend(dbs.iter().map(|db| loupe_store::layout::jit_dir(db)));
        Symbols { inner: Symbolizer::new(opts) }
    }

    /// An ELF image's procedures as (offset, size, name), for uploading (`--ship-symbols`).
    pub fn procedures(&self, image: &ImageId) -> Result<Vec<(u64, u64, String)>, String> {
        self.inner.procedures(image).map_err(|why| why.to_string())
    }
}

impl SymbolSource for Symbols {
    fn symbolize(&mut self, image: &ImageId, offsets: &[ImageOffset], lines: bool) -> Vec<Result<SymInfo, Unnamed>> {
        self.inner
            .symbolize(image, offsets, lines)
            .into_iter()
            .map(|r| r.map(|s| SymInfo { procedure: s.procedure, file: s.file, line: s.line }).map_err(|why| unnamed(&why)))
            .collect()
    }

    fn inlined(&mut self, image: &ImageId, offsets: &[ImageOffset]) -> Vec<Vec<String>> {
        self.inner.inline_frames(image, offsets)
    }

    fn function_starts(&mut self, image: &ImageId, offsets: &[ImageOffset]) -> Vec<Option<ImageOffset>> {
        self.inner.function_starts(image, offsets)
    }
}

/// `--debuginfo` directories, set once from the command line.
static DEBUG_DIRS: std::sync::OnceLock<Vec<PathBuf>> = std::sync::OnceLock::new();

/// Makes `dirs` the first places every symbolizer looks for debug files.
pub fn set_debug_dirs(dirs: Vec<PathBuf>) {
    let _ = DEBUG_DIRS.set(dirs);
}

/// The default options with the `--debuginfo` directories first.
pub fn options() -> SymbolizerOptions {
    let mut opts = SymbolizerOptions::default();
    let extra = DEBUG_DIRS.get().cloned().unwrap_or_default();
    opts.debug_dirs.splice(0..0, extra);
    opts
}

/// The symbolizer's reason, as the class a table counts.
fn unnamed(why: &Reason) -> Unnamed {
    match why {
        Reason::ImageNotFound(_) => Unnamed::ImageNotFound,
        Reason::BuildIdMismatch { .. } => Unnamed::BuildIdMismatch,
        Reason::NoSymbols => Unnamed::NoSymbols,
        Reason::NotInAnySegment => Unnamed::OutsideSegments,
        Reason::UnknownImage => Unnamed::NoImage,
        _ => Unnamed::Other,
    }
}
