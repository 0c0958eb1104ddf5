// Small DOM helpers shared by the pages: elements, API fetches with the server's error message,
// empty/error states, and a sortable table.

type Child = Node | string | null | undefined | false;

export function el<K extends keyof HTMLElementTagNameMap>(tag: K, attrs: Record<string, string> = {}, ...children: Child[]): HTMLElementTagNameMap[K] {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === 'class') e.className = v;
    else e.setAttribute(k, v);
  }
  for (const c of children) if (c !== null && c !== undefined && c !== false) e.append(c);
  return e;
}

/** An error the API answered: its HTTP status and the message of its `{"error": ...}` body. */
export class ApiError extends Error {
  constructor(readonly status: number, message: string) {
    super(message);
  }
}

/** The server's --token when the page was opened as `/?token=...` (needed off loopback). */
export function token(): string | null {
  return new URLSearchParams(location.search).get('token');
}

/** GETs JSON from the API; non-2xx answers become an ApiError carrying the server's own message. */
export async function getJson<T>(url: string): Promise<T> {
  let res: Response;
  const headers: Record<string, string> = { Accept: 'application/json' };
  const t = token();
  if (t) headers.Authorization = `Bearer ${t}`;
  try {
    res = await fetch(url, { headers });
  } catch (e) {
    throw new ApiError(0, `cannot reach the loupe server (${String(e)})`);
  }
  const text = await res.text();
  let body: unknown;
  try {
    body = text ? JSON.parse(text) : null;
  } catch {
    throw new ApiError(res.status, `${url}: answer is not JSON (HTTP ${res.status}): ${text.slice(0, 200)}`);
  }
  if (!res.ok) {
    const msg = (body as { error?: string } | null)?.error ?? `HTTP ${res.status}`;
    throw new ApiError(res.status, msg);
  }
  return body as T;
}

export function errorBox(err: unknown): HTMLElement {
  const msg = err instanceof Error ? err.message : String(err);
  const status = err instanceof ApiError && err.status ? ` (HTTP ${err.status})` : '';
  return el('div', { class: 'error', role: 'alert' }, el('strong', {}, `Error${status}: `), msg);
}

export function emptyBox(msg: string): HTMLElement {
  return el('div', { class: 'empty' }, msg);
}

export function loading(): HTMLElement {
  return el('div', { class: 'loading' }, 'Loading…');
}

export interface Column<R> {
  key: string;
  label: string;
  /** Numeric columns align right and sort descending first. */
  num?: boolean;
  get?: (r: R) => unknown;
  /** Cell content; defaults to the value as text. */
  cell?: (r: R) => Child;
  /** Draws a bar behind the cell, as a fraction 0..1. */
  bar?: (r: R) => number;
  title?: string;
}

/** A table sorted by clicking its headers; rows may carry a class (for marking). */
export function table<R>(cols: Column<R>[], rows: R[], opts: { sort?: string; desc?: boolean; rowClass?: (r: R) => string; id?: string } = {}): HTMLElement {
  let sortKey = opts.sort ?? '';
  let desc = opts.desc ?? true;
  const wrap = el('div', { class: 'table-wrap' });
  const valueOf = (c: Column<R>, r: R) => (c.get ? c.get(r) : (r as Record<string, unknown>)[c.key]);
  const render = () => {
    const col = cols.find((c) => c.key === sortKey);
    const sorted = col ? [...rows].sort((x, y) => compare(valueOf(col, x), valueOf(col, y)) * (desc ? -1 : 1)) : rows;
    const head = el('tr', {}, ...cols.map((c) => {
      const th = el('th', { class: c.num ? 'num' : '', 'data-key': c.key, title: c.title ?? '' }, c.label, c.key === sortKey ? (desc ? ' ▾' : ' ▴') : '');
      th.addEventListener('click', () => {
        desc = c.key === sortKey ? !desc : !!c.num;
        sortKey = c.key;
        render();
      });
      return th;
    }));
    const body = sorted.map((r) => el('tr', { class: opts.rowClass?.(r) ?? '' }, ...cols.map((c) => cell(c, r, valueOf(c, r)))));
    const t = el('table', { class: 'data' }, el('thead', {}, head), el('tbody', {}, ...body));
    if (opts.id) t.id = opts.id;
    wrap.replaceChildren(t);
  };
  render();
  return wrap;
}

function cell<R>(c: Column<R>, r: R, v: unknown): HTMLElement {
  const td = el('td', { class: c.num ? 'num' : '' }, c.cell ? c.cell(r) : fmt(v));
  if (c.bar) {
    const f = Math.max(0, Math.min(1, c.bar(r)));
    td.style.backgroundImage = `linear-gradient(to left, var(--bar) ${(f * 100).toFixed(1)}%, transparent ${(f * 100).toFixed(1)}%)`;
  }
  return td;
}

function compare(a: unknown, b: unknown): number {
  if (a === b) return 0;
  if (a === null || a === undefined) return -1;
  if (b === null || b === undefined) return 1;
  if (typeof a === 'number' && typeof b === 'number') return a - b;
  return String(a).localeCompare(String(b), undefined, { numeric: true });
}

/** Text of a JSON value in a table cell. */
export function fmt(v: unknown): string {
  if (v === null || v === undefined) return '–';
  if (typeof v === 'number') return Number.isInteger(v) ? String(v) : Math.abs(v) < 1e-3 && v !== 0 ? v.toExponential(2) : v.toFixed(3).replace(/\.?0+$/, '');
  if (typeof v === 'boolean') return v ? 'yes' : 'no';
  if (typeof v === 'object') return JSON.stringify(v);
  return String(v);
}

/** The last path component of an image, which is what people recognize. */
export function base(image: string | undefined): string {
  if (!image) return '';
  const i = image.lastIndexOf('/');
  return i < 0 ? image : image.slice(i + 1);
}

/**
 * Any JSON answer as tables: arrays of objects become sortable tables, scalars a summary list.
 * Used for the pages whose shape is a list of rows (data, locks, optimize, stats).
 */
export function genericJson(v: unknown, title = ''): HTMLElement {
  const box = el('div', { class: 'generic' });
  if (Array.isArray(v)) {
    box.append(rowsTable(v, title));
    return box;
  }
  if (!v || typeof v !== 'object') {
    box.append(el('p', {}, fmt(v)));
    return box;
  }
  const scalars = Object.entries(v as Record<string, unknown>).filter(([, x]) => x === null || typeof x !== 'object');
  if (scalars.length) box.append(el('dl', { class: 'summary' }, ...scalars.flatMap(([k, x]) => [el('dt', {}, k), el('dd', {}, fmt(x))])));
  for (const [k, x] of Object.entries(v as Record<string, unknown>)) {
    if (x && typeof x === 'object') box.append(el('h3', {}, k), genericJson(x, k));
  }
  return box;
}

function rowsTable(rows: unknown[], title: string): HTMLElement {
  if (!rows.length) return emptyBox(`No ${title || 'rows'}.`);
  if (typeof rows[0] !== 'object' || rows[0] === null) return el('p', {}, rows.map(fmt).join(', '));
  const keys = [...new Set(rows.flatMap((r) => Object.keys(r as object)))];
  const cols: Column<Record<string, unknown>>[] = keys.map((k) => ({ key: k, label: k, num: typeof (rows[0] as Record<string, unknown>)[k] === 'number' }));
  return table(cols, rows as Record<string, unknown>[]);
}
