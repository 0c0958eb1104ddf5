// First meaningful paint of `loupe serve`'s pages in Debian's Chromium (benchmark, not a test): for each
// page, a fresh document is loaded and timed until its main element says it has drawn (data-ready, as
// the browser tests wait for), which for the flame page is after the answer came and the canvas was drawn.
//   node bench/paint.mjs BASE_URL [RUNS] HASH...   e.g. node bench/paint.mjs http://127.0.0.1:7777 5 'flame?epoch=all' 'overview'
import { chromium } from 'playwright-core';

const [base, runsArg, ...hashes] = process.argv.slice(2);
const runs = Number(runsArg) || 5;
const browser = await chromium.launch({ executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium', headless: true, args: ['--no-sandbox'] });
const page = await browser.newPage({ viewport: { width: 1280, height: 860 } });
page.setDefaultTimeout(900000);
const med = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
let load = 0;
for (const hash of hashes) {
  const ms = [];
  for (let i = 0; i < runs; i++) {
    const t = performance.now();
    await page.goto(`${base}/?load=${++load}#/${hash}`);
    await page.waitForSelector('main[data-ready="1"]');
    ms.push(performance.now() - t);
  }
  console.log(JSON.stringify({ page: hash, first_ms: +ms[0].toFixed(0), median_ms: +med(ms.slice(1)).toFixed(0), max_ms: +Math.max(...ms.slice(1)).toFixed(0), runs }));
}
await browser.close();
