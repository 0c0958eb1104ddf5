// The filter bar shared by every page: database or fleet source, epoch or time range, pid, comm,
// image, event, fleet label conditions. Its values live in the URL, so moving between pages keeps them.
import { Route, withParam } from './state';
import { el, getJson } from './ui';

const FIELDS: [key: string, label: string, placeholder: string, hint: string][] = [
  ['db', 'DB', 'first', 'served database or fleet source name (default: the first database)'],
  ['epoch', 'Epoch', 'current', 'current, all or a number'],
  ['since', 'Since', 'seconds', 'epochs that overlap the last N seconds'],
  ['until', 'Until', 'seconds', 'with since: epochs that started at least N seconds ago'],
  ['pid', 'PID', 'any', 'process ids, comma-separated'],
  ['comm', 'Comm', 'any', 'process names, comma-separated'],
  ['image', 'Image', 'any', 'images whose path contains this text'],
  ['event', 'Event', 'default', 'sampling event, e.g. cpu-clock'],
  ['where', 'Where', 'any', 'fleet sources only: label conditions, comma-separated, e.g. host=web-1 or host~^web-'],
];

const REPEATED = new Set(['pid', 'comm', 'where']);

/** The served databases and fleet sources (`/api/databases`), offered as the DB field's choices. */
interface Databases {
  databases: { name: string; kind: 'database' | 'source' }[];
}

function databaseChoices(): HTMLDataListElement {
  const list = el('datalist', { id: 'served-databases' });
  getJson<Databases>('api/databases')
    .then((d) => list.append(...d.databases.map((x) => el('option', { value: x.name, label: x.kind === 'source' ? `${x.name} (fleet)` : x.name }))))
    .catch(() => {}); // the field still takes a typed name
  return list;
}

export function filterBar(route: Route, nav: (r: Route) => void): HTMLElement {
  const form = el('form', { class: 'filters', id: 'filters' });
  const inputs = new Map<string, HTMLInputElement>();
  for (const [key, label, placeholder, hint] of FIELDS) {
    const value = REPEATED.has(key) ? route.params.getAll(key).join(',') : route.params.get(key) ?? '';
    const input = el('input', { name: key, value, placeholder, title: hint, size: key === 'image' || key === 'comm' || key === 'where' ? '12' : '7' });
    if (key === 'db') input.setAttribute('list', 'served-databases');
    inputs.set(key, input);
    form.append(el('label', {}, label, input));
  }
  form.append(databaseChoices());
  form.append(el('button', { type: 'submit' }, 'Apply'));
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    let r = route;
    for (const [key, input] of inputs) {
      r = withParam(r, key, null);
      const v = input.value.trim();
      const values = REPEATED.has(key) ? v.split(',').map((s) => s.trim()).filter(Boolean) : v ? [v] : [];
      const params = new URLSearchParams(r.params);
      for (const x of values) params.append(key, x);
      r = { page: r.page, params };
    }
    nav(r);
  });
  return form;
}
