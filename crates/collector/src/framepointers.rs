//! Whether an executable image was built with frame pointers: the BPF
//! stack walker follows the frame-pointer chain, which is right only
//! through code that keeps one.
//!
//! Judged from the code itself: the share of function entries (from the
//! symbol table, else the dynamic one) that open with `push %rbp; mov
//! %rsp,%rbp`, after an optional `endbr64`. Compilers told
//! `-fno-omit-frame-pointer` emit that prologue in nearly every function;
//! without it, only functions needing a frame (alloca, variable-length
//! arrays) do. An image with no function symbols to judge by counts as
//! having none, so its samples keep their stack copies.

use object::{Object, ObjectSection, ObjectSymbol, SymbolKind};

/// Functions examined per image at most (enough to judge, bounded work).
const SAMPLE: usize = 4096;
/// Share of prologues that makes an image a frame-pointer build.
const THRESHOLD: f64 = 0.5;

/// How an image was judged.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Verdict {
    pub functions: usize,
    pub with_frame_pointer: usize,
}

impl Verdict {
    pub fn has_frame_pointers(&self) -> bool {
        self.functions > 0 && self.with_frame_pointer as f64 >= THRESHOLD * self.functions as f64
    }
}

/// True when `code` (a function's first bytes) sets up a frame pointer.
pub fn opens_frame(code: &[u8]) -> bool {
    const ENDBR64: [u8; 4] = [0xf3, 0x0f, 0x1e, 0xfa];
    let code = code.strip_prefix(&ENDBR64[..]).unwrap_or(code);
    // push %rbp; mov %rsp,%rbp (either encoding of the mov).
    matches!(code, [0x55, 0x48, 0x89, 0xe5, ..] | [0x55, 0x48, 0x8b, 0xec, ..])
}

/// Judges an ELF image from its bytes; None when it does not parse.
pub fn judge(elf: &[u8]) -> Option<Verdict> {
    let file = object::File::parse(elf).ok()?;
    let mut v = Verdict { functions: 0, with_frame_pointer: 0 };
    let symbols = if file.symbols().next().is_some() { file.symbols() } else { file.dynamic_symbols() };
    for sym in symbols.filter(|s| s.kind() == SymbolKind::Text && s.size() >= 8).take(SAMPLE) {
        let Some(code) = symbol_code(&file, &sym) else { continue };
        v.functions += 1;
        v.with_frame_pointer += opens_frame(code) as usize;
    }
    Some(v)
}

/// The first bytes of a function symbol's code.
fn symbol_code<'a>(file: &object::File<'a>, sym: &object::Symbol<'a, '_>) -> Option<&'a [u8]> {
    let section = file.section_by_index(sym.section_index()?).ok()?;
    let data = section.data().ok()?;
    let at = sym.address().checked_sub(section.address())? as usize;
    data.get(at..at + 8.min(sym.size() as usize))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prologues_with_and_without_a_frame() {
        // Checks the prologue patterns: gcc/clang's frame setup, after endbr64 too, and common frameless entries.
        assert!(opens_frame(&[0x55, 0x48, 0x89, 0xe5, 0x48, 0x83, 0xec, 0x10]));
        assert!(opens_frame(&[0xf3, 0x0f, 0x1e, 0xfa, 0x55, 0x48, 0x89, 0xe5]));
        assert!(opens_frame(&[0x55, 0x48, 0x8b, 0xec, 0x90]));
        // push %rbx; sub $0x10,%rsp
        assert!(!opens_frame(&[0x53, 0x48, 0x83, 0xec, 0x10]));
        // push %rbp; push %rbx (rbp saved as a callee-saved register, no frame)
        assert!(!opens_frame(&[0x55, 0x53, 0x48, 0x83, 0xec]));
        assert!(!opens_frame(&[0xf3, 0x0f, 0x1e, 0xfa, 0x41, 0x57]));
        assert!(!opens_frame(&[0x55]));
    }

    #[test]
    fn the_workloads_library_is_judged_by_how_it_was_built() {
        // Checks libcallee.c (testdata/workloads) built with -fno-omit-frame-pointer and with -fomit-frame-pointer.
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/workloads/libcallee.c");
        let dir = tempfile::tempdir().unwrap();
        let build = |flag: &str| {
            let out = dir.path().join(format!("lib{flag}.so"));
            let ok = std::process::Command::new("cc").args(["-O2", "-g", "-shared", "-fPIC", flag, "-o"]).arg(&out).arg(&src).status();
            assert!(ok.is_ok_and(|s| s.success()), "cc {flag} failed");
            judge(&std::fs::read(out).unwrap()).unwrap()
        };
        let (fp, nofp) = (build("-fno-omit-frame-pointer"), build("-fomit-frame-pointer"));
        assert!(fp.functions > 0 && fp.has_frame_pointers(), "{fp:?}");
        assert!(nofp.functions > 0 && !nofp.has_frame_pointers(), "{nofp:?}");
    }
}
