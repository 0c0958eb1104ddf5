//! Frequency equivalence classes by cycle equivalence (DCPI §6.1.2, after
//! Johnson, Pearson and Pingali 1994).
//!
//! Every block and edge becomes an edge of an undirected graph: block `b`
//! is `in_b - out_b`, a CFG edge is `out_a - in_b`, and one outside vertex
//! `X` joins the entry and the exits (JPP's `end -> start` edge). In a
//! strongly connected graph two edges are cycle equivalent exactly when
//! together they form a two-edge cut, so they run the same number of times.
//! Two-edge cuts are found in linear time by labelling each non-tree edge of
//! a spanning tree with a random 64-bit word and each tree edge with the XOR
//! of the labels of the cycles through it: equal labels, same class (a
//! false match needs a 64-bit collision).
//!
//! DCPI's extension for infinite loops: a loop no path leaves (a server's
//! accept loop, an idle loop, a block ending in `ud2`) would break strong
//! connectivity; each such bottom component gets a virtual edge to `X` from
//! one of its blocks, which carries the (zero or one) times it was entered.

use crate::cfg::Cfg;
use std::collections::HashMap;

/// An edge of the flow graph: a CFG edge or a virtual one; `None` is the
/// world outside the procedure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlowEdge {
    pub from: Option<usize>,
    pub to: Option<usize>,
}

#[derive(Clone, Debug)]
pub struct Classes {
    /// CFG edges (same indices as `Cfg::edges`), then the virtual entry,
    /// exit and infinite-loop edges.
    pub edges: Vec<FlowEdge>,
    /// Class of each block; `None` for unreachable blocks.
    pub block: Vec<Option<usize>>,
    pub edge: Vec<Option<usize>>,
    pub count: usize,
}

/// Groups the reachable blocks and the edges of `g` into frequency classes.
/// With missing edges every block and edge is its own class.
pub fn classes(g: &Cfg) -> Classes {
    let mut edges: Vec<FlowEdge> = g.edges.iter().map(|e| FlowEdge { from: Some(e.from), to: Some(e.to) }).collect();
    let live = |b: usize| g.blocks[b].reachable;
    if !g.blocks.is_empty() {
        edges.push(FlowEdge { from: None, to: Some(0) });
    }
    for (b, blk) in g.blocks.iter().enumerate() {
        if live(b) && (blk.exits || blk.succs.is_empty()) {
            edges.push(FlowEdge { from: Some(b), to: None });
        }
    }
    add_infinite_loop_exits(g, &mut edges);
    let edge_live = |e: &FlowEdge| e.from.is_none_or(live) && e.to.is_none_or(live);
    if g.missing_edges {
        let mut n = 0;
        let mut next = |keep: bool| keep.then(|| (n, n += 1).0);
        let block = (0..g.blocks.len()).map(|b| next(live(b))).collect();
        let edge = edges.iter().map(|e| next(edge_live(e))).collect();
        return Classes { edges, block, edge, count: n };
    }
    // Vertex 0 is X; block b is 1+2b (in) and 2+2b (out).
    let (vin, vout) = (|b: usize| 1 + 2 * b, |b: usize| 2 + 2 * b);
    let end = |v: Option<usize>, f: fn(usize) -> usize| v.map_or(0, f);
    let mut und: Vec<(usize, usize)> = Vec::new();
    let mut item: Vec<Item> = Vec::new();
    for (b, _) in g.blocks.iter().enumerate().filter(|(b, _)| live(*b)) {
        und.push((vin(b), vout(b)));
        item.push(Item::Block(b));
    }
    for (i, e) in edges.iter().enumerate().filter(|(_, e)| edge_live(e)) {
        und.push((end(e.from, vout), end(e.to, vin)));
        item.push(Item::Edge(i));
    }
    let labels = cut_labels(1 + 2 * g.blocks.len(), &und);
    let mut ids: HashMap<u64, usize> = HashMap::new();
    let mut block = vec![None; g.blocks.len()];
    let mut edge = vec![None; edges.len()];
    for (k, it) in item.iter().enumerate() {
        // Label 0 is a bridge (only when the graph is not strongly connected): its own class.
        let key = if labels[k] == 0 { u64::MAX - k as u64 } else { labels[k] };
        let n = ids.len();
        let c = *ids.entry(key).or_insert(n);
        match *it {
            Item::Block(b) => block[b] = Some(c),
            Item::Edge(e) => edge[e] = Some(c),
        }
    }
    Classes { edges, block, edge, count: ids.len() }
}

enum Item {
    Block(usize),
    Edge(usize),
}

/// Adds an exit edge from one block of every bottom component that no path
/// leaves, until every reachable block reaches an exit.
fn add_infinite_loop_exits(g: &Cfg, edges: &mut Vec<FlowEdge>) {
    let n = g.blocks.len();
    let succ = |b: usize| g.blocks[b].succs.iter().map(|&e| g.edges[e].to).collect::<Vec<_>>();
    let reach_from = |start: usize| {
        let mut seen = vec![false; n];
        let mut st = vec![start];
        seen[start] = true;
        while let Some(b) = st.pop() {
            for t in succ(b) {
                if !seen[t] {
                    seen[t] = true;
                    st.push(t);
                }
            }
        }
        seen
    };
    loop {
        let exits: Vec<usize> = edges.iter().filter(|e| e.to.is_none()).filter_map(|e| e.from).collect();
        let mut can = vec![false; n];
        let mut st = exits.clone();
        for &b in &exits {
            can[b] = true;
        }
        while let Some(b) = st.pop() {
            for &e in &g.blocks[b].preds {
                let p = g.edges[e].from;
                if !can[p] {
                    can[p] = true;
                    st.push(p);
                }
            }
        }
        let Some(mut b) = (0..n).find(|&b| g.blocks[b].reachable && !can[b]) else { return };
        // Walk down until b's reachable set is its own strongly connected component.
        loop {
            let r = reach_from(b);
            match (0..n).find(|&c| r[c] && !reach_from(c)[b]) {
                Some(c) => b = c,
                None => break,
            }
        }
        edges.push(FlowEdge { from: Some(b), to: None });
    }
}

/// XOR labels of the edges of a connected undirected multigraph: equal
/// non-zero labels <=> the two edges form a two-edge cut.
fn cut_labels(nv: usize, und: &[(usize, usize)]) -> Vec<u64> {
    let mut adj: Vec<Vec<(usize, usize)>> = vec![Vec::new(); nv];
    for (k, &(a, b)) in und.iter().enumerate() {
        adj[a].push((b, k));
        adj[b].push((a, k));
    }
    let mut parent_edge = vec![usize::MAX; nv];
    let mut visited = vec![false; nv];
    let mut order = Vec::with_capacity(nv);
    let mut tree = vec![false; und.len()];
    let mut stack = vec![0usize];
    visited[0] = true;
    while let Some(v) = stack.pop() {
        order.push(v);
        for &(w, k) in &adj[v] {
            if !visited[w] {
                visited[w] = true;
                tree[k] = true;
                parent_edge[w] = k;
                stack.push(w);
            }
        }
    }
    let mut label = vec![0u64; und.len()];
    let mut acc = vec![0u64; nv];
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    for (k, &(a, b)) in und.iter().enumerate() {
        if !tree[k] {
            label[k] = splitmix(&mut seed);
            acc[a] ^= label[k];
            acc[b] ^= label[k];
        }
    }
    // Children after parents in `order` (a stack-based traversal still
    // visits every vertex after the one that discovered it).
    for &v in order.iter().rev() {
        let k = parent_edge[v];
        if k != usize::MAX {
            label[k] = acc[v];
            let (a, b) = und[k];
            let p = if a == v { b } else { a };
            acc[p] ^= acc[v];
        }
    }
    label
}

fn splitmix(s: &mut u64) -> u64 {
    *s = s.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *s;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cfg::{build, NoMemory};
    use crate::decode::decode;

    fn diamond() -> Cfg {
        // 0: test; je 8 | 4: mov eax,1; jmp 0xd | 0xb(8): mov eax,2 | 0x10: ret
        let bytes = [0x85, 0xff, 0x74, 0x07, 0xb8, 0x01, 0, 0, 0, 0xeb, 0x05, 0xb8, 0x02, 0, 0, 0, 0xc3];
        build(decode(0, &bytes), &NoMemory)
    }

    #[test]
    fn diamond_arms_are_equivalent_to_their_edges_and_head_to_join() {
        // Checks a diamond: {head, join, entry, exit}, {then, its two edges}, {else, its two edges}.
        let g = diamond();
        let c = classes(&g);
        let b = &c.block;
        assert_eq!(b[0], b[3]);
        assert_ne!(b[1], b[2]);
        assert_ne!(b[0], b[1]);
        // edges: 0->2, 0->1, 1->3, 2->3
        assert_eq!(c.edge[1], b[1]);
        assert_eq!(c.edge[2], b[1]);
        assert_eq!(c.edge[0], b[2]);
        assert_eq!(c.edge[3], b[2]);
        assert_eq!(c.count, 3);
    }

    #[test]
    fn loop_body_differs_from_preheader() {
        // Checks a counted loop: preheader and exit block share a class, the body (self loop) does not.
        // 0: xor eax,eax | 2: inc eax; cmp eax,10; jne 2 | 0xa: ret
        let bytes = [0x31, 0xc0, 0xff, 0xc0, 0x83, 0xf8, 0x0a, 0x75, 0xf9, 0xc3];
        let g = build(decode(0, &bytes), &NoMemory);
        let c = classes(&g);
        assert_eq!(g.blocks.len(), 3);
        assert_eq!(c.block[0], c.block[2]);
        assert_ne!(c.block[0], c.block[1]);
        let back = g.edges.iter().position(|e| e.from == 1 && e.to == 1).unwrap();
        assert_ne!(c.edge[back], c.block[1]);
        assert_ne!(c.edge[back], c.block[0]);
    }

    #[test]
    fn infinite_loop_gets_a_virtual_exit_and_real_classes() {
        // Checks the infinite-loop extension: `0: test; je 6 | 4: jmp 4 | 6: ret` stays analysable.
        let bytes = [0x85, 0xff, 0x74, 0x02, 0xeb, 0xfe, 0xc3];
        let g = build(decode(0, &bytes), &NoMemory);
        let c = classes(&g);
        assert!(c.edges.iter().any(|e| e.from == Some(1) && e.to.is_none()));
        assert!(c.block.iter().all(|x| x.is_some()));
        // The entry block runs as often as entry; the loop block is its own class.
        assert_ne!(c.block[0], c.block[1]);
        assert_ne!(c.block[0], c.block[2]);
    }
}
