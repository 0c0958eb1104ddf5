//! Analyses over profiles. No IO and no platform code: profiles come in as
//! values and symbols through the [`SymbolSource`] trait, so every analysis
//! is testable on literal inputs.

pub mod callgraph;
pub mod compare;
pub mod diff;
pub mod export;
pub mod flame;
pub mod pprof;
pub mod significance;
pub mod stats;
pub mod top;

use loupe_model::{ImageId, ImageOffset};

/// What the analyses need to know about one offset in an image.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SymInfo {
    pub procedure: String,
    pub file: Option<String>,
    pub line: Option<u32>,
}

/// Names offsets. Implemented over ELF/DWARF/kallsyms by the CLI, and by
/// tables in tests.
pub trait SymbolSource {
    /// One entry per offset, in order; `None` where the offset has no symbol.
    fn symbolize(&mut self, image: &ImageId, offsets: &[ImageOffset], lines: bool) -> Vec<Option<SymInfo>>;

    /// Per offset, the functions inlined there, innermost first (not
    /// including the procedure `symbolize` names). None by default.
    fn inlined(&mut self, _image: &ImageId, offsets: &[ImageOffset]) -> Vec<Vec<String>> {
        vec![Vec::new(); offsets.len()]
    }
}

/// How an image is shown in tables: its path, or its bracketed name.
pub fn image_display(image: &ImageId) -> String {
    image.path.clone()
}

/// `name+0xoff` for offsets without a symbol (what `perf report` does for
/// stripped code), using the image's file name.
pub fn unsymbolized(image: &ImageId, off: ImageOffset) -> String {
    let base = image.path.rsplit('/').next().unwrap_or(&image.path);
    format!("{base}+0x{:x}", off.0)
}
