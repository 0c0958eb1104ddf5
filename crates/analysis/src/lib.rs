//! Analyses over profiles. No IO and no platform code: profiles come in as
//! values and symbols through the [`SymbolSource`] trait, so every analysis
//! is testable on literal inputs.

pub mod callgraph;
pub mod compare;
pub mod diff;
pub mod export;
pub mod flame;
pub mod labels;
pub mod pprof;
pub mod pprof_import;
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

/// Why an offset has no name: the few causes a table reports, each with
/// what the user can do about it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Unnamed {
    /// The sample hit memory that no file backs (anonymous memory, JIT code).
    NoImage,
    /// The image's file is neither where it was mapped nor in the database's image cache.
    ImageNotFound,
    /// The file at the image's path is another build than the one sampled.
    BuildIdMismatch,
    /// The file has no symbol or DWARF function covering the address (stripped, no debug info).
    NoSymbols,
    /// The offset lies in no loadable segment of the file.
    OutsideSegments,
    /// Anything else (an unreadable file, no kernel symbols).
    Other,
}

impl Unnamed {
    /// A few words for a table's header.
    pub fn describe(self) -> &'static str {
        match self {
            Unnamed::NoImage => "no file (anonymous or JIT code)",
            Unnamed::ImageNotFound => "file not found",
            Unnamed::BuildIdMismatch => "file is another build",
            Unnamed::NoSymbols => "stripped, no debug info",
            Unnamed::OutsideSegments => "outside the file's segments",
            Unnamed::Other => "other",
        }
    }
}

/// Names offsets. Implemented over ELF/DWARF/kallsyms by the CLI, and by
/// tables in tests.
pub trait SymbolSource {
    /// One entry per offset, in order; the reason where the offset has no name.
    fn symbolize(&mut self, image: &ImageId, offsets: &[ImageOffset], lines: bool) -> Vec<Result<SymInfo, Unnamed>>;

    /// Per offset, the functions inlined there, innermost first (not
    /// including the procedure `symbolize` names). None by default.
    fn inlined(&mut self, _image: &ImageId, offsets: &[ImageOffset]) -> Vec<Vec<String>> {
        vec![Vec::new(); offsets.len()]
    }

    /// Per offset, where its function starts, asked only for offsets
    /// `symbolize` could not name: unnamed samples of one function then
    /// share one row, `image+0xSTART`. `None` (the default): each offset
    /// is its own row.
    fn function_starts(&mut self, _image: &ImageId, offsets: &[ImageOffset]) -> Vec<Option<ImageOffset>> {
        vec![None; offsets.len()]
    }
}

/// The `image+0xSTART` names of the offsets `names` left unnamed, grouped
/// by function where `syms` knows its start, else by offset; `None` for
/// the named ones.
pub fn unnamed_labels<T, E>(
    image: &ImageId,
    offsets: &[ImageOffset],
    names: &[Result<T, E>],
    syms: &mut dyn SymbolSource,
) -> Vec<Option<String>> {
    let unnamed: Vec<ImageOffset> = offsets.iter().zip(names).filter(|(_, n)| n.is_err()).map(|(o, _)| *o).collect();
    let mut starts = if unnamed.is_empty() { Vec::new() } else { syms.function_starts(image, &unnamed) }.into_iter();
    offsets.iter().zip(names).map(|(o, n)| n.is_err().then(|| unsymbolized(image, starts.next().flatten().unwrap_or(*o)))).collect()
}

/// How an image is shown in tables: its path, or its bracketed name.
pub fn image_display(image: &ImageId) -> String {
    image.path.clone()
}

/// Whether an event's samples measure time: its sampling period is then in
/// nanoseconds, so samples times period is time (`cpu-clock`, `task-clock`,
/// with or without a `:u`/`:k` modifier).
pub fn is_time_event(event: &loupe_model::EventName) -> bool {
    matches!(event.as_str().split(':').next(), Some("cpu-clock" | "task-clock"))
}

/// `name+0xoff` for offsets without a symbol (what `perf report` does for
/// stripped code), using the image's file name.
pub fn unsymbolized(image: &ImageId, off: ImageOffset) -> String {
    let base = image.path.rsplit('/').next().unwrap_or(&image.path);
    format!("{base}+0x{:x}", off.0)
}
