//! JIT code named from what the runtime wrote about it, with perf's
//! conventions: the text map `/tmp/perf-PID.map` (`START SIZE name` a
//! line, hex, as Node's `--perf-basic-prof` and the JVM's
//! `Compiler.perfmap` write it) and the binary jitdump (`jit-PID.dump`:
//! code loads, moves and source lines, as `--perf-prof` writes it; layout
//! in the Linux tree's `tools/perf/Documentation/jitdump-specification.txt`).
//!
//! Offsets into a JIT image are absolute addresses in the process (the
//! collector stores anonymous memory that way). Code at an address can be
//! replaced: a later record wins over every earlier one it overlaps.

use crate::{Reason, Symbol};
use loupe_model::ImageOffset;
use std::collections::BTreeMap;
use std::path::Path;

/// (address, line, file) of a jitdump's debug info.
type Line = (u64, u32, String);
/// Debug info waiting for the load of the code at its address.
type Pending = Vec<(u64, Vec<Line>)>;

/// One piece of JIT code and what is known about it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Code {
    end: u64,
    name: String,
    /// (address, line, file) from a jitdump's debug info, sorted by address.
    lines: Vec<Line>,
}

/// The JIT code of one process, by start address.
#[derive(Clone, Debug, Default)]
pub struct JitSymbols {
    code: BTreeMap<u64, Code>,
}

impl JitSymbols {
    /// Reads a perf map and a jitdump (either may be absent); the jitdump's
    /// records are applied after the map's. None when neither file exists.
    pub fn load(map: Option<&Path>, dump: Option<&Path>) -> Result<Option<JitSymbols>, Reason> {
        let map_text = map.and_then(|p| std::fs::read(p).ok());
        let dump_bytes = dump.and_then(|p| std::fs::read(p).ok());
        if map_text.is_none() && dump_bytes.is_none() {
            return Ok(None);
        }
        let mut s = JitSymbols::default();
        if let Some(t) = map_text {
            s.add_perf_map(&String::from_utf8_lossy(&t));
        }
        if let Some(b) = dump_bytes {
            s.add_jitdump(&b).map_err(|e| Reason::Other(format!("{}: {e}", dump.unwrap_or(Path::new("?")).display())))?;
        }
        Ok(Some(s))
    }

    /// Adds the lines of a perf map; malformed lines are skipped (the
    /// runtime may be writing the last one right now).
    pub fn add_perf_map(&mut self, text: &str) {
        for line in text.lines() {
            let mut it = line.trim_start().splitn(3, ' ');
            let (Some(start), Some(size), Some(name)) = (it.next(), it.next(), it.next()) else { continue };
            let (Some(start), Some(size)) = (hex(start), hex(size)) else { continue };
            if size > 0 {
                self.insert(start, size, name.trim_end().to_string(), Vec::new());
            }
        }
    }

    /// Adds the records of a jitdump. A torn last record (the runtime was
    /// still writing) ends the file quietly; a bad header is an error.
    pub fn add_jitdump(&mut self, b: &[u8]) -> Result<(), String> {
        const MAGIC: u32 = 0x4A69_5444;
        if b.len() < 40 || u32_at(b, 0) != Some(MAGIC) {
            return Err("not a jitdump file (no JiTD magic; a file of the other byte order is not read)".into());
        }
        let header_size = u32_at(b, 8).unwrap_or(40) as usize;
        let mut pending_lines: Pending = Vec::new();
        let mut at = header_size;
        while let (Some(id), Some(size)) = (u32_at(b, at), u32_at(b, at + 4)) {
            let size = size as usize;
            if size < 16 || at + size > b.len() {
                break;
            }
            let body = &b[at + 16..at + size];
            match id {
                0 => self.code_load(body, &mut pending_lines),
                1 => self.code_move(body),
                2 => pending_lines.extend(debug_info(body)),
                _ => {}
            }
            at += size;
        }
        Ok(())
    }

    /// JIT_CODE_LOAD: pid, tid, vma, code_addr, code_size, index, name.
    fn code_load(&mut self, body: &[u8], pending: &mut Pending) {
        let (Some(addr), Some(size)) = (u64_at(body, 16), u64_at(body, 24)) else { return };
        let Some(name) = cstr(body, 40) else { return };
        // Debug info comes before the load of the code it describes.
        let lines = match pending.iter().position(|(a, _)| *a == addr) {
            Some(i) => pending.swap_remove(i).1,
            None => Vec::new(),
        };
        if size > 0 {
            self.insert(addr, size, name.0, lines);
        }
    }

    /// JIT_CODE_MOVE: pid, tid, vma, old_code_addr, new_code_addr, size.
    fn code_move(&mut self, body: &[u8]) {
        let (Some(old), Some(new), Some(size)) = (u64_at(body, 16), u64_at(body, 24), u64_at(body, 32)) else { return };
        let Some(c) = self.code.remove(&old) else { return };
        let lines = c.lines.iter().map(|(a, l, f)| (a.wrapping_sub(old).wrapping_add(new), *l, f.clone())).collect();
        self.insert(new, size, c.name, lines);
    }

    fn insert(&mut self, start: u64, size: u64, name: String, mut lines: Vec<Line>) {
        let end = start.saturating_add(size);
        let overlapping: Vec<u64> = self.code.range(..end).rev().take_while(|(_, c)| c.end > start).map(|(s, _)| *s).collect();
        for s in overlapping {
            self.code.remove(&s);
        }
        lines.sort_by_key(|l| l.0);
        self.code.insert(start, Code { end, name, lines });
    }

    /// Names the code at one address.
    pub fn symbolize(&self, addr: ImageOffset) -> Result<Symbol, Reason> {
        let (start, c) = self.code.range(..=addr.0).next_back().filter(|(_, c)| addr.0 < c.end).ok_or(Reason::NoSymbols)?;
        let i = c.lines.partition_point(|l| l.0 <= addr.0);
        let line = i.checked_sub(1).map(|i| &c.lines[i]);
        Ok(Symbol {
            procedure: c.name.clone(),
            procedure_start: ImageOffset(*start),
            file: line.map(|l| l.2.clone()),
            line: line.map(|l| l.1),
        })
    }

    pub fn len(&self) -> usize {
        self.code.len()
    }

    pub fn is_empty(&self) -> bool {
        self.code.is_empty()
    }
}

/// JIT_CODE_DEBUG_INFO: code_addr, count, then (addr, line, discriminator,
/// file name) entries; a name of "\xff" repeats the previous one.
fn debug_info(body: &[u8]) -> Option<(u64, Vec<Line>)> {
    let code = u64_at(body, 0)?;
    let n = u64_at(body, 8)?;
    let mut at = 16;
    let mut out: Vec<Line> = Vec::new();
    for _ in 0..n {
        let (addr, line) = (u64_at(body, at)?, u32_at(body, at + 8)?);
        let (name, used) = cstr(body, at + 16)?;
        let name = if name == "\u{fffd}" { out.last().map(|l| l.2.clone()).unwrap_or_default() } else { name };
        out.push((addr, line, name));
        at += 16 + used;
    }
    Some((code, out))
}

fn hex(s: &str) -> Option<u64> {
    u64::from_str_radix(s.strip_prefix("0x").unwrap_or(s), 16).ok()
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at.checked_add(4)?)?.try_into().ok()?))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at.checked_add(8)?)?.try_into().ok()?))
}

/// A NUL-terminated string at `at` and the bytes it took, NUL included.
fn cstr(b: &[u8], at: usize) -> Option<(String, usize)> {
    let rest = b.get(at..)?;
    let len = rest.iter().position(|&c| c == 0)?;
    Some((String::from_utf8_lossy(&rest[..len]).into_owned(), len + 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name_at(s: &JitSymbols, addr: u64) -> Option<String> {
        s.symbolize(ImageOffset(addr)).ok().map(|s| s.procedure)
    }

    #[test]
    fn perf_map_lines_with_and_without_0x() {
        // Checks Node's bare-hex and the JVM's 0x-prefixed lines, names with spaces, and the end of each range.
        let mut s = JitSymbols::default();
        s.add_perf_map(
            "3ef8e1a0b0c0 2c LazyCompile:*hot /tmp/x.js:3:13\n0x00007f0000001000 0x0000000000000100 void Hot.spin(long)\ngarbage\n",
        );
        assert_eq!(name_at(&s, 0x3ef8e1a0b0c0).as_deref(), Some("LazyCompile:*hot /tmp/x.js:3:13"));
        assert_eq!(name_at(&s, 0x3ef8e1a0b0c0 + 0x2b).as_deref(), Some("LazyCompile:*hot /tmp/x.js:3:13"));
        assert_eq!(name_at(&s, 0x3ef8e1a0b0c0 + 0x2c), None);
        let sym = s.symbolize(ImageOffset(0x7f0000001080)).unwrap();
        assert_eq!((sym.procedure.as_str(), sym.procedure_start), ("void Hot.spin(long)", ImageOffset(0x7f0000001000)));
        assert_eq!(s.len(), 2);
    }

    #[test]
    fn later_code_replaces_what_it_overlaps() {
        // Checks that code placed over older code hides it entirely, as when a runtime reuses its code cache.
        let mut s = JitSymbols::default();
        s.add_perf_map("1000 100 old_a\n1100 100 old_b\n1080 100 new\n");
        assert_eq!(name_at(&s, 0x1000), None);
        assert_eq!(name_at(&s, 0x1090).as_deref(), Some("new"));
        assert_eq!(name_at(&s, 0x1180), None);
    }

    /// A jitdump built field by field after the specification.
    fn record(id: u32, body: &[u8]) -> Vec<u8> {
        let mut r = Vec::new();
        r.extend(id.to_le_bytes());
        r.extend((16 + body.len() as u32).to_le_bytes());
        r.extend(7u64.to_le_bytes());
        r.extend(body);
        r
    }

    fn load_body(addr: u64, size: u64, name: &str) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend(42u32.to_le_bytes());
        b.extend(42u32.to_le_bytes());
        b.extend(addr.to_le_bytes());
        b.extend(addr.to_le_bytes());
        b.extend(size.to_le_bytes());
        b.extend(1u64.to_le_bytes());
        b.extend(name.as_bytes());
        b.push(0);
        b.extend(vec![0x90; size as usize]);
        b
    }

    fn jitdump(records: &[Vec<u8>]) -> Vec<u8> {
        let mut b = Vec::new();
        for v in [0x4A69_5444u32, 1, 40, 62, 0, 42] {
            b.extend(v.to_le_bytes());
        }
        b.extend(0u64.to_le_bytes());
        b.extend(0u64.to_le_bytes());
        for r in records {
            b.extend(r);
        }
        b
    }

    #[test]
    fn jitdump_loads_moves_and_lines() {
        // Checks code loads, a move to a new address, debug-info lines (with the repeated-name marker) and a torn last record.
        let mut dbg = Vec::new();
        dbg.extend(0x5000u64.to_le_bytes());
        dbg.extend(2u64.to_le_bytes());
        for (addr, line, name) in [(0x5000u64, 10u32, &b"/app/x.js"[..]), (0x5010, 12, &b"\xff"[..])] {
            dbg.extend(addr.to_le_bytes());
            dbg.extend(line.to_le_bytes());
            dbg.extend(0u32.to_le_bytes());
            dbg.extend(name);
            dbg.push(0);
        }
        let mut mv = Vec::new();
        for v in [42u32, 42] {
            mv.extend(v.to_le_bytes());
        }
        for v in [0x6000u64, 0x6000, 0x9000, 0x20, 2] {
            mv.extend(v.to_le_bytes());
        }
        let mut bytes = jitdump(&[
            record(2, &dbg),
            record(0, &load_body(0x5000, 0x40, "hot")),
            record(0, &load_body(0x6000, 0x20, "moved")),
            record(1, &mv),
        ]);
        bytes.extend(&record(0, &load_body(0x7000, 0x10, "torn"))[..20]);
        let mut s = JitSymbols::default();
        s.add_jitdump(&bytes).unwrap();
        let at = s.symbolize(ImageOffset(0x5014)).unwrap();
        assert_eq!((at.procedure.as_str(), at.file.as_deref(), at.line), ("hot", Some("/app/x.js"), Some(12)));
        assert_eq!(s.symbolize(ImageOffset(0x5004)).unwrap().line, Some(10));
        assert_eq!(name_at(&s, 0x9010).as_deref(), Some("moved"));
        assert_eq!(name_at(&s, 0x7000), None);
        assert!(JitSymbols::default().add_jitdump(b"not a jitdump at all, just forty bytes..").is_err());
    }
}
