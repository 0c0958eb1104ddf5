//! Lines of `/proc/PID/maps`, parsed once for every tool: the collector's
//! start-up scan (DCPI §4.3.2, third source), the uprobe-based tools that place
//! a runtime address in its image (locks, allocation sites) and the data
//! profiler's address regions.

/// One line of a maps file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mapping {
    pub start: u64,
    pub end: u64,
    /// File offset of `start` (what `mmap`'s pgoff speaks).
    pub pgoff: u64,
    pub perms: String,
    pub inode: u64,
    /// Path (spaces kept), `[heap]`, `[stack]`, `[vdso]`, ..., or empty for
    /// anonymous memory. A trailing " (deleted)" is removed and reported in
    /// `deleted`.
    pub path: String,
    pub deleted: bool,
}

impl Mapping {
    pub fn is_exec(&self) -> bool {
        self.perms.as_bytes().get(2) == Some(&b'x')
    }

    /// Backed by a file (not anonymous memory or a `[...]` region).
    pub fn is_file(&self) -> bool {
        self.path.starts_with('/')
    }
}

/// Parses one line; `None` for lines that are not in the maps format.
pub fn parse_line(line: &str) -> Option<Mapping> {
    let mut it = line.splitn(6, ' ');
    let range = it.next()?;
    let perms = it.next()?.to_string();
    let pgoff = u64::from_str_radix(it.next()?, 16).ok()?;
    let _dev = it.next()?;
    let inode = it.next()?.parse().ok()?;
    let mut path = it.next().unwrap_or("").trim().to_string();
    let (start, end) = range.split_once('-')?;
    let deleted = path.ends_with(" (deleted)");
    if deleted {
        path.truncate(path.len() - " (deleted)".len());
    }
    Some(Mapping {
        start: u64::from_str_radix(start, 16).ok()?,
        end: u64::from_str_radix(end, 16).ok()?,
        pgoff,
        perms,
        inode,
        path,
        deleted,
    })
}

/// Every mapping of a maps file, anonymous ones included.
pub fn parse_maps(text: &str) -> Vec<Mapping> {
    text.lines().filter_map(parse_line).collect()
}

/// The executable mappings of a maps file.
pub fn parse_exec_mappings(text: &str) -> Vec<Mapping> {
    text.lines().filter_map(parse_line).filter(Mapping::is_exec).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAPS: &str = "\
55d0c8a00000-55d0c8a02000 r--p 00000000 fe:00 1234    /usr/bin/cat
55d0c8a02000-55d0c8a07000 r-xp 00002000 fe:00 1234    /usr/bin/cat
7f1e00000000-7f1e00001000 r-xp 00000000 fe:00 77      /tmp/my lib.so (deleted)
7f1e00002000-7f1e00003000 rw-p 00000000 00:00 0 
7ffd1c5f6000-7ffd1c5f8000 r-xp 00000000 00:00 0                          [vdso]
not a maps line
";

    #[test]
    fn parses_every_line_with_offsets_paths_and_deleted_flag() {
        // Checks fields of file, deleted (path with a space), anonymous and [vdso] lines; junk lines are skipped.
        let m = parse_maps(MAPS);
        assert_eq!(m.len(), 5);
        assert_eq!((m[1].start, m[1].end, m[1].pgoff, m[1].inode), (0x55d0c8a02000, 0x55d0c8a07000, 0x2000, 1234));
        assert_eq!((m[1].path.as_str(), m[1].deleted, m[1].is_file()), ("/usr/bin/cat", false, true));
        assert_eq!((m[2].path.as_str(), m[2].deleted), ("/tmp/my lib.so", true));
        assert_eq!((m[3].path.as_str(), m[3].is_file(), m[3].is_exec()), ("", false, false));
        assert_eq!((m[4].path.as_str(), m[4].is_file()), ("[vdso]", false));
    }

    #[test]
    fn exec_mappings_keep_only_executable_lines() {
        // Checks that only r-x lines survive parse_exec_mappings.
        let m = parse_exec_mappings(MAPS);
        assert_eq!(m.iter().map(|l| l.start).collect::<Vec<_>>(), [0x55d0c8a02000, 0x7f1e00000000, 0x7ffd1c5f6000]);
    }

    #[test]
    fn rejects_garbage() {
        // Checks that malformed lines are skipped rather than misparsed.
        assert!(parse_line("hello world").is_none());
        assert!(parse_line("zz-10 r-xp 0 00:00 0 /x").is_none());
    }
}
