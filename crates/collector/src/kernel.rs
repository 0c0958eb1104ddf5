//! What the daemon needs to know about the running kernel: where `_text` is
//! (kernel offsets are relative to it, so KASLR does not move them), the
//! kernel's build-id (read by `loupe_symbolize::build_id`), and the load
//! ranges of modules.

/// Lowest kernel address on x86-64 (canonical upper half).
pub const KERNEL_SPACE_START: u64 = 0xffff_8000_0000_0000;
/// Where user code can be: above the never-mapped first page, below the end
/// of x86-64 user space (56 bits, so that 5-level paging fits). A user frame
/// outside it is garbage read by a walk that went wrong (a return address of
/// 0 would otherwise become 0 - 1, a kernel address).
pub const USER_CODE: std::ops::Range<u64> = 0x1000..0x0100_0000_0000_0000;

/// Address of `_text` in a kallsyms listing.
pub fn text_base(kallsyms: &str) -> Option<u64> {
    kallsyms.lines().find_map(|l| {
        let mut it = l.split_whitespace();
        let addr = it.next()?;
        let _ty = it.next()?;
        (it.next()? == "_text").then(|| u64::from_str_radix(addr, 16).ok())?
    })
}

/// `_text` from a kallsyms file, reading only as far as needed (it is
/// near the top; the whole file is megabytes).
pub fn text_base_from_file(path: &std::path::Path) -> Option<u64> {
    use std::io::BufRead;
    let f = std::io::BufReader::new(std::fs::File::open(path).ok()?);
    f.lines().map_while(Result::ok).find_map(|l| text_base(&l))
}

/// A loaded kernel module's text range.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Module {
    pub name: String,
    pub base: u64,
    pub size: u64,
}

/// Parses `/proc/modules` ("name size refcount deps state address").
pub fn parse_modules(text: &str) -> Vec<Module> {
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let base = u64::from_str_radix(f.get(5)?.trim_start_matches("0x"), 16).ok()?;
            Some(Module { name: f[0].to_string(), base, size: f[1].parse().ok()? })
        })
        .filter(|m| m.base != 0)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_text_base() {
        // Checks that _text is found among other symbols at the same address.
        let k = "ffffffff81000000 T _stext\nffffffff81000000 T _text\nffffffff81001000 t foo\n";
        assert_eq!(text_base(k), Some(0xffffffff81000000));
        assert_eq!(text_base("0000000000000000 T foo\n"), None);
    }

    #[test]
    fn parses_modules_and_skips_hidden_addresses() {
        // Checks /proc/modules parsing; address 0 (kptr_restrict) is dropped.
        let m = parse_modules("ext4 999424 1 - Live 0xffffffffc0400000\nhidden 10 0 - Live 0x0000000000000000\n");
        assert_eq!(m, vec![Module { name: "ext4".into(), base: 0xffffffffc0400000, size: 999424 }]);
    }
}
