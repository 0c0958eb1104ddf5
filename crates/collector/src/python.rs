//! CPython frames read from the interpreter's own structures in another
//! process: `_PyRuntime` -> interpreter -> the sampled thread's state ->
//! its current frame (`cframe->current_frame` in 3.11 and 3.12,
//! `current_frame` in 3.13), then each `_PyInterpreterFrame` (its code
//! object, last instruction and `previous`) to the outermost. A frame is
//! named by its code object's `co_qualname` and `co_filename`, its line
//! computed from `co_linetable` and the instruction being run, as
//! CPython's `PyCode_Addr2Line` does.
//!
//! Structure offsets differ between minor versions. 3.13 publishes them
//! in the process (`_Py_DebugOffsets` at the start of `_PyRuntime`, for
//! debuggers), and they are read from there; 3.11 and 3.12 do not, and
//! their tables here were taken from the builds' DWARF (gdb `ptype /o`,
//! x86-64). A version without offsets is refused by name, never read with
//! another's. Memory access goes through [`ProcessMemory`] so the walk is
//! testable.

use object::{Object, ObjectSymbol};
use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};

/// Reads another process's memory.
pub trait ProcessMemory {
    fn read(&self, addr: u64, buf: &mut [u8]) -> std::io::Result<()>;
}

/// A live process, read with `process_vm_readv` (needs ptrace rights over
/// it: root, or the same user with `kernel.yama.ptrace_scope` 0).
pub struct Vm(pub u32);

impl ProcessMemory for Vm {
    fn read(&self, addr: u64, buf: &mut [u8]) -> std::io::Result<()> {
        let local = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
        let remote = libc::iovec { iov_base: addr as *mut libc::c_void, iov_len: buf.len() };
        // SAFETY: `local` covers exactly `buf`, which outlives the call; the
        // remote range is only read by the kernel, which checks it.
        let n = unsafe { libc::process_vm_readv(self.0 as libc::pid_t, &local, 1, &remote, 1, 0) };
        if n < 0 {
            return Err(std::io::Error::last_os_error());
        }
        if n as usize != buf.len() {
            return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, format!("short read at {addr:#x}")));
        }
        Ok(())
    }
}

/// Why a Python stack could not be read.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// No mapped file of the process exports `_PyRuntime`.
    NotPython(u32),
    /// A CPython version whose structure offsets Loupe does not know.
    Unsupported { version: String },
    /// The offsets a CPython 3.13 publishes (`_Py_DebugOffsets`) are not
    /// what CPython writes there.
    DebugOffsets { version: String, why: String },
    /// The process's memory could not be read (it exited, or no rights).
    Read { addr: u64, cause: std::io::Error },
    /// No thread state of the interpreter belongs to this thread.
    NoThread(u32),
    /// The frame chain does not end (being changed while read, or not a frame chain).
    TooDeep,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::NotPython(pid) => write!(f, "process {pid} maps no CPython runtime (no _PyRuntime symbol)"),
            Error::Unsupported { version } => write!(
                f,
                "CPython {version}: Loupe knows the frame structures of CPython 3.11, 3.12 and 3.13 only, so this interpreter's Python frames are not read"
            ),
            Error::DebugOffsets { version, why } => write!(
                f,
                "CPython {version}: the structure offsets it publishes (_Py_DebugOffsets at _PyRuntime) are not usable ({why}), so its Python frames are not read"
            ),
            Error::Read { addr, cause } => write!(f, "cannot read the interpreter's memory at {addr:#x}: {cause}"),
            Error::NoThread(tid) => write!(f, "thread {tid} has no Python thread state"),
            Error::TooDeep => write!(f, "Python frame chain longer than {MAX_FRAMES} frames (changing while read?)"),
        }
    }
}

impl std::error::Error for Error {}

/// How a frame run by a new `_PyEval_EvalFrameDefault` call (a call from
/// C) is told apart: where the Python stack meets the native one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Entry {
    /// 3.11: the frame's `is_entry` byte, at this offset.
    IsEntry(u64),
    /// 3.12 and later: the call links a shim frame of its own rootward of
    /// the first frame it runs, marked by its `owner` byte (at this
    /// offset) being [`OWNED_BY_CSTACK`].
    Owner(u64),
}

/// `FRAME_OWNED_BY_CSTACK` of `enum _frameowner` (3.12, 3.13): the
/// interpreter entry's shim frame, which runs no code of its own.
pub const OWNED_BY_CSTACK: u8 = 3;

/// Offsets into CPython's structures, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Offsets {
    runtime_interpreters_head: u64,
    interp_threads_head: u64,
    tstate_next: u64,
    tstate_native_thread_id: u64,
    /// `cframe` (3.11, 3.12), or `current_frame` (3.13).
    tstate_frame: u64,
    /// `_PyCFrame.current_frame`; None where the thread state points at
    /// the current frame itself (3.13).
    cframe_current_frame: Option<u64>,
    /// `f_code` (3.11, 3.12), or `f_executable` (3.13).
    frame_code: u64,
    frame_previous: u64,
    /// The instruction being run: `prev_instr` (3.11, 3.12), or
    /// `instr_ptr` (3.13).
    frame_instr: u64,
    frame_entry: Entry,
    code_filename: u64,
    code_qualname: u64,
    code_linetable: u64,
    code_firstlineno: u64,
    code_code_adaptive: u64,
    unicode_length: u64,
    unicode_state: u64,
    ascii_data: u64,
    compact_data: u64,
    bytes_size: u64,
    bytes_data: u64,
}

/// CPython 3.11 on x86-64, from its headers (`offsetof`), the same in
/// gdb's `ptype /o` of pyenv 3.11.7's libpython DWARF and read right on
/// Debian's 3.11.2 (CPython keeps these structures within a minor version).
const PY311: Offsets = Offsets {
    runtime_interpreters_head: 40,
    interp_threads_head: 16,
    tstate_next: 8,
    tstate_native_thread_id: 160,
    tstate_frame: 56,
    cframe_current_frame: Some(8),
    frame_code: 32,
    frame_previous: 48,
    frame_instr: 56,
    frame_entry: Entry::IsEntry(68),
    code_filename: 112,
    code_qualname: 128,
    code_linetable: 136,
    code_firstlineno: 72,
    code_code_adaptive: 184,
    unicode_length: 16,
    unicode_state: 32,
    ascii_data: 48,
    compact_data: 72,
    bytes_size: 16,
    bytes_data: 32,
};

/// CPython 3.12 on x86-64, from the DWARF of pyenv 3.12.1's
/// `libpython3.12.so.1.0` (gdb `ptype /o` of `_PyRuntimeState`,
/// `PyInterpreterState`, `PyThreadState`, `_PyCFrame`,
/// `_PyInterpreterFrame`, `PyCodeObject`, `PyASCIIObject`,
/// `PyCompactUnicodeObject`, `PyBytesObject`). 3.12 dropped `is_entry`
/// (entries are shim frames, [`Entry::Owner`]) and the strings' `wstr`.
const PY312: Offsets = Offsets {
    runtime_interpreters_head: 40,
    interp_threads_head: 72,
    tstate_next: 8,
    tstate_native_thread_id: 144,
    tstate_frame: 56,
    cframe_current_frame: Some(0),
    frame_code: 0,
    frame_previous: 8,
    frame_instr: 56,
    frame_entry: Entry::Owner(70),
    code_filename: 112,
    code_qualname: 128,
    code_linetable: 136,
    code_firstlineno: 68,
    code_code_adaptive: 192,
    unicode_length: 16,
    unicode_state: 32,
    ascii_data: 40,
    compact_data: 56,
    bytes_size: 16,
    bytes_data: 32,
};

/// Bytes of a frame read at once: every frame field must lie within.
const FRAME_BYTES: usize = 128;
/// Bytes of a `str` object's head read at once.
const STR_HEAD_BYTES: u64 = 64;

impl Offsets {
    /// Whether the offsets can be used as they are: frame fields within
    /// [`FRAME_BYTES`], string fields within [`STR_HEAD_BYTES`], and every
    /// offset below 64 KiB (what the BPF program's `struct py_proc` holds).
    fn check(&self) -> Result<(), String> {
        let entry = match self.frame_entry {
            Entry::IsEntry(a) | Entry::Owner(a) => a,
        };
        let frame = [self.frame_code, self.frame_previous, self.frame_instr, entry];
        if frame.iter().any(|&a| a + 8 > FRAME_BYTES as u64) {
            return Err(format!("frame fields {frame:?} beyond the first {FRAME_BYTES} bytes"));
        }
        if self.unicode_length + 8 > STR_HEAD_BYTES || self.unicode_state + 4 > STR_HEAD_BYTES {
            return Err(format!("str length at {}, state at {}", self.unicode_length, self.unicode_state));
        }
        let all = [
            self.runtime_interpreters_head,
            self.interp_threads_head,
            self.tstate_next,
            self.tstate_native_thread_id,
            self.tstate_frame,
            self.cframe_current_frame.unwrap_or(0),
            self.code_filename,
            self.code_qualname,
            self.code_linetable,
            self.code_firstlineno,
            self.code_code_adaptive,
            self.ascii_data,
            self.compact_data,
            self.bytes_size,
            self.bytes_data,
        ];
        match all.iter().find(|&&a| a > u16::MAX as u64) {
            Some(a) => Err(format!("offset {a} past 64 KiB")),
            None => Ok(()),
        }
    }

    /// Bytes of a frame that hold the fields read (a frame at the end of
    /// the thread's last stack chunk may have nothing mapped past them).
    fn frame_len(&self) -> usize {
        let entry = match self.frame_entry {
            Entry::IsEntry(a) | Entry::Owner(a) => a + 1,
        };
        [self.frame_code + 8, self.frame_previous + 8, self.frame_instr + 8, entry].into_iter().max().unwrap_or(0) as usize
    }

    /// Bytes of a `str`'s head that hold its length and state.
    fn str_head(&self) -> usize {
        (self.unicode_length + 8).max(self.unicode_state + 4) as usize
    }
}

/// Byte positions in 3.13's `_Py_DebugOffsets` (the first bytes of
/// `_PyRuntime`) of the offsets used here, from the DWARF of pyenv
/// 3.13.0's `libpython3.13.so.1.0` (gdb `ptype /o struct
/// _Py_DebugOffsets`). CPython keeps this struct fixed within a minor
/// version for debuggers and profilers; its `version` field is checked.
mod published {
    pub const BYTES: usize = 584;
    pub const COOKIE: &[u8; 8] = b"xdebugpy";
    pub const VERSION: usize = 8;
    pub const RUNTIME_SIZE: usize = 24;
    pub const INTERPRETERS_HEAD: usize = 40;
    pub const THREADS_HEAD: usize = 72;
    pub const TSTATE_NEXT: usize = 168;
    pub const TSTATE_CURRENT_FRAME: usize = 184;
    pub const TSTATE_NATIVE_THREAD_ID: usize = 200;
    pub const FRAME_PREVIOUS: usize = 232;
    pub const FRAME_EXECUTABLE: usize = 240;
    pub const FRAME_INSTR_PTR: usize = 248;
    pub const FRAME_OWNER: usize = 264;
    pub const CODE_FILENAME: usize = 280;
    pub const CODE_QUALNAME: usize = 296;
    pub const CODE_LINETABLE: usize = 304;
    pub const CODE_FIRSTLINENO: usize = 312;
    pub const CODE_ADAPTIVE: usize = 344;
    pub const BYTES_OB_SIZE: usize = 520;
    pub const BYTES_OB_SVAL: usize = 528;
    pub const UNICODE_STATE: usize = 544;
    pub const UNICODE_LENGTH: usize = 552;
    pub const UNICODE_ASCII_SIZE: usize = 560;
}

/// The offsets a CPython 3.13 publishes in `_Py_DebugOffsets`, `b` being
/// its first [`published::BYTES`] bytes; `runtime_size` is the size of
/// the `_PyRuntime` symbol, which the struct repeats (None: not known).
fn published_offsets(b: &[u8], version: (u8, u8, u8), runtime_size: Option<u64>) -> Result<Offsets, Error> {
    use published::*;
    let bad = |why: String| Error::DebugOffsets { version: format!("{}.{}.{}", version.0, version.1, version.2), why };
    if b.len() < BYTES || &b[..8] != COOKIE {
        return Err(bad("no \"xdebugpy\" cookie".into()));
    }
    let at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
    if at(VERSION) >> 16 != (version.0 as u64) << 8 | version.1 as u64 {
        return Err(bad(format!("it says version {:#x}", at(VERSION))));
    }
    if let Some(size) = runtime_size.filter(|&s| s != 0 && s != at(RUNTIME_SIZE)) {
        return Err(bad(format!("runtime size {} where the symbol has {size}", at(RUNTIME_SIZE))));
    }
    let off = Offsets {
        runtime_interpreters_head: at(INTERPRETERS_HEAD),
        interp_threads_head: at(THREADS_HEAD),
        tstate_next: at(TSTATE_NEXT),
        tstate_native_thread_id: at(TSTATE_NATIVE_THREAD_ID),
        tstate_frame: at(TSTATE_CURRENT_FRAME),
        cframe_current_frame: None,
        frame_code: at(FRAME_EXECUTABLE),
        frame_previous: at(FRAME_PREVIOUS),
        frame_instr: at(FRAME_INSTR_PTR),
        frame_entry: Entry::Owner(at(FRAME_OWNER)),
        code_filename: at(CODE_FILENAME),
        code_qualname: at(CODE_QUALNAME),
        code_linetable: at(CODE_LINETABLE),
        code_firstlineno: at(CODE_FIRSTLINENO),
        code_code_adaptive: at(CODE_ADAPTIVE),
        unicode_length: at(UNICODE_LENGTH),
        unicode_state: at(UNICODE_STATE),
        ascii_data: at(UNICODE_ASCII_SIZE),
        // Not published: `PyCompactUnicodeObject` is `PyASCIIObject` and
        // then `utf8_length` and `utf8`, two words (3.12 and 3.13).
        compact_data: at(UNICODE_ASCII_SIZE) + 16,
        bytes_size: at(BYTES_OB_SIZE),
        bytes_data: at(BYTES_OB_SVAL),
    };
    off.check().map_err(bad)?;
    Ok(off)
}

/// Python frames deeper than this are taken as a chain being rewritten.
const MAX_FRAMES: usize = 1024;

/// One Python frame, innermost first in a stack.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PyFrame {
    pub qualname: String,
    pub file: String,
    /// None where the instruction has no line (CPython's "no location").
    pub line: Option<u32>,
    /// This frame was entered by a new `_PyEval_EvalFrameDefault` call (a
    /// call from C), so it ends one run of Python frames under one native
    /// interpreter frame: where the stacks interleave.
    pub entry: bool,
}

/// What a code object says, cached by its address.
struct CodeInfo {
    qualname: String,
    file: String,
    first_line: u32,
    linetable: Vec<u8>,
}

impl CodeInfo {
    /// CPython's own code with no source (no instruction has a
    /// location): 3.13's `_Py_InitCleanup`, the frame that
    /// `CALL_ALLOC_AND_ENTER_INIT` links under a class's `__init__` to
    /// check its result (its table is `no_location`). Left out of stacks,
    /// as CPython's tracebacks leave it out; any code compiled from source
    /// has a line somewhere.
    fn is_shim(&self) -> bool {
        !has_location(&self.linetable)
    }
}

/// One CPython interpreter in one process.
pub struct Interpreter {
    runtime: u64,
    /// Where `_PyEval_EvalFrameDefault` is in the process: native frames
    /// there are the interpreter's activations (empty when not known).
    pub eval: std::ops::Range<u64>,
    off: Offsets,
    pub version: (u8, u8, u8),
    codes: HashMap<u64, CodeInfo>,
}

/// Marks the innermost frame so far as entered from C (the shim of a
/// 3.12+ interpreter entry was met rootward of it).
fn mark_entry(out: &mut [PyFrame]) {
    if let Some(last) = out.last_mut() {
        last.entry = true;
    }
}

impl Interpreter {
    /// Finds the interpreter of `pid` from its mappings and the exported
    /// `_PyRuntime` and `Py_Version` of its python binary or libpython (a
    /// CPython 3.7 to 3.10, without `Py_Version`, is refused by name).
    pub fn find(pid: u32, mem: &dyn ProcessMemory) -> Result<Interpreter, Error> {
        let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).map_err(|cause| Error::Read { addr: 0, cause })?;
        let found = runtime_symbols(&maps).ok_or(Error::NotPython(pid))?;
        // `Py_Version` came with 3.11; `_PyRuntime` with 3.7.
        let version = found.version.ok_or_else(|| Error::Unsupported { version: format!("before 3.11 ({})", found.path.display()) })?;
        let mut v = [0u8; 4];
        mem.read(version, &mut v).map_err(|cause| Error::Read { addr: version, cause })?;
        let mut i = Interpreter::new(found.runtime, u32::from_le_bytes(v), found.runtime_size, mem)?;
        i.eval = found.eval;
        Ok(i)
    }

    /// The interpreter whose `_PyRuntime` is at `runtime` (a symbol of
    /// `runtime_size` bytes, 0 when not known), for the version
    /// `PY_VERSION_HEX` says; a 3.13's offsets are read from `mem`.
    pub fn new(runtime: u64, version_hex: u32, runtime_size: u64, mem: &dyn ProcessMemory) -> Result<Interpreter, Error> {
        let version = ((version_hex >> 24) as u8, (version_hex >> 16) as u8, (version_hex >> 8) as u8);
        let off = match (version.0, version.1) {
            (3, 11) => PY311,
            (3, 12) => PY312,
            (3, 13) => {
                let mut b = vec![0u8; published::BYTES];
                read(mem, runtime, &mut b)?;
                published_offsets(&b, version, Some(runtime_size))?
            }
            _ => return Err(Error::Unsupported { version: format!("{}.{}.{}", version.0, version.1, version.2) }),
        };
        Ok(Interpreter { runtime, eval: 0..0, off, version, codes: HashMap::new() })
    }

    /// The Python stack of thread `tid`, innermost frame first (empty when
    /// the thread runs no Python code now).
    pub fn stack(&mut self, mem: &dyn ProcessMemory, tid: u32) -> Result<Vec<PyFrame>, Error> {
        let o = self.off;
        let tstate = self.thread_state(mem, tid)?;
        let mut frame = self.current_frame(mem, tstate)?;
        let mut out = Vec::new();
        for _ in 0..MAX_FRAMES {
            if frame == 0 {
                return Ok(out);
            }
            let mut f = [0u8; FRAME_BYTES];
            read(mem, frame, &mut f[..o.frame_len()])?;
            let field = |at: u64| u64::from_le_bytes(f[at as usize..at as usize + 8].try_into().unwrap());
            let (code, instr) = (field(o.frame_code), field(o.frame_instr));
            frame = field(o.frame_previous);
            let entry = match o.frame_entry {
                Entry::IsEntry(at) => f[at as usize] != 0,
                Entry::Owner(at) if f[at as usize] == OWNED_BY_CSTACK => {
                    mark_entry(&mut out);
                    continue;
                }
                Entry::Owner(_) => false,
            };
            let info = self.code(mem, code)?;
            if info.is_shim() {
                continue;
            }
            let line = line_of(&info.linetable, info.first_line, instr.wrapping_sub(code + o.code_code_adaptive));
            out.push(PyFrame { qualname: info.qualname.clone(), file: info.file.clone(), line, entry });
        }
        Err(Error::TooDeep)
    }

    /// The frame thread state `tstate` runs now (0: none).
    fn current_frame(&self, mem: &dyn ProcessMemory, tstate: u64) -> Result<u64, Error> {
        let at = ptr(mem, tstate + self.off.tstate_frame)?;
        match self.off.cframe_current_frame {
            Some(_) if at == 0 => Ok(0),
            Some(off) => ptr(mem, at + off),
            None => Ok(at),
        }
    }

    /// What the BPF program needs to read this interpreter's frames at
    /// sample time.
    pub fn layout(&self) -> loupe_bpf::stacks::PythonLayout {
        let o = &self.off;
        // Offsets::check kept every offset below 64 KiB.
        let w = |v: u64| v as u16;
        let (frame_entry, entry_by_owner) = match o.frame_entry {
            Entry::IsEntry(a) => (a, false),
            Entry::Owner(a) => (a, true),
        };
        loupe_bpf::stacks::PythonLayout {
            runtime: self.runtime,
            runtime_interpreters_head: w(o.runtime_interpreters_head),
            interp_threads_head: w(o.interp_threads_head),
            tstate_next: w(o.tstate_next),
            tstate_native_thread_id: w(o.tstate_native_thread_id),
            tstate_frame: w(o.tstate_frame),
            cframe_current_frame: w(o.cframe_current_frame.unwrap_or(0)),
            frame_code: w(o.frame_code),
            frame_previous: w(o.frame_previous),
            frame_instr: w(o.frame_instr),
            frame_entry: w(frame_entry),
            code_firstlineno: w(o.code_firstlineno),
            code_code_adaptive: w(o.code_code_adaptive),
            frame_direct: o.cframe_current_frame.is_none(),
            entry_by_owner,
        }
    }

    /// Names one frame the BPF program read at sample time (None: a frame
    /// of CPython's own that stacks leave out, source-less code such as
    /// 3.13's `_Py_InitCleanup`): its code object is read once (again if
    /// the first line the program saw says another code object now lives
    /// at that address).
    pub fn frame(&mut self, mem: &dyn ProcessMemory, raw: &loupe_bpf::stacks::RawPyFrame) -> Result<Option<PyFrame>, Error> {
        if self.codes.get(&raw.code).is_some_and(|c| c.first_line != raw.first_line) {
            self.codes.remove(&raw.code);
        }
        let info = self.code(mem, raw.code)?;
        if info.is_shim() {
            return Ok(None);
        }
        let line = line_of(&info.linetable, info.first_line, raw.byte_offset as u64);
        Ok(Some(PyFrame { qualname: info.qualname.clone(), file: info.file.clone(), line, entry: raw.entry }))
    }

    /// The thread state of `tid` in the main interpreter's list.
    fn thread_state(&self, mem: &dyn ProcessMemory, tid: u32) -> Result<u64, Error> {
        let o = &self.off;
        let interp = ptr(mem, self.runtime + o.runtime_interpreters_head)?;
        let mut t = if interp == 0 { 0 } else { ptr(mem, interp + o.interp_threads_head)? };
        for _ in 0..MAX_FRAMES {
            if t == 0 {
                break;
            }
            let mut id = [0u8; 8];
            read(mem, t + o.tstate_native_thread_id, &mut id)?;
            if u64::from_le_bytes(id) == tid as u64 {
                return Ok(t);
            }
            t = ptr(mem, t + o.tstate_next)?;
        }
        Err(Error::NoThread(tid))
    }

    fn code(&mut self, mem: &dyn ProcessMemory, code: u64) -> Result<&CodeInfo, Error> {
        if !self.codes.contains_key(&code) {
            let o = &self.off;
            let qualname = unicode(mem, ptr(mem, code + o.code_qualname)?, o)?;
            let file = unicode(mem, ptr(mem, code + o.code_filename)?, o)?;
            let mut first = [0u8; 4];
            read(mem, code + o.code_firstlineno, &mut first)?;
            let linetable = bytes(mem, ptr(mem, code + o.code_linetable)?, o)?;
            // Code objects live as long as their functions; a bounded cache
            // keeps a process that makes code at run time from growing it.
            if self.codes.len() > 65_536 {
                self.codes.clear();
            }
            self.codes.insert(code, CodeInfo { qualname, file, first_line: u32::from_le_bytes(first), linetable });
        }
        Ok(&self.codes[&code])
    }
}

fn read(mem: &dyn ProcessMemory, addr: u64, buf: &mut [u8]) -> Result<(), Error> {
    mem.read(addr, buf).map_err(|cause| Error::Read { addr, cause })
}

fn ptr(mem: &dyn ProcessMemory, addr: u64) -> Result<u64, Error> {
    let mut b = [0u8; 8];
    read(mem, addr, &mut b)?;
    Ok(u64::from_le_bytes(b))
}

/// A `str` object's text: compact ASCII, or compact with 1-, 2- or 4-byte
/// characters (what code objects' names are).
fn unicode(mem: &dyn ProcessMemory, obj: u64, o: &Offsets) -> Result<String, Error> {
    let mut head = [0u8; STR_HEAD_BYTES as usize];
    read(mem, obj, &mut head[..o.str_head()])?;
    let len = u64::from_le_bytes(head[o.unicode_length as usize..][..8].try_into().unwrap()).min(4096) as usize;
    let state = u32::from_le_bytes(head[o.unicode_state as usize..][..4].try_into().unwrap());
    let (kind, compact, ascii) = ((state >> 2) & 7, state >> 5 & 1 == 1, state >> 6 & 1 == 1);
    if ascii && compact {
        let mut b = vec![0u8; len];
        read(mem, obj + o.ascii_data, &mut b)?;
        return Ok(String::from_utf8_lossy(&b).into_owned());
    }
    let width = if compact && matches!(kind, 1 | 2 | 4) { kind as usize } else { return Ok(format!("<str at {obj:#x}>")) };
    let mut b = vec![0u8; len * width];
    read(mem, obj + o.compact_data, &mut b)?;
    let chars = b.chunks(width).map(|c| {
        let mut v = [0u8; 4];
        v[..width].copy_from_slice(c);
        char::from_u32(u32::from_le_bytes(v)).unwrap_or(char::REPLACEMENT_CHARACTER)
    });
    Ok(chars.collect())
}

/// A `bytes` object's contents (at most 1 MiB).
fn bytes(mem: &dyn ProcessMemory, obj: u64, o: &Offsets) -> Result<Vec<u8>, Error> {
    let mut size = [0u8; 8];
    read(mem, obj + o.bytes_size, &mut size)?;
    let mut b = vec![0u8; (u64::from_le_bytes(size) as usize).min(1 << 20)];
    read(mem, obj + o.bytes_data, &mut b)?;
    Ok(b)
}

/// The line of the instruction at `byte_offset` from a 3.11-3.13 location table
/// (`Objects/locations.md` in CPython): entries of one start byte
/// (`1ccccnnn`: code c, n+1 code units) and their operands; codes 10-12 move
/// the line by 0-2, 13 and 14 by a signed varint, 15 has no location.
pub fn line_of(table: &[u8], first_line: u32, byte_offset: u64) -> Option<u32> {
    let (mut line, mut addr, mut at) = (first_line as i64, 0u64, 0usize);
    while at < table.len() {
        let head = table[at];
        let code = (head >> 3) & 15;
        let units = (head & 7) as u64 + 1;
        line += match code {
            13 | 14 => signed_varint(&table[at + 1..]),
            11 => 1,
            12 => 2,
            _ => 0,
        };
        let end = addr + units * 2;
        if byte_offset < end {
            return (code != 15).then_some(line).and_then(|l| u32::try_from(l).ok());
        }
        addr = end;
        at += 1;
        while at < table.len() && table[at] & 0x80 == 0 {
            at += 1;
        }
    }
    None
}

/// Whether any entry of a location table gives a line (is not code 15,
/// "no location").
fn has_location(table: &[u8]) -> bool {
    table.iter().any(|&b| b & 0x80 != 0 && (b >> 3) & 15 != 15)
}

/// CPython's location-table varint: 6 bits a byte, 0x40 = more follow;
/// the signed form keeps the sign in the lowest bit.
fn signed_varint(b: &[u8]) -> i64 {
    let (mut v, mut shift) = (0u64, 0);
    for &c in b {
        v |= ((c & 63) as u64) << shift;
        shift += 6;
        if c & 64 == 0 || shift > 60 {
            break;
        }
    }
    if v & 1 == 1 {
        -((v >> 1) as i64)
    } else {
        (v >> 1) as i64
    }
}

/// Where an interpreter's symbols are in a process.
struct RuntimeSymbols {
    /// The python binary or libpython that has them.
    path: PathBuf,
    runtime: u64,
    /// Bytes of `_PyRuntime` (0: not known).
    runtime_size: u64,
    /// `Py_Version` (None: before 3.11).
    version: Option<u64>,
    eval: std::ops::Range<u64>,
}

/// Runtime addresses of `_PyRuntime` and `Py_Version` from the first
/// mapped file (python binary or libpython) that exports `_PyRuntime`.
fn runtime_symbols(maps: &str) -> Option<RuntimeSymbols> {
    let all = loupe_model::maps::parse_maps(maps);
    let mut seen: Vec<PathBuf> = Vec::new();
    for m in &all {
        let path = PathBuf::from(&m.path);
        if m.path.is_empty() || !m.path.starts_with('/') || seen.contains(&path) || !looks_like_python(&path) {
            continue;
        }
        seen.push(path.clone());
        let base = all.iter().filter(|x| x.path == m.path && x.pgoff == 0).map(|x| x.start).min()?;
        if let Some(found) = exported(&path, base) {
            return Some(found);
        }
    }
    None
}

/// A python binary or libpython, by its file name.
pub(crate) fn looks_like_python(path: &Path) -> bool {
    path.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("python") || n.starts_with("libpython"))
}

/// `_PyRuntime`, `Py_Version` and `_PyEval_EvalFrameDefault` of one ELF
/// file mapped at `base`.
fn exported(path: &Path, base: u64) -> Option<RuntimeSymbols> {
    let data = std::fs::read(path).ok()?;
    let file = object::File::parse(&*data).ok()?;
    let first_load = file.segments().map(|s| object::ObjectSegment::address(&s)).min().unwrap_or(0);
    let bias = if file.kind() == object::ObjectKind::Executable && first_load != 0 { 0 } else { base - first_load };
    let find =
        |name: &str| file.dynamic_symbols().chain(file.symbols()).find(|s| s.name() == Ok(name)).map(|s| (s.address() + bias, s.size()));
    let eval = find("_PyEval_EvalFrameDefault").map_or(0..0, |(a, n)| a..a + n);
    let (runtime, runtime_size) = find("_PyRuntime")?;
    Some(RuntimeSymbols { path: path.to_path_buf(), runtime, runtime_size, version: find("Py_Version").map(|v| v.0), eval })
}

/// CPython 3.12 and 3.13 builds to check beside Debian's 3.11 (tests and
/// benchmarks; neither Debian 12 nor PyPI ships them): `LOUPE_PYTHONS`
/// (paths, `:`-separated), or else the newest pyenv build of each.
pub fn newer_pythons() -> Vec<PathBuf> {
    let mut all = Vec::new();
    match std::env::var("LOUPE_PYTHONS") {
        Ok(list) => all.extend(list.split(':').filter(|p| !p.is_empty()).map(PathBuf::from)),
        Err(_) => {
            let root = std::env::var("PYENV_ROOT").unwrap_or_else(|_| "/root/.pyenv".into());
            for minor in ["3.12", "3.13"] {
                let mut v: Vec<PathBuf> = std::fs::read_dir(Path::new(&root).join("versions"))
                    .into_iter()
                    .flatten()
                    .flatten()
                    .filter(|e| e.file_name().to_string_lossy().starts_with(&format!("{minor}.")))
                    .map(|e| e.path().join(format!("bin/python{minor}")))
                    .collect();
                v.sort();
                all.extend(v.pop());
            }
        }
    }
    all.retain(|p| p.exists());
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn location_table_lines() {
        // Checks line deltas of the one-line (11, 12), no-column (13, signed varint) and none (15) forms, by code-unit ranges, and tables without any line.
        // start line 10; units: [0,2) +0 (code 10), [2,4) +1 (11), [4,6) +2 (12), [6,8) -3 (13, varint 7), [8,10) none (15).
        let table =
            [0x80 | 10 << 3 | 1, 0, 0, 0x80 | 11 << 3 | 1, 0, 0, 0x80 | 12 << 3 | 1, 0, 0, 0x80 | 13 << 3 | 1, 7, 0x80 | 15 << 3 | 1];
        let lines: Vec<Option<u32>> = (0..5).map(|i| line_of(&table, 10, i * 4)).collect();
        assert_eq!(lines, vec![Some(10), Some(11), Some(13), Some(10), None]);
        assert_eq!(line_of(&table, 10, 100), None);
        // CPython's own source-less code (3.13's no_location) has no line anywhere.
        assert!(has_location(&table) && !has_location(&[0x80 | 15 << 3 | 3]) && !has_location(&[]));
    }

    /// CPython 3.13 on x86-64 from the DWARF of pyenv 3.13.0's
    /// `libpython3.13.so.1.0` (gdb `ptype /o`): what its `_Py_DebugOffsets`
    /// must publish.
    const PY313: Offsets = Offsets {
        runtime_interpreters_head: 632,
        interp_threads_head: 7344,
        tstate_next: 8,
        tstate_native_thread_id: 160,
        tstate_frame: 72,
        cframe_current_frame: None,
        frame_code: 0,
        frame_previous: 8,
        frame_instr: 56,
        frame_entry: Entry::Owner(70),
        code_filename: 112,
        code_qualname: 128,
        code_linetable: 136,
        code_firstlineno: 68,
        code_code_adaptive: 200,
        unicode_length: 16,
        unicode_state: 32,
        ascii_data: 40,
        compact_data: 56,
        bytes_size: 16,
        bytes_data: 32,
    };

    /// A process's memory made of a few regions.
    #[derive(Default)]
    struct Fake(std::collections::BTreeMap<u64, Vec<u8>>);

    impl ProcessMemory for Fake {
        fn read(&self, addr: u64, buf: &mut [u8]) -> std::io::Result<()> {
            let (start, bytes) = self.0.range(..=addr).next_back().ok_or(std::io::ErrorKind::NotFound)?;
            let at = (addr - start) as usize;
            let src = bytes.get(at..at + buf.len()).ok_or(std::io::ErrorKind::UnexpectedEof)?;
            buf.copy_from_slice(src);
            Ok(())
        }
    }

    impl Fake {
        /// The region at `addr`, made or grown to at least `size` bytes.
        fn put(&mut self, addr: u64, size: usize) -> &mut Vec<u8> {
            let b = self.0.entry(addr).or_default();
            if b.len() < size {
                b.resize(size, 0);
            }
            b
        }
        fn word(&mut self, addr: u64, at: u64, v: u64) {
            self.put(addr, at as usize + 8)[at as usize..at as usize + 8].copy_from_slice(&v.to_le_bytes());
        }
        /// A compact ASCII `str` at `addr`.
        fn str(&mut self, addr: u64, o: &Offsets, text: &str) {
            let b = self.put(addr, 256);
            b[o.unicode_length as usize..][..8].copy_from_slice(&(text.len() as u64).to_le_bytes());
            b[o.unicode_state as usize..][..4].copy_from_slice(&(1u32 << 2 | 1 << 5 | 1 << 6).to_le_bytes());
            b[o.ascii_data as usize..][..text.len()].copy_from_slice(text.as_bytes());
        }
        /// A code object at `addr`, first line 10, whose instructions
        /// [0, 4) are on line 11 (none with `no_source`: a shim).
        fn code(&mut self, addr: u64, o: &Offsets, name: &str, no_source: bool) {
            let table = addr + 0x400;
            self.str(addr + 0x100, o, name);
            self.str(addr + 0x200, o, "/app/w.py");
            self.word(addr, o.code_qualname, addr + 0x100);
            self.word(addr, o.code_filename, addr + 0x200);
            self.word(addr, o.code_linetable, table);
            self.put(addr, 256)[o.code_firstlineno as usize..][..4].copy_from_slice(&10u32.to_le_bytes());
            // 3.13's `no_location`: 4 code units without a location.
            let lines: &[u8] = if no_source { &[0x80 | 15 << 3 | 3] } else { &[0x80 | 11 << 3 | 1, 0, 0] };
            self.word(table, o.bytes_size, lines.len() as u64);
            self.put(table, 256)[o.bytes_data as usize..][..lines.len()].copy_from_slice(lines);
        }
    }

    /// Lays out thread 77's stack (innermost first: name, entered from C)
    /// as a CPython with offsets `o` keeps it, with a source-less frame
    /// after the first; `_PyRuntime` is at 0x1000.
    fn fake_thread(o: &Offsets, stack: &[(&str, bool)]) -> Fake {
        let mut m = Fake::default();
        let (interp, tstate, cframe) = (0x2_0000, 0x3_0000, 0x4_0000);
        m.word(0x1000, o.runtime_interpreters_head, interp);
        m.word(interp, o.interp_threads_head, tstate);
        m.word(tstate, o.tstate_native_thread_id, 77);
        let mut frames = Vec::new();
        for (i, &(name, entry)) in stack.iter().enumerate() {
            frames.push((Some(name), entry));
            if i == 0 {
                frames.push((None, false));
            }
            if entry && matches!(o.frame_entry, Entry::Owner(_)) {
                frames.push((Some("<shim>"), false));
            }
        }
        let at = |i: usize| 0x10_0000 + 0x1000 * i as u64;
        match o.cframe_current_frame {
            Some(off) => {
                m.word(tstate, o.tstate_frame, cframe);
                m.word(cframe, off, at(0));
            }
            None => m.word(tstate, o.tstate_frame, at(0)),
        }
        for (i, &(name, entry)) in frames.iter().enumerate() {
            let (frame, code) = (at(i), at(i) + 0x800_0000);
            m.word(frame, o.frame_code, code);
            m.word(frame, o.frame_previous, if i + 1 < frames.len() { at(i + 1) } else { 0 });
            m.word(frame, o.frame_instr, code + o.code_code_adaptive + 2);
            let shim = name == Some("<shim>");
            match o.frame_entry {
                Entry::IsEntry(e) => m.put(frame, 256)[e as usize] = entry as u8,
                Entry::Owner(e) => m.put(frame, 256)[e as usize] = if shim { OWNED_BY_CSTACK } else { 0 },
            }
            m.code(code, o, name.unwrap_or("__init__"), name.is_none());
        }
        m
    }

    #[test]
    fn each_versions_layout_reads_back_the_same_stack() {
        // Checks the walk over 3.11's is_entry, 3.12's cframe with C-stack shim frames and 3.13's direct current_frame: the same names, lines and entries, source-less frames left out.
        let stack = [("inner", false), ("outer", true), ("run", false), ("<module>", true)];
        for (o, minor) in [(PY311, 11), (PY312, 12), (PY313, 13)] {
            let m = fake_thread(&o, &stack);
            let mut i = Interpreter { runtime: 0x1000, eval: 0..0, off: o, version: (3, minor, 0), codes: HashMap::new() };
            let got = i.stack(&m, 77).unwrap();
            let want: Vec<PyFrame> =
                stack.iter().map(|&(n, e)| PyFrame { qualname: n.into(), file: "/app/w.py".into(), line: Some(11), entry: e }).collect();
            assert_eq!(got, want, "3.{minor}");
            assert!(matches!(i.stack(&m, 78), Err(Error::NoThread(78))));
        }
    }

    /// `_Py_DebugOffsets` as 3.13.0 lays it out (positions from its
    /// DWARF), holding `o`, for `version_hex` and a runtime of `size` bytes.
    fn debug_offsets(o: &Offsets, version_hex: u64, size: u64) -> Vec<u8> {
        let mut b = vec![0u8; 584];
        b[..8].copy_from_slice(b"xdebugpy");
        let Entry::Owner(owner) = o.frame_entry else { panic!("3.13 marks entries by owner") };
        let fields = [
            (8, version_hex),
            (24, size),
            (40, o.runtime_interpreters_head),
            (72, o.interp_threads_head),
            (168, o.tstate_next),
            (184, o.tstate_frame),
            (200, o.tstate_native_thread_id),
            (232, o.frame_previous),
            (240, o.frame_code),
            (248, o.frame_instr),
            (264, owner),
            (280, o.code_filename),
            (296, o.code_qualname),
            (304, o.code_linetable),
            (312, o.code_firstlineno),
            (344, o.code_code_adaptive),
            (520, o.bytes_size),
            (528, o.bytes_data),
            (544, o.unicode_state),
            (552, o.unicode_length),
            (560, o.ascii_data),
        ];
        for (at, v) in fields {
            b[at..at + 8].copy_from_slice(&v.to_le_bytes());
        }
        b
    }

    #[test]
    fn published_offsets_are_read_and_checked() {
        // Checks 3.13's _Py_DebugOffsets read at its DWARF positions gives 3.13.0's offsets, and a missing cookie, another version, a runtime size unlike the symbol's or a frame field too far are refused by name.
        let b = debug_offsets(&PY313, 0x030D_00F0, 0x452b8);
        assert_eq!(published_offsets(&b, (3, 13, 0), Some(0x452b8)).unwrap(), PY313);
        let mut m = Fake::default();
        m.put(0x1000, 584).copy_from_slice(&b);
        assert_eq!(Interpreter::new(0x1000, 0x030D_00F0, 0x452b8, &m).unwrap().off, PY313);
        let mut no_cookie = b.clone();
        no_cookie[0] = b'y';
        let other = debug_offsets(&PY313, 0x030E_00F0, 0x452b8);
        for (bytes, size, why) in [(&no_cookie, 0x452b8, "cookie"), (&other, 0x452b8, "version 0x30e00f0"), (&b, 0x1000, "runtime size")] {
            let e = published_offsets(bytes, (3, 13, 0), Some(size)).unwrap_err().to_string();
            assert!(e.contains("CPython 3.13.0") && e.contains(why), "{e}");
        }
        let mut far = PY313;
        far.frame_instr = 200;
        let e = published_offsets(&debug_offsets(&far, 0x030D_00F0, 0), (3, 13, 0), None).unwrap_err().to_string();
        assert!(e.contains("frame fields"), "{e}");
    }

    #[test]
    fn version_tables_fit_the_bpf_layout() {
        // Checks the 3.11, 3.12 and 3.13 offsets pass the bounds the reader and struct py_proc rely on, and what the program is told of 3.12 and 3.13 frames.
        for o in [PY311, PY312, PY313] {
            o.check().unwrap();
        }
        let i = Interpreter { runtime: 0x1000, eval: 0..0, off: PY313, version: (3, 13, 0), codes: HashMap::new() };
        let l = i.layout();
        assert!(l.frame_direct && l.entry_by_owner && l.interp_threads_head == 7344 && l.frame_entry == 70 && l.tstate_frame == 72);
        let i = Interpreter { off: PY312, ..i };
        let l = i.layout();
        assert!(!l.frame_direct && l.entry_by_owner && l.tstate_frame == 56 && l.cframe_current_frame == 0);
        let i = Interpreter { off: PY311, ..i };
        let l = i.layout();
        assert!(!l.frame_direct && !l.entry_by_owner && l.frame_entry == 68 && l.cframe_current_frame == 8);
    }

    #[test]
    fn unknown_versions_are_refused_by_name() {
        // Checks that 3.10 and 3.14 are refused with their version in the message, never read with another version's offsets.
        let none = Fake::default();
        for hex in [0x030E_00F0u32, 0x030A_0CF0] {
            let e = Interpreter::new(0x1000, hex, 0, &none).err().expect("refused");
            assert!(e.to_string().contains(&format!("CPython 3.{}", (hex >> 16) & 0xff)), "{e}");
        }
        assert_eq!(Interpreter::new(0x1000, 0x030B_02F0, 0, &none).unwrap().version, (3, 11, 2));
        assert_eq!(Interpreter::new(0x1000, 0x030C_01F0, 0, &none).unwrap().off, PY312);
        assert!(matches!(Interpreter::new(0x1000, 0x030D_00F0, 0, &none), Err(Error::Read { .. })));
    }

    /// The CPythons to check live: Debian's 3.11 and [`newer_pythons`].
    fn pythons() -> Vec<PathBuf> {
        let mut all: Vec<PathBuf> = vec![PathBuf::from("/usr/bin/python3.11")];
        all.retain(|p| p.exists());
        all.extend(newer_pythons());
        all
    }

    /// A version and the offsets it was read with.
    type Seen = ((u8, u8, u8), Offsets);

    /// The stack of `py` running `script` once it printed a line, and
    /// the version and offsets it was read with.
    fn live_stack(py: &Path, script: &Path) -> (Result<Vec<PyFrame>, Error>, Option<Seen>) {
        let mut child = std::process::Command::new(py).arg(script).stdout(std::process::Stdio::piped()).spawn().unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.as_mut().unwrap()), &mut line).unwrap();
        let pid = child.id();
        // "ready" is printed a line before the sleep: on a loaded machine the thread can still be on the print's
        // line when read. Wait until it sleeps (clock_nanosleep, or nanosleep, in /proc/PID/syscall).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while std::time::Instant::now() < deadline {
            let sc = std::fs::read_to_string(format!("/proc/{pid}/syscall")).unwrap_or_default();
            if sc.starts_with("230 ") || sc.starts_with("35 ") {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let mem = Vm(pid);
        let interp = Interpreter::find(pid, &mem);
        let seen = interp.as_ref().ok().map(|i| (i.version, i.off));
        let got = interp.and_then(|mut i| i.stack(&mem, pid));
        child.kill().unwrap();
        child.wait().unwrap();
        (got, seen)
    }

    #[test]
    fn live_python_stack_names_functions_files_and_lines() {
        // Checks, under each CPython found, the stack of a script sleeping five calls deep (a method, __init__ called thrice so 3.13 specializes it, a function, a lambda called from C by map, the module): names, file, the lines the script marks, entries from C.
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("deep.py");
        std::fs::write(
            &script,
            "import sys, time\n\
             class Box:\n\
             \x20   def __init__(self, last):\n\
             \x20       if last:\n\
             \x20           self.inner()  # line 5\n\
             \x20   def inner(self):\n\
             \x20       print('ready', flush=True)\n\
             \x20       time.sleep(30)  # line 8\n\
             def outer():\n\
             \x20   for i in range(3):\n\
             \x20       Box(i == 2)  # line 11\n\
             list(map(lambda f: f(), [outer]))  # line 12\n",
        )
        .unwrap();
        let found = pythons();
        if found.len() < 3 {
            eprintln!("CPython 3.12/3.13 not found (LOUPE_PYTHONS unset, no pyenv 3.12.x/3.13.x): checked {found:?}");
        }
        for py in &found {
            let (got, seen) = live_stack(py, &script);
            let got = got.unwrap_or_else(|e| panic!("{}: {e}", py.display()));
            let (version, off) = seen.unwrap();
            if version == (3, 13, 0) {
                assert_eq!(off, PY313, "3.13.0's published offsets differ from its DWARF");
            }
            let names: Vec<(&str, Option<u32>)> = got.iter().map(|f| (f.qualname.as_str(), f.line)).collect();
            let want =
                [("Box.inner", Some(8)), ("Box.__init__", Some(5)), ("outer", Some(11)), ("<lambda>", Some(12)), ("<module>", Some(12))];
            assert_eq!(names, want, "{}", py.display());
            assert!(got.iter().all(|f| f.file == script.to_str().unwrap()));
            // Before 3.13 a class's __init__ is run by type.__call__ (C); 3.13 specializes the call into a frame push.
            let init_from_c = version < (3, 13, 0);
            assert_eq!(got.iter().map(|f| f.entry).collect::<Vec<_>>(), vec![false, init_from_c, false, true, true], "{}", py.display());
            eprintln!("{}: CPython {version:?} read", py.display());
        }
    }

    #[test]
    fn live_cpython_before_311_is_refused_by_name() {
        // Checks that a pyenv CPython 3.10 (no Py_Version) is refused as "before 3.11", naming its libpython, not taken for a non-Python process.
        let root = std::env::var("PYENV_ROOT").unwrap_or_else(|_| "/root/.pyenv".into());
        let Some(py) = std::fs::read_dir(Path::new(&root).join("versions"))
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path().join("bin/python3.10"))
            .find(|p| p.exists())
        else {
            eprintln!("skipping: no pyenv CPython 3.10");
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("wait.py");
        std::fs::write(&script, "import time\nprint('ready', flush=True)\ntime.sleep(30)\n").unwrap();
        let (got, _) = live_stack(&py, &script);
        let e = got.expect_err("refused").to_string();
        assert!(e.contains("CPython before 3.11 (") && e.contains("python3.10"), "{e}");
    }
}
