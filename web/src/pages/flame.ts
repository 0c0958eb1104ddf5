// Flame graph (icicle): click zooms, search highlights, inverted view, sandwich of one procedure,
// and a link from the zoomed frame to its source.
import { Ctx } from '../context';
import { FlameView } from '../flame/render';
import { ApiNode, FNode, fromApi, invert, sandwich } from '../flame/tree';
import { apiUrl, formatHash, goTo, withParam } from '../state';
import { el, emptyBox, getJson } from '../ui';

export interface FlameAnswer {
  event: string;
  total: number;
  epochs: number[];
  unwind_stopped?: number;
  root: ApiNode;
}

declare global {
  interface Window {
    /** The flame views of the page, for the browser tests to ask where a frame is drawn. */
    loupeFlame?: FlameView;
    loupeFlames?: Record<string, FlameView>;
  }
}

/**
 * The share of all samples under which the plain view asks the server to fold a frame's children into
 * one "(other)" child (`min-share`): narrower than a pixel of a 2000-pixel canvas, and a whole machine's
 * 150,000 nodes become a few thousand. Inverted and sandwich views are computed here from the whole tree.
 */
export const MIN_SHARE = 0.0005;

export async function flamePage(c: Ctx): Promise<void> {
  const p = c.route.params;
  const inverted = p.get('inverted') === '1';
  const sw = p.get('sandwich') ?? '';
  const pruned = !inverted && !sw && p.get('whole') !== '1';
  const f = await getJson<FlameAnswer>(apiUrl('flame', c.filters, { 'min-share': pruned ? MIN_SHARE : undefined }));
  c.main.append(el('h1', {}, 'Flame graph'));
  if (!f.total) return void c.main.append(emptyBox('No call stacks in this selection (record without --no-stacks).'));
  const tree = fromApi(f.root);
  const whole = el('a', { id: 'flame-whole', href: formatHash(withParam(c.route, 'whole', '1')) }, 'show them all');
  const folded = pruned ? [`; frames under ${MIN_SHARE * 100}% of the samples are folded into (other) (`, whole, ')'] : [];
  c.main.append(controls(c, inverted, sw), el('p', { class: 'lead' }, `${f.total} samples of ${f.event} in epochs ${f.epochs.join(', ')}`, f.unwind_stopped ? `; ${f.unwind_stopped} stacks stopped before the root` : '', ...folded));
  const status = el('div', { class: 'flame-status', id: 'flame-status' });
  c.main.append(status);
  window.loupeFlames = {};
  if (sw) {
    const s = sandwich(tree, sw);
    if (!s.callees.total) return void c.main.append(emptyBox(`No frame named ${sw} in this selection.`));
    c.main.append(el('h2', {}, `Callers of ${sw}`));
    window.loupeFlames.callers = view(c, s.callers);
    c.main.append(el('h2', {}, `${sw} and its callees`));
    window.loupeFlame = window.loupeFlames.callees = view(c, s.callees);
  } else window.loupeFlame = window.loupeFlames.main = view(c, inverted ? invert(tree) : tree);
  const q = p.get('search') ?? '';
  if (q) searchAll(q, status);
}

function controls(c: Ctx, inverted: boolean, sw: string): HTMLElement {
  const search = el('input', { id: 'flame-search', type: 'search', placeholder: 'search frames', value: c.route.params.get('search') ?? '' });
  search.addEventListener('input', () => {
    searchAll(search.value, document.getElementById('flame-status')!);
    history.replaceState(null, '', formatHash(withParam(c.route, 'search', search.value)));
  });
  const inv = el('label', {}, el('input', { type: 'checkbox', id: 'flame-inverted', ...(inverted ? { checked: '' } : {}) }), ' inverted (callers below leaves)');
  inv.querySelector('input')!.addEventListener('change', (e) => c.nav(withParam(c.route, 'inverted', (e.target as HTMLInputElement).checked ? '1' : null)));
  const swInput = el('input', { id: 'flame-sandwich', placeholder: 'sandwich: procedure', value: sw });
  swInput.addEventListener('change', () => c.nav(withParam(c.route, 'sandwich', swInput.value.trim())));
  const reset = el('button', { id: 'flame-reset', type: 'button' }, 'Reset zoom');
  reset.addEventListener('click', () => Object.values(window.loupeFlames ?? {}).forEach((v) => v.focused && setRoot(v)));
  return el('div', { class: 'toolbar' }, search, inv, swInput, reset);
}

function setRoot(v: FlameView): void {
  let n = v.focused!;
  while (n.parent) n = n.parent;
  v.setFocus(n);
}

function searchAll(q: string, status: HTMLElement): void {
  const views = Object.values(window.loupeFlames ?? {});
  let count = 0, samples = 0, total = 0;
  for (const v of views) {
    const m = v.setSearch(q);
    count += m.count;
    samples = Math.max(samples, m.samples);
    let n = v.focused;
    while (n?.parent) n = n.parent;
    total = Math.max(total, n?.total ?? 0);
  }
  status.textContent = q.trim() ? `${count} frames match “${q}”: ${samples} samples, ${total ? ((100 * samples) / total).toFixed(1) : 0}%` : '';
  status.dataset.matches = String(count);
  status.dataset.samples = String(samples);
  status.dataset.total = String(total);
}

function view(c: Ctx, root: FNode): FlameView {
  const box = el('div', { class: 'flame' });
  const info = el('div', { class: 'flame-focus' });
  c.main.append(info, box);
  const v = new FlameView(box, {
    onFocus: (n) => {
      const pct = root.total ? ((100 * n.total) / root.total).toFixed(1) : '0';
      info.replaceChildren(
        n.parent ? `Zoomed to ${n.name}: ${n.total} samples, ${pct}% ` : '',
        n.parent && n.image ? el('a', { href: formatHash(goTo(c.route, 'source', { binary: n.image, procedure: n.name })), id: 'flame-source' }, 'source →') : '',
        n.parent ? ' ' : '',
        n.parent ? el('a', { href: formatHash(withParam(c.route, 'sandwich', n.name)) }, 'sandwich →') : '',
      );
      info.dataset.focus = n.name;
    },
  });
  v.setTree(root);
  return v;
}
