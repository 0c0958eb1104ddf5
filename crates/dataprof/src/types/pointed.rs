//! Unnamed static data typed by the typed static pointers that point at it:
//! string literals have no DWARF variable and no symbol, but `static const
//! char *words[] = {"GET", ...}` says each bytes it points to are `const
//! char`. In a position-independent image (PIE, shared library) every such
//! pointer is a relative dynamic relocation: its place is in a typed static
//! (whose member there is a pointer) and its addend is the target. Targets
//! pointed to as different types are not named; a `char` target extends to
//! its terminating NUL (a C string), any other to its type's size.

use super::{ImageTypes, Typed};
use object::{Object, RelocationFlags};

/// `R_X86_64_RELATIVE`: place = load base + addend.
const R_X86_64_RELATIVE: u32 = 8;

/// A pointed-to range: start, end (exclusive), the pointee's type name and
/// the static whose pointer names it.
pub(crate) type Pointed = (u64, u64, String, String);

impl ImageTypes {
    /// The relative relocations' (place, target), read once at load.
    pub(crate) fn relative_relocations(file: &object::File) -> Vec<(u64, u64)> {
        let Some(relocs) = file.dynamic_relocations() else { return Vec::new() };
        relocs
            .filter(|(_, r)| matches!(r.flags(), RelocationFlags::Elf { r_type } if r_type == R_X86_64_RELATIVE))
            .map(|(place, r)| (place, r.addend() as u64))
            .collect()
    }

    /// The data a typed static pointer points to at `vaddr`, named by the
    /// pointee type and the static (`char (pointed to by words)`).
    pub fn pointed_at(&self, vaddr: u64) -> Option<Typed> {
        let mut table = self.pointed.borrow_mut();
        let table = table.get_or_insert_with(|| self.pointed_table());
        let i = table.partition_point(|p| p.0 <= vaddr).checked_sub(1)?;
        let (start, end, ty, by) = &table[i];
        (vaddr < *end).then(|| Typed {
            type_name: format!("{ty} (pointed to by {by})"),
            field: String::new(),
            field_offset: 0,
            offset: vaddr - start,
            size: end - start,
        })
    }

    /// Every target of a relocated pointer member of a typed static that no
    /// variable already covers, with one agreed pointee type; sorted by start.
    fn pointed_table(&self) -> Vec<Pointed> {
        let mut by_target: std::collections::BTreeMap<u64, Option<(String, u64, String)>> = Default::default();
        for &(place, target) in &self.relocs {
            if self.global_at(target).is_some() {
                continue;
            }
            let Some(g) = self.global_at(place).filter(|g| g.ty.is_some()) else { continue };
            let Some((t, off)) = self.static_raw(place) else { continue };
            let Some(p) = self.leaf_at(t, off).and_then(|l| self.pointee_ref(l)) else { continue };
            let name = self.describe(p, 0).type_name;
            let size = self.size_of(p.ui, &self.units[p.ui], p.ty).max(1);
            let extent = if size == 1 && name.contains("char") { self.c_string_len(target) } else { Some(size) };
            let Some(extent) = extent else { continue };
            let mine = Some((name, extent, g.name.clone()));
            let e = by_target.entry(target).or_insert_with(|| mine.clone());
            // Two pointers that view the bytes as different types: name neither.
            if e.as_ref().map(|x| &x.0) != mine.as_ref().map(|x| &x.0) {
                *e = None;
            }
        }
        let mut out: Vec<Pointed> = by_target.into_iter().filter_map(|(s, v)| v.map(|(t, n, by)| (s, s + n, t, by))).collect();
        // Overlapping ranges (a pointer into the middle of a string): the later start wins from there.
        for i in 1..out.len() {
            if out[i - 1].1 > out[i].0 {
                out[i - 1].1 = out[i].0;
            }
        }
        out
    }

    /// Length of the NUL-terminated string at `vaddr` in the file, NUL included.
    fn c_string_len(&self, vaddr: u64) -> Option<u64> {
        const MAX: u64 = 4096;
        let bytes = (1..=MAX).rev().step_by(64).find_map(|n| self.code(vaddr, vaddr + n))?;
        bytes.iter().position(|&b| b == 0).map(|n| n as u64 + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object::ObjectSection;

    const SRC: &str = r#"
#include <stdio.h>
#include <string.h>
static const char *words[] = {"zq-alpha", "zq-beta"};
struct pair { const char *name; long n; };
struct pair pairs[] = {{"zq-gamma", 1}};
int main(int argc, char **argv) {
    printf("zq-unpointed %d\n", argc);
    return (int)strlen(words[argc & 1]) + (int)strlen(pairs[0].name);
}
"#;

    #[test]
    fn string_literals_take_the_type_of_the_static_pointers_to_them() {
        // Checks (PIE, -O1/-O2) literals held by `const char *words[]` and by a struct member are `char` (qualifiers dropped, as everywhere) up to and including their NUL, named by the static; a literal no static points to stays unnamed.
        for opt in ["-O1", "-O2"] {
            let dir = tempfile::tempdir().unwrap();
            let (src, bin) = (dir.path().join("p.c"), dir.path().join("p"));
            std::fs::write(&src, SRC).unwrap();
            let st = std::process::Command::new("cc").args([opt, "-g", "-fPIE", "-pie", "-o"]).arg(&bin).arg(&src).status().unwrap();
            assert!(st.success());
            let data = std::fs::read(&bin).unwrap();
            let file = object::File::parse(&*data).unwrap();
            let ro = file.section_by_name(".rodata").unwrap();
            let bytes = ro.data().unwrap();
            let at = |s: &str| ro.address() + bytes.windows(s.len()).position(|w| w == s.as_bytes()).unwrap() as u64;
            let t = ImageTypes::load(&bin).unwrap();
            let named = |a: u64| t.static_at(a).map(|x| (x.type_name, x.offset, x.size));
            let by_words = "char (pointed to by words)".to_string();
            assert_eq!(named(at("zq-alpha")), Some((by_words.clone(), 0, 9)), "{opt}");
            assert_eq!(named(at("zq-alpha") + 8), Some((by_words.clone(), 8, 9)), "{opt}: its NUL");
            assert_eq!(named(at("zq-beta") + 3), Some((by_words, 3, 8)), "{opt}");
            assert_eq!(named(at("zq-gamma") + 1), Some(("char (pointed to by pairs)".into(), 1, 9)), "{opt}");
            assert_eq!(named(at("zq-unpointed")), None, "{opt}");
        }
    }
}
