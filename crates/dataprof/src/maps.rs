//! A process's memory map (/proc/PID/maps text), parsed; and where an
//! address falls in it: an image's code or data, the heap, a stack, an
//! anonymous mapping.

pub use loupe_model::maps::Mapping;

/// Every mapping of a maps file.
pub fn parse(text: &str) -> Vec<Mapping> {
    loupe_model::maps::parse_maps(text)
}

/// Where an address lies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Region<'a> {
    /// Inside a file mapping (code, read-only or initialized data), or in
    /// the anonymous mapping right after one (its .bss): the image's path
    /// and the mapping that gives its load address.
    Image {
        path: &'a str,
        file_offset: u64,
    },
    /// Anonymous .bss right after the image's last file mapping.
    Bss {
        path: &'a str,
        past_end: u64,
        last: &'a Mapping,
    },
    Heap,
    Stack,
    Anon,
    Unmapped,
}

pub fn find(maps: &[Mapping], addr: u64) -> Option<(usize, &Mapping)> {
    maps.iter().enumerate().find(|(_, m)| m.start <= addr && addr < m.end)
}

pub fn region(maps: &[Mapping], addr: u64) -> Region<'_> {
    let Some((i, m)) = find(maps, addr) else { return Region::Unmapped };
    if m.is_file() {
        return Region::Image { path: &m.path, file_offset: addr - m.start + m.pgoff };
    }
    match m.path.as_str() {
        "[heap]" => return Region::Heap,
        p if p.starts_with("[stack") => return Region::Stack,
        _ => {}
    }
    // .bss is the anonymous mapping directly after the image's writable data.
    if let Some(prev) = i.checked_sub(1).map(|j| &maps[j]) {
        if prev.is_file() && prev.end == m.start && prev.perms.starts_with("rw") {
            return Region::Bss { path: &prev.path, past_end: addr - prev.end, last: prev };
        }
    }
    Region::Anon
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAPS: &str = "\
555555554000-555555555000 r--p 00000000 08:01 123 /usr/bin/prog
555555555000-555555556000 r-xp 00001000 08:01 123 /usr/bin/prog
555555557000-555555558000 rw-p 00002000 08:01 123 /usr/bin/prog
555555558000-555555559000 rw-p 00000000 00:00 0 
555555559000-55555557a000 rw-p 00000000 00:00 0                          [heap]
7ffff7000000-7ffff7100000 rw-p 00000000 00:00 0 
7ffffffde000-7ffffffff000 rw-p 00000000 00:00 0                          [stack]
";

    #[test]
    fn regions_of_addresses() {
        // Checks code, data, .bss (anonymous after rw data), heap, stack, other anonymous and unmapped addresses.
        let m = parse(MAPS);
        assert_eq!(m.len(), 7);
        assert_eq!(region(&m, 0x555555555010), Region::Image { path: "/usr/bin/prog", file_offset: 0x1010 });
        assert_eq!(region(&m, 0x555555557008), Region::Image { path: "/usr/bin/prog", file_offset: 0x2008 });
        assert!(matches!(region(&m, 0x555555558010), Region::Bss { path: "/usr/bin/prog", past_end: 0x10, .. }));
        assert_eq!(region(&m, 0x55555555a000), Region::Heap);
        assert_eq!(region(&m, 0x7ffffffde100), Region::Stack);
        assert_eq!(region(&m, 0x7ffff7000100), Region::Anon);
        assert_eq!(region(&m, 0x10), Region::Unmapped);
    }
}
