//! Function ranges of stripped code from the unwind tables: every function
//! a compiler emits carries a frame description entry (FDE) in
//! `.eh_frame` giving its first address and length, symbol table or not.
//! Where no symbol names an address, its FDE groups it with the rest of
//! its function, so views compare functions, not addresses.

use addr2line::gimli::{self, BaseAddresses, CieOrFde, EhFrame, UnwindSection};
use object::{Object, ObjectSection};

/// (start, length) of every FDE in the file's `.eh_frame`, ELF virtual
/// addresses, sorted by start; empty without one.
pub fn ranges(file: &object::File<'_>) -> Vec<(u64, u64)> {
    let Some(sec) = file.section_by_name(".eh_frame") else { return Vec::new() };
    let Ok(data) = sec.data() else { return Vec::new() };
    let endian = if file.is_little_endian() { gimli::RunTimeEndian::Little } else { gimli::RunTimeEndian::Big };
    let eh = EhFrame::new(data, endian);
    let mut bases = BaseAddresses::default().set_eh_frame(sec.address());
    if let Some(text) = file.section_by_name(".text") {
        bases = bases.set_text(text.address());
    }
    if let Some(got) = file.section_by_name(".got") {
        bases = bases.set_got(got.address());
    }
    let mut out = Vec::new();
    let mut entries = eh.entries(&bases);
    while let Ok(Some(entry)) = entries.next() {
        if let CieOrFde::Fde(partial) = entry {
            if let Ok(fde) = partial.parse(EhFrame::cie_from_offset) {
                if fde.len() > 0 {
                    out.push((fde.initial_address(), fde.len()));
                }
            }
        }
    }
    out.sort_unstable();
    out
}

/// The start of the range in `ranges` (sorted by start) that holds `addr`.
pub fn containing(ranges: &[(u64, u64)], addr: u64) -> Option<u64> {
    let i = ranges.partition_point(|(s, _)| *s <= addr);
    // Ranges do not nest in practice; a few back cover a short one inside a long one.
    ranges[..i].iter().rev().take(4).find(|(s, len)| addr < s + len).map(|(s, _)| *s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fde_ranges_of_this_binary_match_its_symbols() {
        // Checks on this test's own executable (symbols kept) that the functions of its symbol table are FDE
        // ranges, start and length both, and that an address inside one maps to its start.
        use object::{ObjectSymbol, SymbolKind};
        let data = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        let file = object::File::parse(&*data).unwrap();
        let r = ranges(&file);
        let funcs: Vec<(u64, u64)> =
            file.symbols().filter(|s| s.kind() == SymbolKind::Text && s.size() > 0).map(|s| (s.address(), s.size())).collect();
        assert!(funcs.len() > 100 && r.len() > 100, "{} functions, {} FDEs", funcs.len(), r.len());
        let matched = funcs.iter().filter(|f| r.binary_search(f).is_ok()).count();
        assert!(matched * 10 >= funcs.len() * 9, "only {matched} of {} functions are FDE ranges", funcs.len());
        let &(start, len) = funcs.iter().find(|f| f.1 > 8 && r.binary_search(f).is_ok()).unwrap();
        assert_eq!(containing(&r, start + len / 2), Some(start));
        assert_eq!(containing(&r, start + len - 1), Some(start));
    }
}
