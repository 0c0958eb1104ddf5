//! The callers of an allocation seen by the uprobes: the probe copies the
//! registers and a window of the user stack as the allocation's caller sees
//! them once the allocator has returned (`bpf/allocs.bpf.c`, EV_ALLOC_STACK);
//! this unwinds that copy with the images' `.eh_frame` (the collector's
//! framehop unwinder, so code without frame pointers unwinds too) into the
//! return addresses the LD_PRELOAD shim keeps, the alloc record's payload.

use crate::log::{Callers, CALLERS};
use loupe_collector::process::Mapping;
use loupe_collector::unwind::Unwinders;
use loupe_perf::UserRegs;
use std::collections::HashMap;
use std::path::PathBuf;

/// Per-process unwinders built from `/proc/PID/maps` text.
pub struct CallerUnwinder {
    unwinders: Unwinders,
    /// Image ids by path: the unwinders share one image's unwind data by id.
    images: HashMap<PathBuf, u32>,
}

impl Default for CallerUnwinder {
    fn default() -> Self {
        CallerUnwinder { unwinders: Unwinders::new(None), images: HashMap::new() }
    }
}

impl CallerUnwinder {
    /// Forgets `pid`'s unwinder: its mappings changed.
    pub fn invalidate(&mut self, pid: u32) {
        self.unwinders.invalidate(pid);
    }

    /// Up to [`CALLERS`] return addresses above the site `regs.ip`, read
    /// from `stack` (copied from `regs.sp` up); 0 past the last found.
    pub fn callers(&mut self, pid: u32, maps: &str, regs: UserRegs, stack: &[u8]) -> Callers {
        let images = &mut self.images;
        let mut mappings = || code_mappings(maps, images);
        let mut frames = Vec::new();
        self.unwinders.unwind(pid, &mut mappings, regs, stack, &mut frames);
        let mut out = [0; CALLERS];
        // Frame 0 is the site itself; the shim's callers start above it.
        for (slot, &a) in out.iter_mut().zip(frames.iter().skip(1)) {
            *slot = a;
        }
        out
    }
}

/// The executable file mappings of a maps text, each with its image id.
fn code_mappings(maps: &str, images: &mut HashMap<PathBuf, u32>) -> Vec<(Mapping, Option<PathBuf>)> {
    maps.lines().filter_map(|l| code_mapping(l, images)).collect()
}

fn code_mapping(line: &str, images: &mut HashMap<PathBuf, u32>) -> Option<(Mapping, Option<PathBuf>)> {
    let mut f = line.split_whitespace();
    let (range, perms, offset) = (f.next()?, f.next()?, f.next()?);
    let path = f.nth(2).filter(|p| p.starts_with('/'))?;
    // A deleted file's name has a suffix after it; its unwind data is gone from disk anyway.
    if !perms.contains('x') || f.next().is_some() {
        return None;
    }
    let (start, end) = range.split_once('-')?;
    let hex = |s: &str| u64::from_str_radix(s, 16).ok();
    let path = PathBuf::from(path);
    let next = images.len() as u32;
    let image = *images.entry(path.clone()).or_insert(next);
    Some((Mapping { start: hex(start)?, end: hex(end)?, pgoff: hex(offset)?, image }, Some(path)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_only_executable_file_mappings_and_numbers_images_by_path() {
        // Checks maps parsing: data, anonymous, [vdso]-style and deleted mappings are left out; two mappings of one file share its id.
        let maps = "\
55d0a0000000-55d0a0001000 r--p 00000000 08:01 12 /usr/bin/prog
55d0a0001000-55d0a0002000 r-xp 00001000 08:01 12 /usr/bin/prog
7f0000000000-7f0000100000 r-xp 00028000 08:01 34 /usr/lib/x86_64-linux-gnu/libc.so.6
7f0000200000-7f0000201000 rw-p 00000000 00:00 0
7f0000300000-7f0000301000 r-xp 00000000 08:01 56 /tmp/old.so (deleted)
7ffd00000000-7ffd00002000 r-xp 00000000 00:00 0 [vdso]
7f0000400000-7f0000401000 r-xp 00002000 08:01 12 /usr/bin/prog
";
        let mut images = HashMap::new();
        let m = code_mappings(maps, &mut images);
        let got: Vec<(u64, u64, u64, u32)> = m.iter().map(|(m, _)| (m.start, m.end, m.pgoff, m.image)).collect();
        assert_eq!(
            got,
            [
                (0x55d0a0001000, 0x55d0a0002000, 0x1000, 0),
                (0x7f0000000000, 0x7f0000100000, 0x28000, 1),
                (0x7f0000400000, 0x7f0000401000, 0x2000, 0)
            ]
        );
        assert_eq!(m[1].1.as_deref(), Some(std::path::Path::new("/usr/lib/x86_64-linux-gnu/libc.so.6")));
    }
}
