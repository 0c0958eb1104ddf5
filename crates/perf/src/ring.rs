//! One CPU's mmap'ed ring buffer: the kernel writes at `data_head`, we read
//! up to it and release space by advancing `data_tail`.

use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU64, Ordering};

pub struct Ring {
    base: *mut u8,
    len: usize,
    data_offset: usize,
    data_size: usize,
}

// SAFETY: the mapping is owned by this struct and only accessed through &mut self.
unsafe impl Send for Ring {}

const DATA_HEAD: usize = 1024;
const DATA_TAIL: usize = 1032;
const DATA_OFFSET: usize = 1040;
const DATA_SIZE: usize = 1048;

impl Ring {
    /// Maps one control page plus `pages` (a power of two) data pages.
    pub fn map(fd: RawFd, pages: usize) -> io::Result<Ring> {
        let page = page_size();
        let len = (pages + 1) * page;
        // SAFETY: mapping a perf fd as the perf ABI describes; the result is checked.
        let base = unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd, 0) };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let base = base as *mut u8;
        let mut r = Ring { base, len, data_offset: page, data_size: pages * page };
        // Kernels since 4.1 state where the data area is.
        let (off, size) = (r.word(DATA_OFFSET).load(Ordering::Relaxed), r.word(DATA_SIZE).load(Ordering::Relaxed));
        if off != 0 && size != 0 {
            r.data_offset = off as usize;
            r.data_size = size as usize;
        }
        Ok(r)
    }

    fn word(&self, at: usize) -> &AtomicU64 {
        // SAFETY: `at` is one of the 8-byte aligned control-page fields, inside the mapping.
        unsafe { &*(self.base.add(at) as *const AtomicU64) }
    }

    /// Calls `f` with each complete record (copied out when it wraps).
    pub fn read(&mut self, mut f: impl FnMut(&[u8])) {
        let head = self.word(DATA_HEAD).load(Ordering::Acquire);
        let mut tail = self.word(DATA_TAIL).load(Ordering::Relaxed);
        // SAFETY: the data area lies inside the mapping.
        let data = unsafe { std::slice::from_raw_parts(self.base.add(self.data_offset), self.data_size) };
        let mut scratch = Vec::new();
        while tail + 8 <= head {
            let at = (tail % self.data_size as u64) as usize;
            let mut hdr = [0u8; 8];
            copy_wrapped(data, at, &mut hdr);
            let size = u16::from_ne_bytes([hdr[6], hdr[7]]) as usize;
            if size < 8 || tail + size as u64 > head {
                break;
            }
            if at + size <= data.len() {
                f(&data[at..at + size]);
            } else {
                scratch.resize(size, 0);
                copy_wrapped(data, at, &mut scratch);
                f(&scratch);
            }
            tail += size as u64;
        }
        self.word(DATA_TAIL).store(tail, Ordering::Release);
    }
}

/// Copies `out.len()` bytes starting at `at`, wrapping around the end.
pub(crate) fn copy_wrapped(data: &[u8], at: usize, out: &mut [u8]) {
    let first = (data.len() - at).min(out.len());
    out[..first].copy_from_slice(&data[at..at + first]);
    let rest = out.len() - first;
    out[first..].copy_from_slice(&data[..rest]);
}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly the mapping created in `map`.
        unsafe { libc::munmap(self.base as *mut libc::c_void, self.len) };
    }
}

pub fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    unsafe { libc::sysconf(libc::_SC_PAGESIZE) as usize }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrapped_copy_joins_end_and_start() {
        // Checks that a record crossing the end of the data area is reassembled in order.
        let data = [1u8, 2, 3, 4, 5, 6, 7, 8];
        let mut out = [0u8; 5];
        copy_wrapped(&data, 6, &mut out);
        assert_eq!(out, [7, 8, 1, 2, 3]);
    }
}
