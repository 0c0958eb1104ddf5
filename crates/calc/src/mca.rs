//! Minimum cycles per instruction, M_i (DCPI §6.1.3), from a real machine
//! model. The model sits behind [`MachineModel`]; the CLI runs llvm-mca
//! for the host's `-mcpu`, tests replay recorded llvm-mca output.
//!
//! On an out-of-order x86 a timer sample lands on the oldest instruction
//! not yet retired, so DCPI's "cycles at the head of the issue queue"
//! becomes cycles at the head of the reorder buffer: M_i is the gap
//! between the retirement of instruction i and of the one before it, in
//! llvm-mca's steady-state timeline of the block run as a loop (DCPI
//! likewise schedules each block alone, ignoring its predecessors).

use crate::{Error, ErrorKind};

/// Schedules basic blocks on a model of the CPU the samples came from.
pub trait MachineModel {
    /// For each block (its instructions as AT&T text), M_i of each
    /// instruction; an error names the block or the model's complaint.
    fn schedule(&mut self, blocks: &[Vec<String>]) -> crate::Result<Vec<Vec<f64>>>;
    /// What the model is, for the report ("llvm-mca 19, -mcpu=znver5").
    fn describe(&self) -> String;
}

/// Iterations llvm-mca simulates per block; the first half warm up.
pub const ITERATIONS: usize = 12;
/// Blocks of at least this many instructions are simulated for
/// [`LONG_ITERATIONS`] only: two iterations of warm-up already fill the
/// reorder buffer, and the timeline's text grows with the square of the
/// iterations (rows x cycle columns). A procedure of 32k instructions in
/// 72-instruction blocks made 180 MB of timeline at 12 iterations and 8 s
/// of llvm-mca; at 4, a quarter of the CPU time.
pub const LONG_BLOCK: usize = 32;
pub const LONG_ITERATIONS: usize = 4;

/// Iterations to simulate a block of `len` instructions for.
pub fn iterations(len: usize) -> usize {
    if len >= LONG_BLOCK {
        LONG_ITERATIONS
    } else {
        ITERATIONS
    }
}

/// llvm-mca's input: one code region per block. Calls become `nop` (the
/// callee's time is sampled in the callee; llvm-mca would charge 100
/// cycles). Returns the text and, per line, (block, instruction).
pub fn input(blocks: &[Vec<String>]) -> (String, Vec<Option<(usize, usize)>>) {
    let mut text = String::new();
    let mut lines = Vec::new();
    for (b, insns) in blocks.iter().enumerate() {
        text += &format!("# LLVM-MCA-BEGIN b{b}\n");
        lines.push(None);
        for (i, x) in insns.iter().enumerate() {
            let t = x.trim_start_matches("notrack ").trim_start_matches("bnd ");
            let is_call = t.starts_with("call") || t.starts_with("syscall");
            text += if is_call { "nop" } else { t };
            text.push('\n');
            lines.push(Some((b, i)));
        }
        text += "# LLVM-MCA-END\n";
        lines.push(None);
    }
    (text, lines)
}

/// M_i per block from llvm-mca's `-timeline` output of [`input`] with
/// `iters` iterations: the mean retire-to-retire gap over the second half
/// of the iterations.
pub fn parse_timeline(out: &str, sizes: &[usize], iters: usize) -> crate::Result<Vec<Vec<f64>>> {
    let incomplete = |m: String| Error::new(ErrorKind::Timeline, m);
    let mut result: Vec<Vec<f64>> = Vec::new();
    let mut region: Option<Vec<Vec<Option<usize>>>> = None;
    let mut col = 0usize;
    let flush = |region: &mut Option<Vec<Vec<Option<usize>>>>, result: &mut Vec<Vec<f64>>| -> crate::Result<()> {
        if let Some(r) = region.take() {
            let b = result.len();
            let n = *sizes.get(b).ok_or_else(|| incomplete("llvm-mca printed more regions than blocks".into()))?;
            result.push(gaps(&r, n, iters).ok_or_else(|| incomplete(format!("llvm-mca timeline of block {b} is incomplete")))?);
        }
        Ok(())
    };
    for line in out.lines() {
        if line.contains("Code Region - ") {
            flush(&mut region, &mut result)?;
        } else if line.starts_with("Timeline view:") {
            region = Some(vec![vec![None; 0]; iters]);
        } else if let (Some(_), Some(rest)) = (region.as_ref(), line.strip_prefix("Index")) {
            col = 5 + rest.len() - rest.trim_start().len();
        } else if let (Some(r), true) = (region.as_mut(), line.starts_with('[')) {
            let Some((it, idx, retire)) = timeline_row(line, col) else { continue };
            if let Some(row) = r.get_mut(it) {
                if row.len() <= idx {
                    row.resize(idx + 1, None);
                }
                row[idx] = retire;
            }
        }
    }
    flush(&mut region, &mut result)?;
    if result.len() != sizes.len() {
        return Err(incomplete(format!("llvm-mca printed {} regions for {} blocks", result.len(), sizes.len())));
    }
    Ok(result)
}

/// `[it,idx]   DeeER .  text` -> (it, idx, cycle of R).
fn timeline_row(line: &str, col: usize) -> Option<(usize, usize, Option<usize>)> {
    let close = line.find(']')?;
    let (it, idx) = line[1..close].split_once(',')?;
    // llvm-mca prints instructions in lower case: the only `R` is the retire cell.
    let r = line.get(col..)?.find('R');
    Some((it.trim().parse().ok()?, idx.trim().parse().ok()?, r))
}

fn gaps(rows: &[Vec<Option<usize>>], n: usize, iters: usize) -> Option<Vec<f64>> {
    let mut sum = vec![0.0; n];
    let from = (iters / 2).max(1);
    for it in from..iters {
        let row = rows.get(it)?;
        let prev_row = rows.get(it - 1)?;
        for (i, total) in sum.iter_mut().enumerate() {
            let r = (*row.get(i)?)? as f64;
            let before = if i == 0 { (*prev_row.get(n - 1)?)? } else { (*row.get(i - 1)?)? } as f64;
            *total += r - before;
        }
    }
    Some(sum.into_iter().map(|s| s / (iters - from) as f64).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_become_nops_and_regions_are_marked() {
        // Checks the llvm-mca input: one region per block, calls replaced, line map back to instructions.
        let (t, lines) = input(&[vec!["mov (%rdi), %rax".into(), "call 0x1000".into()], vec!["ret".into()]]);
        assert_eq!(t, "# LLVM-MCA-BEGIN b0\nmov (%rdi), %rax\nnop\n# LLVM-MCA-END\n# LLVM-MCA-BEGIN b1\nret\n# LLVM-MCA-END\n");
        assert_eq!(lines[2], Some((0, 1)));
        assert_eq!(lines[5], Some((1, 0)));
    }

    #[test]
    fn retire_gaps_of_a_recorded_timeline() {
        // Checks M_i from a recorded llvm-mca 19 znver5 timeline: an imul chain retires every 3 cycles,
        // the imul carries the gap, the others retire with it or one cycle later.
        let out = include_str!("../testdata/mca-imul-chain.txt");
        let m = parse_timeline(out, &[3], ITERATIONS).unwrap();
        let total: f64 = m[0].iter().sum();
        assert!((total - 3.0).abs() < 1e-9, "{m:?}");
        assert!(m[0][0] >= 2.0, "{m:?}");
    }
}
