//! LLVM's sample profile, text form (what `clang -fprofile-sample-use`
//! reads): per function `NAME:TOTAL:HEAD`, then ` LINE-OFFSET: COUNT` lines,
//! the offset counted from the function's first line.
//!
//! A line's count is the largest execution count of the blocks it has
//! instructions in (AutoFDO's rule: a line runs at least as often as its
//! most frequent instruction). Inlined code is attributed to the line the
//! debug information gives, not to an inline call-site stack.

use std::collections::BTreeMap;
use std::fmt::Write;

#[derive(Clone, Debug, Default, PartialEq)]
pub struct FunctionLines {
    pub name: String,
    /// Executions of the function's entry block.
    pub head: u64,
    /// Count per line offset from the function's first line.
    pub lines: BTreeMap<u32, u64>,
}

/// Adds an instruction's block count to its line (keeping the maximum).
pub fn add(f: &mut FunctionLines, line_offset: u32, count: u64) {
    let c = f.lines.entry(line_offset).or_insert(0);
    *c = (*c).max(count);
}

/// The text profile; functions without counts are left out, the hottest first.
pub fn write_text(funcs: &[FunctionLines]) -> String {
    let mut v: Vec<(&FunctionLines, u64)> = funcs.iter().map(|f| (f, f.lines.values().sum::<u64>())).filter(|(_, t)| *t > 0).collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.name.cmp(&b.0.name)));
    let mut out = String::new();
    for (f, total) in v {
        let _ = writeln!(out, "{}:{total}:{}", f.name, f.head);
        for (off, n) in &f.lines {
            let _ = writeln!(out, " {off}: {n}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    // Literal input: a line keeps its hottest instruction's count, totals
    // sum the lines, the hotter function comes first.
    #[test]
    fn text_format() {
        let mut a = FunctionLines { name: "main".into(), head: 1, ..Default::default() };
        add(&mut a, 0, 1);
        add(&mut a, 3, 50);
        add(&mut a, 3, 70);
        let mut b = FunctionLines { name: "hot".into(), head: 500, ..Default::default() };
        add(&mut b, 1, 500);
        add(&mut b, 2, 499);
        let cold = FunctionLines { name: "cold".into(), ..Default::default() };
        assert_eq!(write_text(&[a, b, cold]), "hot:999:500\n 1: 500\n 2: 499\nmain:71:1\n 0: 1\n 3: 70\n");
    }
}
