//! The machine code of an image, for instruction-level analyses
//! (`loupe annotate`, `loupe calc`): procedures by name, bytes by virtual
//! address (code and jump tables), file offset <-> virtual address, and
//! source lines.

use crate::elf::Image;
use crate::{Reason, Symbolizer};
use loupe_model::{ImageId, ImageKind, ImageOffset};

/// A procedure's place in the image.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcedureRange {
    pub name: String,
    /// ELF virtual address of its first byte.
    pub start: u64,
    pub size: u64,
}

/// A loaded image's code, borrowed from the symbolizer.
pub struct Code<'a> {
    image: &'a Image,
}

impl Symbolizer {
    /// The code of an ELF image (not the kernel: its text is not readable here).
    pub fn code(&mut self, image: &ImageId) -> Result<Code<'_>, Reason> {
        if !matches!(image.kind, ImageKind::Elf | ImageKind::Vdso) {
            return Err(Reason::UnknownImage);
        }
        if !self.images.contains_key(image) {
            let loaded = self.load(image);
            self.images.insert(image.clone(), loaded);
        }
        match &self.images[image] {
            Ok(img) => Ok(Code { image: img }),
            Err(r) => Err(r.clone()),
        }
    }
}

impl Code<'_> {
    /// Procedures whose name is `name`, or failing that contains it.
    pub fn find(&self, name: &str) -> Vec<ProcedureRange> {
        let all = self.image.symbols();
        let pick = |exact: bool| -> Vec<ProcedureRange> {
            all.iter()
                .filter(|(_, sz, n)| *sz > 0 && if exact { n == name } else { n.contains(name) })
                .map(|(a, sz, n)| ProcedureRange { name: n.clone(), start: *a, size: *sz })
                .collect()
        };
        let exact = pick(true);
        if exact.is_empty() {
            pick(false)
        } else {
            exact
        }
    }

    /// `len` bytes at virtual address `vaddr`, when the file holds them.
    pub fn bytes(&self, vaddr: u64, len: u64) -> Option<&[u8]> {
        let (off, fsz, va) = self.image.segments().iter().copied().find(|(_, fsz, va)| vaddr >= *va && vaddr < va + fsz)?;
        if vaddr + len > va + fsz {
            return None;
        }
        let start = (off + vaddr - va) as usize;
        self.image.data.get(start..start + len as usize)
    }

    /// Virtual address of a file offset (how profiles store locations).
    pub fn vaddr(&self, off: ImageOffset) -> Option<u64> {
        self.image.vaddr(off.0)
    }

    /// Source file and line of a virtual address, from DWARF.
    pub fn line(&self, vaddr: u64) -> (Option<String>, Option<u32>) {
        self.image.location(vaddr)
    }

    /// The source line at `vaddr` in the function the symbol table names
    /// (for inlined code, the line of the outermost call site).
    pub fn outer_line(&self, vaddr: u64) -> Option<(String, u32)> {
        self.image.outer_line(vaddr)
    }
}
