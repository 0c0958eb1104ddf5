//! Where an image's ELF addresses are in a running process: its mappings in
//! `/proc/PID/maps` and its loadable segments.

use crate::{ElfAddr, RuntimeAddr};

/// One line of `/proc/PID/maps`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mapping {
    pub start: u64,
    pub end: u64,
    pub offset: u64,
    pub inode: u64,
    pub path: String,
}

/// Parses `/proc/PID/maps` text; lines that do not parse are skipped.
pub fn parse_maps(text: &str) -> Vec<Mapping> {
    text.lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (range, _perms, off, _dev, inode) = (f.next()?, f.next()?, f.next()?, f.next()?, f.next()?);
            let (s, e) = range.split_once('-')?;
            Some(Mapping {
                start: u64::from_str_radix(s, 16).ok()?,
                end: u64::from_str_radix(e, 16).ok()?,
                offset: u64::from_str_radix(off, 16).ok()?,
                inode: inode.parse().ok()?,
                path: f.collect::<Vec<_>>().join(" "),
            })
        })
        .collect()
}

/// What is added to the image's ELF addresses in this process: from the
/// file offset of `probe` (an address in a loadable segment, `(vaddr,
/// offset, filesz)` each) and the mapping of the file (by inode) that holds
/// that offset. `None` when the process has not mapped it.
pub fn load_bias(maps: &[Mapping], inode: u64, segments: &[(u64, u64, u64)], probe: ElfAddr) -> Option<i64> {
    let &(vaddr, offset, _) = segments.iter().find(|&&(v, _, size)| probe.0 >= v && probe.0 < v + size)?;
    let file_off = probe.0 - vaddr + offset;
    let m = maps.iter().find(|m| m.inode == inode && file_off >= m.offset && file_off < m.offset + (m.end - m.start))?;
    Some((m.start + (file_off - m.offset)) as i64 - probe.0 as i64)
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

    const MAPS: &str = "\
00400000-00401000 r--p 00000000 fe:01 5111 /tmp/modes
00401000-00402000 r-xp 00001000 fe:01 5111 /tmp/modes
55d0c0000000-55d0c0001000 r--p 00000000 fe:01 777 /usr/bin/my prog
55d0c0001000-55d0c0005000 r-xp 00001000 fe:01 777 /usr/bin/my prog
7ffd1000-7ffd2000 rw-p 00000000 00:00 0 [stack]
garbage line";

    #[test]
    fn maps_lines_parse_with_spaces_in_paths() {
        // Checks the fields of /proc/PID/maps text, a path with a space, and that a bad line is skipped.
        let m = parse_maps(MAPS);
        assert_eq!(m.len(), 5);
        assert_eq!(
            m[3],
            Mapping { start: 0x55d0c0001000, end: 0x55d0c0005000, offset: 0x1000, inode: 777, path: "/usr/bin/my prog".into() }
        );
    }

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
