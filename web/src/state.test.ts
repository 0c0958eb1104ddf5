import { describe, expect, it } from 'vitest';
import { apiUrl, filterParams, formatHash, goTo, parseHash, withParam } from './state';

describe('URL state', () => {
  it('parses and formats a route round trip', () => {
    // Checks that a hash with a page and parameters survives parse then format unchanged.
    const h = '#/top?by=line&epoch=all&pid=42';
    expect(formatHash(parseHash(h))).toBe(h);
    expect(parseHash(h).page).toBe('top');
    expect(parseHash(h).params.get('by')).toBe('line');
  });
  it('falls back to the overview for unknown or empty hashes', () => {
    // Checks that a bad page name never renders nothing.
    expect(parseHash('').page).toBe('overview');
    expect(parseHash('#/nope?x=1').page).toBe('overview');
  });
  it('sets and removes parameters without touching the original', () => {
    // Checks withParam is pure and drops empty values.
    const r = parseHash('#/flame?search=alpha');
    const r2 = withParam(r, 'search', '');
    expect(formatHash(r2)).toBe('#/flame');
    expect(formatHash(withParam(r, 'inverted', '1'))).toBe('#/flame?search=alpha&inverted=1');
    expect(formatHash(r)).toBe('#/flame?search=alpha');
  });
  it('keeps only the shared filters when moving between pages', () => {
    // Checks that page-specific keys (by, search) do not leak into another page's URL.
    const r = parseHash('#/top?by=line&epoch=2&comm=selftime&search=x');
    expect(filterParams(r.params).toString()).toBe('epoch=2&comm=selftime');
    expect(filterParams(new URLSearchParams('by=line&db=run2')).toString()).toBe('db=run2');
    expect(formatHash(goTo(r, 'source', { procedure: 'hot_alpha' }))).toBe('#/source?epoch=2&comm=selftime&procedure=hot_alpha');
  });
  it('builds API URLs relative to the page with repeated filters kept', () => {
    // Checks that repeatable flags (pid) stay repeated and undefined extras are left out.
    const f = new URLSearchParams('pid=1&pid=2');
    expect(apiUrl('top', f, { by: 'procedure', limit: undefined })).toBe('api/top?pid=1&pid=2&by=procedure');
    expect(apiUrl('epochs', new URLSearchParams())).toBe('api/epochs');
  });
});
