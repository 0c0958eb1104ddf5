//! The names BOLT gives functions, which its fdata must use. BOLT calls a
//! global symbol by its name, and a local (static) one `NAME/N`: N counts
//! the local symbols of that name in address order, from 1 (llvm-bolt 19,
//! `RewriteInstance::discoverFileObjects` with `NameResolver::uniquify`).
//! A profile that says `match` for the static `match` is ignored by BOLT
//! ("profile for N objects was ignored"): before this, 24 of Lua's 60
//! sampled functions were lost that way, among them `luaH_newkey` and
//! `index2value`.

use crate::error::{Error, ErrorKind, Result};
use object::{Object, ObjectSection, ObjectSymbol, SymbolKind};
use std::collections::HashMap;
use std::path::Path;

/// One symbol of the ELF symbol table, as BOLT sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct ElfSymbol {
    pub name: String,
    pub address: u64,
    pub local: bool,
}

/// BOLT's name of each symbol by address, from the symbols in symbol-table
/// order (ties at one address keep that order, as BOLT's stable sort does).
/// Where several symbols share an address the first global one wins.
pub fn bolt_names(symbols: &[ElfSymbol]) -> HashMap<u64, String> {
    let mut sorted: Vec<&ElfSymbol> = symbols.iter().collect();
    sorted.sort_by_key(|s| s.address);
    let mut counters: HashMap<&str, u32> = HashMap::new();
    let mut out: HashMap<u64, (bool, String)> = HashMap::new();
    for s in sorted {
        let name = if s.local {
            let n = counters.entry(s.name.as_str()).or_insert(0);
            *n += 1;
            format!("{}/{n}", s.name)
        } else {
            s.name.clone()
        };
        let e = out.entry(s.address).or_insert((s.local, name.clone()));
        if e.0 && !s.local {
            *e = (false, name);
        }
    }
    out.into_iter().map(|(a, (_, n))| (a, n)).collect()
}

/// The symbols of the ELF file at `path` that BOLT names: defined, named,
/// in an allocated section, neither file nor section symbols.
pub fn read_symbols(path: &Path) -> Result<Vec<ElfSymbol>> {
    let data = std::fs::read(path).map_err(|e| Error::new(ErrorKind::Io, format!("cannot read {}: {e}", path.display())))?;
    let file =
        object::File::parse(&*data).map_err(|e| Error::new(ErrorKind::Format, format!("{}: not an ELF file: {e}", path.display())))?;
    let mut out = Vec::new();
    for s in file.symbols() {
        if s.is_undefined() || matches!(s.kind(), SymbolKind::File | SymbolKind::Section) {
            continue;
        }
        let Ok(name) = s.name() else { continue };
        let in_memory = s.section_index().and_then(|i| file.section_by_index(i).ok()).is_some_and(|sec| sec.address() != 0);
        if name.is_empty() || !in_memory {
            continue;
        }
        out.push(ElfSymbol { name: name.to_string(), address: s.address(), local: s.is_local() });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sym(name: &str, address: u64, local: bool) -> ElfSymbol {
        ElfSymbol { name: name.into(), address, local }
    }

    // zstd's five static copies of ZSTD_safecopyLiterals, listed out of
    // address order, are /1../5 by address (the 0x411870 copy is the one
    // BOLT's instrumentation calls ZSTD_safecopyLiterals/2); globals keep
    // their plain name, and a global alias beats a local one.
    #[test]
    fn locals_numbered_by_address() {
        let n = bolt_names(&[
            sym("ZSTD_safecopyLiterals", 0x43a1d0, true),
            sym("ZSTD_safecopyLiterals", 0x403600, true),
            sym("ZSTD_safecopyLiterals", 0x411870, true),
            sym("main", 0x401000, false),
            sym("llex", 0x402000, true),
            sym("luaX_next", 0x402000, false),
        ]);
        assert_eq!(n[&0x403600], "ZSTD_safecopyLiterals/1");
        assert_eq!(n[&0x411870], "ZSTD_safecopyLiterals/2");
        assert_eq!(n[&0x43a1d0], "ZSTD_safecopyLiterals/3");
        assert_eq!(n[&0x401000], "main");
        assert_eq!(n[&0x402000], "luaX_next");
    }

    // A local data object of the same name earlier in memory takes /1.
    #[test]
    fn data_objects_count_too() {
        let n = bolt_names(&[sym("buf", 0x500000, true), sym("buf", 0x401000, true)]);
        assert_eq!(n[&0x401000], "buf/1");
        assert_eq!(n[&0x500000], "buf/2");
    }
}
