//! DWARF CFI unwinding of copied user stacks (`PERF_SAMPLE_STACK_USER`),
//! with framehop: `.eh_frame`/`.eh_frame_hdr` or `.debug_frame` where the
//! code has them, frame pointers where it has none.
//!
//! Design constraint: the unwinder for a process is a pure function of its
//! current mappings, so it is rebuilt lazily after any mapping change
//! (`invalidate`), and each image's unwind sections are mapped from disk
//! once and shared by every process that maps the image.

use crate::kernel::USER_CODE;
use crate::process::Mapping;
use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64};
use framehop::{ExplicitModuleSectionInfo, FrameAddress, Module, Unwinder};
use object::{Object, ObjectSection, ObjectSegment};
use std::collections::HashMap;
use std::ops::{Deref, Range};
use std::path::Path;
use std::sync::Arc;

/// Bytes of a section: a window into a shared mapping of the whole file.
#[derive(Clone)]
pub struct Bytes {
    src: Arc<Source>,
    range: Range<usize>,
}

enum Source {
    Map(memmap2::Mmap),
    Owned(Vec<u8>),
}

impl Source {
    fn bytes(&self) -> &[u8] {
        match self {
            Source::Map(m) => m,
            Source::Owned(v) => v,
        }
    }
}

impl Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.src.bytes()[self.range.clone()]
    }
}

/// What one image contributes to every process's unwinder.
struct ImageInfo {
    sections: ExplicitModuleSectionInfo<Bytes>,
    /// (file offset, file size, virtual address) of each loadable segment.
    segments: Vec<(u64, u64, u64)>,
}

impl ImageInfo {
    fn parse(src: Arc<Source>) -> Option<ImageInfo> {
        let file = object::File::parse(src.bytes()).ok()?;
        let section = |name: &str| {
            let s = file.section_by_name(name)?;
            let (off, size) = s.file_range()?;
            let svma = s.address()..s.address() + s.size();
            Some((svma, Bytes { src: src.clone(), range: off as usize..(off + size) as usize }))
        };
        let svma = |name: &str| file.section_by_name(name).map(|s| s.address()..s.address() + s.size());
        let (text_svma, text) = section(".text").unzip();
        let (eh_frame_svma, eh_frame) = section(".eh_frame").unzip();
        let (eh_frame_hdr_svma, eh_frame_hdr) = section(".eh_frame_hdr").unzip();
        let debug_frame = section(".debug_frame").map(|(_, b)| b);
        let sections = ExplicitModuleSectionInfo {
            base_svma: 0,
            text_svma,
            text,
            got_svma: svma(".got"),
            eh_frame_svma,
            eh_frame,
            eh_frame_hdr_svma,
            eh_frame_hdr,
            debug_frame,
            stubs_svma: None,
            stub_helper_svma: None,
            unwind_info: None,
            text_segment_svma: None,
            text_segment: None,
        };
        let segments = file.segments().map(|s| (s.file_range().0, s.file_range().1, s.address())).collect();
        Some(ImageInfo { sections, segments })
    }

    /// Runtime address of virtual address 0, given one mapping of the image.
    fn base_avma(&self, m: &Mapping) -> Option<u64> {
        crate::unwindtable::segment_bias(&self.segments, m.start, m.pgoff)
    }
}

/// How an unwind of a copied user stack ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    /// The unwinder found the root frame.
    Root,
    /// It stopped early (stack copy too short, no unwind info, bad frame).
    Truncated,
}

/// Per-process unwinders over shared per-image unwind data.
pub struct Unwinders {
    procs: HashMap<u32, UnwinderX86_64<Bytes>>,
    images: HashMap<u32, Option<Arc<ImageInfo>>>,
    vdso: Option<Arc<Source>>,
    cache: CacheX86_64,
}

/// Deepest user stack we follow.
pub const MAX_FRAMES: usize = 256;

impl Unwinders {
    pub fn new(vdso: Option<Vec<u8>>) -> Unwinders {
        Unwinders {
            procs: HashMap::new(),
            images: HashMap::new(),
            vdso: vdso.map(|v| Arc::new(Source::Owned(v))),
            cache: CacheX86_64::new(),
        }
    }

    /// Forgets a process's unwinder (its mappings changed or it is gone).
    pub fn invalidate(&mut self, pid: u32) {
        self.procs.remove(&pid);
    }

    /// Drops unwinders of processes `alive` says are gone.
    pub fn retain(&mut self, alive: impl Fn(u32) -> bool) {
        self.procs.retain(|&pid, _| alive(pid));
    }

    /// Unwinds one sample's user stack. `mappings` yields the process's
    /// executable mappings with, per image, a path to read it from (None
    /// for the vDSO). Pushes runtime addresses, leaf first; caller frames
    /// are return addresses.
    pub fn unwind(
        &mut self,
        pid: u32,
        mappings: &mut dyn FnMut() -> Vec<(Mapping, Option<std::path::PathBuf>)>,
        regs: loupe_perf::UserRegs,
        stack: &[u8],
        out: &mut Vec<u64>,
    ) -> End {
        if !self.procs.contains_key(&pid) {
            let u = self.build(mappings());
            self.procs.insert(pid, u);
        }
        let unwinder = &self.procs[&pid];
        let sp = regs.sp;
        let mut read = |addr: u64| -> Result<u64, ()> {
            let at = addr.checked_sub(sp).ok_or(())? as usize;
            let b = stack.get(at..at.checked_add(8).ok_or(())?).ok_or(())?;
            Ok(u64::from_le_bytes(b.try_into().map_err(|_| ())?))
        };
        let mut it = unwinder.iter_frames(regs.ip, UnwindRegsX86_64::new(regs.ip, regs.sp, regs.bp), &mut self.cache, &mut read);
        loop {
            match it.next() {
                // A return address outside user space was read from a bad
                // frame (garbage in the stack copy): the walk went wrong there.
                Ok(Some(FrameAddress::InstructionPointer(a))) if out.len() < MAX_FRAMES && USER_CODE.contains(&a) => out.push(a),
                Ok(Some(FrameAddress::ReturnAddress(a))) if out.len() < MAX_FRAMES && USER_CODE.contains(&a.get()) => out.push(a.get()),
                Ok(Some(_)) => return End::Truncated,
                Ok(None) => return End::Root,
                Err(_) => return End::Truncated,
            }
        }
    }

    fn build(&mut self, mappings: Vec<(Mapping, Option<std::path::PathBuf>)>) -> UnwinderX86_64<Bytes> {
        let mut u = UnwinderX86_64::new();
        for (m, path) in mappings {
            let Some(info) = self.image(m.image, path.as_deref()) else { continue };
            let Some(base) = info.base_avma(&m) else { continue };
            u.add_module(Module::new(String::new(), m.start..m.end, base, info.sections.clone()));
        }
        u
    }

    fn image(&mut self, image: u32, path: Option<&Path>) -> Option<Arc<ImageInfo>> {
        let vdso = self.vdso.clone();
        self.images
            .entry(image)
            .or_insert_with(|| {
                let src = match path {
                    None => vdso?,
                    Some(p) => {
                        let f = std::fs::File::open(p).ok()?;
                        // SAFETY: a read-only private mapping of an executable
                        // image; a concurrent truncation could fault, the same
                        // risk every profiler and debugger reading images takes.
                        Arc::new(Source::Map(unsafe { memmap2::Mmap::map(&f) }.ok()?))
                    }
                };
                ImageInfo::parse(src).map(Arc::new)
            })
            .clone()
    }
}
