//! Synthetic `name@plt` symbols for the procedure linkage table, as perf
//! and `objdump -d` show them: no symbol table names PLT entries, so
//! without these a call through the PLT is charged to whatever symbol
//! precedes `.plt` (usually `_init`).
//!
//! Each x86-64 entry (in `.plt`, `.plt.sec` or `.plt.got`) jumps through
//! its GOT slot with `jmp *disp32(%rip)`; the dynamic relocation of that
//! slot names the imported function (an `IRELATIVE` one is named
//! `*ABS*+0xADDR`, as objdump does). Decoding the jump, not counting
//! entries, keeps this right whatever the entry size and header.

use object::{Architecture, Object, ObjectSection, ObjectSymbol, ObjectSymbolTable, RelocationTarget};
use std::collections::HashMap;

/// The sections that hold PLT entries.
const SECTIONS: [&str; 3] = [".plt", ".plt.sec", ".plt.got"];

/// (address, size, `name@plt`) of every PLT entry whose GOT slot has a
/// dynamic relocation, sorted by address; none on other architectures.
pub fn symbols(file: &object::File<'_>) -> Vec<(u64, u64, String)> {
    if file.architecture() != Architecture::X86_64 {
        return Vec::new();
    }
    let slots = got_slots(file);
    let mut out = Vec::new();
    for name in SECTIONS {
        let Some(sec) = file.section_by_name(name) else { continue };
        let Ok(bytes) = sec.data() else { continue };
        out.extend(entries(sec.address(), bytes, &slots));
    }
    out.sort();
    out
}

/// GOT slot address -> the name of what the dynamic linker writes there.
fn got_slots(file: &object::File<'_>) -> HashMap<u64, String> {
    let dynsyms = file.dynamic_symbol_table();
    let mut slots = HashMap::new();
    for (slot, rel) in file.dynamic_relocations().into_iter().flatten() {
        let name = match rel.target() {
            RelocationTarget::Symbol(i) => dynsyms.as_ref().and_then(|t| t.symbol_by_index(i).ok()).and_then(|s| {
                let n = s.name().ok()?.split('@').next()?;
                (!n.is_empty()).then(|| crate::demangle(n))
            }),
            RelocationTarget::Absolute if rel.addend() > 0 => Some(format!("*ABS*+0x{:x}", rel.addend())),
            _ => None,
        };
        if let Some(n) = name {
            slots.insert(slot, n);
        }
    }
    slots
}

/// The entries of one PLT section at `base`: each `jmp *disp32(%rip)` to a
/// known slot starts an entry at the jump, or at its `bnd` and `endbr64`
/// prefixes; an entry ends where the next begins (or the section ends).
fn entries(base: u64, bytes: &[u8], slots: &HashMap<u64, String>) -> Vec<(u64, u64, String)> {
    let mut found: Vec<(u64, String)> = Vec::new();
    let mut i = 0;
    while i + 6 <= bytes.len() {
        if bytes[i] != 0xff || bytes[i + 1] != 0x25 {
            i += 1;
            continue;
        }
        let disp = i32::from_le_bytes(bytes[i + 2..i + 6].try_into().expect("4 bytes"));
        let target = (base + i as u64 + 6).wrapping_add_signed(disp as i64);
        if let Some(name) = slots.get(&target) {
            let mut start = i;
            if start >= 1 && bytes[start - 1] == 0xf2 {
                start -= 1;
            }
            if start >= 4 && bytes[start - 4..start] == [0xf3, 0x0f, 0x1e, 0xfa] {
                start -= 4;
            }
            found.push((base + start as u64, format!("{name}@plt")));
        }
        i += 6;
    }
    let end = base + bytes.len() as u64;
    let starts: Vec<u64> = found.iter().map(|(a, _)| *a).chain([end]).collect();
    found.into_iter().enumerate().map(|(k, (a, n))| (a, starts[k + 1] - a, n)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lazy_and_ibt_entries_are_found_by_their_jump() {
        // Checks a lazy .plt (header, then jmp/push/jmp entries) and an IBT .plt.sec entry (endbr64; bnd jmp),
        // against slots known by construction; a jump to an unknown slot (the header's) makes no entry.
        let rip_rel = |at: u64, target: u64| ((target as i64 - (at as i64 + 6)) as i32).to_le_bytes();
        let mut plt = vec![0xff, 0x35, 0, 0, 0, 0, 0xff, 0x25];
        plt.extend(rip_rel(0x1006, 0x9000));
        plt.extend([0x0f, 0x1f, 0x40, 0x00]);
        for (k, slot) in [0x9018u64, 0x9020].iter().enumerate() {
            let at = 0x1010 + 16 * k as u64;
            plt.extend([0xff, 0x25]);
            plt.extend(rip_rel(at, *slot));
            plt.extend([0x68, k as u8, 0, 0, 0, 0xe9, 0xe0, 0xff, 0xff, 0xff]);
        }
        let slots: HashMap<u64, String> =
            [(0x9018, "free".to_string()), (0x9020, "malloc".to_string()), (0x9028, "puts".to_string())].into();
        assert_eq!(entries(0x1000, &plt, &slots), [(0x1010, 16, "free@plt".into()), (0x1020, 16, "malloc@plt".into())]);
        let mut sec = vec![0xf3, 0x0f, 0x1e, 0xfa, 0xf2, 0xff, 0x25];
        sec.extend(rip_rel(0x2005, 0x9028));
        sec.extend([0x0f, 0x1f, 0x44, 0x00, 0x00]);
        assert_eq!(entries(0x2000, &sec, &slots), [(0x2000, 16, "puts@plt".into())]);
    }

    #[test]
    fn every_objdump_plt_label_of_real_binaries() {
        // Checks against `objdump -d`: each `<name@plt>` label of ls and libc is a synthesized symbol at the
        // same address with the same name (objdump is the oracle; skipped where binutils is missing).
        for path in ["/bin/ls", "/usr/lib/x86_64-linux-gnu/libc.so.6"] {
            let Ok(out) = std::process::Command::new("objdump").args(["-d", "--no-show-raw-insn", path]).output() else { return };
            let text = String::from_utf8_lossy(&out.stdout);
            let want: Vec<(u64, String)> = text
                .lines()
                .filter_map(|l| {
                    let (addr, rest) = l.split_once(" <")?;
                    let name = rest.strip_suffix(">:")?;
                    name.ends_with("@plt").then(|| (u64::from_str_radix(addr, 16).ok(), name.to_string()))
                })
                .filter_map(|(a, n)| Some((a?, n)))
                .collect();
            assert!(want.len() > 10, "{path}: objdump shows only {} PLT labels", want.len());
            let data = std::fs::read(path).unwrap();
            let got: Vec<(u64, String)> = symbols(&object::File::parse(&*data).unwrap()).into_iter().map(|(a, _, n)| (a, n)).collect();
            assert_eq!(got, want, "{path}");
        }
    }
}
