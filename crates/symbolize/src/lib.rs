//! Analysis-time symbolization of (image, offset) pairs from the profile
//! database: ELF symbol tables, DWARF line tables (via `addr2line`),
//! separate debug files found by build-id or `.gnu_debuglink`, and
//! `/proc/kallsyms` for the kernel.
//!
//! Design constraint: never symbolize against the wrong bytes. An image is
//! identified by build-id; a file at the recorded path with another
//! build-id is refused (the database's `images/` cache is tried first).
//! Batch API: one result per offset, a bad offset never fails the batch.
//!
//! ```no_run
//! use loupe_model::{ImageId, ImageOffset};
//! use loupe_symbolize::{Symbolizer, SymbolizerOptions};
//! let mut s = Symbolizer::new(SymbolizerOptions::default());
//! let r = s.symbolize(&ImageId::elf("/usr/bin/ls", None), &[ImageOffset(0x4000)], true);
//! println!("{:?}", r[0]);
//! ```

pub mod build_id;
mod code;
mod elf;
mod fde;
pub mod jit;
mod kernel;
mod plt;

pub use code::{Code, ProcedureRange};
pub use kernel::{kernel_text_base, parse_kallsyms, KernelSymbols};

use loupe_model::{BuildId, ImageId, ImageKind, ImageOffset};
use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};

#[derive(Clone, Debug)]
pub struct SymbolizerOptions {
    pub debug_dirs: Vec<PathBuf>,
    pub image_cache_dirs: Vec<PathBuf>,
    /// Where databases keep the perf maps and jitdumps of JIT images
    /// (`<file key>.map`, `<file key>.dump`), looked at before `/tmp`.
    pub jit_dirs: Vec<PathBuf>,
    pub kallsyms: PathBuf,
}

impl Default for SymbolizerOptions {
    fn default() -> Self {
        SymbolizerOptions {
            debug_dirs: vec!["/usr/lib/debug".into()],
            image_cache_dirs: Vec::new(),
            jit_dirs: Vec::new(),
            kallsyms: "/proc/kallsyms".into(),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Symbol {
    pub procedure: String,
    /// Where the procedure starts, in the same offset space as the input.
    pub procedure_start: ImageOffset,
    pub file: Option<String>,
    pub line: Option<u32>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Reason {
    ImageNotFound(String),
    BuildIdMismatch { path: String, expected: String, found: String },
    NoSymbols,
    NotInAnySegment,
    UnknownImage,
    Other(String),
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::ImageNotFound(p) => write!(f, "image not found: {p}"),
            Reason::BuildIdMismatch { path, expected, found } => write!(f, "{path} has build-id {found}, profile needs {expected}"),
            Reason::NoSymbols => write!(f, "no symbol covers this address"),
            Reason::NotInAnySegment => write!(f, "offset is in no loadable segment"),
            Reason::UnknownImage => write!(f, "image has no file to symbolize"),
            Reason::Other(s) => f.write_str(s),
        }
    }
}

pub struct Symbolizer {
    opts: SymbolizerOptions,
    images: HashMap<ImageId, Result<elf::Image, Reason>>,
    jits: HashMap<ImageId, Result<jit::JitSymbols, Reason>>,
    kernel: Option<KernelSymbols>,
}

impl Symbolizer {
    pub fn new(opts: SymbolizerOptions) -> Symbolizer {
        Symbolizer { opts, images: HashMap::new(), jits: HashMap::new(), kernel: None }
    }

    /// About how much memory the loaded images hold (their files, debug
    /// files and symbol names), for callers that keep a symbolizer across
    /// requests and bound what it holds.
    pub fn loaded_bytes(&self) -> usize {
        self.images.values().filter_map(|i| i.as_ref().ok()).map(elf::Image::bytes).sum()
    }

    pub fn symbolize(&mut self, image: &ImageId, offsets: &[ImageOffset], lines: bool) -> Vec<Result<Symbol, Reason>> {
        match image.kind {
            ImageKind::Kernel => {
                let k = self.kernel.get_or_insert_with(|| {
                    let text = std::fs::read_to_string(&self.opts.kallsyms).unwrap_or_default();
                    parse_kallsyms(&text)
                });
                offsets.iter().map(|o| k.symbolize(*o)).collect()
            }
            // `[jit] PID`, or Python code (a `.py` path: crates/collector/src/pyframes.rs).
            ImageKind::Anonymous if jit_pid(image).is_some() || !image.path.starts_with('[') => {
                if !self.jits.contains_key(image) {
                    let loaded = self.load_jit(image);
                    self.jits.insert(image.clone(), loaded);
                }
                match &self.jits[image] {
                    Ok(j) => offsets.iter().map(|o| j.symbolize(*o)).collect(),
                    Err(r) => offsets.iter().map(|_| Err(r.clone())).collect(),
                }
            }
            ImageKind::KernelModule | ImageKind::Unknown | ImageKind::Anonymous => {
                offsets.iter().map(|_| Err(Reason::UnknownImage)).collect()
            }
            ImageKind::Elf | ImageKind::Vdso => {
                if !self.images.contains_key(image) {
                    let loaded = self.load(image);
                    self.images.insert(image.clone(), loaded);
                }
                match &self.images[image] {
                    Ok(img) => offsets.iter().map(|o| img.symbolize(*o, lines)).collect(),
                    Err(r) => offsets.iter().map(|_| Err(r.clone())).collect(),
                }
            }
        }
    }

    /// Per offset, the functions inlined there, innermost first (empty
    /// without DWARF or outside inlined code). The outer function is what
    /// [`Symbolizer::symbolize`] names.
    pub fn inline_frames(&mut self, image: &ImageId, offsets: &[ImageOffset]) -> Vec<Vec<String>> {
        if !matches!(image.kind, ImageKind::Elf | ImageKind::Vdso) {
            return vec![Vec::new(); offsets.len()];
        }
        if !self.images.contains_key(image) {
            let loaded = self.load(image);
            self.images.insert(image.clone(), loaded);
        }
        match &self.images[image] {
            Ok(img) => offsets.iter().map(|o| img.inlined(*o)).collect(),
            Err(_) => vec![Vec::new(); offsets.len()],
        }
    }

    /// A JIT image's map and jitdump: the copies the collector kept in a
    /// database, else perf's `/tmp/perf-PID.map` (which names whatever
    /// process has that pid now, as perf would).
    fn load_jit(&self, image: &ImageId) -> Result<jit::JitSymbols, Reason> {
        let key = image.file_key();
        for dir in &self.opts.jit_dirs {
            let (map, dump) = (dir.join(format!("{key}.map")), dir.join(format!("{key}.dump")));
            if let Some(j) = jit::JitSymbols::load(Some(&map), Some(&dump))? {
                return Ok(j);
            }
        }
        let Some(pid) = jit_pid(image) else {
            return Err(Reason::ImageNotFound(format!("{} (no table of its Python frames kept in the database)", image.path)));
        };
        let tmp = PathBuf::from(format!("/tmp/perf-{pid}.map"));
        jit::JitSymbols::load(Some(&tmp), None)?.ok_or_else(|| {
            Reason::ImageNotFound(format!("{} (no perf map or jitdump kept in the database, no {})", image.path, tmp.display()))
        })
    }

    /// Per offset, where its function starts when no symbol names it (from
    /// the unwind tables' FDEs, else the gap between named functions), so
    /// stripped code is grouped by function; `None` where that is unknown
    /// or the image is not an ELF file. Offsets with a name get their
    /// function's start too, but [`Symbol::procedure_start`] already says it.
    pub fn function_starts(&mut self, image: &ImageId, offsets: &[ImageOffset]) -> Vec<Option<ImageOffset>> {
        if !matches!(image.kind, ImageKind::Elf | ImageKind::Vdso) {
            return vec![None; offsets.len()];
        }
        if !self.images.contains_key(image) {
            let loaded = self.load(image);
            self.images.insert(image.clone(), loaded);
        }
        match &self.images[image] {
            Ok(img) => offsets.iter().map(|o| img.function_start(*o)).collect(),
            Err(_) => vec![None; offsets.len()],
        }
    }

    /// The procedures of an ELF image or vDSO as (offset, size, name),
    /// sorted, for uploading a build's symbols: read from the file (or the
    /// image cache) each time and not kept. Kernel and JIT images are not
    /// files of a build: [`Reason::UnknownImage`].
    pub fn procedures(&self, image: &ImageId) -> Result<Vec<(u64, u64, String)>, Reason> {
        if !matches!(image.kind, ImageKind::Elf | ImageKind::Vdso) {
            return Err(Reason::UnknownImage);
        }
        let path = self.find_file(image)?;
        elf::procedure_ranges(&path, image.build_id.as_ref(), &self.opts.debug_dirs)
    }

    fn load(&self, image: &ImageId) -> Result<elf::Image, Reason> {
        let path = self.find_file(image)?;
        elf::Image::load(&path, image.build_id.as_ref(), &self.opts.debug_dirs)
    }

    /// The file holding the image's bytes: its path when the build-id
    /// matches, else a copy in the image cache.
    fn find_file(&self, image: &ImageId) -> Result<PathBuf, Reason> {
        let cached = || {
            let bid = image.build_id.as_ref()?;
            self.opts.image_cache_dirs.iter().map(|d| d.join(bid.to_hex())).find(|p| p.is_file())
        };
        if image.kind == ImageKind::Vdso {
            return cached()
                .ok_or_else(|| Reason::ImageNotFound(format!("[vdso] (no copy in the image cache {:?})", self.opts.image_cache_dirs)));
        }
        let path = Path::new(&image.path);
        let on_disk = Symbolizer::read_build_id(path);
        match (&image.build_id, &on_disk) {
            (None, _) if path.is_file() => return Ok(path.to_path_buf()),
            (Some(want), Some(got)) if want == got => return Ok(path.to_path_buf()),
            _ => {}
        }
        if let Some(c) = cached() {
            return Ok(c);
        }
        match (&image.build_id, on_disk) {
            (Some(want), Some(got)) => {
                Err(Reason::BuildIdMismatch { path: image.path.clone(), expected: want.to_hex(), found: got.to_hex() })
            }
            _ if path.is_file() => Err(Reason::BuildIdMismatch {
                path: image.path.clone(),
                expected: image.build_id.as_ref().map_or("none".into(), |b| b.to_hex()),
                found: "none".into(),
            }),
            _ => Err(Reason::ImageNotFound(image.path.clone())),
        }
    }

    /// The GNU build-id note of an ELF file.
    pub fn read_build_id(path: &Path) -> Option<BuildId> {
        build_id::read(path)
    }
}

/// The pid of a JIT image (`[jit] PID`, the collector's name for the
/// anonymous code of a process that wrote a perf map or jitdump).
pub fn jit_pid(image: &ImageId) -> Option<u32> {
    image.path.strip_prefix(loupe_model::JIT_IMAGE_PREFIX)?.parse().ok()
}

/// Demangles Rust (without the hash) and C++ names; others pass through.
pub fn demangle(name: &str) -> String {
    if let Ok(d) = rustc_demangle::try_demangle(name) {
        return format!("{d:#}");
    }
    if name.starts_with("_Z") {
        if let Ok(s) = cpp_demangle::Symbol::new(name) {
            if let Ok(d) = s.demangle(&cpp_demangle::DemangleOptions::default()) {
                return d;
            }
        }
    }
    name.to_string()
}
