// Page state lives in the URL hash (`#/page?key=value`), so every view can be linked, reloaded and
// driven by a browser test without hidden state.

/** Filter keys shared by every page (the filter bar); they are passed to the API unchanged (`db`: a served database's
 * or fleet source's name; `where`: a fleet source's label conditions). */
export const FILTER_KEYS = ['db', 'epoch', 'since', 'until', 'pid', 'comm', 'image', 'event', 'where'] as const;

export const PAGES = [
  'overview', 'top', 'flame', 'source', 'diff', 'data', 'locks', 'optimize', 'stats', 'traces',
] as const;
export type Page = (typeof PAGES)[number];

export interface Route {
  page: Page;
  params: URLSearchParams;
}

/** Parses `#/top?by=line&epoch=all`; unknown pages fall back to the overview. */
export function parseHash(hash: string): Route {
  const body = hash.replace(/^#\/?/, '');
  const q = body.indexOf('?');
  const name = q < 0 ? body : body.slice(0, q);
  const params = new URLSearchParams(q < 0 ? '' : body.slice(q + 1));
  const page = (PAGES as readonly string[]).includes(name) ? (name as Page) : 'overview';
  return { page, params };
}

/** The hash of a route; empty values are dropped so URLs stay short and canonical. */
export function formatHash(route: Route): string {
  const p = new URLSearchParams();
  for (const [k, v] of route.params) if (v !== '') p.append(k, v);
  const s = p.toString();
  return `#/${route.page}${s ? `?${s}` : ''}`;
}

/** A copy of `route` with `key` set (or removed when `value` is null or empty). */
export function withParam(route: Route, key: string, value: string | null): Route {
  const params = new URLSearchParams(route.params);
  if (value === null || value === '') params.delete(key);
  else params.set(key, value);
  return { page: route.page, params };
}

/** The same filters on another page: what a link from one page to the next keeps. */
export function goTo(route: Route, page: Page, extra: Record<string, string> = {}): Route {
  const params = filterParams(route.params);
  for (const [k, v] of Object.entries(extra)) params.set(k, v);
  return { page, params };
}

/** Only the shared filter keys of `params`, non-empty. */
export function filterParams(params: URLSearchParams): URLSearchParams {
  const out = new URLSearchParams();
  for (const k of FILTER_KEYS) for (const v of params.getAll(k)) if (v !== '') out.append(k, v);
  return out;
}

/** `/api/<command>?...` with the filters plus command-specific parameters (undefined ones left out). */
export function apiUrl(command: string, filters: URLSearchParams, extra: Record<string, string | number | boolean | undefined> = {}): string {
  const p = new URLSearchParams(filters);
  for (const [k, v] of Object.entries(extra)) if (v !== undefined && v !== '') p.set(k, String(v));
  const s = p.toString();
  return `api/${command}${s ? `?${s}` : ''}`;
}
