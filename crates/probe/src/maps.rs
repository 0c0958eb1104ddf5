//! Where an image's ELF addresses are in a running process: its mappings in
//! `/proc/PID/maps` (parsed by `loupe_model::maps`) and its loadable segments.

use crate::{ElfAddr, RuntimeAddr};
use loupe_model::maps::Mapping;

/// What is added to the image's ELF addresses in this process: from the
/// file offset of `probe` (an address in a loadable segment, `(vaddr,
/// offset, filesz)` each) and the mapping of the file (by inode) that holds
/// that offset. `None` when the process has not mapped it.
pub fn load_bias(maps: &[Mapping], inode: u64, segments: &[(u64, u64, u64)], probe: ElfAddr) -> Option<i64> {
    let &(vaddr, offset, _) = segments.iter().find(|&&(v, _, size)| probe.0 >= v && probe.0 < v + size)?;
    let file_off = probe.0 - vaddr + offset;
    let m = maps.iter().find(|m| m.inode == inode && file_off >= m.pgoff && file_off < m.pgoff + (m.end - m.start))?;
    Some((m.start + (file_off - m.pgoff)) as i64 - probe.0 as i64)
}

/// The loadable segments of an ELF file: `(vaddr, offset, filesz)`.
pub fn segments(path: &std::path::Path) -> std::io::Result<Vec<(u64, u64, u64)>> {
    use object::read::elf::{ElfFile64, ProgramHeader};
    let data = std::fs::read(path)?;
    let elf = ElfFile64::<object::Endianness>::parse(&*data).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
    let e = elf.endian();
    Ok(elf
        .elf_program_headers()
        .iter()
        .filter(|p| p.p_type(e) == object::elf::PT_LOAD)
        .map(|p| (p.p_vaddr(e), p.p_offset(e), p.p_filesz(e)))
        .collect())
}

/// `va` in a process whose load bias is `bias`.
pub fn runtime(va: ElfAddr, bias: i64) -> RuntimeAddr {
    RuntimeAddr((va.0 as i64 + bias) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use loupe_model::maps::parse_maps;

    const MAPS: &str = "\
00400000-00401000 r--p 00000000 fe:01 5111 /tmp/modes
00401000-00402000 r-xp 00001000 fe:01 5111 /tmp/modes
55d0c0000000-55d0c0001000 r--p 00000000 fe:01 777 /usr/bin/my prog
55d0c0001000-55d0c0005000 r-xp 00001000 fe:01 777 /usr/bin/my prog
7ffd1000-7ffd2000 rw-p 00000000 00:00 0 [stack]";

    #[test]
    fn non_pie_has_no_bias_and_pie_its_load_address() {
        // Checks the bias from a segment's file offset: 0 for a non-PIE at its link address, the base for a PIE.
        let m = parse_maps(MAPS);
        let fixed = [(0x400000, 0, 0x1000), (0x401000, 0x1000, 0x1000)];
        assert_eq!(load_bias(&m, 5111, &fixed, ElfAddr(0x401560)), Some(0));
        let pie = [(0, 0, 0x1000), (0x1000, 0x1000, 0x4000)];
        let bias = load_bias(&m, 777, &pie, ElfAddr(0x1530)).unwrap();
        assert_eq!(runtime(ElfAddr(0x1530), bias), RuntimeAddr(0x55d0c0001530));
        assert_eq!(load_bias(&m, 999, &pie, ElfAddr(0x1530)), None);
    }
}
