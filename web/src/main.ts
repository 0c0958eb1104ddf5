// The single-page app: a nav bar, the shared filter bar, and the page named in the URL hash.
import './style.css';
import { Ctx } from './context';
import { diffPage } from './pages/diff';
import { flamePage } from './pages/flame';
import { dataPage, locksPage, optimizePage, statsPage, tracesPage } from './pages/misc';
import { overviewPage } from './pages/overview';
import { sourcePage } from './pages/source';
import { topPage } from './pages/top';
import { filterBar } from './filters';
import { filterParams, formatHash, Page, PAGES, parseHash, Route } from './state';
import { el, errorBox } from './ui';

const RENDER: Record<Page, (c: Ctx) => Promise<void>> = {
  overview: overviewPage, top: topPage, flame: flamePage, source: sourcePage, diff: diffPage,
  data: dataPage, locks: locksPage, optimize: optimizePage, stats: statsPage, traces: tracesPage,
};

const TITLES: Record<Page, string> = {
  overview: 'Overview', top: 'Top', flame: 'Flame', source: 'Source', diff: 'Diff',
  data: 'Data', locks: 'Locks', optimize: 'Optimize', stats: 'Stats', traces: 'Traces',
};

function nav(r: Route): void {
  const h = formatHash(r);
  if (location.hash === h) void show();
  else location.hash = h;
}

let generation = 0;

async function show(): Promise<void> {
  const route = parseHash(location.hash);
  const gen = ++generation;
  const filters = filterParams(route.params);
  const links = PAGES.map((p) => el('a', { href: formatHash({ page: p, params: filters }), class: p === route.page ? 'active' : '', 'data-page': p }, TITLES[p]));
  const main = el('main', { id: 'page', 'data-page': route.page });
  document.title = `${TITLES[route.page]} · Loupe`;
  document.body.replaceChildren(
    el('header', {}, el('span', { class: 'brand' }, 'Loupe'), el('nav', {}, ...links)),
    filterBar(route, nav),
    main,
  );
  try {
    await RENDER[route.page]({ route, filters, main, nav });
  } catch (e) {
    if (gen === generation) main.append(errorBox(e));
  }
  if (gen === generation) main.dataset.ready = '1';
}

window.addEventListener('hashchange', () => void show());
void show();
