//! Each optimized binary gets its own build-id. llvm-bolt only flips the
//! last bit of its input's build-id, so every BOLT output of one input
//! shares one identity and samples of two different candidates would be
//! filed together. The new id is derived from the input's build-id and the
//! profile BOLT was given, so the same input and profile give the same id
//! (a rebuild is recognised) and any other profile gives another.

use crate::error::{Error, ErrorKind, Result};
use loupe_symbolize::build_id;
use std::path::Path;
use xxhash_rust::xxh3::xxh3_128_with_seed;

/// `len` bytes derived from the input's build-id and the profile's bytes.
pub fn derived_build_id(input: &[u8], profile: &[u8], len: usize) -> Vec<u8> {
    let mut data = Vec::with_capacity(8 + input.len() + profile.len());
    data.extend_from_slice(&(input.len() as u64).to_le_bytes());
    data.extend_from_slice(input);
    data.extend_from_slice(profile);
    let mut out = Vec::new();
    let mut seed = 0;
    while out.len() < len {
        out.extend_from_slice(&xxh3_128_with_seed(&data, seed).to_le_bytes());
        seed += 1;
    }
    out.truncate(len);
    out
}

/// The build-id of the ELF file `data` and its place in the file.
fn locate(data: &[u8]) -> Result<(Vec<u8>, std::ops::Range<usize>)> {
    let at = build_id::locate(data).map_err(|e| Error::new(ErrorKind::Format, e.to_string()))?;
    Ok((data[at.clone()].to_vec(), at))
}

/// The build-id of the ELF file at `path`.
pub fn read_build_id(path: &Path) -> Result<Vec<u8>> {
    let data = std::fs::read(path).map_err(|e| Error::new(ErrorKind::Io, format!("cannot read {}: {e}", path.display())))?;
    locate(&data).map(|(id, _)| id).map_err(|e| e.context(path.display()))
}

/// Gives the optimized binary `output` (made from `input` with the profile
/// `profile`) its own build-id; returns it. The note keeps its length.
pub fn give_identity(input: &Path, profile: &Path, output: &Path) -> Result<Vec<u8>> {
    let io = |p: &Path, e: std::io::Error| Error::new(ErrorKind::Io, format!("cannot read {}: {e}", p.display()));
    let input_id = read_build_id(input)?;
    let prof = std::fs::read(profile).map_err(|e| io(profile, e))?;
    let mut data = std::fs::read(output).map_err(|e| io(output, e))?;
    let (_, at) = locate(&data).map_err(|e| e.context(output.display()))?;
    let id = derived_build_id(&input_id, &prof, at.len());
    data[at].copy_from_slice(&id);
    // Written beside (with the output's mode: it is an executable) and
    // renamed over, so a reader never sees half a file.
    let tmp = output.with_extension("loupe-id");
    let mode = std::fs::metadata(output).map(|m| m.permissions());
    std::fs::write(&tmp, &data)
        .and_then(|_| mode.and_then(|m| std::fs::set_permissions(&tmp, m)))
        .and_then(|_| std::fs::rename(&tmp, output))
        .map_err(|e| Error::new(ErrorKind::Io, format!("cannot write {}: {e}", output.display())))?;
    Ok(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    // The same input and profile give the same id; another profile or
    // another input gives another; the length asked for is kept.
    #[test]
    fn derived_ids() {
        let a = derived_build_id(&[1, 2, 3], b"1 f 0 1 f 4 0 7\n", 20);
        assert_eq!(a.len(), 20);
        assert_eq!(a, derived_build_id(&[1, 2, 3], b"1 f 0 1 f 4 0 7\n", 20));
        assert_ne!(a, derived_build_id(&[1, 2, 3], b"1 f 0 1 f 4 0 8\n", 20));
        assert_ne!(a, derived_build_id(&[1, 2, 4], b"1 f 0 1 f 4 0 7\n", 20));
    }

    // On a real ELF file (this test's own executable): the new id is in
    // the note where readers find it, and the rest of the file is intact.
    #[test]
    fn patches_a_real_binary() {
        let me = std::env::current_exe().unwrap();
        let orig = read_build_id(&me).unwrap();
        let d = tempfile::tempdir().unwrap();
        let (out, prof) = (d.path().join("out"), d.path().join("p.fdata"));
        std::fs::copy(&me, &out).unwrap();
        std::fs::write(&prof, "1 main 0 1 main 8 0 5\n").unwrap();
        let id = give_identity(&me, &prof, &out).unwrap();
        assert_eq!(read_build_id(&out).unwrap(), id);
        assert_eq!(id, derived_build_id(&orig, b"1 main 0 1 main 8 0 5\n", orig.len()));
        assert_ne!(id, orig);
        let (a, b) = (std::fs::read(&me).unwrap(), std::fs::read(&out).unwrap());
        assert_eq!(a.len(), b.len());
        assert_eq!(std::fs::metadata(&out).unwrap().permissions(), std::fs::metadata(&me).unwrap().permissions());
        assert_eq!(a.iter().zip(&b).filter(|(x, y)| x != y).count(), id.iter().zip(&orig).filter(|(x, y)| x != y).count());
    }
}
