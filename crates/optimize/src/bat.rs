//! BOLT's address translation table (`-enable-bat`, section
//! `.note.bolt_bat`): for each function BOLT rewrote, which output offsets
//! came from which input offsets, so samples of the optimized binary map
//! back to the original's code.
//!
//! The layout is BOLT 19's `BoltAddressTranslation::writeMaps`, not the one
//! of BOLT's docs/BAT.md (measured on a BOLT 19 output of `layout`, see
//! the tests). After the note header (name "BOLT", type 1):
//! - hot fragments: ULEB count, then per fragment: ULEB address delta,
//!   8-byte function hash, ULEB block count, ULEB secondary-entry count,
//!   ULEB entry count, ULEB "equal" count E, ceil(E/8) bytes of branch bits;
//! - cold fragments: ULEB count, then per fragment: ULEB address delta,
//!   ULEB delta of its hot fragment's index, ULEB input skew, then entry
//!   count, E and branch bits as above.
//! - entries: ULEB output-address delta; the first E have input offset =
//!   output offset (+ skew) with the branch bit from the bitmap, the rest an
//!   SLEB delta of (input << 1 | branch); every non-branch entry (a block
//!   start) is followed by an 8-byte block hash and a ULEB block-index delta.
//!   Hot fragments end with their secondary entry points (ULEB deltas).
//!
//! Addresses are delta-encoded against one running "previous address" that
//! spans all entries of both lists; several entries may share an output
//! offset (an emptied block and its successor).

use crate::error::{Error, ErrorKind, Result};
use object::{Object, ObjectSection, ObjectSymbol, SymbolKind};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

/// Which version of a file a cached translator was read from.
type FileStamp = (u64, u64, SystemTime);

fn stamp(p: &Path) -> Option<FileStamp> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(p).ok()?;
    Some((m.ino(), m.len(), m.modified().ok()?))
}

/// A table or ELF file that does not read as BOLT writes them.
fn bad(m: impl Into<String>) -> Error {
    Error::new(ErrorKind::Format, m)
}

/// The section's name.
pub const SECTION: &str = ".note.bolt_bat";
/// The note type BOLT writes (`BinarySection::NT_BOLT_BAT`).
const NT_BOLT_BAT: u32 = 1;

/// One output fragment of a rewritten function.
#[derive(Clone, Debug, PartialEq)]
pub struct Fragment {
    /// Output address of the fragment's start.
    pub address: u64,
    /// Output address of the function's hot fragment (itself when hot).
    pub hot: u64,
    /// (output offset, input offset from the original function's start,
    /// branch entry) in output order.
    pub entries: Vec<(u32, u32, bool)>,
}

/// A parsed table: fragments by output address.
#[derive(Clone, Debug, Default)]
pub struct Bat {
    pub fragments: BTreeMap<u64, Fragment>,
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl Reader<'_> {
    fn byte(&mut self) -> Result<u8> {
        let b = *self.buf.get(self.pos).ok_or_else(|| bad(format!("BAT table truncated at byte {}", self.pos)))?;
        self.pos += 1;
        Ok(b)
    }

    fn uleb(&mut self) -> Result<u64> {
        let (mut v, mut shift) = (0u64, 0u32);
        loop {
            let b = self.byte()?;
            if shift < 64 {
                v |= u64::from(b & 0x7f) << shift;
            }
            shift += 7;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
    }

    fn sleb(&mut self) -> Result<i64> {
        let (mut v, mut shift) = (0i64, 0u32);
        loop {
            let b = self.byte()?;
            if shift < 64 {
                v |= i64::from(b & 0x7f) << shift;
            }
            shift += 7;
            if b & 0x80 == 0 {
                if shift < 64 && b & 0x40 != 0 {
                    v |= -1i64 << shift;
                }
                return Ok(v);
            }
        }
    }

    fn bytes(&mut self, n: usize) -> Result<&[u8]> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.buf.len());
        let end = end.ok_or_else(|| bad(format!("BAT table truncated at byte {}", self.pos)))?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }
}

impl Bat {
    /// Parses the whole `.note.bolt_bat` section (note header included).
    pub fn parse(section: &[u8]) -> Result<Bat> {
        let word = |i: usize| section.get(i..i + 4).map(|b| u32::from_le_bytes(b.try_into().unwrap()));
        let (Some(namesz), Some(descsz), Some(kind)) = (word(0), word(4), word(8)) else {
            return Err(bad("BAT note shorter than its header"));
        };
        let start = (12 + namesz as usize).next_multiple_of(4);
        if kind != NT_BOLT_BAT || section.get(12..16) != Some(b"BOLT".as_slice()) {
            return Err(bad("not a BOLT address translation note"));
        }
        let desc = section.get(start..start + descsz as usize).ok_or_else(|| bad("BAT note shorter than its size"))?;
        let mut r = Reader { buf: desc, pos: 0 };
        let mut bat = Bat::default();
        let mut prev = 0u64;
        let mut hot_list = Vec::new();
        for cold in [false, true] {
            let n = r.uleb()?;
            let mut hot_index = 0u64;
            for _ in 0..n {
                let address = prev.wrapping_add(r.uleb()?);
                prev = address;
                let (hot, skew, secondary) = if cold {
                    hot_index = hot_index.wrapping_add(r.uleb()?);
                    let hot = *hot_list.get(hot_index as usize).ok_or_else(|| bad("BAT cold fragment names no hot fragment"))?;
                    (hot, r.uleb()?, 0)
                } else {
                    r.bytes(8)?; // function hash
                    r.uleb()?; // block count
                    hot_list.push(address);
                    (address, 0, r.uleb()?)
                };
                let entries = parse_entries(&mut r, address, skew, &mut prev)?;
                for _ in 0..secondary {
                    r.uleb()?;
                }
                bat.fragments.insert(address, Fragment { address, hot, entries });
            }
        }
        Ok(bat)
    }

    /// The (hot fragment's output address, input offset) of output address
    /// `addr`, where `addr` lies in a fragment that starts at or before it
    /// (the caller bounds fragments: the table has no sizes).
    pub fn translate(&self, addr: u64) -> Option<(u64, u32)> {
        let (_, f) = self.fragments.range(..=addr).next_back()?;
        let off = u32::try_from(addr - f.address).ok()?;
        let i = f.entries.partition_point(|e| e.0 <= off).checked_sub(1)?;
        let (out, input, _) = f.entries[i];
        // Past an entry whose input offset is near u32::MAX (a damaged table) there is no input offset.
        Some((f.hot, input.checked_add(off - out)?))
    }
}

/// One fragment's entries (see the module comment).
fn parse_entries(r: &mut Reader, address: u64, skew: u64, prev: &mut u64) -> Result<Vec<(u32, u32, bool)>> {
    let n = r.uleb()?;
    let equal = r.uleb()? as usize;
    let bits = r.bytes(equal.div_ceil(8))?.to_vec();
    let mut entries = Vec::new();
    let mut input = 0u64; // (offset << 1) | branch
    for j in 0..n as usize {
        let out = prev.wrapping_add(r.uleb()?);
        *prev = out;
        let out_off = out.wrapping_sub(address);
        if j < equal {
            // A skew or offset past u32::MAX (a damaged table) is out of range like the other entries.
            let in_off = out_off.checked_add(skew).filter(|&v| v <= u64::from(u32::MAX));
            let in_off = in_off.ok_or_else(|| bad(format!("BAT entry out of range in fragment {address:#x}")))?;
            input = (in_off << 1) | u64::from(bits[j / 8] >> (j % 8) & 1);
        } else {
            input = input.wrapping_add_signed(r.sleb()?);
        }
        let branch = input & 1 == 1;
        if !branch {
            r.bytes(8)?; // block hash
            r.uleb()?; // block index delta
        }
        let (o, i) = (u32::try_from(out_off), u32::try_from(input >> 1));
        let (Ok(o), Ok(i)) = (o, i) else { return Err(bad(format!("BAT entry out of range in fragment {address:#x}"))) };
        entries.push((o, i, branch));
    }
    Ok(entries)
}

/// A function symbol: name, start, size.
type Func = (String, u64, u64);

fn functions<'a>(data: &'a [u8], what: &Path) -> Result<(object::File<'a>, Vec<Func>)> {
    let file = object::File::parse(data).map_err(|e| bad(format!("{}: not an ELF file: {e}", what.display())))?;
    let funcs = file
        .symbols()
        .filter(|s| s.kind() == SymbolKind::Text && !s.is_undefined() && s.size() > 0)
        .filter_map(|s| Some((s.name().ok()?.to_string(), s.address(), s.size())))
        .collect();
    Ok((file, funcs))
}

/// The executable sections of an ELF file, to read its code by address.
struct Text {
    data: Vec<u8>,
    /// (address, size, file offset) of each section with code.
    sections: Vec<(u64, u64, u64)>,
}

impl Text {
    fn new(file: &object::File, data: Vec<u8>) -> Text {
        let sections = file
            .sections()
            .filter(|s| s.kind() == object::SectionKind::Text)
            .filter_map(|s| Some((s.address(), s.size(), s.file_range()?.0)))
            .collect();
        Text { data, sections }
    }

    /// Up to `len` bytes from `va`, cut at the end of its section.
    fn bytes(&self, va: u64, len: u64) -> Option<&[u8]> {
        let &(addr, size, off) = self.sections.iter().find(|(a, n, _)| (*a..a + n).contains(&va))?;
        let from = (off + va - addr) as usize;
        let to = (off + size.min(va - addr + len)) as usize;
        self.data.get(from..to)
    }
}

/// Maps addresses of a BOLT output back to its input: both ELF files' text
/// symbols name the functions (names that occur more than once in either
/// file are left out, as ambiguous).
pub struct Translator {
    bat: Bat,
    /// Optimized binary's function symbols sorted by address.
    optimized: Vec<Func>,
    /// Output hot-fragment address -> original function address.
    original_of: HashMap<u64, u64>,
    /// Functions BOLT left where they were: (start, size) present with the
    /// same name, start and size in both files.
    unmoved: std::collections::HashSet<(u64, u64)>,
    /// Both files' code, to check that mapped straight-line code decodes alike.
    opt_text: Text,
    orig_text: Text,
}

impl Translator {
    /// Reads the table of `optimized` and the symbols of both files.
    /// `open`, remembered per pair of files for as long as neither changes
    /// (same inode, size and modification time): the manager maps an
    /// installed version's samples on every pass (default every 60 s), and
    /// reading both ELF files and BOLT's table each time was its largest
    /// fixed cost.
    pub fn open_cached(optimized: &Path, original: &Path) -> Result<Arc<Translator>> {
        type Cache = HashMap<(PathBuf, PathBuf), (FileStamp, FileStamp, Arc<Translator>)>;
        static CACHE: Mutex<Option<Cache>> = Mutex::new(None);
        let key = (optimized.to_path_buf(), original.to_path_buf());
        let now = (stamp(optimized), stamp(original));
        let mut guard = CACHE.lock().unwrap_or_else(|e| e.into_inner());
        let cache = guard.get_or_insert_with(HashMap::new);
        if let (Some(f), Some(o), Some((cf, co, t))) = (now.0, now.1, cache.get(&key)) {
            if f == *cf && o == *co {
                return Ok(Arc::clone(t));
            }
        }
        let t = Arc::new(Translator::open(optimized, original)?);
        if let (Some(f), Some(o)) = now {
            cache.insert(key, (f, o, Arc::clone(&t)));
        }
        Ok(t)
    }

    pub fn open(optimized: &Path, original: &Path) -> Result<Translator> {
        let data = std::fs::read(optimized).map_err(|e| Error::new(ErrorKind::Io, format!("cannot read {}: {e}", optimized.display())))?;
        let (file, mut opt_funcs) = functions(&data, optimized)?;
        let section = file
            .section_by_name(SECTION)
            .ok_or_else(|| bad(format!("{}: no {SECTION} section (not written by BOLT with -enable-bat)", optimized.display())))?;
        let bat = Bat::parse(section.data().map_err(|e| bad(format!("{}: {e}", optimized.display())))?)?;
        let orig_data =
            std::fs::read(original).map_err(|e| Error::new(ErrorKind::Io, format!("cannot read {}: {e}", original.display())))?;
        let (_, orig_funcs) = functions(&orig_data, original)?;
        let orig_by_name = unique_by_name(&orig_funcs);
        let opt_by_name = unique_by_name(&opt_funcs);
        let mut original_of = HashMap::new();
        for (name, &opt_addr) in &opt_by_name {
            if let Some(&orig) = orig_by_name.get(name) {
                original_of.insert(opt_addr, orig);
            }
        }
        let orig_set: std::collections::HashSet<&Func> = orig_funcs.iter().collect();
        let unmoved = opt_funcs.iter().filter(|f| orig_set.contains(f)).map(|f| (f.1, f.2)).collect();
        opt_funcs.sort_by_key(|f| f.1);
        let opt_text = Text::new(&file, data.clone());
        let orig_file = object::File::parse(&*orig_data).map_err(|e| bad(format!("{}: {e}", original.display())))?;
        let orig_text = Text::new(&orig_file, orig_data.clone());
        Ok(Translator { bat, optimized: opt_funcs, original_of, unmoved, opt_text, orig_text })
    }

    /// The table itself.
    pub fn bat(&self) -> &Bat {
        &self.bat
    }

    /// The original binary's address of optimized address `addr`, when
    /// `addr` lies in a function (or a split-off part) BOLT rewrote, or in
    /// one it left at the same place (same name, address and size).
    pub fn to_original(&self, addr: u64) -> Option<u64> {
        let i = self.optimized.partition_point(|f| f.1 <= addr).checked_sub(1)?;
        let (_, start, size) = &self.optimized[i];
        if addr >= start + size {
            return None;
        }
        // The enclosing symbol must be a fragment of the table, or unmoved.
        if !self.bat.fragments.contains_key(start) {
            return self.unmoved.contains(&(*start, *size)).then_some(addr);
        }
        let (hot, input) = self.bat.translate(addr)?;
        Some(self.original_of.get(&hot)? + u64::from(input))
    }

    /// The original's (start, end) of a straight run from `start` to `end`
    /// in the optimized binary, when the run's bytes sit in the original in
    /// the same order and at the same distances (one displacement for both
    /// ends and every table entry between them): then the original ran
    /// through the same instructions and block boundaries. A run whose
    /// blocks BOLT moved apart, or whose branches it resized, has no such
    /// original run: None.
    pub fn run_to_original(&self, start: u64, end: u64) -> Option<(u64, u64)> {
        let (s, e) = (self.to_original(start)?, self.to_original(end)?);
        if end < start || e.checked_sub(s)? != end - start {
            return None;
        }
        let i = self.optimized.partition_point(|f| f.1 <= start).checked_sub(1)?;
        let (_, fstart, size) = &self.optimized[i];
        if end >= fstart + size {
            return None;
        }
        if let Some(f) = self.bat.fragments.get(fstart) {
            let (lo, hi) = (start - fstart, end - fstart);
            let inside = f.entries.iter().filter(|x| (lo + 1..=hi).contains(&u64::from(x.0)));
            for &(out, _, _) in inside {
                let a = fstart + u64::from(out);
                if self.to_original(a)? != s + (a - start) {
                    return None;
                }
            }
            if !self.decodes_alike(start, end, s) {
                return None;
            }
        }
        Some((s, e))
    }

    /// The original's address of `addr` as the end of a branch record of
    /// the optimized binary: exact for a table entry (a block start or a
    /// branch) and in an unmoved function; past an entry, only when the
    /// code from the entry to `addr` decodes alike in both files. So a
    /// jump BOLT inserted (or a branch it resized) before `addr` gives None
    /// instead of a guess.
    pub fn branch_end_to_original(&self, addr: u64) -> Option<u64> {
        match self.entry_before(addr)? {
            Entry::Unmoved(o) => Some(o),
            Entry::At { base, orig } => (base == addr || self.decodes_alike(base, addr, orig)).then_some(orig + (addr - base)),
        }
    }

    /// Where optimized `addr` stands: in a function BOLT left in place (its
    /// original address), or after the table entry at `base` (which maps to
    /// `orig`).
    fn entry_before(&self, addr: u64) -> Option<Entry> {
        let i = self.optimized.partition_point(|f| f.1 <= addr).checked_sub(1)?;
        let (_, fstart, size) = &self.optimized[i];
        if addr >= fstart + size {
            return None;
        }
        let Some(f) = self.bat.fragments.get(fstart) else { return self.to_original(addr).map(Entry::Unmoved) };
        let off = addr - fstart;
        let k = f.entries.partition_point(|e| u64::from(e.0) <= off).checked_sub(1)?;
        let base = fstart + u64::from(f.entries[k].0);
        Some(Entry::At { base, orig: self.to_original(base)? })
    }

    /// The original's address of a PC sample at optimized `addr`: exact
    /// where the code from the preceding table entry to `addr` decodes
    /// alike in both files; past a difference (a jump BOLT inserted to make
    /// a fall-through explicit, a branch it resized), the original's last
    /// instruction before the difference, the code that ran just before.
    /// Never an address inside an original instruction, as the entry's
    /// offset alone would give on such code.
    pub fn sample_to_original(&self, addr: u64) -> Option<u64> {
        match self.entry_before(addr)? {
            Entry::Unmoved(o) => Some(o),
            Entry::At { base, orig } => Some(self.last_alike(base, addr, orig)),
        }
    }

    /// The original's address of the last instruction, at or before
    /// optimized `b`, up to which the code from `a` and from `s` decodes to
    /// the same lengths and kinds; `s` when the first already differs.
    fn last_alike(&self, a: u64, b: u64, s: u64) -> u64 {
        use loupe_calc::decode::decode;
        let n = b - a + 16;
        let (Some(x), Some(y)) = (self.opt_text.bytes(a, n), self.orig_text.bytes(s, n)) else { return s };
        let mut last = s;
        for (i, j) in decode(a, x).iter().zip(&decode(s, y)) {
            let kind = |f: &loupe_calc::decode::Flow| std::mem::discriminant(f);
            let alike = i.addr - a == j.addr - s && i.len == j.len && kind(&i.flow) == kind(&j.flow) && i.is_call == j.is_call;
            if !alike || i.addr > b {
                break;
            }
            last = j.addr;
        }
        last
    }

    /// Whether the optimized code from `a` through the instruction at `b`
    /// and the original's from `s` decode to instructions of the same
    /// lengths and kinds, `b` an instruction start.
    fn decodes_alike(&self, a: u64, b: u64, s: u64) -> bool {
        use loupe_calc::decode::decode;
        let n = b - a + 16;
        let (Some(x), Some(y)) = (self.opt_text.bytes(a, n), self.orig_text.bytes(s, n)) else { return false };
        for (i, j) in decode(a, x).iter().zip(&decode(s, y)) {
            let kind = |f: &loupe_calc::decode::Flow| std::mem::discriminant(f);
            if i.addr - a != j.addr - s || i.len != j.len || kind(&i.flow) != kind(&j.flow) || i.is_call != j.is_call {
                return false;
            }
            if i.addr >= b {
                return i.addr == b;
            }
        }
        false
    }
}

/// See [`Translator::entry_before`].
enum Entry {
    Unmoved(u64),
    At { base: u64, orig: u64 },
}

fn unique_by_name(funcs: &[Func]) -> HashMap<&str, u64> {
    let mut seen: HashMap<&str, Option<u64>> = HashMap::new();
    for (name, addr, _) in funcs {
        seen.entry(name).and_modify(|v| *v = None).or_insert(Some(*addr));
    }
    seen.into_iter().filter_map(|(n, a)| Some((n, a?))).collect()
}

/// BOLT's note holding the hand-built table of the tests: one hot fragment at 0x1000 (entries 0->0, 0x10->0x20
/// branch, 0x18->0x40) and its cold fragment at 0x2000 (skew 0x60: 0->0x60).
#[cfg(test)]
fn hand_built_note() -> Vec<u8> {
    let mut d = vec![1u8, 0x80, 0x20]; // 1 hot fragment, address 0x1000
    d.extend([0; 8]); // function hash
    d.extend([3, 0, 3, 1, 0]); // 3 blocks, 0 secondary, 3 entries, 1 equal, its branch bit
    d.extend([0]); // entry 0: delta 0, block
    d.extend([0; 8]);
    d.push(0); // hash + index delta
    d.extend([0x10, 0xc1, 0x00]); // entry 1: out +0x10, in 0x20<<1|1 = 0x41 (SLEB), branch: no hash
    d.extend([0x08, 0x3f]); // entry 2: out +8, in (0x40<<1) - 0x41 = 0x3f
    d.extend([0; 8]);
    d.push(1);
    // 1 cold fragment: 0x2000 - 0x1018 = 0xfe8, hot index +0, skew 0x60, 1 entry, 1 equal, bits 0.
    d.extend([1, 0xe8, 0x1f, 0, 0x60, 1, 1, 0, 0]);
    d.extend([0; 8]);
    d.push(0);
    let mut note = vec![5, 0, 0, 0];
    note.extend((d.len() as u32).to_le_bytes());
    note.extend(1u32.to_le_bytes());
    note.extend(b"BOLT\0\0\0\0");
    note.extend(&d);
    note
}

/// The translator of the tests over `bat`: the hot fragment `f` at 0x1000 (size 0x30) taken from an original
/// function at 0x5000, its cold part `f.cold.0` at 0x2000; all code one-byte nops but the original's 0x5041, a
/// two-byte `66 90`.
#[cfg(test)]
fn translator_over(bat: Bat) -> Translator {
    let mut orig = vec![0x90; 0x100];
    orig[0x41] = 0x66;
    Translator {
        bat,
        optimized: vec![("f".into(), 0x1000, 0x30), ("f.cold.0".into(), 0x2000, 0x10)],
        original_of: HashMap::from([(0x1000, 0x5000)]),
        unmoved: Default::default(),
        opt_text: Text { data: vec![0x90; 0x40], sections: vec![(0x1000, 0x30, 0), (0x2000, 0x10, 0x30)] },
        orig_text: Text { data: orig, sections: vec![(0x5000, 0x100, 0)] },
    }
}

/// The translator over the hand-built table, for other modules' tests.
#[cfg(test)]
pub(crate) fn hand_built_translator() -> Translator {
    translator_over(Bat::parse(&hand_built_note()).unwrap())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    // LEB128 decoding of hand-encoded values (LLVM's encodeULEB128/SLEB128 examples).
    #[test]
    fn leb128() {
        let mut r = Reader { buf: &[0xe5, 0x8e, 0x26, 0xc0, 0xbb, 0x78, 0x7f, 0x02], pos: 0 };
        assert_eq!(r.uleb().unwrap(), 624485);
        assert_eq!(r.sleb().unwrap(), -123456);
        assert_eq!(r.sleb().unwrap(), -1);
        assert_eq!(r.sleb().unwrap(), 2);
        assert!(r.byte().is_err());
    }

    // A hand-built table: one hot fragment at 0x1000 (entries 0->0, 0x10->0x20 branch, 0x18->0x40) and
    // its cold fragment at 0x2000 (skew 0x60: 0->0x60).
    #[test]
    fn hand_built_table() {
        let note = hand_built_note();
        let bat = Bat::parse(&note).unwrap();
        check_hand_built_runs(bat.clone());
        assert_eq!(bat.fragments[&0x1000].entries, vec![(0, 0, false), (0x10, 0x20, true), (0x18, 0x40, false)]);
        assert_eq!(bat.fragments[&0x2000].entries, vec![(0, 0x60, false)]);
        assert_eq!(bat.translate(0x1004), Some((0x1000, 4)));
        assert_eq!(bat.translate(0x1012), Some((0x1000, 0x22)));
        assert_eq!(bat.translate(0x101a), Some((0x1000, 0x42)));
        assert_eq!(bat.translate(0x2003), Some((0x1000, 0x63)));
        assert_eq!(bat.translate(0xfff), None);
    }

    // A table whose last entry has input offset u32::MAX - 1 (fuzz target bolt_bat's minimized input): an
    // address past that entry has no translation instead of overflowing the input offset.
    #[test]
    fn translating_past_an_entry_near_u32_max_is_none_not_overflow() {
        let d = [0x01, 0x0a, 0xff, 0xff, 0xff, 0x00, 0x00, 0x29, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x29, 0x00];
        let mut note = vec![5, 0, 0, 0];
        note.extend((d.len() as u32).to_le_bytes());
        note.extend(1u32.to_le_bytes());
        note.extend(b"BOLT\0\0\0\0");
        note.extend(d);
        let bat = Bat::parse(&note).unwrap();
        let f = &bat.fragments[&0x0a];
        let &(out, input, _) = f.entries.last().unwrap();
        let at = f.address + out as u64;
        assert_eq!(bat.translate(at), Some((0x0a, input)));
        assert_eq!(bat.translate(at + (u32::MAX - input) as u64 + 1), None);
    }

    // A table whose cold fragment's skew plus output offset passes 2^64 (fuzz target bolt_bat, found after the
    // merge of the manager): an entry out of range, not an overflow.
    #[test]
    fn skew_overflowing_the_input_offset_is_an_error_not_overflow() {
        #[rustfmt::skip]
        let d = [0x01, 0x03, 0x80, 0x20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x03, 0, 0x03, 0xc4, 0xc4, 0xc4, 0xff, 0xc4, 0xc4, 0xc4,
            0xc4, 0xf8, 0x80, 0xff, 0x03, 0, 0x03, 0xc4, 0xc4, 0xc4, 0xff, 0xc4, 0xc4, 0xc4, 0xc4, 0xf8, 0x80, 0xff, 0x2d, 0x20,
            0, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x6f, 0x01,
            0x80, 0x01];
        let mut note = vec![5, 0, 0, 0];
        note.extend((d.len() as u32).to_le_bytes());
        note.extend(1u32.to_le_bytes());
        note.extend(b"BOLT\0\0\0\0");
        note.extend(d);
        assert!(Bat::parse(&note).is_err());
    }

    /// Straight runs and branch ends through the hand-built table, the hot fragment `f` at 0x1000 (size 0x30)
    /// taken from an original function at 0x5000, its cold part `f.cold.0` at 0x2000; all code one-byte nops but
    /// the original's 0x5041, a two-byte `66 90`. A run inside one entry whose code decodes alike keeps its length
    /// (0x1000..0x1008 -> 0x5000..0x5008); one that does not (0x1018..0x101c: one-byte nops at 0x1019.. against
    /// the two-byte instruction at 0x5041) has no original run; nor one over the entry at 0x10 (original 0x20,
    /// not 0x14), nor one from the hot part into the cold one, nor a backward one. A branch end at an entry maps
    /// exactly (0x1018 -> 0x5040), past one only over code that decodes alike (0x1004 -> 0x5004; 0x101a: none).
    fn check_hand_built_runs(bat: Bat) {
        let t = translator_over(bat);
        assert_eq!(t.run_to_original(0x1000, 0x1008), Some((0x5000, 0x5008)));
        assert_eq!(t.run_to_original(0x1018, 0x101c), None);
        assert_eq!(t.run_to_original(0x1004, 0x1012), None);
        assert_eq!(t.run_to_original(0x1008, 0x2004), None);
        assert_eq!(t.run_to_original(0x1008, 0x1004), None);
        assert_eq!(t.branch_end_to_original(0x1018), Some(0x5040));
        assert_eq!(t.branch_end_to_original(0x1004), Some(0x5004));
        assert_eq!(t.branch_end_to_original(0x101a), None);
        assert_eq!(t.branch_end_to_original(0x2003), Some(0x5063));
        // A sample maps like a branch end where the code agrees, else to the original's last agreeing instruction.
        assert_eq!(t.sample_to_original(0x1004), Some(0x5004));
        assert_eq!(t.sample_to_original(0x1018), Some(0x5040));
        assert_eq!(t.sample_to_original(0x101a), Some(0x5040));
    }

    fn bolt_layout(dir: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
        let bolt = Path::new("/usr/lib/llvm-19/bin/llvm-bolt");
        assert!(bolt.is_file(), "{} missing: run scripts/setup.sh (Debian package bolt-19)", bolt.display());
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/workloads/layout.c");
        let (orig, out) = (dir.join("layout"), dir.join("layout.bolt"));
        let cc = Command::new("cc")
            .args(["-O2", "-g", "-fno-omit-frame-pointer", "-fno-inline-functions", "-fno-pie", "-no-pie", "-Wl,--emit-relocs", "-o"])
            .arg(&orig)
            .arg(&src)
            .status()
            .unwrap();
        assert!(cc.success());
        // The interpreter and its helpers are hot (as `loupe optimize export` writes them for this workload).
        let fdata = dir.join("p.fdata");
        std::fs::write(&fdata, "no_lbr loupe-block-counts\n1 run 0 1000\n1 mix 0 500\n1 step 0 500\n1 main 0 10\n").unwrap();
        let st = Command::new(bolt)
            .arg(&orig)
            .arg("-o")
            .arg(&out)
            .arg(format!("-data={}", fdata.display()))
            .args(crate::tool::default_opts())
            .output()
            .unwrap();
        assert!(st.status.success(), "{}", String::from_utf8_lossy(&st.stderr));
        (orig, out)
    }

    /// The code bytes at virtual address `va` of an ELF file.
    fn code_at(data: &[u8], va: u64) -> &[u8] {
        let f = object::File::parse(data).unwrap();
        let sec = f.sections().find(|s| (s.address()..s.address() + s.size()).contains(&va)).unwrap();
        &sec.data().unwrap()[(va - sec.address()) as usize..]
    }

    /// (agreeing, compared) first instructions of block-start entries, optimized vs original.
    fn same_first_instructions(t: &Translator, opt: &[u8], orig: &[u8]) -> (usize, usize) {
        let first = |data: &[u8], va: u64| loupe_calc::decode::decode(va, &code_at(data, va)[..16]).into_iter().next().unwrap();
        let (mut same, mut compared) = (0, 0);
        for f in t.bat().fragments.values() {
            let size = t.optimized.iter().find(|s| s.1 == f.address).unwrap().2;
            for &(out_off, _, _) in f.entries.iter().filter(|e| !e.2 && u64::from(e.0) < size) {
                let a = f.address + u64::from(out_off);
                let (x, y) = (first(opt, a), first(orig, t.to_original(a).unwrap()));
                let plain = |i: &loupe_calc::decode::Insn| i.flow == loupe_calc::decode::Flow::Next && !i.is_call;
                if plain(&x) && plain(&y) {
                    compared += 1;
                    same += usize::from(x.text == y.text);
                }
            }
        }
        (same, compared)
    }

    /// Straight runs of the optimized code from each table entry to the last instruction before the next
    /// (or the fragment's end): (kept, tried). Kept runs must decode, instruction for instruction, to the same
    /// lengths and (branches and calls aside, whose targets BOLT rewrites) the same text in the original.
    fn runs_decode_alike(t: &Translator, opt: &[u8], orig: &[u8]) -> (usize, usize) {
        use loupe_calc::decode::{decode, Flow, Insn};
        let (mut kept, mut tried) = (0, 0);
        for f in t.bat().fragments.values() {
            let size = t.optimized.iter().find(|s| s.1 == f.address).unwrap().2;
            let mut bounds: Vec<u64> = f.entries.iter().map(|e| u64::from(e.0)).filter(|&o| o < size).collect();
            bounds.push(size);
            bounds.dedup();
            for w in bounds.windows(2) {
                let (a, b) = (f.address + w[0], f.address + w[1]);
                let insns = decode(a, &code_at(opt, a)[..(b - a) as usize]);
                let Some(last) = insns.last() else { continue };
                tried += 1;
                let Some((s, e)) = t.run_to_original(a, last.addr) else { continue };
                kept += 1;
                assert_eq!(e - s, last.addr - a);
                let theirs = decode(s, &code_at(orig, s)[..(e - s) as usize + usize::from(last.len)]);
                let plain = |i: &Insn| i.flow == Flow::Next && !i.is_call;
                assert_eq!(insns.len(), theirs.len(), "run {a:#x}..{:#x} vs {s:#x}..{e:#x}", last.addr);
                for (x, y) in insns.iter().zip(&theirs) {
                    assert_eq!((x.addr - a, x.len), (y.addr - s, y.len));
                    assert!(!plain(x) || x.text == y.text, "{} vs {}", x.text, y.text);
                }
            }
        }
        (kept, tried)
    }

    // On a real BOLT 19 output of `layout`: every fragment of the table starts at a function symbol (hot:
    // NAME, cold: NAME.cold.N), each hot start maps to the same-named original function's start, and every
    // table entry maps inside that original function's bounds; a straight run inside one entry maps to a run
    // of the same instructions in the original.
    // The cache hands out the same translator while the files stay as they
    // are, and reads again once the optimized file is replaced (a new
    // version renamed over the path, as the manager installs one).
    #[test]
    fn cached_translator_follows_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let (orig, out) = bolt_layout(dir.path());
        let a = Translator::open_cached(&out, &orig).unwrap();
        let b = Translator::open_cached(&out, &orig).unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        let copy = dir.path().join("layout.bolt.new");
        std::fs::copy(&out, &copy).unwrap();
        std::fs::rename(&copy, &out).unwrap();
        let c = Translator::open_cached(&out, &orig).unwrap();
        assert!(!Arc::ptr_eq(&a, &c));
        assert!(Arc::ptr_eq(&c, &Translator::open_cached(&out, &orig).unwrap()));
        assert!(Translator::open_cached(&orig, &orig).is_err(), "a file without BOLT's table is refused, not cached");
    }

    #[test]
    fn real_bolt_output_maps_to_original_functions() {
        let dir = tempfile::tempdir().unwrap();
        let (orig, out) = bolt_layout(dir.path());
        let t = Translator::open(&out, &orig).unwrap();
        let orig_data = std::fs::read(&orig).unwrap();
        let (_, orig_funcs) = functions(&orig_data, &orig).unwrap();
        let opt_name: HashMap<u64, &str> = t.optimized.iter().map(|f| (f.1, f.0.as_str())).collect();
        let bounds: HashMap<&str, (u64, u64)> = orig_funcs.iter().map(|f| (f.0.as_str(), (f.1, f.1 + f.2))).collect();
        let hot: Vec<&Fragment> = t.bat().fragments.values().filter(|f| f.hot == f.address).collect();
        let names: Vec<&str> = hot.iter().map(|f| opt_name[&f.address]).collect();
        for want in ["run", "mix", "step", "main"] {
            assert!(names.contains(&want), "{want} not in the table: {names:?}");
        }
        let mut checked = 0;
        for f in t.bat().fragments.values() {
            let name = opt_name[&f.hot];
            let frag_name = opt_name[&f.address];
            assert!(frag_name == name || frag_name.starts_with(&format!("{name}.cold.")), "{frag_name} vs {name}");
            let (lo, hi) = bounds[name];
            if f.hot == f.address {
                assert_eq!(t.to_original(f.address), Some(lo), "{name}");
            }
            // Entries at the fragment's end are emptied blocks: they own no bytes.
            let size = t.optimized.iter().find(|s| s.1 == f.address).unwrap().2;
            for &(out_off, _, _) in f.entries.iter().filter(|e| u64::from(e.0) < size) {
                let a = t.to_original(f.address + u64::from(out_off)).unwrap();
                assert!((lo..hi).contains(&a), "{name}+{out_off:#x} -> {a:#x} outside {lo:#x}..{hi:#x}");
                checked += 1;
            }
        }
        assert!(checked > 20, "only {checked} entries");
        // Instruction-level ground truth: at a block start, the optimized and the original code begin with the
        // same instruction (branches and calls left out: BOLT rewrites their targets).
        let opt_data = std::fs::read(&out).unwrap();
        let (same, compared) = same_first_instructions(&t, &opt_data, &orig_data);
        assert!(compared >= 10 && same * 10 >= compared * 9, "{same} of {compared} block starts agree");
        let (kept, spans) = runs_decode_alike(&t, &opt_data, &orig_data);
        assert!(spans >= 10 && kept * 4 >= spans * 3, "{kept} of {spans} straight runs inside one table entry kept");
        // Every instruction of the rewritten code, taken as a PC sample, maps to an instruction start of the same
        // original function (ground truth: the original decoded from its symbols).
        let starts: std::collections::HashSet<u64> = orig_funcs
            .iter()
            .flat_map(|f| loupe_calc::decode::decode(f.1, &code_at(&orig_data, f.1)[..f.2 as usize]).into_iter().map(|i| i.addr))
            .collect();
        let (mut samples, mut inside_by_offset) = (0, 0);
        for f in t.bat().fragments.values() {
            let size = t.optimized.iter().find(|s| s.1 == f.address).unwrap().2;
            let (lo, hi) = bounds[opt_name[&f.hot]];
            for i in loupe_calc::decode::decode(f.address, &code_at(&opt_data, f.address)[..size as usize]) {
                let o = t.sample_to_original(i.addr).unwrap();
                assert!(starts.contains(&o) && (lo..hi).contains(&o), "{:#x} ({}) -> {o:#x}", i.addr, i.text);
                samples += 1;
                inside_by_offset += usize::from(t.to_original(i.addr).is_some_and(|x| !starts.contains(&x)));
            }
        }
        assert!(samples > 100, "only {samples} instructions");
        eprintln!("{samples} instructions as samples; by entry offset alone {inside_by_offset} land inside an original instruction");
        // Code BOLT did not rewrite stays where the original has it (cold_c never ran: not in the profile).
        let cold_c = orig_funcs.iter().find(|f| f.0 == "cold_c").unwrap();
        assert!(t.bat().fragments.values().all(|f| opt_name[&f.hot] != "cold_c"));
        assert_eq!(t.to_original(cold_c.1 + 4), Some(cold_c.1 + 4));
        // Addresses in no function are not translated.
        assert_eq!(t.to_original(0x10), None);
    }
}
