// Pure flame-graph logic: the call tree the API sends, its inverted and sandwich views, the layout
// of an icicle for a zoomed frame, search, and diff colouring. No DOM here, so it is unit-tested.

/** A node as `/api/flame` sends it (root first, children nested). */
export interface ApiNode {
  name: string;
  image?: string;
  inlined?: boolean;
  self: number;
  total: number;
  children?: ApiNode[];
}

export interface FNode {
  name: string;
  image: string;
  self: number;
  total: number;
  children: FNode[];
  parent: FNode | null;
  depth: number;
  /** Samples in the other side of a diff (undefined outside diffs). */
  base?: number;
}

function node(name: string, image: string, parent: FNode | null): FNode {
  return { name, image, self: 0, total: 0, children: [], parent, depth: parent ? parent.depth + 1 : 0 };
}

/** The child of `p` with this name and image, created when missing. */
function child(p: FNode, name: string, image: string): FNode {
  let c = p.children.find((x) => x.name === name && x.image === image);
  if (!c) {
    c = node(name, image, p);
    p.children.push(c);
  }
  return c;
}

/** Heaviest children first, so the hot paths sit at the left as in most flame graph tools. */
function sortTree(n: FNode): FNode {
  n.children.sort((a, b) => b.total - a.total || a.name.localeCompare(b.name));
  for (const c of n.children) sortTree(c);
  return n;
}

/** The API's tree with parent links and depths (iterative: deep stacks must not overflow). */
export function fromApi(root: ApiNode): FNode {
  const top = node(root.name, root.image ?? '', null);
  const todo: [ApiNode, FNode][] = [[root, top]];
  while (todo.length) {
    const [a, f] = todo.pop()!;
    f.self = a.self;
    f.total = a.total;
    for (const c of a.children ?? []) {
      const fc = node(c.name, c.image ?? '', f);
      f.children.push(fc);
      todo.push([c, fc]);
    }
  }
  return sortTree(top);
}

/** Every node, depth first. */
export function walk(root: FNode, visit: (n: FNode) => void): void {
  const todo = [root];
  while (todo.length) {
    const n = todo.pop()!;
    visit(n);
    for (let i = n.children.length - 1; i >= 0; i--) todo.push(n.children[i]);
  }
}

/** Frames from the root's child down to `n`. */
function pathOf(n: FNode): FNode[] {
  const p: FNode[] = [];
  for (let x: FNode | null = n; x && x.parent; x = x.parent) p.push(x);
  return p.reverse();
}

/** Bottom-up tree: each leaf's self samples hang under the root, its callers below it. */
export function invert(root: FNode): FNode {
  const out = node('all', '', null);
  out.total = root.total;
  walk(root, (n) => {
    if (!n.parent || n.self === 0) return;
    let at = out;
    for (const f of pathOf(n).reverse()) {
      at = child(at, f.name, f.image);
      at.total += n.self;
    }
    at.self += n.self;
  });
  return sortTree(out);
}

/** True when an ancestor of `n` is also the procedure `name`: recursion is counted once. */
function nestedIn(n: FNode, name: string): boolean {
  for (let x = n.parent; x; x = x.parent) if (x.name === name) return true;
  return false;
}

/** The outermost frames of procedure `name` (recursive calls inside them left out). */
export function occurrences(root: FNode, name: string): FNode[] {
  const out: FNode[] = [];
  walk(root, (n) => {
    if (n.name === name && !nestedIn(n, name)) out.push(n);
  });
  return out;
}

/** Sandwich view of one procedure: who calls it (inverted, it at the root) and what it calls. */
export function sandwich(root: FNode, name: string): { callers: FNode; callees: FNode } {
  const occ = occurrences(root, name);
  const callees = node(name, occ[0]?.image ?? '', null);
  const callers = node(name, occ[0]?.image ?? '', null);
  for (const o of occ) {
    mergeInto(callees, o);
    callers.total += o.total;
    let at = callers;
    for (let x = o.parent; x && x.parent; x = x.parent) {
      at = child(at, x.name, x.image);
      at.total += o.total;
    }
  }
  return { callers: sortTree(callers), callees: sortTree(callees) };
}

/** Adds `src`'s counts and subtree into `dst` (same frame). */
function mergeInto(dst: FNode, src: FNode): void {
  const todo: [FNode, FNode][] = [[dst, src]];
  while (todo.length) {
    const [d, s] = todo.pop()!;
    d.total += s.total;
    d.self += s.self;
    for (const c of s.children) todo.push([child(d, c.name, c.image), c]);
  }
}

export interface Rect {
  node: FNode;
  /** Left edge and width as fractions of the view (0..1). */
  x: number;
  w: number;
  depth: number;
}

/**
 * The icicle's rectangles with `focus` (the root, or a frame zoomed to) across the whole width: its ancestors span the view
 * above it, its descendants share it in proportion to their totals. Frames narrower than
 * `minWidth` (a fraction) are not laid out, so 100k-node trees draw only what is visible.
 */
export function layout(focus: FNode, minWidth = 0): Rect[] {
  const rects: Rect[] = [];
  for (let a = focus.parent; a; a = a.parent) rects.push({ node: a, x: 0, w: 1, depth: a.depth });
  const todo: Rect[] = [{ node: focus, x: 0, w: 1, depth: focus.depth }];
  while (todo.length) {
    const r = todo.pop()!;
    rects.push(r);
    const scale = r.node.total > 0 ? r.w / r.node.total : 0;
    let x = r.x;
    for (const c of r.node.children) {
      const w = c.total * scale;
      if (w >= minWidth && w > 0) todo.push({ node: c, x, w, depth: r.depth + 1 });
      x += w;
    }
  }
  return rects;
}

/** Nodes whose name contains `query` (case-insensitive), and the samples under the outermost ones. */
export function search(root: FNode, query: string): { nodes: Set<FNode>; samples: number } {
  const nodes = new Set<FNode>();
  let samples = 0;
  const q = query.trim().toLowerCase();
  if (!q) return { nodes, samples };
  walk(root, (n) => {
    if (!n.parent || !n.name.toLowerCase().includes(q)) return;
    nodes.add(n);
    let outer = true;
    for (let x: FNode | null = n.parent; x; x = x.parent) if (nodes.has(x)) outer = false;
    if (outer) samples += n.total;
  });
  return { nodes, samples };
}

/** One tree holding both sides of a diff: `total` from B, `base` from A, matched by call path. */
export function diffTree(a: FNode, b: FNode): FNode {
  const out = node('all', '', null);
  const add = (src: FNode, side: 'a' | 'b') => {
    const todo: [FNode, FNode][] = [[out, src]];
    while (todo.length) {
      const [d, s] = todo.pop()!;
      if (side === 'b') {
        d.total += s.total;
        d.self += s.self;
      } else d.base = (d.base ?? 0) + s.total;
      for (const c of s.children) todo.push([child(d, c.name, c.image), c]);
    }
  };
  add(a, 'a');
  add(b, 'b');
  return sortTree(out);
}

/** What the diff API says of one procedure. */
export interface DiffVerdict {
  significant: boolean;
  /** B relative to A after the mode's normalization: above 1 grew, below 1 shrank. */
  score: number | null;
  a: number;
  b: number;
}

export const NEUTRAL = '#c8c8c8';

/**
 * Fill of a diff flame frame: grey unless the diff test found the procedure's change significant;
 * red for growth, blue for shrinkage, deeper the larger the change (log scale, capped at 4x).
 */
export function diffColour(v: DiffVerdict | undefined): string {
  if (!v || !v.significant) return NEUTRAL;
  const grew = v.score !== null ? v.score > 1 : v.b > v.a;
  const ratio = v.score !== null && v.score > 0 ? v.score : v.a > 0 ? v.b / v.a : 4;
  const strength = Math.min(1, Math.abs(Math.log(ratio)) / Math.log(4));
  const light = Math.round(80 - 35 * strength);
  return grew ? `hsl(0, 80%, ${light}%)` : `hsl(215, 80%, ${light}%)`;
}

/** A stable warm colour per procedure name, so the same frame keeps its colour across views. */
export function nameColour(name: string, image: string): string {
  let h = 0;
  for (let i = 0; i < name.length; i++) h = (h * 31 + name.charCodeAt(i)) | 0;
  const kernel = image === '[kernel]' || name.startsWith('[k]');
  const hue = kernel ? 190 + (Math.abs(h) % 30) : 10 + (Math.abs(h) % 45);
  return `hsl(${hue}, 75%, ${62 + (Math.abs(h >> 8) % 14)}%)`;
}
