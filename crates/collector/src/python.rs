//! CPython frames read from the interpreter's own structures in another
//! process: `_PyRuntime` -> interpreter -> the sampled thread's state ->
//! `cframe->current_frame`, then each `_PyInterpreterFrame` (`f_code`,
//! `prev_instr`, `previous`) to the outermost. A frame is named by its
//! code object's `co_qualname` and `co_filename`, its line computed from
//! `co_linetable` and the instruction being run, as CPython's
//! `PyCode_Addr2Line` does.
//!
//! Structure offsets differ between minor versions and are not published
//! before 3.13 (`_Py_DebugOffsets`); the table here was taken from 3.11's
//! headers (`offsetof` on `Include/internal/pycore_*.h`, x86-64). A version
//! without a table is refused by name, never read with another's offsets.
//! Memory access goes through [`ProcessMemory`] so the walk is testable.

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
    /// No mapped file of the process exports `_PyRuntime` and `Py_Version`.
    NotPython(u32),
    /// A CPython version whose structure offsets Loupe does not know.
    Unsupported { version: String },
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
            Error::NotPython(pid) => write!(f, "process {pid} maps no CPython runtime (no _PyRuntime and Py_Version symbols)"),
            Error::Unsupported { version } => write!(
                f,
                "CPython {version}: Loupe knows the frame structures of CPython 3.11 only, so this interpreter's Python frames are not read"
            ),
            Error::Read { addr, cause } => write!(f, "cannot read the interpreter's memory at {addr:#x}: {cause}"),
            Error::NoThread(tid) => write!(f, "thread {tid} has no Python thread state"),
            Error::TooDeep => write!(f, "Python frame chain longer than {MAX_FRAMES} frames (changing while read?)"),
        }
    }
}

impl std::error::Error for Error {}

/// Offsets into CPython's structures, in bytes.
#[derive(Clone, Copy, Debug)]
struct Offsets {
    runtime_interpreters_head: u64,
    interp_threads_head: u64,
    tstate_next: u64,
    tstate_native_thread_id: u64,
    tstate_cframe: u64,
    cframe_current_frame: u64,
    frame_code: u64,
    frame_previous: u64,
    frame_prev_instr: u64,
    frame_is_entry: u64,
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

/// CPython 3.11 on x86-64 (the same for every 3.11.x: CPython keeps
/// these structures within a minor version).
const PY311: Offsets = Offsets {
    runtime_interpreters_head: 40,
    interp_threads_head: 16,
    tstate_next: 8,
    tstate_native_thread_id: 160,
    tstate_cframe: 56,
    cframe_current_frame: 8,
    frame_code: 32,
    frame_previous: 48,
    frame_prev_instr: 56,
    frame_is_entry: 68,
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

/// One CPython interpreter in one process.
pub struct Interpreter {
    runtime: u64,
    /// Where `_PyEval_EvalFrameDefault` is in the process: native frames
    /// there are the interpreter's activations (empty when not known).
    pub eval: std::ops::Range<u64>,
    off: &'static Offsets,
    pub version: (u8, u8, u8),
    codes: HashMap<u64, CodeInfo>,
}

impl Interpreter {
    /// Finds the interpreter of `pid` from its mappings and the exported
    /// `_PyRuntime` and `Py_Version` of its python binary or libpython.
    pub fn find(pid: u32, mem: &dyn ProcessMemory) -> Result<Interpreter, Error> {
        let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).map_err(|cause| Error::Read { addr: 0, cause })?;
        let (runtime, version_at, eval) = runtime_symbols(&maps).ok_or(Error::NotPython(pid))?;
        let mut v = [0u8; 4];
        mem.read(version_at, &mut v).map_err(|cause| Error::Read { addr: version_at, cause })?;
        let mut i = Interpreter::new(runtime, u32::from_le_bytes(v))?;
        i.eval = eval;
        Ok(i)
    }

    /// The interpreter whose `_PyRuntime` is at `runtime`, for the version
    /// `PY_VERSION_HEX` says.
    pub fn new(runtime: u64, version_hex: u32) -> Result<Interpreter, Error> {
        let version = ((version_hex >> 24) as u8, (version_hex >> 16) as u8, (version_hex >> 8) as u8);
        let off = match (version.0, version.1) {
            (3, 11) => &PY311,
            _ => return Err(Error::Unsupported { version: format!("{}.{}.{}", version.0, version.1, version.2) }),
        };
        Ok(Interpreter { runtime, eval: 0..0, off, version, codes: HashMap::new() })
    }

    /// The Python stack of thread `tid`, innermost frame first (empty when
    /// the thread runs no Python code now).
    pub fn stack(&mut self, mem: &dyn ProcessMemory, tid: u32) -> Result<Vec<PyFrame>, Error> {
        let o = *self.off;
        let tstate = self.thread_state(mem, tid)?;
        let cframe = ptr(mem, tstate + o.tstate_cframe)?;
        let mut frame = if cframe == 0 { 0 } else { ptr(mem, cframe + o.cframe_current_frame)? };
        let mut out = Vec::new();
        while frame != 0 {
            if out.len() >= MAX_FRAMES {
                return Err(Error::TooDeep);
            }
            let mut f = [0u8; 72];
            read(mem, frame, &mut f)?;
            let field = |at: u64| u64::from_le_bytes(f[at as usize..at as usize + 8].try_into().unwrap());
            let (code, prev_instr) = (field(o.frame_code), field(o.frame_prev_instr));
            let entry = f[o.frame_is_entry as usize] != 0;
            let info = self.code(mem, code)?;
            let byte_offset = prev_instr.wrapping_sub(code + o.code_code_adaptive);
            let line = line_of(&info.linetable, info.first_line, byte_offset);
            out.push(PyFrame { qualname: info.qualname.clone(), file: info.file.clone(), line, entry });
            frame = field(o.frame_previous);
        }
        Ok(out)
    }

    /// What the BPF program needs to read this interpreter's frames at
    /// sample time.
    pub fn layout(&self) -> loupe_bpf::stacks::PythonLayout {
        let o = self.off;
        let w = |v: u64| v as u16;
        loupe_bpf::stacks::PythonLayout {
            runtime: self.runtime,
            runtime_interpreters_head: w(o.runtime_interpreters_head),
            interp_threads_head: w(o.interp_threads_head),
            tstate_next: w(o.tstate_next),
            tstate_native_thread_id: w(o.tstate_native_thread_id),
            tstate_cframe: w(o.tstate_cframe),
            cframe_current_frame: w(o.cframe_current_frame),
            frame_code: w(o.frame_code),
            frame_previous: w(o.frame_previous),
            frame_prev_instr: w(o.frame_prev_instr),
            frame_is_entry: w(o.frame_is_entry),
            code_firstlineno: w(o.code_firstlineno),
            code_code_adaptive: w(o.code_code_adaptive),
        }
    }

    /// Names one frame the BPF program read at sample time: its code
    /// object is read once (again if the first line the program saw says
    /// another code object now lives at that address).
    pub fn frame(&mut self, mem: &dyn ProcessMemory, raw: &loupe_bpf::stacks::RawPyFrame) -> Result<PyFrame, Error> {
        if self.codes.get(&raw.code).is_some_and(|c| c.first_line != raw.first_line) {
            self.codes.remove(&raw.code);
        }
        let info = self.code(mem, raw.code)?;
        let line = line_of(&info.linetable, info.first_line, raw.byte_offset as u64);
        Ok(PyFrame { qualname: info.qualname.clone(), file: info.file.clone(), line, entry: raw.entry })
    }

    /// The thread state of `tid` in the main interpreter's list.
    fn thread_state(&self, mem: &dyn ProcessMemory, tid: u32) -> Result<u64, Error> {
        let o = self.off;
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
            let o = self.off;
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
    let mut head = [0u8; 40];
    read(mem, obj, &mut head)?;
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

/// The line of the instruction at `byte_offset` from a 3.11 location table
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

/// Runtime addresses of `_PyRuntime` and `Py_Version` from the first
/// mapped file (python binary or libpython) that exports both.
fn runtime_symbols(maps: &str) -> Option<(u64, u64, std::ops::Range<u64>)> {
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

fn looks_like_python(path: &Path) -> bool {
    path.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("python") || n.starts_with("libpython"))
}

/// `_PyRuntime`, `Py_Version` and `_PyEval_EvalFrameDefault` of one ELF
/// file mapped at `base`.
fn exported(path: &Path, base: u64) -> Option<(u64, u64, std::ops::Range<u64>)> {
    let data = std::fs::read(path).ok()?;
    let file = object::File::parse(&*data).ok()?;
    let first_load = file.segments().map(|s| object::ObjectSegment::address(&s)).min().unwrap_or(0);
    let bias = if file.kind() == object::ObjectKind::Executable && first_load != 0 { 0 } else { base - first_load };
    let find =
        |name: &str| file.dynamic_symbols().chain(file.symbols()).find(|s| s.name() == Ok(name)).map(|s| (s.address() + bias, s.size()));
    let eval = find("_PyEval_EvalFrameDefault").map_or(0..0, |(a, n)| a..a + n);
    Some((find("_PyRuntime")?.0, find("Py_Version")?.0, eval))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn location_table_lines() {
        // Checks line deltas of the one-line (11, 12), no-column (13, signed varint) and none (15) forms, by code-unit ranges.
        // start line 10; units: [0,2) +0 (code 10), [2,4) +1 (11), [4,6) +2 (12), [6,8) -3 (13, varint 7), [8,10) none (15).
        let table =
            [0x80 | 10 << 3 | 1, 0, 0, 0x80 | 11 << 3 | 1, 0, 0, 0x80 | 12 << 3 | 1, 0, 0, 0x80 | 13 << 3 | 1, 7, 0x80 | 15 << 3 | 1];
        let lines: Vec<Option<u32>> = (0..5).map(|i| line_of(&table, 10, i * 4)).collect();
        assert_eq!(lines, vec![Some(10), Some(11), Some(13), Some(10), None]);
        assert_eq!(line_of(&table, 10, 100), None);
    }

    #[test]
    fn unknown_versions_are_refused_by_name() {
        // Checks that 3.12 and 3.10 are refused with their version in the message, never read with 3.11's offsets.
        for hex in [0x030C_01F0u32, 0x030A_0CF0] {
            let e = Interpreter::new(0x1000, hex).err().expect("refused");
            assert!(e.to_string().contains(&format!("CPython 3.{}", (hex >> 16) & 0xff)), "{e}");
        }
        assert_eq!(Interpreter::new(0x1000, 0x030B_02F0).unwrap().version, (3, 11, 2));
    }

    /// Debian's CPython 3.11, when installed.
    fn python311() -> Option<&'static str> {
        Path::new("/usr/bin/python3.11").exists().then_some("/usr/bin/python3.11")
    }

    #[test]
    fn live_python_stack_names_functions_files_and_lines() {
        // Checks the stack of a python3.11 sleeping three calls deep (a method, a function, the module): names, file and the lines the script marks.
        let Some(py) = python311() else {
            eprintln!("skipping: no /usr/bin/python3.11");
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("deep.py");
        std::fs::write(
            &script,
            "import sys, time\n\
             class Box:\n\
             \x20   def inner(self):\n\
             \x20       print('ready', flush=True)\n\
             \x20       time.sleep(30)  # line 5\n\
             def outer():\n\
             \x20   Box().inner()  # line 7\n\
             outer()  # line 8\n",
        )
        .unwrap();
        let mut child = std::process::Command::new(py).arg(&script).stdout(std::process::Stdio::piped()).spawn().unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.as_mut().unwrap()), &mut line).unwrap();
        let pid = child.id();
        let mem = Vm(pid);
        let got = Interpreter::find(pid, &mem).and_then(|mut i| i.stack(&mem, pid));
        child.kill().unwrap();
        child.wait().unwrap();
        let got = got.unwrap();
        let names: Vec<(&str, Option<u32>)> = got.iter().map(|f| (f.qualname.as_str(), f.line)).collect();
        assert_eq!(names, vec![("Box.inner", Some(5)), ("outer", Some(7)), ("<module>", Some(8))]);
        assert!(got.iter().all(|f| f.file == script.to_str().unwrap()));
        assert_eq!(got.iter().map(|f| f.entry).collect::<Vec<_>>(), vec![false, false, true]);
    }
}
