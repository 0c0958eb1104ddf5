//! Parsing `/proc/PID/maps` text: the start-up scan for processes that were
//! alive before the sampler opened (DCPI §4.3.2, third source).

/// One executable mapping from a maps file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MapsLine {
    pub start: u64,
    pub end: u64,
    pub pgoff: u64,
    pub perms: String,
    pub inode: u64,
    /// Path, `[vdso]`, or empty for anonymous memory. A trailing
    /// " (deleted)" is removed and reported in `deleted`.
    pub path: String,
    pub deleted: bool,
}

impl MapsLine {
    pub fn is_exec(&self) -> bool {
        self.perms.as_bytes().get(2) == Some(&b'x')
    }
}

/// Parses one line; `None` for lines that are not in the maps format.
pub fn parse_line(line: &str) -> Option<MapsLine> {
    let mut it = line.splitn(6, ' ');
    let range = it.next()?;
    let perms = it.next()?.to_string();
    let pgoff = u64::from_str_radix(it.next()?, 16).ok()?;
    let _dev = it.next()?;
    let inode = it.next()?.parse().ok()?;
    let mut path = it.next().unwrap_or("").trim_start().to_string();
    let (start, end) = range.split_once('-')?;
    let deleted = path.ends_with(" (deleted)");
    if deleted {
        path.truncate(path.len() - " (deleted)".len());
    }
    Some(MapsLine {
        start: u64::from_str_radix(start, 16).ok()?,
        end: u64::from_str_radix(end, 16).ok()?,
        pgoff,
        perms,
        inode,
        path,
        deleted,
    })
}

/// The executable mappings of a maps file.
pub fn parse_exec_mappings(text: &str) -> Vec<MapsLine> {
    text.lines().filter_map(parse_line).filter(MapsLine::is_exec).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAPS: &str = "\
55d0c8a00000-55d0c8a02000 r--p 00000000 fe:00 1234    /usr/bin/cat
55d0c8a02000-55d0c8a07000 r-xp 00002000 fe:00 1234    /usr/bin/cat
7f1e2c000000-7f1e2c021000 rw-p 00000000 00:00 0
7f1e2c228000-7f1e2c3bd000 r-xp 00028000 fe:00 5678    /usr/lib/x86_64-linux-gnu/libc.so.6
7f1e2c400000-7f1e2c401000 r-xp 00001000 fe:00 999     /tmp/old lib.so (deleted)
7ffd4b5f2000-7ffd4b5f4000 r-xp 00000000 00:00 0                          [vdso]
";

    #[test]
    fn keeps_only_exec_mappings_with_offsets_and_paths() {
        // Checks exec filtering, hex fields, paths with spaces and the deleted marker.
        let m = parse_exec_mappings(MAPS);
        assert_eq!(m.len(), 4);
        assert_eq!(m[0].start, 0x55d0c8a02000);
        assert_eq!(m[0].pgoff, 0x2000);
        assert_eq!(m[0].path, "/usr/bin/cat");
        assert_eq!(m[1].path, "/usr/lib/x86_64-linux-gnu/libc.so.6");
        assert_eq!(m[2].path, "/tmp/old lib.so");
        assert!(m[2].deleted);
        assert_eq!(m[3].path, "[vdso]");
    }

    #[test]
    fn rejects_garbage() {
        // Checks that malformed lines are skipped rather than misparsed.
        assert!(parse_line("hello world").is_none());
        assert!(parse_line("zz-10 r-xp 0 00:00 0 /x").is_none());
    }
}
