import { describe, expect, it } from 'vitest';
import { ApiNode, diffColour, diffTree, fromApi, FNode, invert, layout, NEUTRAL, sandwich, search, walk } from './tree';

// main calls a (which calls c) and b (which calls c): 10 samples, known self counts.
const api: ApiNode = {
  name: 'all', self: 0, total: 10, children: [
    { name: 'main', image: 'prog', self: 0, total: 10, children: [
      { name: 'b', image: 'prog', self: 3, total: 4, children: [{ name: 'c', image: 'prog', self: 1, total: 1 }] },
      { name: 'a', image: 'prog', self: 4, total: 6, children: [{ name: 'c', image: 'prog', self: 2, total: 2 }] },
    ] },
  ],
};

const find = (n: FNode, ...path: string[]): FNode => path.reduce((x, p) => x.children.find((c) => c.name === p)!, n);

describe('flame tree', () => {
  it('keeps the API counts and sorts heavy children first', () => {
    // Checks parent links, depths and the heaviest-first order.
    const t = fromApi(api);
    const main = find(t, 'main');
    expect(main.children.map((c) => c.name)).toEqual(['a', 'b']);
    expect(find(t, 'main', 'a', 'c').depth).toBe(3);
    expect(find(t, 'main', 'a').parent).toBe(main);
  });
  it('inverts so leaves sit under the root with their self samples', () => {
    // Checks the bottom-up view: c's 3 self samples split into callers a (2) and b (1).
    const inv = invert(fromApi(api));
    expect(inv.total).toBe(10);
    expect(find(inv, 'c').total).toBe(3);
    expect(find(inv, 'c', 'a').total).toBe(2);
    expect(find(inv, 'c', 'b', 'main').total).toBe(1);
    expect(find(inv, 'a').total).toBe(4);
    expect(inv.children.reduce((s, c) => s + c.total, 0)).toBe(10);
  });
  it('builds the sandwich of one procedure from all its call sites', () => {
    // Checks c's callers (a: 2, b: 1) and its callees (none) across both call sites.
    const { callers, callees } = sandwich(fromApi(api), 'c');
    expect(callers.total).toBe(3);
    expect(find(callers, 'a').total).toBe(2);
    expect(find(callers, 'b', 'main').total).toBe(1);
    expect(callees.total).toBe(3);
    expect(callees.self).toBe(3);
  });
  it('counts recursion once in the sandwich', () => {
    // Checks that r calling r does not double the samples of r's callees.
    const rec = fromApi({ name: 'all', self: 0, total: 5, children: [
      { name: 'r', self: 1, total: 5, children: [{ name: 'r', self: 1, total: 4, children: [{ name: 'x', self: 3, total: 3 }] }] },
    ] });
    const { callees } = sandwich(rec, 'r');
    expect(callees.total).toBe(5);
    expect(find(callees, 'r', 'x').total).toBe(3);
  });
  it('lays out a zoomed frame across the whole width', () => {
    // Checks that the focus spans 0..1, ancestors too, and children split it by total.
    const t = fromApi(api);
    const a = find(t, 'main', 'a');
    const rects = layout(a);
    const r = (n: FNode) => rects.find((x) => x.node === n)!;
    expect(r(a)).toMatchObject({ x: 0, w: 1, depth: 2 });
    expect(r(find(t, 'main'))).toMatchObject({ x: 0, w: 1 });
    expect(r(find(a, 'c')).w).toBeCloseTo(2 / 6);
    expect(rects.find((x) => x.node.name === 'b')).toBeUndefined();
  });
  it('lays out the whole tree in proportion and prunes tiny frames', () => {
    // Checks widths at the root and that frames under minWidth are skipped.
    const t = fromApi(api);
    const all = layout(t);
    const b = all.find((x) => x.node.name === 'b')!;
    expect(b.x).toBeCloseTo(0.6);
    expect(b.w).toBeCloseTo(0.4);
    expect(layout(t, 0.15).filter((x) => x.node.name === 'c')).toHaveLength(1);
  });
  it('finds frames by name and counts nested matches once', () => {
    // Checks case-insensitive search and that c under a matched a is not counted twice.
    const t = fromApi(api);
    expect(search(t, 'C').nodes.size).toBe(2);
    expect(search(t, 'C').samples).toBe(3);
    const m = search(t, 'a');
    expect(m.samples).toBe(10); // "main" matches and holds everything
    expect(search(t, '  ').nodes.size).toBe(0);
  });
  it('merges two sides of a diff by call path', () => {
    // Checks B totals, A as base, and paths present on one side only.
    const t = fromApi(api);
    const b = fromApi({ name: 'all', self: 0, total: 4, children: [{ name: 'main', image: 'prog', self: 0, total: 4, children: [{ name: 'd', image: 'prog', self: 4, total: 4 }] }] });
    const d = diffTree(t, b);
    expect(find(d, 'main').total).toBe(4);
    expect(find(d, 'main').base).toBe(10);
    expect(find(d, 'main', 'a').total).toBe(0);
    expect(find(d, 'main', 'a').base).toBe(6);
    expect(find(d, 'main', 'd').base).toBeUndefined();
  });
  it('colours only significant changes, red for growth and blue for shrinkage', () => {
    // Checks the diff colour rule.
    expect(diffColour(undefined)).toBe(NEUTRAL);
    expect(diffColour({ significant: false, score: 3, a: 1, b: 3 })).toBe(NEUTRAL);
    expect(diffColour({ significant: true, score: 2, a: 1, b: 2 })).toMatch(/^hsl\(0,/);
    expect(diffColour({ significant: true, score: 0.5, a: 2, b: 1 })).toMatch(/^hsl\(215,/);
    expect(diffColour({ significant: true, score: null, a: 0, b: 9 })).toBe('hsl(0, 80%, 45%)');
  });
});

describe('large trees', () => {
  it('lays out only visible frames of a 100k-node tree', () => {
    // Checks the pruning that keeps drawing independent of tree size: at most 1/minWidth frames per row.
    // 100 heavy frames (0.5% of the samples each) among 49,900 light ones, each with one child.
    const leaves: ApiNode[] = [];
    for (let i = 0; i < 50000; i++) {
      const w = i < 100 ? 500 : 1;
      leaves.push({ name: `f${i}`, self: w, total: 2 * w, children: [{ name: `g${i}`, self: w, total: w }] });
    }
    const t = fromApi({ name: 'all', self: 0, total: 100 * 1000 + 49900 * 2, children: leaves });
    let n = 0;
    walk(t, () => n++);
    expect(n).toBe(100001);
    const minWidth = 0.5 / 1280;
    const rects = layout(t, minWidth);
    // The root and the heavy frames with their children; no light frame is wide enough.
    expect(rects.length).toBe(1 + 200);
    expect(rects.every((r) => r.w >= minWidth)).toBe(true);
    expect(layout(t).length).toBe(100001);
    // Zoomed to one frame, its subtree fills the view.
    const f = t.children[t.children.length - 1];
    expect(layout(f, minWidth).map((r) => r.node.name)).toEqual(['all', f.name, f.children[0].name]);
  });
});
