//! Lines of `/proc/PID/maps`: the part the uprobe-based tools (locks,
//! allocation sites) need to place a runtime address in its image.

/// One line of `/proc/PID/maps`: its range, file offset and path (the first
/// word after the inode; empty for anonymous memory).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mapping {
    pub start: u64,
    pub end: u64,
    pub pgoff: u64,
    pub path: String,
}

/// Parses the maps lines that name a file or region (anonymous lines too).
pub fn parse_maps(text: &str) -> Vec<Mapping> {
    text.lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            let (start, end) = it.next()?.split_once('-')?;
            let _perms = it.next()?;
            let pgoff = u64::from_str_radix(it.next()?, 16).ok()?;
            let path = it.nth(2).unwrap_or("").to_string();
            Some(Mapping { start: u64::from_str_radix(start, 16).ok()?, end: u64::from_str_radix(end, 16).ok()?, pgoff, path })
        })
        .collect()
}
