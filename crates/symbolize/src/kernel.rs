//! Kernel symbols from `/proc/kallsyms`. Offsets are relative to `_text`.

use crate::{Reason, Symbol};
use loupe_model::ImageOffset;
use std::path::Path;

#[derive(Clone, Debug, Default)]
pub struct KernelSymbols {
    pub text_base: Option<u64>,
    /// (address, name), text symbols of the kernel proper, sorted.
    pub symbols: Vec<(u64, String)>,
}

pub fn parse_kallsyms(text: &str) -> KernelSymbols {
    let mut k = KernelSymbols::default();
    for line in text.lines() {
        let mut it = line.split_whitespace();
        let (Some(addr), Some(ty), Some(name)) = (it.next(), it.next(), it.next()) else { continue };
        let Ok(addr) = u64::from_str_radix(addr, 16) else { continue };
        if name == "_text" {
            k.text_base = Some(addr);
        }
        let module = it.next();
        if matches!(ty, "t" | "T" | "w" | "W") && module.is_none() && addr != 0 {
            k.symbols.push((addr, name.to_string()));
        }
    }
    k.symbols.sort();
    k
}

pub fn kernel_text_base(kallsyms: &Path) -> Option<u64> {
    parse_kallsyms(&std::fs::read_to_string(kallsyms).ok()?).text_base
}

impl KernelSymbols {
    pub fn symbolize(&self, off: ImageOffset) -> Result<Symbol, Reason> {
        let base = self.text_base.ok_or_else(|| Reason::Other("no _text in kallsyms (kptr_restrict?)".into()))?;
        let addr = base.wrapping_add(off.0);
        let i = self.symbols.partition_point(|(a, _)| *a <= addr);
        let (start, name) = self.symbols.get(i.checked_sub(1).ok_or(Reason::NoSymbols)?).ok_or(Reason::NoSymbols)?;
        Ok(Symbol { procedure: name.clone(), procedure_start: ImageOffset(start - base), file: None, line: None })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_preceding_text_symbol() {
        // Checks lookup relative to _text and that data and module symbols are ignored.
        let k = parse_kallsyms(
            "ffffffff81000000 T _text\nffffffff81000100 t foo\nffffffff81000200 D some_data\nffffffff81000300 T bar\nffffffffc0000000 t modfn\t[ext4]\n",
        );
        assert_eq!(k.text_base, Some(0xffffffff81000000));
        assert_eq!(k.symbolize(ImageOffset(0x150)).unwrap().procedure, "foo");
        assert_eq!(k.symbolize(ImageOffset(0x250)).unwrap().procedure, "foo");
        let s = k.symbolize(ImageOffset(0x300)).unwrap();
        assert_eq!((s.procedure.as_str(), s.procedure_start), ("bar", ImageOffset(0x300)));
    }

    #[test]
    fn live_kernel_round_trip() {
        // Checks that a real kernel function's offset symbolizes back to its name.
        let text = std::fs::read_to_string("/proc/kallsyms").unwrap();
        let k = parse_kallsyms(&text);
        let base = k.text_base.expect("_text visible (run as root)");
        let sched = k.symbols.iter().find(|(_, n)| n == "schedule").unwrap().0;
        assert_eq!(k.symbolize(ImageOffset(sched - base + 3)).unwrap().procedure, "schedule");
    }
}
