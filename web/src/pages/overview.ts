// Overview: samples per epoch over time, stacked per image, lost samples marked; pick epochs or a
// time range for every other page.
import uPlot from 'uplot';
import 'uplot/dist/uPlot.min.css';
import { Ctx } from '../context';
import { goTo, withParam } from '../state';
import { base, el, emptyBox, fmt, getJson, table } from '../ui';
import { stackImages } from '../series';

export interface Epoch {
  id: number;
  start: string;
  end: string | null;
  start_unix_ns: number;
  end_unix_ns: number | null;
  samples: number;
  lost: number;
  images: Record<string, number>;
  host?: string;
  kernel?: string;
}

const PALETTE = ['#e4572e', '#f3a712', '#29335c', '#669bbc', '#a8c686', '#8e6c8a', '#d17a22', '#4c956c', '#999999'];

export async function overviewPage(c: Ctx): Promise<void> {
  const epochs = await getJson<Epoch[]>('api/epochs');
  c.main.append(el('h1', {}, 'Overview'));
  if (!epochs.length) {
    c.main.append(emptyBox('The database holds no epochs yet: record with `loupe record` or run `loupe daemon`.'));
    return;
  }
  const total = epochs.reduce((s, e) => s + e.samples, 0);
  const lost = epochs.reduce((s, e) => s + e.lost, 0);
  c.main.append(el('p', { class: 'lead' }, `${epochs.length} epochs, ${total} samples`, lost ? `, ${lost} lost (marked in red)` : ', none lost', '. Drag across the chart to pick a time range, or pick an epoch below.'));
  const chartBox = el('div', { class: 'chart', id: 'overview-chart' });
  c.main.append(chartBox);
  drawChart(chartBox, epochs, c);
  c.main.append(el('h2', {}, 'Epochs'), epochTable(epochs, c));
}

function drawChart(box: HTMLElement, epochs: Epoch[], c: Ctx): void {
  const s = stackImages(epochs, PALETTE.length - 1);
  const xs = epochs.map((e) => e.start_unix_ns / 1e9);
  const series: uPlot.Series[] = [{}];
  // Tallest cumulative first, so each later (shorter) bar leaves its image's band visible.
  const bars = uPlot.paths.bars!({ size: [0.8, 60] });
  for (let i = s.names.length - 1; i >= 0; i--) {
    series.push({ label: base(s.names[i]) || s.names[i], stroke: PALETTE[i % PALETTE.length], fill: PALETTE[i % PALETTE.length], paths: bars, points: { show: false } });
  }
  series.push({ label: 'lost', stroke: '#d00', width: 0, points: { show: true, size: 9, fill: '#d00' } });
  const data: uPlot.AlignedData = [xs, ...[...s.cumulative].reverse(), epochs.map((e) => (e.lost > 0 ? e.lost : null))];
  const width = Math.max(box.clientWidth || 900, 400);
  new uPlot({
    width, height: 280, series, scales: { x: { time: true, range: () => padded(xs) } },
    axes: [{}, { label: 'samples' }],
    hooks: { setSelect: [(u) => pickRange(u, epochs, c)] },
  }, data, box);
}

/** The time axis around the epochs, with room for the first and last bars (and a lone one). */
function padded(xs: number[]): [number, number] {
  const lo = Math.min(...xs), hi = Math.max(...xs);
  const pad = Math.max(30, (hi - lo) * 0.05);
  return [lo - pad, hi + pad];
}

/** A dragged range selects the epochs that started in it (one epoch, or since/until seconds). */
function pickRange(u: uPlot, epochs: Epoch[], c: Ctx): void {
  if (u.select.width < 3) return;
  const t0 = u.posToVal(u.select.left, 'x'), t1 = u.posToVal(u.select.left + u.select.width, 'x');
  const inside = epochs.filter((e) => e.start_unix_ns / 1e9 >= t0 && e.start_unix_ns / 1e9 <= t1);
  if (!inside.length) return;
  let r = withParam(withParam(c.route, 'since', null), 'until', null);
  if (inside.length === 1) r = withParam(r, 'epoch', String(inside[0].id));
  else {
    const now = Date.now() / 1000;
    r = withParam(withParam(withParam(r, 'epoch', null), 'since', String(Math.ceil(now - t0))), 'until', String(Math.floor(now - inside[inside.length - 1].start_unix_ns / 1e9)));
  }
  c.nav(r);
}

function epochTable(epochs: Epoch[], c: Ctx): HTMLElement {
  const chosen = c.route.params.get('epoch');
  return table<Epoch>([
    { key: 'id', label: 'Epoch', num: true, cell: (e) => el('a', { href: openHref(c, e.id), 'data-epoch': String(e.id) }, String(e.id)) },
    { key: 'start', label: 'Start' },
    { key: 'end', label: 'End' },
    { key: 'samples', label: 'Samples', num: true },
    { key: 'lost', label: 'Lost', num: true, cell: (e) => (e.lost ? el('span', { class: 'lost' }, String(e.lost)) : '0') },
    { key: 'images', label: 'Top images', get: (e) => topImages(e) },
    { key: 'host', label: 'Host', get: (e) => e.host ?? '' },
    { key: 'kernel', label: 'Kernel', get: (e) => e.kernel ?? '' },
    { key: 'open', label: '', cell: (e) => el('a', { href: openHref(c, e.id) }, 'top →') },
  ], epochs, { sort: 'id', desc: false, rowClass: (e) => (String(e.id) === chosen ? 'chosen' : '') });
}

function openHref(c: Ctx, id: number): string {
  const r = goTo(withParam(c.route, 'epoch', String(id)), 'top');
  return `#/${r.page}?${r.params}`;
}

function topImages(e: Epoch): string {
  return Object.entries(e.images).sort((a, b) => b[1] - a[1]).slice(0, 3).map(([k, v]) => `${base(k) || k} ${fmt(v)}`).join(', ');
}
