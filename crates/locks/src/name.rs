//! Naming a lock by its address: the data symbol that contains it, found
//! through the process's mappings and the image's load segments. A lock
//! in `.bss` lies past the file-backed part of the image, in an anonymous
//! mapping, so addresses are placed by load bias and segment memory size,
//! not by which mapping holds them.

use object::{Object, ObjectSegment, ObjectSymbol, SymbolKind};

pub use loupe_model::maps::{parse_maps, Mapping};

/// The image (path) and ELF virtual address of a runtime address, given the
/// ELF bytes of a mapped path (`elf` returns `None` for paths it cannot
/// read). Only the image mapped nearest below the address is read: the
/// address is in one of its mappings, or in the anonymous `.bss` right after.
pub fn locate(addr: u64, maps: &[Mapping], elf: &mut dyn FnMut(&str) -> Option<&'static [u8]>) -> Option<(String, u64)> {
    let path = maps.iter().filter(|m| m.path.starts_with('/') && m.start <= addr).max_by_key(|m| m.start)?.path.as_str();
    let base = maps.iter().filter(|m| m.path == path && m.pgoff == 0).map(|m| m.start).min()?;
    let file = object::File::parse(elf(path)?).ok()?;
    // The segment mapped at file offset 0 fixes the load bias.
    let first = file.segments().find(|s| s.file_range().0 == 0)?;
    let vaddr = addr.wrapping_sub(base.wrapping_sub(first.address()));
    file.segments().any(|s| vaddr >= s.address() && vaddr < s.address() + s.size()).then(|| (path.to_string(), vaddr))
}

/// `symbol` or `symbol+0xoff` of the data object containing `vaddr`.
pub fn data_symbol(elf: &[u8], vaddr: u64) -> Option<String> {
    let file = object::File::parse(elf).ok()?;
    let sym = file
        .symbols()
        .chain(file.dynamic_symbols())
        .filter(|s| matches!(s.kind(), SymbolKind::Data | SymbolKind::Unknown) && s.address() != 0)
        .find(|s| vaddr >= s.address() && vaddr < s.address() + s.size().max(1))?;
    let name = sym.name().ok()?.split('@').next()?.to_string();
    let off = vaddr - sym.address();
    Some(if off == 0 { name } else { format!("{name}+0x{off:x}") })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn this_exe() -> &'static [u8] {
        Box::leak(std::fs::read("/proc/self/exe").unwrap().into_boxed_slice())
    }

    /// A static that lands in .bss (zero-initialized), like PTHREAD_MUTEX_INITIALIZER locks.
    #[no_mangle]
    #[used]
    static mut LOUPE_TEST_BSS_LOCK: [u64; 5] = [0; 5];

    #[test]
    fn names_a_bss_static_of_this_process_by_symbol() {
        // Checks the whole path on this test binary: its maps, load bias, .bss placement and symbol + offset.
        let maps = parse_maps(&std::fs::read_to_string("/proc/self/maps").unwrap());
        // Only the address is taken; nothing reads or writes the static.
        let addr = std::ptr::addr_of!(LOUPE_TEST_BSS_LOCK) as u64;
        let exe = std::fs::read_link("/proc/self/exe").unwrap().to_string_lossy().into_owned();
        let bytes = this_exe();
        let (path, vaddr) = locate(addr + 8, &maps, &mut |p| (p == exe).then_some(bytes)).expect("located");
        assert_eq!(path, exe);
        assert_eq!(data_symbol(bytes, vaddr).as_deref(), Some("LOUPE_TEST_BSS_LOCK+0x8"));
    }
}
