//! The perf_event_open ABI: `perf_event_attr`, ioctls and the ring
//! buffer's control page, as in `linux/perf_event.h`.

use std::io;
use std::os::fd::{FromRawFd, OwnedFd};

pub const PERF_TYPE_HARDWARE: u32 = 0;
pub const PERF_TYPE_SOFTWARE: u32 = 1;
pub const PERF_TYPE_TRACEPOINT: u32 = 2;
pub const PERF_TYPE_HW_CACHE: u32 = 3;

/// `sample_type` bits, in the order their fields appear in a sample
/// (IDENTIFIER first; WEIGHT_STRUCT shares WEIGHT's place, AUX is last).
pub const SAMPLE_IP: u64 = 1 << 0;
pub const SAMPLE_TID: u64 = 1 << 1;
pub const SAMPLE_TIME: u64 = 1 << 2;
pub const SAMPLE_ADDR: u64 = 1 << 3;
pub const SAMPLE_READ: u64 = 1 << 4;
pub const SAMPLE_CALLCHAIN: u64 = 1 << 5;
pub const SAMPLE_ID: u64 = 1 << 6;
pub const SAMPLE_CPU: u64 = 1 << 7;
pub const SAMPLE_PERIOD: u64 = 1 << 8;
pub const SAMPLE_STREAM_ID: u64 = 1 << 9;
pub const SAMPLE_RAW: u64 = 1 << 10;
/// The last branches the CPU took (Intel LBR, AMD BRS/LbrExtV2, Arm BRBE):
/// `u64 nr`, then `nr` x `{u64 from, u64 to, u64 flags}`, newest first.
pub const SAMPLE_BRANCH_STACK: u64 = 1 << 11;
pub const SAMPLE_REGS_USER: u64 = 1 << 12;
pub const SAMPLE_STACK_USER: u64 = 1 << 13;
pub const SAMPLE_WEIGHT: u64 = 1 << 14;
pub const SAMPLE_DATA_SRC: u64 = 1 << 15;
pub const SAMPLE_IDENTIFIER: u64 = 1 << 16;
pub const SAMPLE_TRANSACTION: u64 = 1 << 17;
pub const SAMPLE_REGS_INTR: u64 = 1 << 18;
pub const SAMPLE_PHYS_ADDR: u64 = 1 << 19;
pub const SAMPLE_AUX: u64 = 1 << 20;
pub const SAMPLE_CGROUP: u64 = 1 << 21;
pub const SAMPLE_DATA_PAGE_SIZE: u64 = 1 << 22;
pub const SAMPLE_CODE_PAGE_SIZE: u64 = 1 << 23;
pub const SAMPLE_WEIGHT_STRUCT: u64 = 1 << 24;

/// x86-64 `perf_regs.h` indices of the registers an unwinder starts from.
pub const REG_BP: u32 = 6;
pub const REG_SP: u32 = 7;
pub const REG_IP: u32 = 8;
/// `sample_regs_user` mask: BP, SP, IP (delivered in that order).
pub const USER_REGS_MASK: u64 = (1 << REG_BP) | (1 << REG_SP) | (1 << REG_IP);

/// `branch_sample_type` bits: privilege levels of the branches kept, and
/// which kinds of branch (ANY = every taken branch).
pub mod branch {
    pub const USER: u64 = 1 << 0;
    pub const KERNEL: u64 = 1 << 1;
    pub const HV: u64 = 1 << 2;
    pub const ANY: u64 = 1 << 3;
    /// The sample's branch stack starts with `hw_idx`.
    pub const HW_INDEX: u64 = 1 << 17;
    /// A counters word per branch follows the entries.
    pub const COUNTERS: u64 = 1 << 19;
}

/// `read_format` bit (kernel 6.0+): a read() of the event also returns the
/// samples it lost because its ring was full.
pub const FORMAT_LOST: u64 = 1 << 4;

/// Bits of the flags word after `read_format`.
pub mod flag {
    pub const DISABLED: u64 = 1 << 0;
    pub const INHERIT: u64 = 1 << 1;
    pub const EXCLUDE_USER: u64 = 1 << 4;
    pub const EXCLUDE_KERNEL: u64 = 1 << 5;
    pub const EXCLUDE_HV: u64 = 1 << 6;
    pub const MMAP: u64 = 1 << 8;
    pub const COMM: u64 = 1 << 9;
    pub const FREQ: u64 = 1 << 10;
    pub const ENABLE_ON_EXEC: u64 = 1 << 12;
    pub const TASK: u64 = 1 << 13;
    pub const WATERMARK: u64 = 1 << 14;
    pub const SAMPLE_ID_ALL: u64 = 1 << 18;
    pub const MMAP2: u64 = 1 << 23;
    pub const COMM_EXEC: u64 = 1 << 24;
    /// Timestamps from `clockid` instead of the perf clock.
    pub const USE_CLOCKID: u64 = 1 << 25;
    pub const BUILD_ID: u64 = 1 << 34;
}

pub const RECORD_MMAP: u32 = 1;
pub const RECORD_LOST: u32 = 2;
pub const RECORD_COMM: u32 = 3;
pub const RECORD_EXIT: u32 = 4;
pub const RECORD_THROTTLE: u32 = 5;
pub const RECORD_UNTHROTTLE: u32 = 6;
pub const RECORD_FORK: u32 = 7;
pub const RECORD_SAMPLE: u32 = 9;
pub const RECORD_MMAP2: u32 = 10;

pub const MISC_CPUMODE_MASK: u16 = 7;
pub const MISC_COMM_EXEC: u16 = 1 << 13;
pub const MISC_MMAP_BUILD_ID: u16 = 1 << 14;

pub const IOC_ENABLE: libc::c_ulong = 0x2400;
pub const IOC_DISABLE: libc::c_ulong = 0x2401;
pub const IOC_PERIOD: libc::c_ulong = 0x4008_2404;
pub const IOC_SET_OUTPUT: libc::c_ulong = 0x2405;
pub const IOC_ID: libc::c_ulong = 0x8008_2407;

/// `struct perf_event_attr`, version 8 (136 bytes).
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct PerfEventAttr {
    pub type_: u32,
    pub size: u32,
    pub config: u64,
    pub sample_period_or_freq: u64,
    pub sample_type: u64,
    pub read_format: u64,
    pub flags: u64,
    pub wakeup_events_or_watermark: u32,
    pub bp_type: u32,
    pub config1: u64,
    pub config2: u64,
    pub branch_sample_type: u64,
    pub sample_regs_user: u64,
    pub sample_stack_user: u32,
    pub clockid: i32,
    pub sample_regs_intr: u64,
    pub aux_watermark: u32,
    pub sample_max_stack: u16,
    pub reserved_2: u16,
    pub aux_sample_size: u32,
    pub reserved_3: u32,
    pub sig_data: u64,
    pub config3: u64,
}

pub const ATTR_SIZE: u32 = std::mem::size_of::<PerfEventAttr>() as u32;
const _: () = assert!(ATTR_SIZE == 136);

/// perf_event_open(2); the fd is close-on-exec.
pub fn perf_event_open(attr: &PerfEventAttr, pid: i32, cpu: i32, group_fd: i32) -> io::Result<OwnedFd> {
    const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 8;
    // SAFETY: `attr` points to a valid, fully initialized perf_event_attr of
    // the size it declares; the kernel only reads it.
    let fd = unsafe { libc::syscall(libc::SYS_perf_event_open, attr as *const PerfEventAttr, pid, cpu, group_fd, PERF_FLAG_FD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the syscall returned a new file descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// An ioctl with an integer (or no) argument.
pub fn ioctl(fd: i32, request: libc::c_ulong, arg: libc::c_ulong) -> io::Result<()> {
    // SAFETY: these perf ioctls take an integer argument and touch no memory of ours.
    if unsafe { libc::ioctl(fd, request, arg) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// PERF_EVENT_IOC_PERIOD takes a pointer to the new period.
pub fn set_period(fd: i32, period: u64) -> io::Result<()> {
    // SAFETY: the kernel reads one u64 through the pointer, which is valid for the call.
    if unsafe { libc::ioctl(fd, IOC_PERIOD, &period as *const u64) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// PERF_EVENT_IOC_ID: the id the kernel puts in each sample's IDENTIFIER.
pub fn event_id(fd: i32) -> io::Result<u64> {
    let mut id = 0u64;
    // SAFETY: the kernel writes one u64 through the pointer, valid for the call.
    if unsafe { libc::ioctl(fd, IOC_ID, &mut id as *mut u64) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(id)
}
