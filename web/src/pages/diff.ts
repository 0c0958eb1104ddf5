// Diff: two selections (epochs, databases as NAME:EPOCH, comma-joined sums) compared with the
// ratio / weighted / saturation / power-law modes; significant rows marked with their p-values;
// a diff flame graph coloured only where the change is significant.
import { Ctx } from '../context';
import { FlameView } from '../flame/render';
import { DiffVerdict, diffColour, diffTree, FNode, fromApi } from '../flame/tree';
import { apiUrl, formatHash, goTo, withParam } from '../state';
import { base, el, emptyBox, errorBox, fmt, getJson, table } from '../ui';
import { FlameAnswer } from './flame';

export interface DiffRow {
  image?: string;
  procedure?: string;
  line?: string;
  address?: string;
  a: number;
  b: number;
  score: number | null;
  p_value: number | null;
  q_value?: number | null;
  significant: boolean;
}

interface DiffAnswer {
  mode: string;
  level?: number;
  a_total: number;
  b_total: number;
  event?: string;
  rows: DiffRow[];
}

const MODES = ['ratio', 'weighted', 'saturation', 'power-law'];
const BYS = ['procedure', 'image', 'line', 'instruction'];

export async function diffPage(c: Ctx): Promise<void> {
  const p = c.route.params;
  const a = p.get('a') ?? '', b = p.get('b') ?? '';
  const mode = p.get('mode') ?? 'ratio', by = p.get('by') ?? 'procedure';
  c.main.append(el('h1', {}, 'Diff'), form(c, a, b, mode, by));
  if (!a || !b) return void c.main.append(emptyBox('Name two sides: epochs (2), databases and epochs (NAME:EPOCH), or comma-joined sums (1,2).'));
  const imageFilter = c.filters.get('image') ?? undefined;
  const d = await getJson<DiffAnswer>(apiUrl('diff', new URLSearchParams(), { a, b, mode, by, image: imageFilter, limit: 300 }));
  const sig = d.rows.filter((r) => r.significant).length;
  c.main.append(el('p', { class: 'lead' }, `A: ${d.a_total} samples, B: ${d.b_total} samples, mode ${d.mode}; ${sig} significant rows`, d.level ? ` at level ${d.level}` : '', '.'));
  if (!d.rows.length) c.main.append(emptyBox('No buckets in either side.'));
  else c.main.append(rowsTable(c, d, by));
  await diffFlame(c, a, b, mode, by === 'procedure' ? d : null);
}

function form(c: Ctx, a: string, b: string, mode: string, by: string): HTMLElement {
  const f = el('form', { class: 'toolbar', id: 'diff-form' },
    el('label', {}, 'A ', el('input', { name: 'a', value: a, placeholder: '1 or NAME:1' })),
    el('label', {}, 'B ', el('input', { name: 'b', value: b, placeholder: '2 or NAME:2' })),
    el('label', {}, 'mode ', select('mode', MODES, mode)),
    el('label', {}, 'by ', select('by', BYS, by)),
    el('button', { type: 'submit' }, 'Compare'));
  f.addEventListener('submit', (e) => {
    e.preventDefault();
    const v = (n: string) => (f.elements.namedItem(n) as HTMLInputElement).value.trim();
    c.nav(['a', 'b', 'mode', 'by'].reduce((r, k) => withParam(r, k, v(k)), c.route));
  });
  return f;
}

function select(name: string, options: string[], value: string): HTMLSelectElement {
  const s = el('select', { name }, ...options.map((o) => el('option', { value: o, ...(o === value ? { selected: '' } : {}) }, o)));
  return s;
}

function label(r: DiffRow): string {
  return r.procedure ?? r.line ?? r.address ?? base(r.image) ?? '';
}

function rowsTable(c: Ctx, d: DiffAnswer, by: string): HTMLElement {
  const rows = d.rows.map((r, i) => ({ ...r, rank: i + 1, name: by === 'image' ? base(r.image) || r.image || '' : label(r) }));
  return table([
    { key: 'rank', label: '#', num: true },
    { key: 'name', label: by, cell: (r) => (r.procedure && r.image ? el('a', { href: formatHash(goTo(c.route, 'source', { binary: r.image, procedure: r.procedure })) }, r.name) : r.name) },
    { key: 'image', label: 'Image', get: (r) => base(r.image) },
    { key: 'a', label: 'A', num: true },
    { key: 'b', label: 'B', num: true },
    { key: 'score', label: 'Score', num: true, title: 'B relative to A after the mode’s normalization' },
    { key: 'p_value', label: 'p', num: true, cell: (r) => pval(r.p_value) },
    { key: 'q_value', label: 'q', num: true, cell: (r) => pval(r.q_value ?? null) },
    { key: 'significant', label: 'Significant', cell: (r) => (r.significant ? el('span', { class: 'badge sig' }, `yes, p=${pval(r.p_value)}`) : 'no') },
  ], rows, { sort: 'rank', desc: false, id: 'diff-table', rowClass: (r) => (r.significant ? (grew(r) ? 'sig grew' : 'sig shrank') : '') });
}

function grew(r: DiffRow): boolean {
  return r.score !== null ? r.score > 1 : r.b > r.a;
}

function pval(p: number | null): string {
  if (p === null || p === undefined) return '–';
  return p < 1e-4 ? p.toExponential(1) : fmt(p);
}

/** Flame graph of B laid over A, frames red or blue only where the procedure's change is significant. */
async function diffFlame(c: Ctx, a: string, b: string, mode: string, byProc: DiffAnswer | null): Promise<void> {
  const box = el('section', { class: 'diff-flame' }, el('h2', {}, 'Diff flame graph'), el('p', { class: 'lead' }, 'Widths: B. Red: significantly more in B, blue: significantly less; grey: no significant change.'));
  c.main.append(box);
  try {
    const side = (s: string) => getJson<FlameAnswer>(apiUrl('flame', sideSelection(c.filters, s)));
    const [fa, fb, verdicts] = await Promise.all([side(a), side(b), byProc ? Promise.resolve(byProc) : getJson<DiffAnswer>(apiUrl('diff', new URLSearchParams(), { a, b, mode, by: 'procedure', limit: 100000 }))]);
    const map = new Map<string, DiffVerdict>();
    const byName = new Map<string, DiffVerdict>();
    for (const r of verdicts.rows) if (r.procedure) {
      map.set(key(r.procedure, r.image ?? ''), r);
      byName.set(r.procedure, r);
    }
    // Frames without an image (unsymbolized or kernel) fall back to the verdict of their name.
    const verdict = (n: FNode) => map.get(key(n.name, n.image)) ?? (n.image ? undefined : byName.get(n.name));
    const tree = diffTree(fromApi(fa.root), fromApi(fb.root));
    const host = el('div', { class: 'flame', id: 'diff-flame' });
    box.append(host);
    const v = new FlameView(host, {
      colour: (n) => diffColour(verdict(n)),
      describe: (n) => `${n.name}${n.image ? ` (${base(n.image)})` : ''}\nA ${n.base ?? 0} → B ${n.total}${verdict(n)?.significant ? ' · significant' : ''}`,
    });
    v.setTree(tree);
    window.loupeFlames = { diff: v };
  } catch (e) {
    box.append(errorBox(e));
  }
}

/** Flame selection of one diff side: `EPOCH` of the first database or `NAME:EPOCH`; sums have no single tree. */
export function sideSelection(filters: URLSearchParams, side: string): URLSearchParams {
  if (side.includes(',')) throw new Error(`the diff flame graph draws one epoch per side; ${side} is a sum`);
  const p = new URLSearchParams(filters);
  p.delete('since');
  p.delete('until');
  const colon = side.lastIndexOf(':');
  if (colon >= 0) {
    p.set('db', side.slice(0, colon));
    p.set('epoch', side.slice(colon + 1));
  } else if (/^(\d+|all|current)$/.test(side)) p.set('epoch', side);
  else {
    p.set('db', side);
    p.set('epoch', 'current');
  }
  return p;
}

/** Procedure and image base name: the flame tree names images for display, diff rows by path. */
function key(name: string, image: string): string {
  return `${name}\u0000${base(image)}`;
}
