// Pages whose answers are lists of rows: data profile, locks, optimization decisions, stats, and the
// trace exports. They show the API's JSON as sortable tables.
import { Ctx } from '../context';
import { apiUrl, formatHash, withParam } from '../state';
import type { Answers, Lock } from '../api.gen';
import { ApiError, base, el, emptyBox, genericJson, getJson, table, token } from '../ui';

const DATA_VIEWS = [
  ['profile', 'Types and fields'],
  ['classify', 'Miss classification'],
  ['workingset', 'Working set'],
] as const;

export async function dataPage(c: Ctx): Promise<void> {
  const view = c.route.params.get('view') ?? 'profile';
  c.main.append(el('h1', {}, 'Data profile'), el('div', { class: 'tabs' }, ...DATA_VIEWS.map(([v, t]) => el('a', { href: formatHash(withParam(c.route, 'view', v)), class: v === view ? 'active' : '' }, t))));
  const d = await getJson<unknown>(apiUrl(`data/${view}`, c.filters));
  c.main.append(isEmpty(d) ? emptyBox('No data samples: record with memory events (`loupe record -e mem-loads`) on a program built with -g.') : genericJson(d));
}

export async function locksPage(c: Ctx): Promise<void> {
  c.main.append(el('h1', {}, 'Locks'), el('p', { class: 'lead' }, 'Hold and wait times per lock; hold fraction near 1 means the lock is saturated.'));
  // Locks are kept per database (`loupe locks --db DIR -- CMD`), not per epoch: only the database filter applies.
  const d = await getJson<Answers['locks']>(apiUrl('locks', dbOnly(c.filters))).catch((e: unknown) => {
    if (e instanceof ApiError && e.status === 404) return null;
    throw e;
  });
  if (!d || !d.locks?.length) return void c.main.append(emptyBox('No lock results kept in this database: `loupe locks --db DIR -- CMD` keeps one.'));
  c.main.append(el('p', { class: 'lead' }, `${d.locks.length} locks over ${d.duration_s.toFixed(3)} s${d.dropped ? `; ${d.dropped} events dropped` : ''}.`));
  c.main.append(table<Lock>([
    { key: 'held_fraction', label: 'Held', num: true, bar: (r) => Math.min(1, r.held_fraction), cell: (r) => `${(100 * r.held_fraction).toFixed(2)}%` },
    { key: 'name', label: 'Lock' },
    { key: 'kind', label: 'Kind' },
    { key: 'pid', label: 'PID', num: true },
    { key: 'acquisitions', label: 'Acquired', num: true },
    { key: 'hold_ns', label: 'Hold ms', num: true, cell: (r) => (r.hold_ns / 1e6).toFixed(3) },
    { key: 'wait_ns', label: 'Wait ms', num: true, cell: (r) => (r.wait_ns / 1e6).toFixed(3) },
    { key: 'max_hold_ns', label: 'Max hold µs', num: true, cell: (r) => (r.max_hold_ns / 1e3).toFixed(1) },
  ], d.locks, { sort: 'held_fraction', desc: true, id: 'locks-table' }));
}

/** Only the `db` filter: what commands that keep results per database (locks, optimize) take. */
function dbOnly(filters: URLSearchParams): URLSearchParams {
  const p = new URLSearchParams();
  const db = filters.get('db');
  if (db) p.set('db', db);
  return p;
}

export async function optimizePage(c: Ctx): Promise<void> {
  const image = c.route.params.get('image') ?? '';
  const f = el('form', { class: 'toolbar' }, el('label', {}, 'Image ', el('input', { name: 'img', value: image, placeholder: 'path or name of a binary' })), el('button', { type: 'submit' }, 'Show decisions'));
  f.addEventListener('submit', (e) => {
    e.preventDefault();
    c.nav(withParam(c.route, 'image', (f.elements.namedItem('img') as HTMLInputElement).value.trim()));
  });
  c.main.append(el('h1', {}, 'Optimization decisions'), f);
  if (!image) return void c.main.append(emptyBox('Name an image to see the decisions taken for it (loupe optimize run / manage).'));
  c.main.append(genericJson(await getJson<unknown>(apiUrl('optimize/status', dbOnly(c.filters), { image }))));
}

export async function statsPage(c: Ctx): Promise<void> {
  const runs = c.route.params.get('runs') ?? '';
  const f = el('form', { class: 'toolbar' }, el('label', {}, 'Runs ', el('input', { name: 'runs', value: runs, placeholder: '1 2 3 or NAME:1 NAME:2', size: '30' })), el('button', { type: 'submit' }, 'Compare runs'));
  f.addEventListener('submit', (e) => {
    e.preventDefault();
    c.nav(withParam(c.route, 'runs', (f.elements.namedItem('runs') as HTMLInputElement).value.trim()));
  });
  c.main.append(el('h1', {}, 'Stats across runs'), el('p', { class: 'lead' }, 'Which procedures vary most across runs: range %, mean, standard deviation, p-value.'), f);
  const list = runs.split(/[\s]+/).filter(Boolean);
  if (list.length < 2) return void c.main.append(emptyBox('Name at least two runs (epochs or NAME:EPOCH), separated by spaces.'));
  const p = new URLSearchParams();
  for (const r of list) p.append('run', r);
  const st = await getJson<Answers['stats']>(apiUrl('stats', p, { by: c.route.params.get('by') ?? undefined, image: c.filters.get('image') ?? undefined }));
  c.main.append(el('p', { class: 'lead' }, `${st.total ?? ''} samples of ${st.event ?? ''} in ${list.length} runs; significant: the counts differ more than sampling noise explains.`));
  if (!st.rows?.length) return void c.main.append(emptyBox('No procedures in these runs.'));
  c.main.append(table<StatsRow>([
    { key: 'range_percent', label: 'Range %', num: true, bar: (r) => r.range_percent / 100 },
    { key: 'procedure', label: 'Procedure' },
    { key: 'image', label: 'Image', get: (r) => base(r.image ?? undefined) },
    { key: 'n', label: 'Runs', num: true },
    { key: 'mean', label: 'Mean', num: true },
    { key: 'std_dev', label: 'Std dev', num: true },
    { key: 'min', label: 'Min', num: true },
    { key: 'max', label: 'Max', num: true },
    { key: 'percent', label: '% of all', num: true },
    { key: 'p_value', label: 'p', num: true },
    { key: 'significant', label: 'Significant', cell: (r) => (r.significant ? el('span', { class: 'badge sig' }, 'yes') : 'no') },
  ], st.rows, { sort: 'significant', id: 'stats-table', rowClass: (r) => (r.significant ? 'sig grew' : '') }));
}

type StatsRow = Answers['stats']['rows'][number];

const EXPORTS = [
  ['perfetto', 'Perfetto trace', 'open it at the Perfetto UI (Open trace file)'],
  ['speedscope', 'speedscope JSON', 'open it in speedscope'],
  ['pprof', 'pprof profile', 'go tool pprof -http : FILE'],
  ['collapsed', 'Collapsed stacks', 'flamegraph.pl or inferno'],
] as const;

export async function tracesPage(c: Ctx): Promise<void> {
  c.main.append(el('h1', {}, 'Traces and exports'), el('p', { class: 'lead' }, 'Download the selection (the filters above apply) for other tools; nothing leaves this machine unless you open the file elsewhere.'));
  c.main.append(el('ul', { class: 'exports' }, ...EXPORTS.map(([fmt, name, how]) => el('li', {},
    el('a', { href: apiUrl('export', c.filters, { format: fmt, token: token() ?? undefined }), download: `loupe.${fmt === 'pprof' ? 'pb.gz' : fmt === 'collapsed' ? 'txt' : fmt === 'perfetto' ? 'pftrace' : 'json'}`, 'data-format': fmt }, name),
    ` — ${how}; from a shell: `, el('code', {}, cliExport(c.filters, fmt))))));
}

/** The `loupe export` command line for the same selection, for machines where the server is remote. */
export function cliExport(filters: URLSearchParams, format: string): string {
  const args = ['loupe', 'export', '--format', format];
  for (const [k, v] of filters) args.push(`--${k}`, /^[\w.:/,-]+$/.test(v) ? v : `'${v.replace(/'/g, "'\\''")}'`);
  return `${args.join(' ')} -o loupe.${format}`;
}

function isEmpty(d: unknown): boolean {
  if (d === null || d === undefined) return true;
  if (Array.isArray(d)) return d.length === 0;
  if (typeof d === 'object') {
    const rows = (d as Record<string, unknown>).rows;
    return Array.isArray(rows) && rows.length === 0;
  }
  return false;
}
