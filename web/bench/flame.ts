// Benchmark page: the canvas icicle on a synthetic 100k-node tree (web/bench/flame.mjs drives it).
import { FlameView } from '../src/flame/render';
import { ApiNode, fromApi } from '../src/flame/tree';

/** A tree of `n` nodes: each frame has up to 8 children with Zipf-like weights, depth up to 30. */
function synth(n: number): ApiNode {
  let made = 1, seed = 42;
  const rnd = () => ((seed = (seed * 1103515245 + 12345) & 0x7fffffff) / 0x7fffffff);
  const root: ApiNode = { name: 'all', self: 0, total: 0, children: [] };
  const queue: [ApiNode, number][] = [[root, 0]];
  for (let q = 0; q < queue.length && made < n; q++) {
    const [p, depth] = queue[q];
    const k = depth > 30 ? 0 : 1 + Math.floor(rnd() * 8);
    for (let i = 0; i < k && made < n; i++, made++) {
      const c: ApiNode = { name: `f${made}`, image: 'bench', self: 1 + Math.floor(100 / (i + 1) * rnd()), total: 0, children: [] };
      p.children!.push(c);
      queue.push([c, depth + 1]);
    }
  }
  const sum = (x: ApiNode): number => (x.total = x.self + (x.children ?? []).reduce((s, c) => s + sum(c), 0));
  sum(root);
  return root;
}

declare global {
  interface Window { bench: () => { nodes: number; buildMs: number; firstDrawMs: number; zoomDrawMs: number[] } }
}

window.bench = () => {
  const api = synth(100000);
  const t0 = performance.now();
  const tree = fromApi(api);
  const t1 = performance.now();
  const v = new FlameView(document.getElementById('host')!);
  v.setTree(tree);
  v.rectOf('all'); // forces a synchronous draw
  const t2 = performance.now();
  const zoomDrawMs: number[] = [];
  let n = tree;
  for (let i = 0; i < 10 && n.children.length; i++) {
    n = n.children[0];
    const z0 = performance.now();
    v.setFocus(n);
    v.rectOf(n.name);
    zoomDrawMs.push(performance.now() - z0);
  }
  let nodes = 0;
  const walk = (x: typeof tree) => { nodes++; x.children.forEach(walk); };
  walk(tree);
  return { nodes, buildMs: t1 - t0, firstDrawMs: t2 - t1, zoomDrawMs };
};
