//! An image's block profile from its combined samples: every sampled
//! function's blocks counted ([`crate::blocks`]), probe counts taking the
//! place of the estimates where `optimize probe` counted them, BOLT's
//! names, hottest first. The code is read through [`CodeView`], so the
//! caller decides where the file comes from (the path, the saved original,
//! the database's image cache).

use crate::blocks::{function_profile, ColdPolicy, FunctionProfile, Measured};
use crate::combine::Combined;
use crate::lbr;
use loupe_model::ImageId;
use std::collections::{HashMap, HashSet};

/// A sized function symbol of an image.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Symbol {
    pub start: u64,
    pub size: u64,
    pub name: String,
}

/// An image's code as the symbolizer reads it.
pub trait CodeView {
    /// Every sized function symbol, aliases included, in the symbol table's order.
    fn symbols(&self) -> Vec<Symbol>;
    /// `len` bytes at virtual address `va`, when the file holds them.
    fn bytes(&self, va: u64, len: u64) -> Option<&[u8]>;
}

/// The image's profile: its build-id, the combined samples and
/// per-function block counts.
#[derive(Clone, Debug)]
pub struct ImageProfile {
    pub image: ImageId,
    pub build_id: String,
    pub combined: Combined,
    pub functions: Vec<FunctionProfile>,
}

impl ImageProfile {
    /// Blocks confidently cold, and all blocks.
    pub fn cold_blocks(&self) -> (usize, usize) {
        let cold = self.functions.iter().map(|f| f.blocks.iter().filter(|b| b.cold).count()).sum();
        (cold, self.functions.iter().map(|f| f.blocks.len()).sum())
    }
}

struct Mem<'a>(&'a dyn CodeView);

impl loupe_calc::cfg::Memory for Mem<'_> {
    fn read(&self, vaddr: u64, len: usize) -> Option<Vec<u8>> {
        self.0.bytes(vaddr, len as u64).map(<[u8]>::to_vec)
    }
}

/// Block profiles of every function of `code` with a sample in `combined`
/// (aliases once), hottest first: blocks in `measured` (by function start)
/// take those counts, and `bolt_names` (when the file is still this build)
/// give BOLT's name of each function.
pub fn block_profiles(
    code: &dyn CodeView,
    combined: &Combined,
    policy: ColdPolicy,
    measured: &HashMap<u64, Measured>,
    bolt_names: Option<&HashMap<u64, String>>,
) -> Vec<FunctionProfile> {
    let mut functions = Vec::new();
    let mut seen = HashSet::new();
    for f in code.symbols() {
        if !seen.insert(f.start) {
            continue;
        }
        let hot = combined.samples.range(f.start..f.start + f.size).next().is_some();
        if !hot {
            continue;
        }
        let Some(bytes) = code.bytes(f.start, f.size) else { continue };
        functions.push(function_profile(&f.name, f.start, bytes, &combined.samples, &Mem(code), policy, measured.get(&f.start)));
    }
    for f in &mut functions {
        if let Some(n) = bolt_names.and_then(|names| names.get(&f.start)) {
            f.bolt_name = n.clone();
        }
    }
    functions.sort_by(|a, b| b.samples.total_cmp(&a.samples));
    functions
}

/// Every sized function of `code` (aliases once) with its bytes, under
/// BOLT's name for it where `names` has one: what branch fdata is written over.
pub fn lbr_functions(code: &dyn CodeView, names: &HashMap<u64, String>) -> Vec<lbr::Function> {
    let mut seen = HashSet::new();
    code.symbols()
        .into_iter()
        .filter(|f| seen.insert(f.start))
        .map(|f| lbr::Function {
            start: f.start,
            size: f.size,
            code: code.bytes(f.start, f.size).map(<[u8]>::to_vec).unwrap_or_default(),
            bolt_name: names.get(&f.start).cloned().unwrap_or(f.name),
        })
        .collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// Code at literal addresses: symbols and one stretch of bytes from `base`.
    pub(crate) struct Literal {
        pub symbols: Vec<Symbol>,
        pub base: u64,
        pub bytes: Vec<u8>,
    }

    impl CodeView for Literal {
        fn symbols(&self) -> Vec<Symbol> {
            self.symbols.clone()
        }
        fn bytes(&self, va: u64, len: u64) -> Option<&[u8]> {
            let from = va.checked_sub(self.base)? as usize;
            self.bytes.get(from..from + len as usize)
        }
    }

    fn sym(start: u64, size: u64, name: &str) -> Symbol {
        Symbol { start, size, name: name.into() }
    }

    /// Three functions of nops ending in `ret`: `a` at 0x1000 (16 bytes, opening with `je 0x1004`), `b` at
    /// 0x1010 (16 bytes, also named `b_alias`), and `c` at 0x1020.
    pub(crate) fn three_functions() -> Literal {
        let mut bytes = vec![0x90; 0x30];
        bytes[..2].copy_from_slice(&[0x74, 0x02]);
        for end in [0x0f, 0x1f, 0x2f] {
            bytes[end] = 0xc3;
        }
        Literal {
            symbols: vec![sym(0x1000, 16, "a"), sym(0x1010, 16, "b"), sym(0x1010, 16, "b_alias"), sym(0x1020, 16, "c")],
            base: 0x1000,
            bytes,
        }
    }

    // Only sampled functions get a profile, an alias once (under the first name), hottest first, under BOLT's
    // name where one is given; functions whose bytes the file lacks are left out.
    #[test]
    fn sampled_functions_hottest_first_with_bolt_names() {
        let code = three_functions();
        let combined = Combined { samples: BTreeMap::from([(0x1004, 2.0), (0x1012, 5.0), (0x1018, 1.0)]), ..Default::default() };
        let names = HashMap::from([(0x1000, "a/1".to_string())]);
        let got = block_profiles(&code, &combined, ColdPolicy::default(), &HashMap::new(), Some(&names));
        let summary: Vec<(&str, &str, f64)> = got.iter().map(|f| (f.name.as_str(), f.bolt_name.as_str(), f.samples)).collect();
        assert_eq!(summary, vec![("b", "b", 6.0), ("a", "a/1", 2.0)]);
        assert_eq!(got[0].blocks.len(), 1);
        let short = Literal { bytes: code.bytes[..0x18].to_vec(), ..three_functions() };
        assert_eq!(block_profiles(&short, &combined, ColdPolicy::default(), &HashMap::new(), None).len(), 1);
    }

    // Branch fdata is written over every function, sampled or not, aliases once, BOLT's name else the symbol's.
    #[test]
    fn lbr_functions_cover_every_symbol() {
        let code = three_functions();
        let got = lbr_functions(&code, &HashMap::from([(0x1020, "c/2".to_string())]));
        let names: Vec<&str> = got.iter().map(|f| f.bolt_name.as_str()).collect();
        assert_eq!(names, vec!["a", "b", "c/2"]);
        assert_eq!(got[2].code, code.bytes[0x20..0x30]);
    }
}
