//! Compact unwind tables for the BPF stack walker, compiled from an image's
//! `.eh_frame` (and `.debug_frame`, for code `.eh_frame` does not cover).
//!
//! Design constraint: the walker in `dwarfwalk.h` runs in the kernel with a
//! bounded loop and no DWARF interpreter, so every CFI row is reduced here,
//! with gimli's evaluation of the CFA programs, to what x86-64 code needs:
//! CFA = rsp+N | rbp+N (or the PLT's one known expression), the caller's
//! rbp saved at CFA+N or unchanged, and the return address at CFA-8. Rows
//! are sorted by ELF virtual address, so one binary search finds a pc's
//! rule; a pc between functions lands on an [`Cfa::Unknown`] row. Anything
//! else (other expressions, a return address elsewhere) is an
//! [`Cfa::Expression`] row: the walk stops there and says why.
//!
//! A table depends only on the image's bytes, so it is cached on disk by
//! build-id ([`TableCache`]) and shared by every process that maps it.
//!
//! ```
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use loupe_collector::unwindtable::UnwindTable;
//! let libc = std::fs::read("/lib/x86_64-linux-gnu/libc.so.6")?;
//! let table = UnwindTable::build(&libc)?;
//! assert!(table.rows().len() > 1000);
//! # Ok(()) }
//! ```

use gimli::{BaseAddresses, CfaRule, CieOrFde, DebugFrame, EhFrame, NativeEndian, Register, RegisterRule, UnwindContext, UnwindSection};
use loupe_model::BuildId;
use object::{Object, ObjectSection};
use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// DWARF register numbers on x86-64.
const RBP: Register = Register(6);
const RSP: Register = Register(7);
const RA: Register = Register(16);

/// How to find the canonical frame address (the caller's rsp) at a pc.
/// The discriminants are `UNWIND_CFA_*` in `dwarfwalk.h`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Cfa {
    /// No CFI covers the pc (between functions, or code without CFI).
    Unknown = 0,
    /// CFA = rsp + offset.
    Rsp(i32) = 1,
    /// CFA = rbp + offset.
    Rbp(i32) = 2,
    /// The PLT's expression: rsp + offset, + 8 once the entry pushed its
    /// index (pc & 15 >= 11).
    Plt(i32) = 3,
    /// A DWARF expression or register rule the walker does not evaluate.
    Expression = 4,
    /// The return address is undefined: the outermost frame (`_start`,
    /// a thread's `clone3`).
    End = 5,
}

/// Where the caller's rbp is. Discriminants: `UNWIND_RBP_*` in `dwarfwalk.h`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SavedRbp {
    /// Not saved by this frame: the caller's value is still in rbp.
    Unchanged,
    /// Saved at CFA + offset.
    AtCfa(i16),
    /// Moved somewhere the walker does not follow; a caller whose CFA is
    /// rbp-based cannot be unwound.
    Lost,
}

/// One row: the rule from `pc` (ELF virtual address) to the next row's pc.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Row {
    pub pc: u64,
    pub cfa: Cfa,
    pub rbp: SavedRbp,
}

/// Bytes of one row as the BPF map stores it (`struct unwind_row`).
pub const ROW_BYTES: usize = 16;

impl Row {
    /// `struct unwind_row`: pc, CFA offset, rbp offset, CFA kind, rbp kind.
    pub fn encode(&self) -> [u8; ROW_BYTES] {
        let (kind, off) = match self.cfa {
            Cfa::Unknown => (0u8, 0),
            Cfa::Rsp(o) => (1, o),
            Cfa::Rbp(o) => (2, o),
            Cfa::Plt(o) => (3, o),
            Cfa::Expression => (4, 0),
            Cfa::End => (5, 0),
        };
        let (rbp_kind, rbp_off) = match self.rbp {
            SavedRbp::Unchanged => (0u8, 0i16),
            SavedRbp::AtCfa(o) => (1, o),
            SavedRbp::Lost => (2, 0),
        };
        let mut b = [0u8; ROW_BYTES];
        b[0..8].copy_from_slice(&self.pc.to_le_bytes());
        b[8..12].copy_from_slice(&off.to_le_bytes());
        b[12..14].copy_from_slice(&rbp_off.to_le_bytes());
        b[14] = kind;
        b[15] = rbp_kind;
        b
    }

    /// The inverse of [`Row::encode`]; None for kinds no encoder writes.
    pub fn decode(b: &[u8; ROW_BYTES]) -> Option<Row> {
        let off = i32::from_le_bytes(b[8..12].try_into().expect("4 bytes"));
        let rbp_off = i16::from_le_bytes([b[12], b[13]]);
        let cfa = match b[14] {
            0 => Cfa::Unknown,
            1 => Cfa::Rsp(off),
            2 => Cfa::Rbp(off),
            3 => Cfa::Plt(off),
            4 => Cfa::Expression,
            5 => Cfa::End,
            _ => return None,
        };
        let rbp = match b[15] {
            0 => SavedRbp::Unchanged,
            1 => SavedRbp::AtCfa(rbp_off),
            2 => SavedRbp::Lost,
            _ => return None,
        };
        Some(Row { pc: u64::from_le_bytes(b[0..8].try_into().expect("8 bytes")), cfa, rbp })
    }
}

/// Why a table could not be built.
#[derive(Debug)]
pub struct TableError(String);

impl fmt::Display for TableError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for TableError {}

/// An image's rows, sorted by pc, with equal neighbours merged.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UnwindTable {
    rows: Vec<Row>,
}

/// The gimli section reader over the image's bytes.
type Reader<'a> = gimli::EndianSlice<'a, NativeEndian>;

impl UnwindTable {
    /// Compiles the table of an ELF image (its bytes). An image without
    /// `.eh_frame` or `.debug_frame` gives an empty table.
    pub fn build(elf: &[u8]) -> Result<UnwindTable, TableError> {
        let file = object::File::parse(elf).map_err(|e| TableError(format!("not an ELF image: {e}")))?;
        let section = |name: &str| file.section_by_name(name).and_then(|s| Some((s.address(), s.data().ok()?)));
        let mut fdes: Vec<(u64, u64, Vec<Row>)> = Vec::new();
        if let Some((addr, data)) = section(".eh_frame") {
            let mut bases = BaseAddresses::default().set_eh_frame(addr);
            if let Some((text, _)) = section(".text") {
                bases = bases.set_text(text);
            }
            if let Some((got, _)) = section(".got") {
                bases = bases.set_got(got);
            }
            collect(&EhFrame::new(data, NativeEndian), &bases, &mut fdes)?;
        }
        if let Some((_, data)) = section(".debug_frame") {
            let mut more = Vec::new();
            collect(&DebugFrame::new(data, NativeEndian), &BaseAddresses::default(), &mut more)?;
            let covered = |pc: u64| fdes.iter().any(|&(s, e, _)| pc >= s && pc < e);
            more.retain(|(s, _, _)| !covered(*s));
            fdes.extend(more);
        }
        Ok(UnwindTable { rows: merge(fdes) })
    }

    pub fn rows(&self) -> &[Row] {
        &self.rows
    }

    /// The rule at ELF virtual address `pc`, or None before the first row.
    pub fn lookup(&self, pc: u64) -> Option<&Row> {
        let i = self.rows.partition_point(|r| r.pc <= pc);
        i.checked_sub(1).map(|i| &self.rows[i])
    }

    /// The rows in the BPF map's layout, one after another.
    pub fn to_bytes(&self) -> Vec<u8> {
        self.rows.iter().flat_map(|r| r.encode()).collect()
    }

    /// The inverse of [`UnwindTable::to_bytes`]; None when the bytes are not a table.
    pub fn from_bytes(b: &[u8]) -> Option<UnwindTable> {
        if !b.len().is_multiple_of(ROW_BYTES) {
            return None;
        }
        let rows = b.chunks_exact(ROW_BYTES).map(|c| Row::decode(c.try_into().expect("row"))).collect::<Option<Vec<_>>>()?;
        rows.windows(2).all(|w| w[0].pc < w[1].pc).then_some(UnwindTable { rows })
    }
}

/// Appends every FDE's (start, end, rows) of one CFI section.
fn collect<'a, S: UnwindSection<Reader<'a>>>(
    section: &S,
    bases: &BaseAddresses,
    out: &mut Vec<(u64, u64, Vec<Row>)>,
) -> Result<(), TableError>
where
    S::Offset: gimli::UnwindOffset<usize>,
{
    let bad = |e: gimli::Error| TableError(format!("malformed CFI: {e}"));
    let mut ctx = Box::new(UnwindContext::new());
    let mut entries = section.entries(bases);
    while let Some(entry) = entries.next().map_err(bad)? {
        let CieOrFde::Fde(partial) = entry else { continue };
        // One bad FDE (a CIE it cannot find) leaves out that function only.
        let Ok(fde) = partial.parse(|s, b, o| s.cie_from_offset(b, o)) else { continue };
        let Ok(mut table) = fde.rows(section, bases, &mut ctx) else { continue };
        let mut rows = Vec::new();
        while let Ok(Some(r)) = table.next_row() {
            rows.push(Row {
                pc: r.start_address(),
                cfa: cfa_of(section, r),
                rbp: rbp_of(r.register(RBP).unwrap_or(RegisterRule::SameValue)),
            });
        }
        out.push((fde.initial_address(), fde.end_address(), rows));
    }
    Ok(())
}

/// The CFA rule of a row, with the return-address rule folded in.
fn cfa_of<'a, S: UnwindSection<Reader<'a>>>(section: &S, r: &gimli::UnwindTableRow<usize>) -> Cfa {
    // x86-64 CIEs state the return address's rule; without one there is no caller.
    match r.register(RA).unwrap_or(RegisterRule::Undefined) {
        RegisterRule::Offset(-8) => {}
        RegisterRule::Undefined => return Cfa::End,
        _ => return Cfa::Expression,
    }
    match r.cfa() {
        CfaRule::RegisterAndOffset { register, offset } => match (i32::try_from(*offset), *register) {
            (Ok(o), RSP) => Cfa::Rsp(o),
            (Ok(o), RBP) => Cfa::Rbp(o),
            _ => Cfa::Expression,
        },
        CfaRule::Expression(e) => match e.get(section) {
            Ok(expr) if is_plt_expression(expr.0.slice()) => Cfa::Plt(8),
            _ => Cfa::Expression,
        },
    }
}

/// The expression GNU ld writes for `.plt` entries:
/// `DW_OP_breg7 (rsp) 8; DW_OP_breg16 (rip) 0; DW_OP_lit15; DW_OP_and;
/// DW_OP_lit11; DW_OP_ge; DW_OP_lit3; DW_OP_shl; DW_OP_plus`.
fn is_plt_expression(b: &[u8]) -> bool {
    matches!(b, [0x77, 0x08, 0x80, 0x00, 0x3f, 0x1a, 0x3b, 0x2a, 0x33, 0x24, 0x22])
}

fn rbp_of(rule: RegisterRule<usize>) -> SavedRbp {
    match rule {
        RegisterRule::Undefined | RegisterRule::SameValue => SavedRbp::Unchanged,
        RegisterRule::Offset(o) => i16::try_from(o).map_or(SavedRbp::Lost, SavedRbp::AtCfa),
        _ => SavedRbp::Lost,
    }
}

/// One sorted row list from per-FDE rows: an [`Cfa::Unknown`] row closes
/// each FDE that the next one does not start right after, and a row equal
/// to the one before it is dropped.
fn merge(mut fdes: Vec<(u64, u64, Vec<Row>)>) -> Vec<Row> {
    fdes.sort_by_key(|f| (f.0, f.1));
    let mut rows: Vec<Row> = Vec::new();
    for (i, (start, end, fde_rows)) in fdes.iter().enumerate() {
        for r in fde_rows.iter().filter(|r| r.pc >= *start && r.pc < *end) {
            push(&mut rows, *r);
        }
        let next = fdes.get(i + 1).map(|f| f.0);
        if next.is_none_or(|n| n > *end) {
            push(&mut rows, Row { pc: *end, cfa: Cfa::Unknown, rbp: SavedRbp::Unchanged });
        }
    }
    rows
}

/// Appends `r`, replacing a row at the same pc (overlapping FDEs: the later
/// one wins) and skipping it when it repeats the rule before it.
fn push(rows: &mut Vec<Row>, r: Row) {
    while rows.last().is_some_and(|l| l.pc >= r.pc) {
        rows.pop();
    }
    if rows.last().is_some_and(|l| (l.cfa, l.rbp) == (r.cfa, r.rbp)) {
        return;
    }
    rows.push(r);
}

/// Tables by build-id, on disk under `dir` (0600 files in a 0700
/// directory) so the next daemon does not compile them again. Not kept in
/// memory: once in the kernel a table is not read here again.
pub struct TableCache {
    dir: Option<PathBuf>,
    /// Tables compiled, read back from disk, and not compiled because the
    /// image's CFI is past [`MAX_CFI_BYTES`], since start.
    pub built: u64,
    pub loaded: u64,
    pub too_big: u64,
}

/// CFI (`.eh_frame` + `.debug_frame`) bytes past which an image gets no
/// table: compiling libLLVM's took hundreds of MiB and seconds of the
/// daemon's CPU, and its rows alone would fill the kernel's array. libc
/// has ~250 KiB; samples in such images keep their stack copies.
pub const MAX_CFI_BYTES: u64 = 4 << 20;

/// Bytes of the image's CFI sections.
pub fn cfi_bytes(elf: &[u8]) -> u64 {
    let Ok(file) = object::File::parse(elf) else { return 0 };
    [".eh_frame", ".debug_frame"].iter().filter_map(|n| file.section_by_name(n)).map(|s| s.size()).sum()
}

/// Marks a cached table file (and its layout version).
const MAGIC: &[u8; 8] = b"LUPUNW01";

impl TableCache {
    /// A cache in memory only, or also under `dir` (created when missing).
    pub fn new(dir: Option<PathBuf>) -> TableCache {
        TableCache { dir, built: 0, loaded: 0, too_big: 0 }
    }

    /// The table of the image `elf` identified by `build_id` (images
    /// without one are compiled and kept in memory by the caller's key).
    /// Only the pages of `elf` that compiling reads are touched, and none
    /// when the table is cached.
    pub fn get(&mut self, build_id: Option<&BuildId>, elf: &[u8]) -> Option<Arc<UnwindTable>> {
        let file = build_id.and_then(|b| Some(self.dir.as_ref()?.join(format!("{}.unw", b.to_hex()))));
        let cached = file.as_deref().and_then(read_cached);
        self.loaded += cached.is_some() as u64;
        let table = match cached {
            Some(t) => t,
            None if cfi_bytes(elf) > MAX_CFI_BYTES => {
                self.too_big += 1;
                return None;
            }
            None => {
                let t = UnwindTable::build(elf).ok()?;
                self.built += 1;
                if let Some(f) = &file {
                    // A cache that cannot be written only costs the next start its compile.
                    let _ = write_cached(f, &t);
                }
                t
            }
        };
        Some(Arc::new(table))
    }
}

fn read_cached(path: &Path) -> Option<UnwindTable> {
    let b = std::fs::read(path).ok()?;
    UnwindTable::from_bytes(b.strip_prefix(&MAGIC[..])?)
}

/// Writes a table file atomically (a temporary file renamed), 0600 (0640
/// in a database shared with `--group`, like the rest of it).
fn write_cached(path: &Path, t: &UnwindTable) -> std::io::Result<()> {
    let dir = path.parent().expect("a file in the cache directory");
    loupe_files::create_dir_all(dir)?;
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let mut f = loupe_files::create(&tmp)?;
    f.write_all(MAGIC)?;
    f.write_all(&t.to_bytes())?;
    drop(f);
    std::fs::rename(&tmp, path)
}

/// Runtime address of ELF virtual address 0 for a mapping of `elf` at
/// `start` from file offset `pgoff`: table pcs plus it are runtime pcs.
pub fn load_bias(elf: &[u8], start: u64, pgoff: u64) -> Option<u64> {
    segment_bias(&segments(elf), start, pgoff)
}

/// (file offset, file size, virtual address) of each loadable segment.
pub fn segments(elf: &[u8]) -> Vec<(u64, u64, u64)> {
    use object::ObjectSegment;
    let Ok(file) = object::File::parse(elf) else { return Vec::new() };
    file.segments().map(|s| (s.file_range().0, s.file_range().1, s.address())).collect()
}

/// [`load_bias`] from the loadable segments' (file offset, file size,
/// virtual address). The kernel maps a segment from its file offset
/// rounded down to a page, so the segment starting in that page is the
/// one mapped (lld and Rust binaries have segments that share a page).
pub fn segment_bias(segments: &[(u64, u64, u64)], start: u64, pgoff: u64) -> Option<u64> {
    let page = |o: u64| o & !0xfff;
    let &(off, _, vaddr) = segments
        .iter()
        .find(|s| page(s.0) == pgoff)
        .or_else(|| segments.iter().find(|(o, size, _)| pgoff >= *o && pgoff < o + size.max(&1)))?;
    Some(start.wrapping_sub(vaddr.wrapping_sub(off).wrapping_add(pgoff)))
}

/// What the walker knows of the code at a pc.
pub enum Code<'a> {
    /// An image with a table, loaded at this bias.
    Table(&'a UnwindTable, u64),
    /// An image without a table, built with frame pointers.
    FramePointers,
    /// Nothing: no mapping, or an image with neither.
    Unknown,
}

/// Why a walk ended. The discriminants of the failures are the order of
/// the `UNWIND_*` counters in `codes.in`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Stop {
    /// The outermost frame was reached.
    Root,
    /// A pc with no table row (no table for its image, or between functions).
    NoTable,
    /// A rule the walker does not evaluate.
    Expression,
    /// A stack read failed (the address was not mapped or paged out).
    ReadFault,
    /// The frame limit was reached first.
    Depth,
}

impl Stop {
    /// The words `--stats` uses.
    pub fn describe(self) -> &'static str {
        match self {
            Stop::Root => "reached the root",
            Stop::NoTable => "no table",
            Stop::Expression => "expression",
            Stop::ReadFault => "read fault",
            Stop::Depth => "depth limit",
        }
    }
}

/// The registers a walk starts from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Regs {
    pub pc: u64,
    pub sp: u64,
    pub bp: u64,
}

/// Walks a user stack by the tables, as `dwarfwalk.h` does in the kernel
/// (kept in step with it: the tests replay recorded stacks through this).
/// Pushes the pc and then each return address, at most `max` frames.
pub fn walk<'t>(
    find: &mut dyn FnMut(u64) -> Code<'t>,
    regs: Regs,
    read: &mut dyn FnMut(u64) -> Option<u64>,
    max: usize,
    out: &mut Vec<u64>,
) -> Stop {
    let Regs { mut pc, mut sp, mut bp } = regs;
    let mut bp_lost = false;
    for depth in 0.. {
        if depth >= max {
            return Stop::Depth;
        }
        out.push(pc);
        // A return address points after the call; its rule is the call's.
        let at = if depth == 0 { pc } else { pc - 1 };
        let row = match find(at) {
            Code::Table(t, bias) => match t.lookup(at.wrapping_sub(bias)) {
                Some(r) => *r,
                None => return Stop::NoTable,
            },
            Code::FramePointers => Row { pc: at, cfa: Cfa::Rbp(16), rbp: SavedRbp::AtCfa(-16) },
            Code::Unknown => return Stop::NoTable,
        };
        let cfa = match row.cfa {
            Cfa::Unknown => return Stop::NoTable,
            Cfa::Rsp(o) => sp.wrapping_add(o as i64 as u64),
            Cfa::Rbp(_) if bp_lost => return Stop::Expression,
            Cfa::Rbp(o) => bp.wrapping_add(o as i64 as u64),
            Cfa::Plt(o) => sp.wrapping_add(o as i64 as u64) + if pc & 15 >= 11 { 8 } else { 0 },
            Cfa::Expression => return Stop::Expression,
            Cfa::End => return Stop::Root,
        };
        let Some(ra) = read(cfa.wrapping_sub(8)) else { return Stop::ReadFault };
        match row.rbp {
            SavedRbp::Unchanged => {}
            SavedRbp::AtCfa(o) => match read(cfa.wrapping_add(o as i64 as u64)) {
                Some(v) => (bp, bp_lost) = (v, false),
                None => return Stop::ReadFault,
            },
            SavedRbp::Lost => bp_lost = true,
        }
        if ra == 0 {
            return Stop::Root;
        }
        (pc, sp) = (ra, cfa);
    }
    unreachable!("the loop returns")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::process::Mapping;
    use std::collections::HashMap;

    /// The rule readelf states at one LOC of its `--debug-dump=frames-interp`.
    fn readelf_rule(cfa: &str, rbp: Option<&str>, ra: Option<&str>) -> (Cfa, SavedRbp) {
        let num = |s: &str| s.parse::<i32>().unwrap();
        let cfa = match (ra, cfa) {
            (Some("u") | None, _) => Cfa::End,
            (_, c) if c.starts_with("rsp+") => Cfa::Rsp(num(&c[4..])),
            (_, c) if c.starts_with("rbp+") => Cfa::Rbp(num(&c[4..])),
            (_, "exp") => Cfa::Plt(8),
            _ => Cfa::Expression,
        };
        let rbp = match rbp {
            None | Some("u") | Some("s") => SavedRbp::Unchanged,
            Some(c) if c.starts_with("c-") || c.starts_with("c+") => SavedRbp::AtCfa(c[1..].parse().unwrap()),
            _ => SavedRbp::Lost,
        };
        (cfa, rbp)
    }

    /// (pc, rule, the line it came from).
    type ReadelfRow = (u64, (Cfa, SavedRbp), String);

    /// Checks every LOC readelf prints for `.eh_frame` of `path` against the
    /// table's rule at that pc; returns the number of rows compared.
    fn compare_with_readelf(path: &Path) -> usize {
        let out = std::process::Command::new("readelf").arg("--debug-dump=frames-interp").arg(path).output().expect("readelf (binutils)");
        let text = String::from_utf8_lossy(&out.stdout);
        let table = UnwindTable::build(&std::fs::read(path).unwrap()).unwrap();
        // Per FDE: its range and its rows as (pc, rule).
        let mut fdes: Vec<((u64, u64), Vec<ReadelfRow>)> = Vec::new();
        let mut columns = Vec::<String>::new();
        for line in text.lines().skip_while(|l| !l.contains(".eh_frame section")).skip(1) {
            if line.starts_with("Contents of") {
                break;
            }
            let words: Vec<&str> = line.split_whitespace().collect();
            if words.get(3) == Some(&"FDE") {
                let (s, e) = words.iter().find_map(|w| w.strip_prefix("pc=")).unwrap().split_once("..").unwrap();
                fdes.push(((u64::from_str_radix(s, 16).unwrap(), u64::from_str_radix(e, 16).unwrap()), Vec::new()));
                columns.clear();
            } else if words.first() == Some(&"LOC") {
                columns = words.iter().map(|w| w.to_string()).collect();
            } else if let Some(fde) = fdes.last_mut().filter(|_| !columns.is_empty() && words.len() == columns.len()) {
                let col = |name: &str| columns.iter().position(|c| c == name).map(|i| words[i]);
                let rule = readelf_rule(words[1], col("rbp"), col("ra"));
                fde.1.push((u64::from_str_radix(words[0], 16).unwrap(), rule, line.to_string()));
            }
        }
        let mut ranges: Vec<(u64, u64)> = fdes.iter().map(|f| f.0).collect();
        ranges.sort();
        // Overlapping FDEs (the later one wins in the table) are not compared.
        let overlaps = |r: (u64, u64)| ranges.iter().filter(|o| o.0 < r.1 && r.0 < o.1).count() > 1;
        let mut compared = 0;
        for ((start, end), rows) in fdes.into_iter().filter(|f| !overlaps(f.0)) {
            // readelf prints a row the FDE's instructions reach at its very end (ld's .plt FDEs do); no pc has it.
            for (pc, want, line) in rows.into_iter().filter(|r| r.0 >= start && r.0 < end) {
                let got = table.lookup(pc).map(|r| (r.cfa, r.rbp));
                // readelf shows "exp" for every expression; the end of the stack keeps whatever rbp rule.
                let got = got.map(|(c, r)| if c == Cfa::Expression && want.0 == Cfa::Plt(8) { (Cfa::Plt(8), r) } else { (c, r) });
                let want = if want.0 == Cfa::End { (Cfa::End, got.map_or(want.1, |g| g.1)) } else { want };
                assert_eq!(got, Some(want), "{}: pc {pc:#x}: readelf says {line:?}", path.display());
                compared += 1;
            }
        }
        compared
    }

    #[test]
    fn rows_match_readelf_for_a_library_without_frame_pointers_and_libc() {
        // Checks the table's rule at every row readelf --debug-dump=frames-interp prints, for libcallee.c built -O2 -fomit-frame-pointer and for libc.
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/workloads/libcallee.c");
        let dir = tempfile::tempdir().unwrap();
        let lib = dir.path().join("libnofp.so");
        let ok =
            std::process::Command::new("cc").args(["-O2", "-shared", "-fPIC", "-fomit-frame-pointer", "-o"]).arg(&lib).arg(&src).status();
        assert!(ok.is_ok_and(|s| s.success()), "cc failed");
        assert!(compare_with_readelf(&lib) >= 2);
        let libc = Path::new("/lib/x86_64-linux-gnu/libc.so.6");
        let n = compare_with_readelf(libc);
        assert!(n > 10_000, "libc has thousands of CFI rows: {n} compared");
    }

    #[test]
    fn gaps_between_functions_have_no_rule_and_rows_round_trip() {
        // Checks that a pc past a function's FDE finds an Unknown row, rows are strictly sorted, and the byte layout round-trips.
        let table = UnwindTable::build(&std::fs::read("/lib/x86_64-linux-gnu/libc.so.6").unwrap()).unwrap();
        assert!(table.rows().windows(2).all(|w| w[0].pc < w[1].pc));
        assert!(table.rows().iter().any(|r| r.cfa == Cfa::Unknown));
        assert!(table.rows().iter().any(|r| matches!(r.cfa, Cfa::Plt(_))), "libc's .plt uses the PLT expression");
        assert_eq!(table.lookup(0), None);
        assert_eq!(UnwindTable::from_bytes(&table.to_bytes()), Some(table.clone()));
        for r in [Row { pc: 7, cfa: Cfa::Rbp(-24), rbp: SavedRbp::Lost }, Row { pc: u64::MAX, cfa: Cfa::End, rbp: SavedRbp::AtCfa(-16) }] {
            assert_eq!(Row::decode(&r.encode()), Some(r));
        }
    }

    #[test]
    fn cached_tables_are_private_and_read_back() {
        // Checks the disk cache: a 0600 file in a 0700 directory named by build-id, read back (not compiled) by a second cache.
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let cache_dir = dir.path().join("unwind");
        let libc = std::fs::read("/lib/x86_64-linux-gnu/libc.so.6").unwrap();
        let bid = BuildId(vec![0xab, 0xcd]);
        let mut a = TableCache::new(Some(cache_dir.clone()));
        let t1 = a.get(Some(&bid), &libc).unwrap();
        assert_eq!((a.built, a.loaded), (1, 0));
        let file = cache_dir.join("abcd.unw");
        assert_eq!(std::fs::metadata(&file).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(std::fs::metadata(&cache_dir).unwrap().permissions().mode() & 0o777, 0o700);
        let mut b = TableCache::new(Some(cache_dir));
        // No image bytes: only the cached file can answer.
        let t2 = b.get(Some(&bid), &[]).unwrap();
        assert_eq!((b.built, b.loaded, t1), (0, 1, t2));
    }

    /// A stack captured in place: registers at the capture and the bytes
    /// from rsp to the top of the thread's stack.
    struct Captured {
        regs: Regs,
        stack: Vec<u8>,
    }

    thread_local! {
        static CAPTURED: std::cell::RefCell<Option<Captured>> = const { std::cell::RefCell::new(None) };
    }

    /// The executable file mappings of this process: (start, end, pgoff, path).
    fn own_mappings() -> Vec<(u64, u64, u64, String)> {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        maps.lines()
            .filter_map(|l| {
                let w: Vec<&str> = l.split_whitespace().collect();
                let (s, e) = w[0].split_once('-')?;
                let path = w.get(5).filter(|p| p.starts_with('/'))?;
                w[1].contains('x').then(|| {
                    (
                        u64::from_str_radix(s, 16).unwrap(),
                        u64::from_str_radix(e, 16).unwrap(),
                        u64::from_str_radix(w[2], 16).unwrap(),
                        path.to_string(),
                    )
                })
            })
            .collect()
    }

    #[inline(never)]
    fn capture() {
        let (pc, sp, bp): (u64, u64, u64);
        // SAFETY: reads three registers into outputs; touches no memory.
        unsafe {
            std::arch::asm!("lea {pc}, [rip]", "mov {sp}, rsp", "mov {bp}, rbp", pc = out(reg) pc, sp = out(reg) sp, bp = out(reg) bp)
        };
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let top = maps
            .lines()
            .filter_map(|l| {
                l.split_whitespace()
                    .next()?
                    .split_once('-')
                    .map(|(s, e)| (u64::from_str_radix(s, 16).unwrap(), u64::from_str_radix(e, 16).unwrap()))
            })
            .find(|&(s, e)| sp >= s && sp < e)
            .unwrap()
            .1;
        // SAFETY: [sp, top) is this thread's live stack mapping, read while the thread is here.
        let stack = unsafe { std::slice::from_raw_parts(sp as *const u8, (top - sp) as usize) }.to_vec();
        CAPTURED.with(|c| *c.borrow_mut() = Some(Captured { regs: Regs { pc, sp, bp }, stack }));
    }

    extern "C" fn compare(a: *const libc::c_void, b: *const libc::c_void) -> libc::c_int {
        if CAPTURED.with(|c| c.borrow().is_none()) {
            capture();
        }
        // SAFETY: qsort passes pointers to two elements of the u64 array below.
        let (a, b) = unsafe { (*(a as *const u64), *(b as *const u64)) };
        a.cmp(&b) as libc::c_int
    }

    #[inline(never)]
    fn sort_through_libc() -> Captured {
        let mut v: Vec<u64> = (0..64).rev().collect();
        // SAFETY: a valid array of 64 u64s and a comparator of u64s.
        unsafe { libc::qsort(v.as_mut_ptr().cast(), v.len(), 8, Some(compare)) };
        std::hint::black_box(&v);
        CAPTURED.with(|c| c.borrow_mut().take()).unwrap()
    }

    #[test]
    fn walking_a_stack_captured_inside_a_libc_qsort_callback_agrees_with_framehop() {
        // Checks the table walk over a real stack (this thread's, captured in a callback of libc's qsort) against framehop's DWARF unwind: same frames, through libc, to the root.
        let cap = sort_through_libc();
        let maps = own_mappings();
        let mut cache = TableCache::new(None);
        let mut images: HashMap<String, (Arc<UnwindTable>, Vec<u8>)> = HashMap::new();
        for (_, _, _, path) in &maps {
            let bytes = std::fs::read(path).unwrap();
            let t = cache.get(None, &bytes).unwrap();
            images.insert(path.clone(), (t, bytes));
        }
        let sp0 = cap.regs.sp;
        let mut read = |a: u64| {
            let at = a.checked_sub(sp0)? as usize;
            Some(u64::from_le_bytes(cap.stack.get(at..at + 8)?.try_into().ok()?))
        };
        let mut find = |pc: u64| match maps.iter().find(|m| pc >= m.0 && pc < m.1) {
            Some((s, _, off, path)) => {
                let (t, bytes) = &images[path];
                Code::Table(t, load_bias(bytes, *s, *off).unwrap())
            }
            None => Code::Unknown,
        };
        let mut ours = Vec::new();
        let stop = walk(&mut find, cap.regs, &mut read, 256, &mut ours);
        assert_eq!(stop, Stop::Root, "frames {ours:x?}");

        let mut fh = crate::unwind::Unwinders::new(None);
        let mappings: Vec<(Mapping, Option<std::path::PathBuf>)> = maps
            .iter()
            .enumerate()
            .map(|(i, (s, e, off, p))| (Mapping { start: *s, end: *e, pgoff: *off, image: i as u32 }, Some(p.into())))
            .collect();
        let mut theirs = Vec::new();
        let regs = loupe_perf::UserRegs { ip: cap.regs.pc, sp: cap.regs.sp, bp: cap.regs.bp };
        fh.unwind(1, &mut || mappings.clone(), regs, &cap.stack, &mut theirs);
        assert_eq!(ours, theirs, "the table walk and framehop disagree");

        let image = |pc: u64| maps.iter().find(|m| pc >= m.0 && pc < m.1).map(|m| m.3.clone()).unwrap_or_default();
        let libc_at = ours.iter().position(|&pc| image(pc).contains("libc.so")).expect("a frame in libc's qsort");
        let own = image(ours[0]);
        assert!(ours[libc_at..].iter().any(|&pc| image(pc) == own), "frames above libc reached the test binary again: {ours:x?}");
    }
}
