// Source and disassembly of one procedure: samples per line, and per instruction side by side
// with calc's executions, CPI, stall cycles and culprits (DCPI's dcpicalc as a page).
import { Ctx } from '../context';
import { apiUrl, formatHash, goTo } from '../state';
import { base, el, emptyBox, errorBox, fmt, getJson, table } from '../ui';

interface AnnInstr {
  address: string;
  file?: string;
  line?: number;
  instruction: string;
  samples: Record<string, number>;
  percent: Record<string, number>;
}

interface Annotate {
  image: string;
  procedure: string;
  events: string[];
  instructions: AnnInstr[];
  lines: { file: string; line: number; samples: number }[];
  total_samples: Record<string, number>;
}

interface CalcInstr {
  address: string;
  instruction: string;
  samples: number;
  executions: number | null;
  cpi: number | null;
  stall: number;
  min_cycles: number;
  confidence: string | null;
  culprits: unknown[];
}

interface Calc {
  instructions: CalcInstr[];
  summary: Record<string, unknown>;
  clock?: string;
  model?: string;
}

export async function sourcePage(c: Ctx): Promise<void> {
  const image = c.route.params.get('binary') ?? '', procedure = c.route.params.get('procedure') ?? '';
  c.main.append(el('h1', {}, 'Source and disassembly'));
  if (!image || !procedure) return pickProcedure(c);
  c.main.append(el('p', { class: 'lead' }, el('code', {}, procedure), ` in ${image}`));
  const [ann, calc] = await Promise.allSettled([
    getJson<Annotate>(apiUrl('annotate', c.filters, { image, procedure, source: true })),
    getJson<Calc>(apiUrl('calc', c.filters, { image, procedure })),
  ]);
  if (ann.status === 'rejected') throw ann.reason;
  const a = ann.value;
  const event = a.events[0] ?? '';
  const total = a.total_samples[event] ?? 0;
  const lines = el('section', { class: 'lines' }, el('h2', {}, 'Samples per source line'), linesTable(a, total));
  const instr = el('section', { class: 'instructions' }, el('h2', {}, 'Instructions'));
  if (calc.status === 'rejected') instr.append(errorBox(calc.reason), el('p', {}, 'Showing samples only; calc needs llvm-mca and the image.'));
  else instr.append(calcSummary(calc.value));
  instr.append(instrTable(a, event, calc.status === 'fulfilled' ? calc.value : null));
  c.main.append(el('div', { class: 'side-by-side' }, lines, instr));
}

function linesTable(a: Annotate, total: number): HTMLElement {
  if (!a.lines.length) return emptyBox('No line information (build with -g).');
  const rows = a.lines.map((l) => ({ ...l, where: `${base(l.file)}:${l.line}`, percent: total ? (100 * l.samples) / total : 0 }));
  return table([
    { key: 'where', label: 'Line', get: (r) => r.line, cell: (r) => el('span', { title: r.file }, r.where) },
    { key: 'samples', label: 'Samples', num: true, bar: (r) => (total ? r.samples / total : 0) },
    { key: 'percent', label: '% of procedure', num: true, cell: (r) => r.percent.toFixed(1) },
  ], rows, { sort: 'where', desc: false, id: 'lines-table' });
}

function calcSummary(c: Calc): HTMLElement {
  const s = Object.entries(c.summary ?? {}).filter(([, v]) => v === null || typeof v !== 'object');
  return el('dl', { class: 'summary' }, ...s.flatMap(([k, v]) => [el('dt', {}, k), el('dd', {}, fmt(v))]), c.model ? el('dt', {}, 'model') : null, c.model ? el('dd', {}, c.model) : null);
}

function instrTable(a: Annotate, event: string, calc: Calc | null): HTMLElement {
  const byAddr = new Map((calc?.instructions ?? []).map((i) => [i.address, i]));
  const rows = a.instructions.map((i) => {
    const k = byAddr.get(i.address);
    return {
      address: i.address, line: i.line ?? null, instruction: i.instruction, samples: i.samples[event] ?? 0,
      executions: k?.executions ?? null, cpi: k?.cpi ?? null, stall: k ? k.stall : null,
      culprits: k?.culprits.length ? k.culprits.map(culprit).filter(Boolean).join('; ') : '',
    };
  });
  const max = rows.reduce((m, r) => Math.max(m, r.samples), 0);
  return table([
    { key: 'address', label: 'Address', get: (r) => parseInt(r.address, 16) , cell: (r) => r.address },
    { key: 'line', label: 'Line', num: true },
    { key: 'instruction', label: 'Instruction', cell: (r) => el('code', {}, r.instruction) },
    { key: 'samples', label: 'Samples', num: true, bar: (r) => (max ? r.samples / max : 0) },
    { key: 'executions', label: 'Executions', num: true },
    { key: 'cpi', label: 'CPI', num: true },
    { key: 'stall', label: 'Stall', num: true, title: 'stall cycles per execution above the model’s minimum' },
    { key: 'culprits', label: 'Culprits' },
  ], rows, { sort: 'address', desc: false, id: 'instr-table' });
}

function culprit(c: unknown): string {
  if (c && typeof c === 'object') {
    const o = c as Record<string, unknown>;
    if (o.ruled_out) return '';
    const bound = typeof o.bound_cycles === 'number' ? ` ≤${fmt(o.bound_cycles)} cycles` : '';
    return `${String(o.cause ?? '?')}${o.at ? ` at ${String(o.at)}` : ''}${bound}`;
  }
  return String(c);
}

/** Without a procedure in the URL: the hottest procedures to choose from. */
async function pickProcedure(c: Ctx): Promise<void> {
  const t = await getJson<{ rows: { image: string; procedure: string; percent: number }[] }>(apiUrl('top', c.filters, { by: 'procedure', limit: 30 }));
  if (!t.rows.length) return void c.main.append(emptyBox('No samples in this selection.'));
  c.main.append(el('p', {}, 'Pick a procedure:'), el('ul', { class: 'picks' }, ...t.rows.map((r) => el('li', {}, el('a', { href: formatHash(goTo(c.route, 'source', { binary: r.image, procedure: r.procedure })) }, r.procedure), ` ${r.percent}% · ${base(r.image)}`))));
}
