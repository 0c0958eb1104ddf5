//! The analysis crate's `SymbolSource`, backed by ELF/DWARF/kallsyms.
//! Each command builds its own symbolizer, except under `loupe serve`,
//! where [`crate::symbol_cache`] keeps one per set of databases across
//! requests.

use loupe_analysis::{SymInfo, SymbolSource, Unnamed};
use loupe_model::{ImageId, ImageOffset};
use loupe_symbolize::{Reason, Symbolizer, SymbolizerOptions};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

pub struct Symbols {
    inner: Held,
}

enum Held {
    Own(Box<Symbolizer>),
    /// The server's, locked for each call so that requests share it.
    Shared(Arc<Mutex<Symbolizer>>),
}

impl Symbols {
    /// Looks for replaced or deleted binaries in the database's image cache
    /// before the usual places.
    pub fn for_db(db: &Path) -> Symbols {
        Symbols::for_dbs(&[db])
    }

    /// The same over several databases (diff and stats read more than one).
    pub fn for_dbs(dbs: &[&Path]) -> Symbols {
        let make = || {
            let mut opts = options();
            opts.image_cache_dirs.extend(dbs.iter().map(|db| loupe_store::layout::images_dir(db)));
            opts.jit_dirs.extend(dbs.iter().map(|db| loupe_store::layout::jit_dir(db)));
            Symbolizer::new(opts)
        };
        match crate::symbol_cache::shared(dbs, make) {
            Some(s) => Symbols { inner: Held::Shared(s) },
            None => Symbols { inner: Held::Own(Box::new(make())) },
        }
    }

    fn with<R>(&mut self, f: impl FnOnce(&mut Symbolizer) -> R) -> R {
        match &mut self.inner {
            Held::Own(s) => f(s),
            // A request that panicked mid-call left at worst a half-filled cache entry: still usable.
            Held::Shared(s) => f(&mut s.lock().unwrap_or_else(|p| p.into_inner())),
        }
    }

    /// An ELF image's procedures as (offset, size, name), for uploading (`--ship-symbols`).
    pub fn procedures(&mut self, image: &ImageId) -> Result<Vec<(u64, u64, String)>, String> {
        self.with(|s| s.procedures(image)).map_err(|why| why.to_string())
    }
}

impl SymbolSource for Symbols {
    fn symbolize(&mut self, image: &ImageId, offsets: &[ImageOffset], lines: bool) -> Vec<Result<SymInfo, Unnamed>> {
        self.with(|s| s.symbolize(image, offsets, lines))
            .into_iter()
            .map(|r| r.map(|s| SymInfo { procedure: s.procedure, file: s.file, line: s.line }).map_err(|why| unnamed(&why)))
            .collect()
    }

    fn inlined(&mut self, image: &ImageId, offsets: &[ImageOffset]) -> Vec<Vec<String>> {
        self.with(|s| s.inline_frames(image, offsets))
    }

    fn function_starts(&mut self, image: &ImageId, offsets: &[ImageOffset]) -> Vec<Option<ImageOffset>> {
        self.with(|s| s.function_starts(image, offsets))
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
