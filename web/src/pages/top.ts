// Top: samples per image, procedure or source line; procedures with self and inclusive shares.
import { Ctx } from '../context';
import { formatHash, goTo, withParam } from '../state';
import { apiUrl } from '../state';
import { base, Column, el, emptyBox, getJson, table } from '../ui';

interface TopRow {
  image: string;
  procedure?: string;
  line?: string;
  samples: number;
  percent: number;
}

interface ChildRow {
  image: string;
  procedure: string;
  self: number;
  self_percent: number;
  inclusive: number;
  inclusive_percent: number;
}

interface TopAnswer<R> {
  event: string;
  rows: R[];
  total_samples?: number;
}

const BYS = ['image', 'procedure', 'line'] as const;

export async function topPage(c: Ctx): Promise<void> {
  const by = (BYS as readonly string[]).includes(c.route.params.get('by') ?? '') ? c.route.params.get('by')! : 'procedure';
  const tabs = el('div', { class: 'tabs' }, ...BYS.map((b) => el('a', { href: formatHash(withParam(c.route, 'by', b)), class: b === by ? 'active' : '', 'data-by': b }, `by ${b}`)));
  c.main.append(el('h1', {}, 'Top'), tabs);
  if (by === 'procedure') return procedures(c);
  const t = await getJson<TopAnswer<TopRow>>(apiUrl('top', c.filters, { by, limit: 500 }));
  c.main.append(el('p', { class: 'lead' }, `${t.total_samples ?? ''} samples of ${t.event}`));
  if (!t.rows.length) return void c.main.append(emptyBox('No samples in this selection.'));
  const cols: Column<TopRow>[] = [
    { key: 'percent', label: '%', num: true, bar: (r) => r.percent / 100 },
    { key: 'samples', label: 'Samples', num: true },
  ];
  if (by === 'line') cols.push({ key: 'line', label: 'Line' }, { key: 'procedure', label: 'Procedure', cell: (r) => procLink(c, r.image, r.procedure ?? '') });
  cols.push({ key: 'image', label: 'Image', get: (r) => base(r.image) || r.image });
  c.main.append(table(cols, t.rows, { sort: 'percent', id: 'top-table' }));
}

/** Procedures: self and inclusive (children) shares from one call-graph query. */
async function procedures(c: Ctx): Promise<void> {
  const t = await getJson<TopAnswer<ChildRow>>(apiUrl('top', c.filters, { by: 'procedure', children: true, limit: 500 }));
  c.main.append(el('p', { class: 'lead' }, `Self: samples in the procedure itself; inclusive: with everything it called. Event ${t.event}.`));
  if (!t.rows.length) return void c.main.append(emptyBox('No samples in this selection.'));
  c.main.append(table<ChildRow>([
    { key: 'self_percent', label: 'Self %', num: true, bar: (r) => r.self_percent / 100 },
    { key: 'self', label: 'Self', num: true },
    { key: 'inclusive_percent', label: 'Inclusive %', num: true, bar: (r) => r.inclusive_percent / 100 },
    { key: 'inclusive', label: 'Inclusive', num: true },
    { key: 'procedure', label: 'Procedure', cell: (r) => procLink(c, r.image, r.procedure) },
    { key: 'image', label: 'Image', get: (r) => base(r.image) || r.image },
    { key: 'links', label: '', cell: (r) => el('a', { href: formatHash(goTo(c.route, 'flame', { sandwich: r.procedure })) }, 'sandwich') },
  ], t.rows, { sort: 'self_percent', id: 'top-table' }));
}

function procLink(c: Ctx, image: string, procedure: string): HTMLElement {
  return el('a', { href: formatHash(goTo(c.route, 'source', { binary: image, procedure })), class: 'proc' }, procedure);
}
