//! A group of execute breakpoints on one thread, enabled and read together.

use crate::RuntimeAddr;
use loupe_perf::sys::{self, PerfEventAttr};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::Duration;

/// x86 has four debug registers per thread.
pub const SLOTS: usize = 4;
const PERF_TYPE_BREAKPOINT: u32 = 5;
const HW_BREAKPOINT_X: u32 = 4;
const FLAG_EXCLUDE_KERNEL: u64 = 1 << 5;
const FLAG_EXCLUDE_HV: u64 = 1 << 6;
const FORMAT_GROUP: u64 = 1 << 3;
const IOC_RESET: libc::c_ulong = 0x2403;
/// PERF_IOC_FLAG_GROUP: enable, disable or reset the leader's whole group at once.
const IOC_FLAG_GROUP: libc::c_ulong = 1;

/// Up to [`SLOTS`] execute breakpoints on thread `tid`, counting (not
/// sampling): the leader's group is enabled and disabled in one step, so
/// all counts cover the same stretch of the thread's execution.
pub struct Group {
    fds: Vec<OwnedFd>,
}

fn attr(addr: RuntimeAddr, leader: bool) -> PerfEventAttr {
    PerfEventAttr {
        type_: PERF_TYPE_BREAKPOINT,
        size: sys::ATTR_SIZE,
        read_format: FORMAT_GROUP,
        flags: FLAG_EXCLUDE_KERNEL | FLAG_EXCLUDE_HV | if leader { sys::flag::DISABLED } else { 0 },
        bp_type: HW_BREAKPOINT_X,
        config1: addr.0,
        config2: std::mem::size_of::<libc::c_long>() as u64,
        ..Default::default()
    }
}

impl Group {
    /// Opens the breakpoints (disabled) on thread `tid`.
    pub fn open(tid: u32, addrs: &[RuntimeAddr]) -> io::Result<Group> {
        if addrs.is_empty() || addrs.len() > SLOTS {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("a group holds 1 to {SLOTS} breakpoints, not {}", addrs.len()),
            ));
        }
        let mut fds: Vec<OwnedFd> = Vec::with_capacity(addrs.len());
        for (i, &a) in addrs.iter().enumerate() {
            let leader = fds.first().map_or(-1, |f| f.as_raw_fd());
            fds.push(sys::perf_event_open(&attr(a, i == 0), tid as i32, -1, leader)?);
        }
        Ok(Group { fds })
    }

    /// Counts each breakpoint's executions over `dur` of wall time (zeroed first).
    pub fn window(&self, dur: Duration) -> io::Result<Vec<u64>> {
        let leader = self.fds[0].as_raw_fd();
        sys::ioctl(leader, IOC_RESET, IOC_FLAG_GROUP)?;
        sys::ioctl(leader, sys::IOC_ENABLE, IOC_FLAG_GROUP)?;
        std::thread::sleep(dur);
        sys::ioctl(leader, sys::IOC_DISABLE, IOC_FLAG_GROUP)?;
        self.read()
    }

    /// The counts since the last reset, in the order the addresses were given.
    pub fn read(&self) -> io::Result<Vec<u64>> {
        let mut buf = [0u64; 1 + SLOTS];
        // SAFETY: the kernel writes at most the buffer's size in bytes into it.
        let n = unsafe { libc::read(self.fds[0].as_raw_fd(), buf.as_mut_ptr().cast(), std::mem::size_of_val(&buf)) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let nr = (buf[0] as usize).min(SLOTS);
        if (n as usize) < 8 * (1 + nr) || nr != self.fds.len() {
            return Err(io::Error::new(io::ErrorKind::InvalidData, format!("group read of {n} bytes for {} events", self.fds.len())));
        }
        Ok(buf[1..=nr].to_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[inline(never)]
    fn spin(n: u64, f: fn(u64) -> u64) -> u64 {
        (0..n).fold(0, |a, i| a ^ f(i))
    }

    #[inline(never)]
    fn odd(i: u64) -> u64 {
        std::hint::black_box(i * 3)
    }

    #[inline(never)]
    fn even(i: u64) -> u64 {
        std::hint::black_box(i + 7)
    }

    #[test]
    fn a_group_counts_each_execution_of_its_addresses() {
        // Checks the breakpoints end to end on this thread: `odd` runs 300 times and `even` 600, counted exactly.
        if !crate::privileged_test() {
            return;
        }
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() } as u32;
        let (a, b) = (RuntimeAddr(odd as fn(u64) -> u64 as usize as u64), RuntimeAddr(even as fn(u64) -> u64 as usize as u64));
        let g = Group::open(tid, &[a, b]).unwrap();
        let leader = g.fds[0].as_raw_fd();
        sys::ioctl(leader, IOC_RESET, IOC_FLAG_GROUP).unwrap();
        sys::ioctl(leader, sys::IOC_ENABLE, IOC_FLAG_GROUP).unwrap();
        spin(300, odd);
        spin(600, even);
        sys::ioctl(leader, sys::IOC_DISABLE, IOC_FLAG_GROUP).unwrap();
        spin(50, odd);
        assert_eq!(g.read().unwrap(), vec![300, 600]);
    }

    #[test]
    fn more_than_four_breakpoints_are_refused() {
        // Checks the slot limit is said before the kernel is asked.
        let addrs = [RuntimeAddr(0x1000); 5];
        let e = Group::open(1, &addrs).err().unwrap();
        assert!(e.to_string().contains("1 to 4"), "{e}");
    }
}
