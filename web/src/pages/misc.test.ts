import { expect, it } from 'vitest';
import { cliExport } from './misc';

it('spells the export command line of the page filters, quoting what the shell would split', () => {
  // Checks repeated filters stay repeated and a value with a space is single-quoted.
  const f = new URLSearchParams('pid=1&pid=2&comm=my prog&epoch=all');
  expect(cliExport(f, 'perfetto')).toBe("loupe export --format perfetto --pid 1 --pid 2 --comm 'my prog' --epoch all -o loupe.perfetto");
  expect(cliExport(new URLSearchParams("comm=it's"), 'pprof')).toBe("loupe export --format pprof --comm 'it'\\''s' -o loupe.pprof");
});
