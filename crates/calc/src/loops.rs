//! Loop kernels. On an out-of-order core a timer sample lands on the
//! instruction after the oldest unretired one, and a short loop retires
//! whole iterations in a few groups: its samples pile on one instruction
//! per retire group, often in another block of the loop than the one the
//! machine model charges the cycles to (insertion sort's inner loop: 82% of
//! its samples on one compare, while llvm-mca gives that block a third of
//! the cycles). The loop's samples as a whole still measure its cycles, so
//! an innermost loop that runs its blocks in one order every iteration is
//! scheduled as one kernel, and its frequency is ΣS over the loop divided by
//! the kernel's cycles per iteration.

use crate::cfg::Cfg;

/// An innermost loop whose blocks run in this order every iteration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cycle {
    pub blocks: Vec<usize>,
}

/// The innermost loops of `g` that are simple cycles of at least
/// `min_blocks` reachable blocks: loops (strongly connected components,
/// decomposed into nested loops by removing each one's header, as in
/// Bourdoncle's hierarchy) in which every block has exactly one successor
/// inside the loop, so the body has no branch and no inner loop. Each
/// cycle starts at its header.
pub fn simple_cycles(g: &Cfg, min_blocks: usize) -> Vec<Cycle> {
    innermost(g, min_blocks).0
}

/// The innermost loops of `g` whose body branches (an if/else, a
/// `switch` dispatch): loops of the same nest decomposition as
/// [`simple_cycles`] in which some block has two successors inside the
/// loop, and no inner loop remains once the header is removed. Each
/// starts at its header; the other blocks follow in address order.
pub fn branching_loops(g: &Cfg) -> Vec<Cycle> {
    innermost(g, 1).1
}

/// The blocks of the loop (strongly connected set, whatever its nesting)
/// that holds block `b`; `None` when `b` is in no cycle.
pub fn enclosing_loop(g: &Cfg, b: usize) -> Option<Vec<usize>> {
    cyclic_components(g, &vec![true; g.blocks.len()]).into_iter().find(|m| m.contains(&b))
}

/// Per block, how many loops hold it (0 outside every loop): the nest
/// decomposition of [`simple_cycles`], each loop's header removed to find the
/// loops inside it. Deeper blocks run more often, as a rule: what
/// `record --count` needs to arm classes of like frequencies together.
pub fn depths(g: &Cfg) -> Vec<u32> {
    nest_walk(g).0
}

/// Per block, whether it is the header of a loop of the decomposition of [`depths`] (runs every iteration).
pub fn headers(g: &Cfg) -> Vec<bool> {
    nest_walk(g).1
}

/// (depths, headers).
fn nest_walk(g: &Cfg) -> (Vec<u32>, Vec<bool>) {
    let mut depth = vec![0u32; g.blocks.len()];
    let mut heads = vec![false; g.blocks.len()];
    let mut todo = cyclic_components(g, &g.blocks.iter().map(|b| b.reachable).collect::<Vec<_>>());
    while let Some(set) = todo.pop() {
        let mut inside = vec![false; g.blocks.len()];
        for &b in &set {
            inside[b] = true;
            depth[b] += 1;
        }
        let h = header(g, &set, &inside);
        inside[h] = false;
        heads[h] = true;
        todo.extend(cyclic_components(g, &inside));
    }
    (depth, heads)
}

/// The block of the loop `set` (`inside` marks it) that is entered from outside it.
fn header(g: &Cfg, set: &[usize], inside: &[bool]) -> usize {
    // Unreachable code (alignment padding falling through into the loop) does not enter it.
    let entered_from_outside = |b: usize| g.blocks[b].preds.iter().map(|&e| g.edges[e].from).any(|p| !inside[p] && g.blocks[p].reachable);
    set.iter().copied().find(|&b| entered_from_outside(b)).unwrap_or(set[0])
}

/// (simple cycles of at least `min_blocks` blocks, branching innermost loops).
fn innermost(g: &Cfg, min_blocks: usize) -> (Vec<Cycle>, Vec<Cycle>) {
    let all: Vec<bool> = g.blocks.iter().map(|b| b.reachable).collect();
    let (mut simple, mut branching) = (Vec::new(), Vec::new());
    for set in cyclic_components(g, &all) {
        nest(g, set, min_blocks.max(1), &mut simple, &mut branching);
    }
    (simple, branching)
}

/// Looks for innermost loops in the loop `set` (a strongly connected set).
fn nest(g: &Cfg, set: Vec<usize>, min_blocks: usize, simple: &mut Vec<Cycle>, branching: &mut Vec<Cycle>) {
    let mut inside = vec![false; g.blocks.len()];
    for &b in &set {
        inside[b] = true;
    }
    let header = header(g, &set, &inside);
    let next: Vec<Vec<usize>> = set
        .iter()
        .map(|&b| {
            let mut s: Vec<usize> = succs(g, b).filter(|&x| inside[x]).collect();
            s.sort_unstable();
            s.dedup();
            s
        })
        .collect();
    if next.iter().all(|n| n.len() == 1) {
        // One successor each inside a strongly connected set: the walk from the header visits every block.
        let mut order = vec![header];
        let at = |b: usize| next[set.binary_search(&b).expect("inside")][0];
        let mut b = at(header);
        while b != header && order.len() <= set.len() {
            order.push(b);
            b = at(b);
        }
        if order.len() == set.len() && set.len() >= min_blocks {
            simple.push(Cycle { blocks: order });
        }
        return;
    }
    inside[header] = false;
    let inner = cyclic_components(g, &inside);
    if inner.is_empty() {
        let blocks = std::iter::once(header).chain(set.iter().copied().filter(|&b| b != header)).collect();
        branching.push(Cycle { blocks });
    }
    for inner in inner {
        nest(g, inner, min_blocks, simple, branching);
    }
}

/// The strongly connected components of the blocks in `alive` that hold a
/// cycle (two blocks or more, or one that branches to itself), each sorted.
fn cyclic_components(g: &Cfg, alive: &[bool]) -> Vec<Vec<usize>> {
    let comp = components(g, alive);
    let mut members: Vec<Vec<usize>> = Vec::new();
    for (b, c) in comp.iter().enumerate() {
        if let Some(c) = *c {
            if members.len() <= c {
                members.resize(c + 1, Vec::new());
            }
            members[c].push(b);
        }
    }
    members.retain(|m| m.len() > 1 || m.first().is_some_and(|&b| succs(g, b).any(|x| x == b)));
    members
}

fn succs(g: &Cfg, b: usize) -> impl Iterator<Item = usize> + '_ {
    g.blocks[b].succs.iter().map(|&e| g.edges[e].to)
}

/// Strongly connected component of each block in `alive` (iterative
/// Tarjan: procedures have thousands of blocks, too deep to recurse).
fn components(g: &Cfg, alive: &[bool]) -> Vec<Option<usize>> {
    let n = g.blocks.len();
    let (mut index, mut low) = (vec![usize::MAX; n], vec![0usize; n]);
    let mut on_stack = vec![false; n];
    let (mut stack, mut comp) = (Vec::new(), vec![None; n]);
    let (mut next_index, mut next_comp) = (0usize, 0usize);
    for root in (0..n).filter(|&b| alive[b]) {
        if index[root] != usize::MAX {
            continue;
        }
        let mut work: Vec<(usize, usize)> = vec![(root, 0)];
        index[root] = next_index;
        low[root] = next_index;
        next_index += 1;
        stack.push(root);
        on_stack[root] = true;
        while let Some(&(v, k)) = work.last() {
            if let Some(w) = g.blocks[v].succs.get(k).map(|&e| g.edges[e].to) {
                work.last_mut().expect("not empty").1 += 1;
                if !alive[w] {
                    continue;
                }
                if index[w] == usize::MAX {
                    index[w] = next_index;
                    low[w] = next_index;
                    next_index += 1;
                    stack.push(w);
                    on_stack[w] = true;
                    work.push((w, 0));
                } else if on_stack[w] {
                    low[v] = low[v].min(index[w]);
                }
                continue;
            }
            work.pop();
            if let Some(&(parent, _)) = work.last() {
                low[parent] = low[parent].min(low[v]);
            }
            if low[v] == index[v] {
                while let Some(w) = stack.pop() {
                    on_stack[w] = false;
                    comp[w] = Some(next_comp);
                    if w == v {
                        break;
                    }
                }
                next_comp += 1;
            }
        }
    }
    comp
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cfg::{build, NoMemory};
    use crate::decode::decode;

    #[test]
    fn two_block_loop_is_one_cycle_in_execution_order() {
        // Checks an insertion-sort-shaped inner loop: entry jumps to the test block, which loops back to the body.
        // 0: jmp 4 | 2: dec %eax | 4: cmp %ecx,%eax ; jg 2 | 8: ret
        let bytes = [0xeb, 0x02, 0xff, 0xc8, 0x39, 0xc8, 0x7f, 0xfa, 0xc3];
        let g = build(decode(0, &bytes), &NoMemory);
        let cycles = simple_cycles(&g, 2);
        assert_eq!(cycles.len(), 1, "{g:?}");
        let starts: Vec<u64> = cycles[0].blocks.iter().map(|&b| g.start(b)).collect();
        assert_eq!(starts, vec![4, 2]);
    }

    #[test]
    fn inner_loop_of_a_nest_is_found_under_its_outer_loop() {
        // Checks the nest decomposition: an outer loop around the two-block inner loop yields the inner one only.
        // 0: jmp 4 | 2: dec %eax | 4: cmp %ecx,%eax ; jg 2 | 8: dec %edi ; jne 0 | c: ret
        let bytes = [0xeb, 0x02, 0xff, 0xc8, 0x39, 0xc8, 0x7f, 0xfa, 0xff, 0xcf, 0x75, 0xf2, 0xc3];
        let g = build(decode(0, &bytes), &NoMemory);
        let cycles = simple_cycles(&g, 2);
        let starts: Vec<Vec<u64>> = cycles.iter().map(|c| c.blocks.iter().map(|&b| g.start(b)).collect()).collect();
        assert_eq!(starts, vec![vec![4, 2]], "{g:?}");
    }

    #[test]
    fn depths_count_the_loops_around_each_block() {
        // Checks depths on the nest above, its outer jump back to 0 (jne 0): the outer loop's blocks 1, the inner
        // loop's 2, the return 0.
        let bytes = [0xeb, 0x02, 0xff, 0xc8, 0x39, 0xc8, 0x7f, 0xfa, 0xff, 0xcf, 0x75, 0xf4, 0xc3];
        let g = build(decode(0, &bytes), &NoMemory);
        let d: Vec<(u64, u32)> = (0..g.blocks.len()).map(|b| (g.start(b), depths(&g)[b])).collect();
        assert_eq!(d, vec![(0, 1), (2, 2), (4, 2), (8, 1), (0xc, 0)], "{g:?}");
        // The outer loop's header is its first block; the inner loop is entered at its test.
        assert_eq!(headers(&g), vec![true, false, true, false, false]);
    }

    #[test]
    fn loop_with_a_branch_inside_is_not_a_simple_cycle() {
        // Checks that a body with an if inside (two paths per iteration) is left to the per-class estimate.
        // 0: test %edi,%edi ; je 6 | 4: inc %eax | 6: dec %edi ; jne 0 | a: ret
        let bytes = [0x85, 0xff, 0x74, 0x02, 0xff, 0xc0, 0xff, 0xcf, 0x75, 0xf6, 0xc3];
        let g = build(decode(0, &bytes), &NoMemory);
        assert!(simple_cycles(&g, 1).is_empty(), "{g:?}");
    }

    #[test]
    fn single_block_loop_counts_only_from_one_block() {
        // Checks the min_blocks filter on a one-block loop (dec; jne back to itself).
        // 0: dec %edi ; jne 0 | 4: ret
        let bytes = [0xff, 0xcf, 0x75, 0xfc, 0xc3];
        let g = build(decode(0, &bytes), &NoMemory);
        assert_eq!(simple_cycles(&g, 1), vec![Cycle { blocks: vec![0] }]);
        assert!(simple_cycles(&g, 2).is_empty());
    }

    #[test]
    fn loop_with_an_if_inside_is_a_branching_loop_from_its_header() {
        // Checks that the if-in-a-loop body above is one branching loop: header 0, then the arm 4 and the latch 6.
        // 0: test %edi,%edi ; je 6 | 4: inc %eax | 6: dec %edi ; jne 0 | a: ret
        let bytes = [0x85, 0xff, 0x74, 0x02, 0xff, 0xc0, 0xff, 0xcf, 0x75, 0xf6, 0xc3];
        let g = build(decode(0, &bytes), &NoMemory);
        let loops = branching_loops(&g);
        let starts: Vec<Vec<u64>> = loops.iter().map(|c| c.blocks.iter().map(|&b| g.start(b)).collect()).collect();
        assert_eq!(starts, vec![vec![0, 4, 6]], "{g:?}");
    }

    #[test]
    fn outer_loop_around_a_simple_inner_loop_is_not_branching_innermost() {
        // Checks that a nest whose inner loop is simple yields no branching loop (the outer one is not innermost).
        // 0: jmp 4 | 2: dec %eax | 4: cmp %ecx,%eax ; jg 2 | 8: dec %edi ; jne 0 | c: ret
        let bytes = [0xeb, 0x02, 0xff, 0xc8, 0x39, 0xc8, 0x7f, 0xfa, 0xff, 0xcf, 0x75, 0xf2, 0xc3];
        let g = build(decode(0, &bytes), &NoMemory);
        assert!(branching_loops(&g).is_empty(), "{g:?}");
    }

    #[test]
    fn padding_that_falls_into_a_loop_does_not_make_its_header() {
        // Checks that the header is the block entered by reachable code (gcc's rotated loops put an
        // unreachable nop before the body): the cycle starts at the jump's target 5, not at 3.
        // 0: jmp 5 | 2: nop (unreachable) | 3: inc %eax | 5: dec %edi ; jne 3 | 9: ret
        let bytes = [0xeb, 0x03, 0x90, 0xff, 0xc0, 0xff, 0xcf, 0x75, 0xfa, 0xc3];
        let g = build(decode(0, &bytes), &NoMemory);
        let cycles = simple_cycles(&g, 2);
        let starts: Vec<Vec<u64>> = cycles.iter().map(|c| c.blocks.iter().map(|&b| g.start(b)).collect()).collect();
        assert_eq!(starts, vec![vec![5, 3]], "{g:?}");
    }
}
