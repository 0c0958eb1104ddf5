//! Python frames in the collector's stacks: for a sample of a CPython
//! 3.11, 3.12 or 3.13 process, the thread's Python stack
//! ([`crate::python`]) is read with `process_vm_readv` when the sample is
//! drained, and spliced into the native stack just above (leafward of) the `_PyEval_EvalFrameDefault`
//! activation that runs it, so a C function called from Python shows both.
//!
//! A Python frame is stored as a frame of the image named by its `.py`
//! file (kind `Anonymous`, one per process and file) at a made-up offset
//! per (qualified name, line); at each flush the table of those offsets is
//! written into the database as a jitdump (`DB/jit/<file key>.dump`: a code
//! load named after the function, debug info with file and line), which
//! the symbolizer reads like any JIT code.
//!
//! With the BPF stack program the frames are read at sample time, in the
//! kernel (`pystack.h`): once a process is known to be CPython the
//! program gets its interpreter's layout, and each sample carries its
//! (code object, instruction offset) pairs, beside the native stack in the
//! counted key or, for a sample sent to the perf ring, in a map found again
//! by the sample's thread and user registers. Only code objects are read
//! from user space, once each. With the stream backend (or before the
//! program knows the process) the frames are read when the sample is
//! drained, so a stack that changed in between (milliseconds with stack
//! copies filling the rings) is attributed as it is when read.

use crate::python::{Interpreter, PyFrame, Vm};
use crate::Collector;
use loupe_model::{fnv1a, ImageId, ImageKind};
use std::collections::HashMap;
use std::path::PathBuf;

/// The made-up code addresses of one Python image.
#[derive(Default)]
struct PyImage {
    by_name: HashMap<(String, u32), u64>,
    /// (offset, qualified name, line), in order of first use.
    entries: Vec<(u64, String, u32)>,
    written: usize,
}

/// One process: its interpreter (None: not CPython, or not readable).
struct PyProcess {
    interp: Option<Interpreter>,
    /// The BPF program reads its frames at sample time.
    in_kernel: bool,
    /// Image index per `.py` file.
    files: HashMap<String, u32>,
}

/// The collector's Python state.
#[derive(Default)]
pub struct PyState {
    procs: HashMap<u32, PyProcess>,
    images: HashMap<u32, PyImage>,
    /// Said once per cause: versions without offsets, unreadable memory.
    pub notes: Vec<String>,
    /// Samples whose Python stack was read, and failed reads.
    pub stacks_read: u64,
    pub read_failures: u64,
    /// Of `stacks_read`: read by the BPF program at sample time.
    pub read_in_kernel: u64,
    /// Frames of streamed samples that the BPF program read.
    kernel: Option<loupe_bpf::stacks::PythonSamples>,
}

/// Size of one made-up code range.
const SLOT: u64 = 16;

impl PyState {
    /// Forgets a process after exec (it may become or stop being Python).
    pub fn forget(&mut self, pid: u32) {
        self.procs.remove(&pid);
    }

    /// A file mapped into `pid`: a python binary or libpython mapped after
    /// the process was found not to be CPython has it looked at again
    /// (pyenv's and most distributions' 3.12+ keep the runtime in a
    /// libpython, which ld.so maps after exec; a sample drained in between
    /// found no `_PyRuntime`).
    pub fn mapped(&mut self, pid: u32, path: &str) {
        if self.procs.get(&pid).is_some_and(|p| p.interp.is_none()) && crate::python::looks_like_python(std::path::Path::new(path)) {
            self.procs.remove(&pid);
        }
    }

    /// Whether a CPython process is being sampled whose stacks are read
    /// when drained (not by the BPF program), so the rings should be
    /// drained promptly.
    pub fn active(&self) -> bool {
        self.procs.values().any(|p| p.interp.is_some() && !p.in_kernel)
    }

    /// Drops the processes `alive` says are gone (their tables stay
    /// until written).
    pub fn retain(&mut self, alive: impl Fn(u32) -> bool) {
        self.procs.retain(|pid, _| alive(*pid));
    }

    fn note(&mut self, msg: String) {
        if !self.notes.contains(&msg) {
            self.notes.push(msg);
        }
    }
}

/// Splices Python groups into a native stack (leaf first): group k (the
/// Python frames up to the k-th entry frame) goes just leafward of the k-th
/// interpreter activation; groups without an activation go at the root end.
pub fn splice<T: Copy>(native: &[(u64, T)], eval: &std::ops::Range<u64>, py: &[PyFrame], frame: &mut dyn FnMut(&PyFrame) -> T) -> Vec<T> {
    let mut groups = py.split_inclusive(|f| f.entry);
    let mut out = Vec::with_capacity(native.len() + py.len());
    for &(addr, t) in native {
        if eval.contains(&addr) {
            if let Some(g) = groups.next() {
                out.extend(g.iter().map(&mut *frame));
            }
        }
        out.push(t);
    }
    for g in groups {
        out.extend(g.iter().map(&mut *frame));
    }
    out
}

impl Collector {
    /// Has Python frames of samples sent to the perf ring taken from the
    /// BPF stack program, which read them at sample time.
    pub fn read_python_in_kernel(&mut self, samples: loupe_bpf::stacks::PythonSamples) {
        self.py.kernel = Some(samples);
    }

    /// Finds out once whether `pid` is CPython (until it execs).
    fn python_process(&mut self, pid: u32) -> Option<&mut Interpreter> {
        if !self.py.procs.contains_key(&pid) {
            let interp = match Interpreter::find(pid, &Vm(pid)) {
                Ok(i) => Some(i),
                Err(crate::python::Error::NotPython(_)) | Err(crate::python::Error::Read { .. }) => None,
                Err(e) => {
                    self.py.note(e.to_string());
                    None
                }
            };
            self.py.procs.insert(pid, PyProcess { interp, in_kernel: false, files: HashMap::new() });
        }
        self.py.procs.get_mut(&pid)?.interp.as_mut()
    }

    /// The layout the BPF program needs to read `pid`'s Python frames;
    /// None for processes that are not CPython (3.11 to 3.13).
    pub(crate) fn python_layout(&mut self, pid: u32) -> Option<loupe_bpf::stacks::PythonLayout> {
        self.python_process(pid).map(|i| i.layout())
    }

    /// Counts `n` samples counted in the kernel with Python frames.
    pub(crate) fn count_python_in_kernel(&mut self, n: u64) {
        self.py.stacks_read += n;
        self.py.read_in_kernel += n;
    }

    /// The BPF program reads `pid`'s Python frames from now on.
    pub(crate) fn python_in_kernel(&mut self, pid: u32) {
        if let Some(p) = self.py.procs.get_mut(&pid) {
            p.in_kernel = true;
        }
    }

    /// Names the code objects of a Python stack the BPF program counted,
    /// now, while `pid` lives: the counts come later, when a short-lived
    /// process and its code objects are gone. Nothing is counted here.
    pub(crate) fn name_python_early(&mut self, pid: u32, words: &[u64]) {
        let (raw, _) = loupe_bpf::stacks::python_frames(words);
        let Some(interp) = self.python_process(pid) else { return };
        let mem = Vm(pid);
        for r in &raw {
            // A frame not readable now is counted when its samples are named.
            let _ = interp.frame(&mem, r);
        }
    }

    /// Names Python frames the BPF program read (pystack.h's words), with
    /// the range of the interpreter's eval function and whether outer
    /// frames are missing; `samples` of them are counted as read.
    pub(crate) fn python_read_in_kernel(
        &mut self,
        pid: u32,
        words: &[u64],
        samples: u64,
    ) -> Option<(std::ops::Range<u64>, Vec<PyFrame>, bool)> {
        let (raw, truncated) = loupe_bpf::stacks::python_frames(words);
        let interp = self.python_process(pid)?;
        let mem = Vm(pid);
        let frames: Result<Vec<PyFrame>, _> = raw.iter().filter_map(|r| interp.frame(&mem, r).transpose()).collect();
        let eval = interp.eval.clone();
        match frames {
            Ok(f) => {
                self.py.stacks_read += samples;
                self.py.read_in_kernel += samples;
                Some((eval, f, truncated))
            }
            // A code object freed before it was named, or the process exited.
            Err(_) => {
                self.py.read_failures += 1;
                None
            }
        }
    }

    /// The Python stack of a sample of thread `tid` of `pid` that reached
    /// the daemon through the perf ring, with the range of the
    /// interpreter's eval function; None for processes that are not
    /// CPython. Taken from what the BPF program read at sample time when
    /// it reads the process's frames (`regs`: the sample's user pc and sp),
    /// else read now.
    pub(crate) fn python_stack(&mut self, pid: u32, tid: u32, regs: Option<(u64, u64)>) -> Option<(std::ops::Range<u64>, Vec<PyFrame>)> {
        self.python_process(pid)?;
        let p = self.py.procs.get_mut(&pid)?;
        if p.in_kernel && self.py.kernel.is_some() {
            let (pc, sp) = regs?;
            let words = self.py.kernel.as_mut()?.take(tid, pc, sp).filter(|w| !w.is_empty())?;
            return self.python_read_in_kernel(pid, &words, 1).map(|(eval, f, _)| (eval, f));
        }
        let mem = Vm(pid);
        let interp = p.interp.as_mut()?;
        match interp.stack(&mem, tid) {
            Ok(frames) => {
                self.py.stacks_read += 1;
                Some((interp.eval.clone(), frames))
            }
            // A chain rewritten while read, or a process exiting: counted.
            Err(_) => {
                self.py.read_failures += 1;
                None
            }
        }
    }

    /// The (image, offset) frame standing for one Python frame of `pid`.
    pub(crate) fn python_frame(&mut self, pid: u32, f: &PyFrame) -> (u32, u64) {
        let p = self.py.procs.get_mut(&pid).expect("python_stack saw the process");
        let image = match p.files.get(&f.file) {
            Some(&i) => i,
            None => {
                let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
                let ident = fnv1a(&[pid.to_le_bytes().as_slice(), &now.to_le_bytes()].concat());
                let id = ImageId { kind: ImageKind::Anonymous, path: f.file.clone(), build_id: None, content_hash: Some(ident) };
                let i = self.images.intern(id).0;
                p.files.insert(f.file.clone(), i);
                i
            }
        };
        let img = self.py.images.entry(image).or_default();
        let line = f.line.unwrap_or(0);
        let next = SLOT * (img.entries.len() as u64 + 1);
        let off = *img.by_name.entry((f.qualname.clone(), line)).or_insert(next);
        if off == next {
            img.entries.push((off, f.qualname.clone(), line));
        }
        (image, off)
    }

    /// Writes the tables of Python images that got new frames into `dir`.
    pub(crate) fn keep_python_tables(&mut self, dir: Option<&PathBuf>) {
        let Some(dir) = dir else { return };
        for (image, t) in self.py.images.iter_mut() {
            if t.written == t.entries.len() {
                continue;
            }
            let id = self.images.get(*image);
            let path = dir.join(format!("{}.dump", id.file_key()));
            if crate::jit::write_private(dir, &path, &jitdump(&id.path, &t.entries)) {
                t.written = t.entries.len();
            }
        }
    }
}

/// A jitdump naming each made-up range: debug info (file, line), then the
/// load of a range named after the function.
pub fn jitdump(file: &str, entries: &[(u64, String, u32)]) -> Vec<u8> {
    let mut b = Vec::new();
    for v in [0x4A69_5444u32, 1, 40, 62, 0, 0] {
        b.extend(v.to_le_bytes());
    }
    b.extend([0u8; 16]);
    for (off, name, line) in entries {
        let mut dbg = Vec::new();
        for v in [*off, 1, *off] {
            dbg.extend(v.to_le_bytes());
        }
        dbg.extend(line.to_le_bytes());
        dbg.extend(0u32.to_le_bytes());
        dbg.extend(file.as_bytes());
        dbg.push(0);
        record(&mut b, 2, &dbg);
        let mut load = Vec::new();
        load.extend([0u8; 8]);
        for v in [*off, *off, SLOT, 0] {
            load.extend(v.to_le_bytes());
        }
        load.extend(name.as_bytes());
        load.push(0);
        record(&mut b, 0, &load);
    }
    b
}

fn record(b: &mut Vec<u8>, id: u32, body: &[u8]) {
    b.extend(id.to_le_bytes());
    b.extend((16 + body.len() as u32).to_le_bytes());
    b.extend(0u64.to_le_bytes());
    b.extend(body);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(name: &str, entry: bool) -> PyFrame {
        PyFrame { qualname: name.into(), file: "/x.py".into(), line: Some(1), entry }
    }

    #[test]
    fn python_groups_go_above_their_eval_activations() {
        // Checks leaf-first splicing: each run of Python frames up to an entry frame sits just leafward of its _PyEval_EvalFrameDefault frame.
        let eval = 0x100..0x200;
        let native = [(0x900, "sleep"), (0x150, "eval0"), (0x300, "call_c"), (0x180, "eval1"), (0x50, "main")];
        let py = [f("inner", false), f("outer", true), f("<module>", true)];
        let mut name = |p: &PyFrame| {
            if p.qualname == "inner" {
                "inner"
            } else if p.qualname == "outer" {
                "outer"
            } else {
                "<module>"
            }
        };
        let got = splice(&native, &eval, &py, &mut name);
        assert_eq!(got, vec!["sleep", "inner", "outer", "eval0", "call_c", "<module>", "eval1", "main"]);
    }

    #[test]
    fn made_up_ranges_symbolize_to_function_file_and_line() {
        // Checks the written jitdump reads back through the symbolizer's reader as (qualified name, file, line).
        let table = jitdump("/app/work.py", &[(16, "Work.spin".into(), 12), (32, "main".into(), 30)]);
        let mut s = loupe_symbolize::jit::JitSymbols::default();
        s.add_jitdump(&table).unwrap();
        let at = s.symbolize(loupe_model::ImageOffset(35)).unwrap();
        assert_eq!((at.procedure.as_str(), at.file.as_deref(), at.line), ("main", Some("/app/work.py"), Some(30)));
        assert_eq!(s.symbolize(loupe_model::ImageOffset(16)).unwrap().procedure, "Work.spin");
    }

    #[test]
    fn a_libpython_mapped_later_has_the_process_looked_at_again() {
        // Checks that a process found not to be CPython is forgotten when a libpython or python binary is mapped into it, and only then.
        let mut st = PyState::default();
        st.procs.insert(7, PyProcess { interp: None, in_kernel: false, files: HashMap::new() });
        st.mapped(7, "/usr/lib/x86_64-linux-gnu/libc.so.6");
        assert!(st.procs.contains_key(&7));
        st.mapped(7, "/root/.pyenv/versions/3.12.1/lib/libpython3.12.so.1.0");
        assert!(!st.procs.contains_key(&7));
    }
}
