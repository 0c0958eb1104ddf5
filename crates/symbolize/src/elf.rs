//! One ELF image: its loadable segments (file offset -> virtual address),
//! its function symbols, and its DWARF, possibly from a separate debug file.

use crate::{demangle, Reason, Symbol};

use loupe_model::{BuildId, ImageOffset};
use object::{Object, ObjectSection, ObjectSegment, ObjectSymbol, SymbolKind};
use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

/// DWARF sections as ranges of the shared file bytes, so that an image
/// owns what it reads and frees it when dropped (a server keeps symbolizers
/// across requests, and evicts them to bound its memory).
type Slice = gimli::EndianArcSlice<gimli::RunTimeEndian>;

pub struct Image {
    /// (file offset, file size, virtual address) of each loadable segment.
    segments: Vec<(u64, u64, u64)>,
    /// (address, size, demangled name), sorted by address.
    symbols: Vec<(u64, u64, String)>,
    dwarf: Option<addr2line::Context<Slice>>,
    /// The whole file, for reading code and jump tables (see `code.rs`).
    pub(crate) data: Arc<[u8]>,
    /// Bytes held: the file, a debug file and decompressed sections.
    bytes: usize,
    /// FDE ranges from `.eh_frame`, read when an address has no symbol.
    fdes: OnceLock<Vec<(u64, u64)>>,
}

fn read_shared(path: &Path) -> Option<Arc<[u8]>> {
    std::fs::read(path).ok().map(Arc::from)
}

impl Image {
    pub fn load(path: &Path, build_id: Option<&BuildId>, debug_dirs: &[PathBuf]) -> Result<Image, Reason> {
        let data = read_shared(path).ok_or_else(|| Reason::ImageNotFound(path.display().to_string()))?;
        let file = object::File::parse(&*data).map_err(|e| Reason::Other(format!("{}: not an ELF file: {e}", path.display())))?;
        let segments = file.segments().map(|s| (s.file_range().0, s.file_range().1, s.address())).collect();
        let mut bytes = data.len();
        let mut symbols = symbols_of(&file);
        let mut dwarf = dwarf_of(&file, &data, &mut bytes);
        let needs_debug = symbols.is_empty() || file.section_by_name(".debug_info").is_none();
        if needs_debug {
            let bid = build_id.cloned().or_else(|| file.build_id().ok().flatten().map(|b| BuildId(b.to_vec())));
            if let Some(debug) = find_debug_file(path, &file, bid.as_ref(), debug_dirs).and_then(|p| read_shared(&p)) {
                if let Ok(dfile) = object::File::parse(&*debug) {
                    let dsyms = symbols_of(&dfile);
                    if dsyms.len() > symbols.len() {
                        symbols = dsyms;
                    }
                    if dfile.section_by_name(".debug_info").is_some() {
                        bytes += debug.len();
                        dwarf = dwarf_of(&dfile, &debug, &mut bytes);
                    }
                }
            }
        }
        add_plt(&mut symbols, crate::plt::symbols(&file));
        bytes += symbols.iter().map(|s| s.2.len() + 40).sum::<usize>();
        Ok(Image { segments, symbols, dwarf, data, bytes, fdes: OnceLock::new() })
    }

    /// About how much memory the image holds (file bytes, symbol names),
    /// not counting DWARF's lazily parsed units.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    pub(crate) fn vaddr(&self, off: u64) -> Option<u64> {
        self.segments.iter().find(|(o, sz, _)| off >= *o && off < o + sz).map(|(o, _, va)| off - o + va)
    }

    fn file_offset(&self, vaddr: u64, near: u64) -> u64 {
        let seg = self.segments.iter().find(|(o, sz, _)| near >= *o && near < o + sz);
        seg.map_or(vaddr, |(o, _, va)| vaddr.wrapping_sub(*va).wrapping_add(*o))
    }

    pub(crate) fn segments(&self) -> &[(u64, u64, u64)] {
        &self.segments
    }

    pub(crate) fn symbols(&self) -> &[(u64, u64, String)] {
        &self.symbols
    }

    pub fn symbolize(&self, off: ImageOffset, lines: bool) -> Result<Symbol, Reason> {
        let addr = self.vaddr(off.0).ok_or(Reason::NotInAnySegment)?;
        let (procedure, start) = match self.symbol_at(addr) {
            Some((start, name)) => (name.to_string(), start),
            None => self.dwarf_function(addr).ok_or(Reason::NoSymbols)?,
        };
        let (file, line) = if lines { self.location(addr) } else { (None, None) };
        Ok(Symbol { procedure, procedure_start: ImageOffset(self.file_offset(start, off.0)), file, line })
    }

    /// Where the function holding `off` starts when no symbol names it: its
    /// FDE's start, else the end of the nearest preceding symbol (the
    /// unnamed code between two named functions).
    pub fn function_start(&self, off: ImageOffset) -> Option<ImageOffset> {
        let addr = self.vaddr(off.0)?;
        let fdes = self.fdes.get_or_init(|| object::File::parse(&*self.data).map(|f| crate::fde::ranges(&f)).unwrap_or_default());
        let start = crate::fde::containing(fdes, addr).or_else(|| self.gap_start(addr))?;
        Some(ImageOffset(self.file_offset(start, off.0)))
    }

    fn gap_start(&self, addr: u64) -> Option<u64> {
        let i = self.symbols.partition_point(|(a, _, _)| *a <= addr);
        self.symbols[..i].iter().rev().find(|(_, sz, _)| *sz > 0).map(|(a, sz, _)| a + sz).filter(|&end| end <= addr)
    }

    /// The sized symbol covering `addr`, else the nearest preceding unsized one.
    fn symbol_at(&self, addr: u64) -> Option<(u64, &str)> {
        let i = self.symbols.partition_point(|(a, _, _)| *a <= addr);
        self.symbols[..i]
            .iter()
            .rev()
            .take(8)
            .find(|(a, sz, _)| addr < a + sz)
            .or_else(|| self.symbols[..i].last().filter(|(_, sz, _)| *sz == 0))
            .map(|(a, _, n)| (*a, n.as_str()))
    }

    fn dwarf_function(&self, addr: u64) -> Option<(String, u64)> {
        let ctx = self.dwarf.as_ref()?;
        let mut frames = ctx.find_frames(addr).skip_all_loads().ok()?;
        let mut outer = None;
        while let Ok(Some(f)) = frames.next() {
            if let Some(func) = f.function {
                outer = func.raw_name().ok().map(|n| demangle(&n));
            }
        }
        Some((outer?, addr))
    }

    /// Functions inlined at `off`, innermost first, without the outer
    /// function the symbol table names.
    pub fn inlined(&self, off: ImageOffset) -> Vec<String> {
        let (Some(addr), Some(ctx)) = (self.vaddr(off.0), self.dwarf.as_ref()) else { return Vec::new() };
        let Ok(mut frames) = ctx.find_frames(addr).skip_all_loads() else { return Vec::new() };
        let mut names = Vec::new();
        while let Ok(Some(f)) = frames.next() {
            names.push(f.function.and_then(|func| func.raw_name().ok().map(|n| demangle(&n))).unwrap_or_else(|| "??".into()));
        }
        names.pop();
        names
    }

    /// The line of the outermost frame at `addr`: inside inlined code, the
    /// line of the call site in the function the symbol table names.
    pub(crate) fn outer_line(&self, addr: u64) -> Option<(String, u32)> {
        let ctx = self.dwarf.as_ref()?;
        let mut frames = ctx.find_frames(addr).skip_all_loads().ok()?;
        let mut at = None;
        while let Ok(Some(f)) = frames.next() {
            at = f.location.and_then(|l| Some((l.file?.to_string(), l.line?)));
        }
        at
    }

    pub(crate) fn location(&self, addr: u64) -> (Option<String>, Option<u32>) {
        let Some(ctx) = &self.dwarf else { return (None, None) };
        match ctx.find_location(addr) {
            Ok(Some(loc)) => (loc.file.map(str::to_string), loc.line),
            _ => (None, None),
        }
    }
}

fn symbols_of(file: &object::File<'_>) -> Vec<(u64, u64, String)> {
    // At one address (aliases such as getpid / __getpid / __GI___getpid) the
    // name perf would show wins: sized, global, fewest leading underscores, shortest.
    let mut v: Vec<(u64, std::cmp::Reverse<u64>, bool, usize, usize, String)> = file
        .symbols()
        .chain(file.dynamic_symbols())
        .filter(|s| s.kind() == SymbolKind::Text && s.address() != 0)
        .filter_map(|s| {
            // Drop symbol versions ("clock_gettime@@GLIBC_2.17").
            let name = s.name().ok()?.split('@').next()?;
            let underscores = name.len() - name.trim_start_matches('_').len();
            Some((s.address(), std::cmp::Reverse(s.size()), !s.is_global(), underscores, name.len(), demangle(name)))
        })
        .collect();
    v.sort();
    v.dedup_by(|b, a| a.0 == b.0);
    v.into_iter().map(|(a, sz, _, _, _, n)| (a, sz.0, n)).collect()
}

/// The procedures of an ELF file as (file offset, size, name), sorted by
/// offset: the symbol table (or the debug file's, found as [`Image::load`]
/// finds it) and PLT entries, in the offset space of samples. Nothing is
/// kept: the file is mapped, its symbols taken and the mapping dropped, so
/// naming a build this way costs its symbol table (the pages of it read),
/// not the whole file or its DWARF.
pub fn procedure_ranges(path: &Path, build_id: Option<&BuildId>, debug_dirs: &[PathBuf]) -> Result<Vec<(u64, u64, String)>, Reason> {
    let data = map(path).ok_or_else(|| Reason::ImageNotFound(path.display().to_string()))?;
    let file = object::File::parse(&*data).map_err(|e| Reason::Other(format!("{}: not an ELF file: {e}", path.display())))?;
    let segments: Vec<(u64, u64, u64)> = file.segments().map(|s| (s.file_range().0, s.file_range().1, s.address())).collect();
    let mut symbols = symbols_of(&file);
    if symbols.is_empty() {
        let bid = build_id.cloned().or_else(|| file.build_id().ok().flatten().map(|b| BuildId(b.to_vec())));
        if let Some(debug) = find_debug_file(path, &file, bid.as_ref(), debug_dirs).and_then(|p| map(&p)) {
            if let Ok(dfile) = object::File::parse(&*debug) {
                symbols = symbols_of(&dfile);
            }
        }
    }
    add_plt(&mut symbols, crate::plt::symbols(&file));
    let to_offset = |va: u64| segments.iter().find(|(_, sz, a)| va >= *a && va < a + sz).map(|(o, _, a)| va - a + o);
    let mut out: Vec<(u64, u64, String)> = symbols.into_iter().filter_map(|(va, size, name)| Some((to_offset(va)?, size, name))).collect();
    out.sort_by_key(|s| s.0);
    Ok(out)
}

/// A read-only mapping of a file: only the pages parsed become resident.
fn map(path: &Path) -> Option<memmap2::Mmap> {
    let f = std::fs::File::open(path).ok()?;
    // SAFETY: a private read-only mapping; a binary truncated while mapped
    // would fault, the same risk every ELF reader that maps files takes
    // (and binaries are replaced by rename, which leaves this inode intact).
    unsafe { memmap2::Mmap::map(&f) }.ok()
}

/// Adds PLT entries where no symbol starts at the same address (the
/// symbols may come from a debug file, whose `.plt` holds no bytes).
fn add_plt(symbols: &mut Vec<(u64, u64, String)>, plt: Vec<(u64, u64, String)>) {
    let taken: std::collections::HashSet<u64> = symbols.iter().map(|s| s.0).collect();
    symbols.extend(plt.into_iter().filter(|s| !taken.contains(&s.0)));
    symbols.sort_by_key(|s| s.0);
}

/// `file` parsed from `data`; sections stored in the file are ranges of
/// `data`, compressed ones are decompressed into their own buffers (added
/// to `bytes`).
fn dwarf_of(file: &object::File<'_>, data: &Arc<[u8]>, bytes: &mut usize) -> Option<addr2line::Context<Slice>> {
    file.section_by_name(".debug_info")?;
    let endian = if file.is_little_endian() { gimli::RunTimeEndian::Little } else { gimli::RunTimeEndian::Big };
    let whole = gimli::EndianReader::new(Arc::clone(data), endian);
    let load = |id: gimli::SectionId| -> Result<Slice, gimli::Error> {
        Ok(match file.section_by_name(id.name()).and_then(|s| s.uncompressed_data().ok()) {
            Some(Cow::Borrowed(b)) => {
                let start = b.as_ptr() as usize - data.as_ptr() as usize;
                whole.range(start..start + b.len())
            }
            Some(Cow::Owned(v)) => {
                *bytes += v.len();
                gimli::EndianReader::new(Arc::from(v), endian)
            }
            None => gimli::EndianReader::new(Arc::from(&[][..]), endian),
        })
    };
    let dwarf = gimli::Dwarf::load(load).ok()?;
    addr2line::Context::from_dwarf(dwarf).ok()
}

/// Separate debug info: `.build-id/xx/rest.debug` under the debug dirs,
/// then the `.gnu_debuglink` name next to the file, in `.debug/`, under
/// the debug dirs with the file's directory appended, and in the debug
/// dirs themselves (a `--debuginfo` folder of `.debug` files).
fn find_debug_file(path: &Path, file: &object::File<'_>, bid: Option<&BuildId>, debug_dirs: &[PathBuf]) -> Option<PathBuf> {
    if let Some(b) = bid.map(|b| b.to_hex()).filter(|h| h.len() > 2) {
        for d in debug_dirs {
            let p = d.join(".build-id").join(&b[..2]).join(format!("{}.debug", &b[2..]));
            if p.is_file() {
                return Some(p);
            }
        }
    }
    let (name, _crc) = file.gnu_debuglink().ok().flatten()?;
    let name = std::str::from_utf8(name).ok()?;
    let dir = path.parent()?;
    let mut candidates = vec![dir.join(name), dir.join(".debug").join(name)];
    for d in debug_dirs {
        candidates.push(d.join(dir.strip_prefix("/").unwrap_or(dir)).join(name));
        candidates.push(d.join(name));
    }
    // A debug file of another build would name the wrong code: where both have a build-id, they must agree.
    let same_build = |p: &PathBuf| match (bid, crate::build_id::read(p)) {
        (Some(want), Some(got)) => *want == got,
        _ => true,
    };
    candidates.into_iter().find(|p| p.is_file() && p != path && same_build(p))
}
