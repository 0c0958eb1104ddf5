//! BOLT's profile from real branch records (what `perf2bolt` writes from
//! `perf record -b`): one line per taken branch,
//! `1 FROM-FUNCTION FROM-OFFSET 1 TO-FUNCTION TO-OFFSET MISPREDICTED COUNT`,
//! offsets in hex from each function's start, names as BOLT calls the
//! functions ([`crate::bolt_names`]), and no header (a `no_lbr` header
//! would make BOLT read block counts instead). BOLT derives block counts
//! and fall-through counts from these; nothing is synthesized, and no
//! cold-block policy applies: a branch the LBR saw was taken.
//!
//! A record with an end outside every sized function (a PLT stub, code
//! without symbols) is left out and counted.

use std::fmt::Write;

/// One branch of the image, both ends as ELF virtual addresses, with its
/// (aged) counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Branch {
    pub from: u64,
    pub to: u64,
    pub taken: u64,
    pub mispredicted: u64,
}

/// A function of the image as BOLT names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Function {
    pub start: u64,
    pub size: u64,
    pub bolt_name: String,
}

/// The fdata text and what went into it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LbrFdata {
    pub text: String,
    /// Lines written, and the branch executions they hold.
    pub lines: usize,
    pub taken: u64,
    /// Branch executions left out: an end in no function.
    pub left_out: u64,
    /// Distinct functions named in the profile.
    pub functions: usize,
}

/// The function holding `addr`, by binary search over functions sorted by start.
fn locate<'a>(funcs: &'a [&Function], addr: u64) -> Option<&'a Function> {
    let i = funcs.partition_point(|f| f.start <= addr).checked_sub(1)?;
    let f = funcs[i];
    (addr < f.start + f.size.max(1)).then_some(f)
}

/// Writes `branches` as BOLT branch fdata, lines sorted by (from, to).
/// Functions whose BOLT name has white space (which fdata cannot carry) are
/// treated as unknown.
pub fn write_fdata(branches: &[Branch], funcs: &[Function]) -> LbrFdata {
    let mut sorted: Vec<&Function> = funcs.iter().filter(|f| !f.bolt_name.chars().any(char::is_whitespace)).collect();
    sorted.sort_by_key(|f| f.start);
    let mut bs = branches.to_vec();
    bs.sort_by_key(|b| (b.from, b.to));
    let mut out = LbrFdata::default();
    let mut named = std::collections::BTreeSet::new();
    for b in bs.iter().filter(|b| b.taken > 0) {
        let (Some(f), Some(t)) = (locate(&sorted, b.from), locate(&sorted, b.to)) else {
            out.left_out += b.taken;
            continue;
        };
        let _ = writeln!(
            out.text,
            "1 {} {:x} 1 {} {:x} {} {}",
            f.bolt_name,
            b.from - f.start,
            t.bolt_name,
            b.to - t.start,
            b.mispredicted.min(b.taken),
            b.taken
        );
        named.insert(f.start);
        named.insert(t.start);
        out.lines += 1;
        out.taken += b.taken;
    }
    out.functions = named.len();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(start: u64, size: u64, name: &str) -> Function {
        Function { start, size, bolt_name: name.into() }
    }

    // Literal records, hand-derived lines: a loop branch inside run/1 (static), a call from run/1 into mix, its
    // return, a branch into a PLT stub (no function: left out); counts and mispredictions as given, offsets in hex.
    #[test]
    fn writes_branch_lines_per_function() {
        let funcs = [f(0x401000, 0x80, "run/1"), f(0x401100, 0x40, "mix"), f(0x401200, 0x10, "has space")];
        let br = |from, to, taken, mispredicted| Branch { from, to, taken, mispredicted };
        let got = write_fdata(
            &[
                br(0x401130, 0x401025, 40, 0),
                br(0x401020, 0x401100, 40, 1),
                br(0x401040, 0x401010, 900, 37),
                br(0x401050, 0x400500, 3, 0),
                br(0x401060, 0x401205, 2, 0),
                br(0x401070, 0x401010, 0, 0),
            ],
            &funcs,
        );
        assert_eq!(got.text, "1 run/1 20 1 mix 0 1 40\n1 run/1 40 1 run/1 10 37 900\n1 mix 30 1 run/1 25 0 40\n");
        assert_eq!((got.lines, got.taken, got.left_out, got.functions), (3, 980, 5, 2));
    }

    // An address one past a function's end belongs to no function.
    #[test]
    fn function_ends_are_exclusive() {
        let got = write_fdata(&[Branch { from: 0x401080, to: 0x401000, taken: 1, mispredicted: 0 }], &[f(0x401000, 0x80, "run")]);
        assert_eq!((got.lines, got.left_out), (0, 1));
    }
}
