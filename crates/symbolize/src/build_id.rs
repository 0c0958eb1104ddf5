//! GNU build-ids, read one way everywhere: the `object` crate's reader, for
//! ELF images (where the note's descriptor lies too, so that it can be
//! rewritten) and for bare note blobs such as `/sys/kernel/notes`.

use loupe_model::BuildId;
use object::read::elf::NoteIterator;
use object::{elf, NativeEndian, Object};
use std::fmt;
use std::ops::Range;
use std::path::Path;

/// Why an image has no build-id to read.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Missing {
    NotElf(String),
    NoNote,
}

impl fmt::Display for Missing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Missing::NotElf(e) => write!(f, "not an ELF file: {e}"),
            Missing::NoNote => f.write_str("no GNU build-id note"),
        }
    }
}

impl std::error::Error for Missing {}

/// Where the build-id's bytes lie in the ELF image `data`.
pub fn locate(data: &[u8]) -> Result<Range<usize>, Missing> {
    let file = object::File::parse(data).map_err(|e| Missing::NotElf(e.to_string()))?;
    let id = file.build_id().ok().flatten().ok_or(Missing::NoNote)?;
    // The reader hands out slices of `data` itself: the offset is the distance between the two.
    let start = (id.as_ptr() as usize).checked_sub(data.as_ptr() as usize).ok_or(Missing::NoNote)?;
    let at = start..start + id.len();
    data.get(at.clone()).map(|_| at).ok_or(Missing::NoNote)
}

/// The build-id of the ELF image `data`.
pub fn of_elf(data: &[u8]) -> Option<BuildId> {
    locate(data).ok().map(|at| BuildId(data[at].to_vec()))
}

/// The build-id of the ELF file at `path` (`None`: no file, not ELF, or no note).
pub fn read(path: &Path) -> Option<BuildId> {
    of_elf(&std::fs::read(path).ok()?)
}

/// The GNU build-id in a blob of ELF notes in this machine's byte order,
/// 4-byte aligned, such as `/sys/kernel/notes`.
pub fn of_notes(blob: &[u8]) -> Option<BuildId> {
    let mut notes = NoteIterator::<elf::FileHeader64<NativeEndian>>::new(NativeEndian, 4, blob).ok()?;
    while let Ok(Some(n)) = notes.next() {
        if n.name() == elf::ELF_NOTE_GNU && n.n_type(NativeEndian) == elf::NT_GNU_BUILD_ID {
            return Some(BuildId(n.desc().to_vec()));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Notes as a linker or the kernel writes them: namesz, descsz, type, then name and descriptor each
    /// padded to 4 bytes.
    fn notes(list: &[(&[u8], u32, &[u8])]) -> Vec<u8> {
        let mut b = Vec::new();
        for (name, ty, desc) in list {
            b.extend((name.len() as u32).to_ne_bytes());
            b.extend((desc.len() as u32).to_ne_bytes());
            b.extend(ty.to_ne_bytes());
            b.extend(*name);
            b.resize((b.len() + 3) & !3, 0);
            b.extend(*desc);
            b.resize((b.len() + 3) & !3, 0);
        }
        b
    }

    #[test]
    fn build_id_note_after_other_notes() {
        // Checks note walking with 4-byte padding past a non-GNU note and a GNU note of another type, and that
        // a blob cut inside the notes gives no build-id.
        let b = notes(&[(b"Linux\0", 6, &[1, 0, 0, 0]), (b"GNU\0", 1, &[0; 16]), (b"GNU\0", 3, &[0xde, 0xad, 0xbe, 0xef, 0x01])]);
        assert_eq!(of_notes(&b).unwrap().to_hex(), "deadbeef01");
        assert_eq!(of_notes(&b[..10]), None);
        assert_eq!(of_notes(&b[..b.len() - 8]), None);
        assert_eq!(of_notes(&notes(&[(b"Xen\0", 3, &[1, 2, 3, 4])])), None);
    }

    #[test]
    fn locates_the_build_id_of_this_test_binary() {
        // Checks on a real ELF file (this test's executable, linked with a build-id) that the located bytes are
        // the descriptor of the note readelf would show: right after a "GNU\0" name whose header says type 3.
        let data = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        let at = locate(&data).unwrap();
        assert!(at.len() >= 8, "{at:?}");
        assert_eq!(&data[at.start - 4..at.start], b"GNU\0");
        let word = |o: usize| u32::from_ne_bytes(data[o..o + 4].try_into().unwrap());
        assert_eq!((word(at.start - 16), word(at.start - 12), word(at.start - 8)), (4, at.len() as u32, 3));
        assert_eq!(of_elf(&data), Some(BuildId(data[at].to_vec())));
        assert_eq!(locate(b"not an ELF file at all").unwrap_err().to_string().split(':').next(), Some("not an ELF file"));
    }
}
