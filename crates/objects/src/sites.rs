//! Naming allocation sites: the procedure, file and line of the call into
//! the allocator. A site is a return address, so the call instruction is
//! the byte before it (`offset - 1`), which keeps a call that ends its
//! function (a tail position before a `noreturn`) in the right procedure.

use crate::SiteLocation;
use loupe_model::{ImageId, ImageOffset};
use loupe_symbolize::{Reason, Symbol, Symbolizer};
use std::collections::HashMap;
use std::path::Path;

/// Resolves sites with one symbolizer, reading each image's build-id once.
pub struct SiteNamer {
    symbolizer: Symbolizer,
    images: HashMap<String, ImageId>,
}

impl SiteNamer {
    pub fn new(symbolizer: Symbolizer) -> SiteNamer {
        SiteNamer { symbolizer, images: HashMap::new() }
    }

    /// The calling procedure (and line, with DWARF) of a site.
    pub fn name(&mut self, loc: &SiteLocation) -> Result<Symbol, Reason> {
        let image = self
            .images
            .entry(loc.path.clone())
            .or_insert_with(|| ImageId::elf(&loc.path, Symbolizer::read_build_id(Path::new(&loc.path))))
            .clone();
        let call = ImageOffset(loc.offset.0.saturating_sub(1));
        self.symbolizer.symbolize(&image, &[call], true).pop().unwrap_or(Err(Reason::NoSymbols))
    }

    /// `procedure (file:line)`, or `path+0xoffset` when it has no symbol.
    pub fn label(&mut self, loc: &SiteLocation) -> String {
        match self.name(loc) {
            Ok(s) => match (&s.file, s.line) {
                (Some(f), Some(l)) => format!("{} ({}:{l})", s.procedure, f.rsplit('/').next().unwrap_or(f)),
                _ => s.procedure,
            },
            Err(_) => format!("{}+{:#x}", loc.path.rsplit('/').next().unwrap_or(&loc.path), loc.offset.0),
        }
    }
}
