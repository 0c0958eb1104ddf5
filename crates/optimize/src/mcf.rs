//! Minimum-cost flow, for `infer`'s flow-consistent counts. Primal-dual:
//! Dijkstra over reduced costs finds the cheapest augmenting distance,
//! then a Dinic blocking flow pushes along every path of that cost before
//! the next search, so the number of searches is the number of distinct
//! path costs, not of paths. Written here rather than taken from a crate:
//! the maintained Rust ones are GPL (rs-graph) or wrap C++ through a
//! build script (mcmf), and this is sixty lines, as in LLVM's profi.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

/// Capacity that no flow here reaches.
pub const UNBOUNDED: i64 = i64::MAX / 8;

#[derive(Clone, Debug)]
struct Arc {
    to: usize,
    cap: i64,
    cost: i64,
}

/// A network of arcs with non-negative costs; arc `2k` is the k-th added
/// arc and `2k + 1` its residual.
#[derive(Clone, Debug, Default)]
pub struct Network {
    arcs: Vec<Arc>,
    out: Vec<Vec<usize>>,
}

impl Network {
    pub fn new(nodes: usize) -> Self {
        Network { arcs: Vec::new(), out: vec![Vec::new(); nodes] }
    }

    /// Adds an arc and returns its id for `flow`. Costs must be >= 0.
    pub fn add(&mut self, from: usize, to: usize, cap: i64, cost: i64) -> usize {
        debug_assert!(cost >= 0);
        let id = self.arcs.len();
        self.arcs.push(Arc { to, cap, cost });
        self.arcs.push(Arc { to: from, cap: 0, cost: -cost });
        self.out[from].push(id);
        self.out[to].push(id + 1);
        id
    }

    /// Flow on arc `id` after `solve`.
    pub fn flow(&self, id: usize) -> i64 {
        self.arcs[id + 1].cap
    }

    /// Sends as much flow as possible from `s` to `t` at the least cost;
    /// returns (flow, cost).
    pub fn solve(&mut self, s: usize, t: usize) -> (i64, i64) {
        let n = self.out.len();
        let mut pot = vec![0i64; n];
        let (mut flow, mut cost) = (0i64, 0i64);
        loop {
            // Shortest reduced distances from s over arcs with capacity left.
            let mut dist = vec![i64::MAX; n];
            dist[s] = 0;
            let mut heap = BinaryHeap::from([Reverse((0i64, s))]);
            while let Some(Reverse((d, u))) = heap.pop() {
                if d > dist[u] {
                    continue;
                }
                for &a in &self.out[u] {
                    let arc = &self.arcs[a];
                    if arc.cap > 0 {
                        let nd = d + arc.cost + pot[u] - pot[arc.to];
                        if nd < dist[arc.to] {
                            dist[arc.to] = nd;
                            heap.push(Reverse((nd, arc.to)));
                        }
                    }
                }
            }
            if dist[t] == i64::MAX {
                return (flow, cost);
            }
            for v in 0..n {
                pot[v] += dist[v].min(dist[t]);
            }
            // Blocking flows over the arcs of zero reduced cost.
            loop {
                let level = self.levels(s, &pot);
                if level[t] == usize::MAX {
                    break;
                }
                let mut next = vec![0usize; n];
                loop {
                    let pushed = self.push(s, t, UNBOUNDED, &level, &pot, &mut next);
                    if pushed == 0 {
                        break;
                    }
                    flow += pushed;
                    cost += pushed * (pot[t] - pot[s]);
                }
            }
        }
    }

    fn admissible(&self, u: usize, a: usize, pot: &[i64]) -> bool {
        let arc = &self.arcs[a];
        arc.cap > 0 && arc.cost + pot[u] - pot[arc.to] == 0
    }

    fn levels(&self, s: usize, pot: &[i64]) -> Vec<usize> {
        let mut level = vec![usize::MAX; self.out.len()];
        level[s] = 0;
        let mut q = VecDeque::from([s]);
        while let Some(u) = q.pop_front() {
            for &a in &self.out[u] {
                let v = self.arcs[a].to;
                if level[v] == usize::MAX && self.admissible(u, a, pot) {
                    level[v] = level[u] + 1;
                    q.push_back(v);
                }
            }
        }
        level
    }

    fn push(&mut self, u: usize, t: usize, limit: i64, level: &[usize], pot: &[i64], next: &mut [usize]) -> i64 {
        if u == t {
            return limit;
        }
        while next[u] < self.out[u].len() {
            let a = self.out[u][next[u]];
            let v = self.arcs[a].to;
            if level[v] == level[u] + 1 && self.admissible(u, a, pot) {
                let pushed = self.push(v, t, limit.min(self.arcs[a].cap), level, pot, next);
                if pushed > 0 {
                    self.arcs[a].cap -= pushed;
                    self.arcs[a ^ 1].cap += pushed;
                    return pushed;
                }
            }
            next[u] += 1;
        }
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The example of the mcmf crate's documentation, solved by hand: two
    // units from Vancouver to Halifax cost 650 at best.
    #[test]
    fn cheapest_flow() {
        let (s, van, tor, hal, t) = (0, 1, 2, 3, 4);
        let mut n = Network::new(5);
        n.add(s, van, 2, 0);
        let vt = n.add(van, tor, 2, 100);
        n.add(tor, hal, 1, 150);
        let vh = n.add(van, hal, 5, 400);
        n.add(hal, t, 2, 0);
        assert_eq!(n.solve(s, t), (2, 650));
        assert_eq!((n.flow(vt), n.flow(vh)), (1, 1));
    }

    // A cheap path with small capacity fills first, the rest takes the
    // dearer one; arcs of cost 0 forming cycles do not loop.
    #[test]
    fn fills_cheap_paths_first() {
        let mut n = Network::new(5);
        let cheap = n.add(0, 1, 3, 1);
        let dear = n.add(0, 2, UNBOUNDED, 5);
        n.add(1, 3, UNBOUNDED, 0);
        n.add(2, 3, UNBOUNDED, 0);
        n.add(3, 0, UNBOUNDED, 0);
        n.add(1, 2, UNBOUNDED, 0);
        n.add(2, 1, UNBOUNDED, 0);
        n.add(3, 4, 10, 0);
        assert_eq!(n.solve(0, 4), (10, 3 + 7 * 5));
        assert_eq!((n.flow(cheap), n.flow(dear)), (3, 7));
    }
}
