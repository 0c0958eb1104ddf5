//! Function shares of a profile, the unit the manager's drift compares
//! (`policy::drift`). The fingerprint of an installed version is taken on
//! the original's addresses; its later samples are compared on the same
//! footing by mapping them back through BOLT's address translation table
//! (Morph's "mapping as a by-product of optimization"), so a function BOLT
//! moved or split is still one function with the original's name. Without
//! a table, the optimized binary's own symbols are used, BOLT's and gcc's
//! fragment names folded into their function.

use std::collections::BTreeMap;

/// A function symbol: (start, size, name).
pub type Func = (u64, u64, String);

/// The function a fragment symbol belongs to: `f.cold` (gcc's split-off
/// part), `f.cold.N` (BOLT's), and BOLT's `f/N` naming of local symbols
/// all count for `f`. Other dotted names (`f.part.0`, `f.coldpath`) are
/// functions of their own.
pub fn base_name(n: &str) -> &str {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let mut n = n;
    if let Some((head, tail)) = n.rsplit_once(".cold.") {
        if digits(tail) {
            n = head;
        }
    }
    n = n.strip_suffix(".cold").unwrap_or(n);
    match n.rsplit_once('/') {
        Some((head, tail)) if digits(tail) && !head.is_empty() => head,
        _ => n,
    }
}

/// Functions sorted by start, for lookups by address.
pub struct Functions(Vec<Func>);

impl Functions {
    pub fn new(mut funcs: Vec<Func>) -> Functions {
        funcs.retain(|f| f.1 > 0);
        funcs.sort();
        Functions(funcs)
    }

    /// The base name of the function containing `va`.
    pub fn name_at(&self, va: u64) -> Option<&str> {
        let i = self.0.partition_point(|f| f.0 <= va).checked_sub(1)?;
        let f = &self.0[i];
        (va < f.0 + f.1).then(|| base_name(&f.2))
    }
}

/// Sample weight per function (base names).
pub fn function_shares(funcs: &Functions, samples: &BTreeMap<u64, f64>) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for (&va, &w) in samples {
        if let Some(name) = funcs.name_at(va) {
            *out.entry(name.to_string()).or_insert(0.0) += w;
        }
    }
    out
}

/// Function shares of an optimized build's samples on the original's
/// footing: each address goes through `to_original` and is named by the
/// original function it lands in; an address with no original (code BOLT
/// made, such as a stub) keeps its own function's base name. Also returns
/// the weight that was not mapped.
pub fn translated_shares(
    original: &Functions,
    optimized: &Functions,
    to_original: &dyn Fn(u64) -> Option<u64>,
    samples: &BTreeMap<u64, f64>,
) -> (BTreeMap<String, f64>, f64) {
    let mut out = BTreeMap::new();
    let mut unmapped = 0.0;
    for (&va, &w) in samples {
        let name = match to_original(va).and_then(|o| original.name_at(o)) {
            Some(n) => n,
            None => {
                unmapped += w;
                match optimized.name_at(va) {
                    Some(n) => n,
                    None => continue,
                }
            }
        };
        *out.entry(name.to_string()).or_insert(0.0) += w;
    }
    (out, unmapped)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn funcs(v: &[(u64, u64, &str)]) -> Functions {
        Functions::new(v.iter().map(|(a, s, n)| (*a, *s, n.to_string())).collect())
    }

    // Fragment suffixes fold into their function; look-alike names do not.
    #[test]
    fn base_names() {
        assert_eq!(base_name("run.cold.0"), "run");
        assert_eq!(base_name("run.cold.12"), "run");
        assert_eq!(base_name("cold_report.cold"), "cold_report");
        assert_eq!(base_name("helper/1"), "helper");
        assert_eq!(base_name("helper/1.cold.0"), "helper");
        assert_eq!(base_name("main"), "main");
        assert_eq!(base_name("f.part.0"), "f.part.0");
        assert_eq!(base_name("f.coldpath"), "f.coldpath");
        assert_eq!(base_name("f.cold.x"), "f.cold.x");
        assert_eq!(base_name("operator/"), "operator/");
        assert_eq!(base_name("/1"), "/1");
    }

    // Samples count for the function containing them; a BOLT-split part (run.cold.0) counts for run;
    // addresses outside every function are dropped.
    #[test]
    fn shares_by_function() {
        let f = funcs(&[(0x100, 0x40, "run"), (0x140, 0x10, "mix"), (0x900, 0x20, "run.cold.0")]);
        let s: BTreeMap<u64, f64> = [(0x100, 2.0), (0x13f, 1.0), (0x140, 4.0), (0x910, 3.0), (0x150, 9.0)].into_iter().collect();
        let got = function_shares(&f, &s);
        assert_eq!(got, [("mix".to_string(), 4.0), ("run".to_string(), 6.0)].into_iter().collect());
    }

    // Through a table, an optimized build's samples land on the original's functions even where the
    // optimized symbols would say otherwise (here a symbol named "other" at the address BOLT gave "run"'s
    // code); addresses without an original keep their own function's name and count as unmapped.
    #[test]
    fn translated_to_original_functions() {
        let orig = funcs(&[(0x1000, 0x100, "run"), (0x1100, 0x40, "mix")]);
        let opt = funcs(&[(0x8000, 0x80, "other"), (0x8080, 0x10, "stub"), (0x9000, 0x40, "run.cold.0")]);
        // Hot part of run at 0x8000 (input offset = output offset), its cold part at 0x9000 from input 0xc0.
        let map = |va: u64| match va {
            0x8000..=0x807f => Some(0x1000 + (va - 0x8000)),
            0x9000..=0x903f => Some(0x10c0 + (va - 0x9000)),
            _ => None,
        };
        let s: BTreeMap<u64, f64> = [(0x8004, 5.0), (0x9010, 2.0), (0x8088, 1.0), (0x7000, 4.0)].into_iter().collect();
        let (shares, unmapped) = translated_shares(&orig, &opt, &map, &s);
        assert_eq!(shares, [("run".to_string(), 7.0), ("stub".to_string(), 1.0)].into_iter().collect());
        assert_eq!(unmapped, 5.0);
    }
}
