// Browser tests of `loupe serve`'s pages in Debian's Chromium (playwright-core, no downloaded
// browser). web/test.sh records the workloads and starts the server; this file drives the pages and
// checks what a person reads there against the workloads' own measurements.
//   node tests/browser.mjs BASE_URL SELFTIME_TRUTH.json SCALING_TRUTH_1.json SCALING_TRUTH_2.json SCREENSHOT_DIR
import { readFileSync, mkdirSync } from 'node:fs';
import { chromium } from 'playwright-core';

const [base, truthPath, s1Path, s2Path, shots] = process.argv.slice(2);
const truth = JSON.parse(readFileSync(truthPath, 'utf8'));
const scal = [s1Path, s2Path].map((p) => JSON.parse(readFileSync(p, 'utf8')));
const sourceFile = new URL('../../testdata/workloads/selftime.c', import.meta.url);
mkdirSync(shots, { recursive: true, mode: 0o700 });

const browser = await chromium.launch({ executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium', headless: true, args: ['--no-sandbox'] });
const page = await browser.newPage({ viewport: { width: 1280, height: 860 } });
page.setDefaultTimeout(30000);
const consoleErrors = [];
page.on('pageerror', (e) => consoleErrors.push(String(e)));

/** Loads `#/hash` and waits until the page has drawn (its main element carries data-ready). */
let loads = 0;
async function open(hash) {
  // A fresh document each time (a new query string): a hash change alone would keep the last page's state.
  await page.goto(`${base}/?load=${++loads}#/${hash}`);
  await page.waitForSelector('main[data-ready="1"]');
}

async function shot(name) {
  await page.screenshot({ path: `${shots}/${name}.png`, fullPage: false });
}

function assert(cond, msg) {
  if (!cond) throw new Error(msg);
}

/** Measured share of each procedure in percent of the process's CPU time (ground truth). */
const measured = (p) => (100 * truth.procedures[p]) / truth.total_cpu;

const tests = [
  ['top page shows the known procedures with their measured shares (within 2 points)', async () => {
    await open('top?by=procedure');
    const rows = await page.$$eval('#top-table tbody tr', (trs) => trs.map((tr) => {
      const cells = [...tr.querySelectorAll('td')].map((td) => td.textContent.trim());
      return { self: parseFloat(cells[0]), proc: cells[4] };
    }));
    for (const p of ['hot_alpha', 'hot_beta', 'hot_gamma', 'lib_spin']) {
      const r = rows.find((x) => x.proc === p);
      assert(r, `${p} missing from the top table`);
      assert(Math.abs(r.self - measured(p)) <= 2, `${p}: page shows ${r.self}%, the workload measured ${measured(p).toFixed(2)}%`);
    }
    await shot('top');
    // The db filter picks another served database: scaling's procedures, none of selftime's.
    await open('top?by=procedure&db=scal');
    const other = await page.$$eval('#top-table a.proc', (as) => as.map((a) => a.textContent));
    assert(other.includes('grow') && !other.includes('hot_alpha'), `db=scal shows ${other.slice(0, 8)}`);
    assert(await page.inputValue('#filters input[name="db"]') === 'scal', 'the db filter does not show the served database');
    await open('top?by=procedure');
    // Sortable: a click on the Procedure header orders the rows by name.
    await page.click('#top-table th[data-key="procedure"]');
    const names = await page.$$eval('#top-table tbody tr td:nth-child(5)', (tds) => tds.map((t) => t.textContent.trim()));
    const sorted = [...names].sort((a, b) => a.localeCompare(b, undefined, { numeric: true }));
    assert(names.length > 4 && names.join('\n') === sorted.join('\n'), `not sorted by name: ${names.slice(0, 8)}`);
  }],
  ['clicking a flame frame zooms it to the full width', async () => {
    await open('flame');
    const before = await page.evaluate(() => window.loupeFlame.rectOf('hot_beta'));
    assert(before && before.w > 5, `hot_beta not drawn: ${JSON.stringify(before)}`);
    const canvas = await page.$eval('.flame-canvas', (c) => { const b = c.getBoundingClientRect(); return { x: b.left, w: b.width }; });
    assert(before.w < canvas.w * 0.9, `hot_beta already fills the view before the click (${before.w} of ${canvas.w})`);
    await page.mouse.click(before.x + before.w / 2, before.y + before.h / 2);
    await page.waitForFunction(() => document.querySelector('.flame-focus')?.dataset.focus === 'hot_beta');
    const after = await page.evaluate(() => window.loupeFlame.rectOf('hot_beta'));
    assert(Math.abs(after.x - canvas.x) < 1 && Math.abs(after.w - canvas.w) < 1, `zoomed hot_beta spans ${after.x}+${after.w}, the view ${canvas.x}+${canvas.w}`);
    const text = await page.textContent('.flame-focus');
    assert(text.includes('Zoomed to hot_beta'), `focus line: ${text}`);
    await shot('flame-zoomed');
    // The zoomed frame links to its source: the source page of hot_beta with samples on its lines.
    await page.click('#flame-source');
    await page.waitForSelector('main[data-page="source"][data-ready="1"]');
    assert(page.url().includes('procedure=hot_beta'), `source link went to ${page.url()}`);
    const lineSamples = await page.$$eval('#lines-table tbody tr td:nth-child(2)', (tds) => tds.reduce((s, t) => s + Number(t.textContent), 0));
    assert(lineSamples > 0, 'no samples on hot_beta\'s source lines');
  }],
  ['search highlights the matching frames and counts their samples', async () => {
    await open('flame');
    await page.fill('#flame-search', 'hot_');
    await page.waitForFunction(() => Number(document.getElementById('flame-status')?.dataset.matches) > 0);
    const lit = await page.evaluate(() => window.loupeFlame.highlighted());
    for (const p of ['hot_alpha', 'hot_beta', 'hot_gamma']) assert(lit.includes(p), `${p} not highlighted: ${lit}`);
    assert(!lit.includes('lib_spin') && !lit.includes('work'), `non-matching frames highlighted: ${lit}`);
    const st = await page.$eval('#flame-status', (s) => ({ samples: Number(s.dataset.samples), total: Number(s.dataset.total) }));
    const want = measured('hot_alpha') + measured('hot_beta') + measured('hot_gamma');
    const got = (100 * st.samples) / st.total;
    assert(Math.abs(got - want) <= 2, `matching frames hold ${got.toFixed(2)}% of samples, the workload measured ${want.toFixed(2)}%`);
    assert(page.url().includes('search=hot_'), `search not kept in the URL: ${page.url()}`);
    await shot('flame');
  }],
  ['inverted and sandwich views put the procedure at the root', async () => {
    await open('flame?inverted=1');
    const inv = await page.evaluate(() => window.loupeFlame.rectOf('hot_alpha'));
    assert(inv && inv.y === (await page.$eval('.flame-canvas', (c) => c.getBoundingClientRect().top)) + 18, `inverted: hot_alpha not right under the root: ${JSON.stringify(inv)}`);
    await open('flame?sandwich=hot_alpha');
    const callers = await page.evaluate(() => window.loupeFlames.callers.rectOf('work'));
    assert(callers, 'sandwich: work is not among hot_alpha\'s callers');
    await shot('sandwich');
  }],
  ['the diff page marks the known regression as the first significant row', async () => {
    const grew = scal[1].procedures.grow / scal[0].procedures.grow;
    assert(grew > 1.4, `the workload did not grow \`grow\` (measured ${grew})`);
    await open('diff?a=scal:1&b=scal:2&image=scaling');
    const first = await page.$eval('#diff-table tbody tr.sig', (tr) => ({ text: tr.textContent, cells: [...tr.querySelectorAll('td')].map((t) => t.textContent.trim()) }));
    assert(first.cells[1] === 'grow', `first significant row is ${first.cells[1]}: ${first.text}`);
    assert(/yes, p=/.test(first.cells[8]), `no p-value on the significant row: ${first.text}`);
    const steady = await page.$$eval('#diff-table tbody tr', (trs) => trs.filter((t) => /steady_/.test(t.textContent)).map((t) => t.className));
    assert(steady.length === 3 && steady.every((c) => !c.includes('sig')), `unchanged procedures marked: ${steady}`);
    await page.waitForSelector('#diff-flame canvas');
    // Only the significant change is coloured: grow red (it grew), the steady procedures grey.
    const fills = await page.evaluate(() => ['grow', 'steady_a', 'steady_b', 'steady_c'].map((n) => window.loupeFlames.diff.rectOf(n)?.fill));
    assert(/^hsl\(0,/.test(fills[0]), `grow is drawn ${fills[0]}, not red`);
    assert(fills.slice(1).every((f) => f === '#c8c8c8'), `unchanged procedures coloured: ${fills}`);
    await shot('diff');
  }],
  ['the source page shows per-line samples for the hot loop', async () => {
    await open('top?by=procedure');
    await page.click('#top-table a.proc:text-is("hot_alpha")');
    await page.waitForSelector('main[data-page="source"][data-ready="1"]');
    const lines = await page.$$eval('#lines-table tbody tr', (trs) => trs.map((tr) => {
      const c = [...tr.querySelectorAll('td')].map((t) => t.textContent.trim());
      return { line: Number(c[0].split(':').pop()), samples: Number(c[1]) };
    }));
    const src = readFileSync(sourceFile, 'utf8').split('\n');
    const body = src.findIndex((l) => l.includes('x = x * 6364136223846793005ULL')) + 1;
    const loop = [body - 1, body];
    const total = lines.reduce((s, l) => s + l.samples, 0);
    const inLoop = lines.filter((l) => loop.includes(l.line)).reduce((s, l) => s + l.samples, 0);
    assert(total > 0 && inLoop / total >= 0.7, `hot loop lines ${loop} hold ${inLoop} of ${total} samples: ${JSON.stringify(lines)}`);
    const instr = await page.$$eval('#instr-table tbody tr', (trs) => trs.length);
    assert(instr > 3, `only ${instr} instructions shown`);
    await shot('source');
  }],
  ['errors from the API are shown with their message', async () => {
    await open('source?binary=selftime&procedure=no_such_procedure');
    const msg = await page.textContent('.error');
    assert(/no_such_procedure/.test(msg) && /HTTP 404/.test(msg), `error box: ${msg}`);
  }],
  ['the data page shows the fields the workload writes', async () => {
    // dataprof falseshare writes fields a and b of one `struct counters` from two threads, nothing else.
    await open('data');
    const rows = await page.$eval('.generic table.data', (t) => {
      const keys = [...t.querySelectorAll('thead th')].map((th) => th.dataset.key);
      return [...t.querySelectorAll('tbody tr')].map((tr) => Object.fromEntries([...tr.querySelectorAll('td')].map((td, i) => [keys[i], td.textContent.trim()])));
    });
    const fields = rows.filter((r) => r.type === 'struct counters').map((r) => r.field).sort();
    assert(fields.join() === 'a,b', `struct counters fields listed: ${fields} (rows ${JSON.stringify(rows)})`);
    const inCounters = rows.filter((r) => r.type === 'struct counters').reduce((s, r) => s + Number(r.percent), 0);
    assert(inCounters > 80, `struct counters holds only ${inCounters}% of the typed samples`);
    await shot('data');
  }],
  ['the stats page finds grow, the procedure that varies most across the two runs', async () => {
    await open('stats?runs=scal:1%20scal:2&image=scaling');
    const rows = await page.$$eval('#stats-table tbody tr', (trs) => trs.map((tr) => ({ range: parseFloat(tr.children[0].textContent), proc: tr.children[1].textContent, sig: tr.className.includes('sig') })));
    assert(rows[0]?.proc === 'grow' && rows[0].sig, `first stats row: ${JSON.stringify(rows[0])}`);
    // grow's count doubles by construction (range 67% of the mean). The steady procedures do the same work in both
    // runs, but their sample counts follow the CPU time that work took, which a loaded VM moves by more than
    // sampling noise (a fresh-clone CI at load ~13 found all three significant): they must vary far less than grow.
    const steady = rows.filter((r) => r.proc.startsWith('steady_'));
    assert(steady.length === 3 && steady.every((r) => r.range < rows[0].range / 2), `steady procedures: ${JSON.stringify(steady)}, grow ${rows[0].range}%`);
    await shot('stats');
  }],
  ['overview, locks, optimize and traces pages draw', async () => {
    await open('overview');
    await page.waitForSelector('#overview-chart canvas');
    const epochs = await page.$$eval('table.data tbody tr', (t) => t.length);
    assert(epochs >= 1, 'no epochs listed');
    await shot('overview');
    // Dragging across the chart picks the epochs that started in the range (here the only one).
    const plot = await page.$eval('#overview-chart .u-over', (o) => { const b = o.getBoundingClientRect(); return { x: b.left, y: b.top, w: b.width, h: b.height }; });
    await page.mouse.move(plot.x + 2, plot.y + plot.h / 2);
    await page.mouse.down();
    await page.mouse.move(plot.x + plot.w - 2, plot.y + plot.h / 2, { steps: 5 });
    await page.mouse.up();
    await page.waitForFunction(() => /epoch=1(&|$)/.test(location.hash));
    // The page draws again on the hash's change event, which comes after the hash itself.
    const shown = await page.waitForFunction(() => document.querySelector('#filters input[name="epoch"]')?.value === '1', null, { timeout: 10000 }).then(() => true, () => false);
    assert(shown, `the epoch filter does not show the picked epoch: ${JSON.stringify(await page.inputValue('#filters input[name="epoch"]'))}`);
    for (const p of ['locks', 'optimize?image=selftime', 'traces']) {
      await open(p);
      // Served now: no page shows an error box (they showed the API's 404 before locks/optimize/export were served).
      const err = await page.$eval('main', (m) => m.querySelector('.error')?.textContent ?? '');
      assert(err === '', `${p}: ${err}`);
      await shot(p.split('?')[0]);
    }
    // Each export link downloads a file of its own type.
    const links = await page.$$eval('ul.exports a', (as) => as.map((a) => a.href));
    assert(links.length === 4, `export links: ${links.length}`);
    for (const href of links) {
      const r = await page.evaluate(async (u) => { const x = await fetch(u); return { status: x.status, disposition: x.headers.get('content-disposition') ?? '', size: (await x.arrayBuffer()).byteLength }; }, href);
      assert(r.status === 200 && r.disposition.startsWith('attachment') && r.size > 0, `${href}: ${JSON.stringify(r)}`);
    }
  }],
];

let passed = 0, failed = 0;
for (const [name, fn] of tests) {
  try {
    await fn();
    passed++;
    console.log(`ok - ${name}`);
  } catch (e) {
    failed++;
    console.log(`FAIL - ${name}: ${e.message}`);
    await page.screenshot({ path: `${process.env.FAIL_SHOTS ?? '/tmp'}/loupe-web-failed-${passed + failed}.png` }).catch(() => {});
  }
}
if (consoleErrors.length) {
  failed++;
  console.log(`FAIL - uncaught errors in the page: ${consoleErrors.join(' | ')}`);
}
await browser.close();
console.log(`browser: ${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
