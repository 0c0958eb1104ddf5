// Draw time of the canvas icicle on a 100k-node tree in Debian's Chromium (benchmark, not a test):
//   cd web && npx vite build --config bench/vite.config.mjs && node bench/flame.mjs
import { chromium } from 'playwright-core';
import { fileURLToPath } from 'node:url';

const page = fileURLToPath(new URL('../bench-dist/bench/flame.html', import.meta.url));
const browser = await chromium.launch({ executablePath: '/usr/bin/chromium', headless: true, args: ['--no-sandbox', '--allow-file-access-from-files'] });
const p = await browser.newPage({ viewport: { width: 1300, height: 900 } });
await p.goto(`file://${page}`);
await p.waitForFunction(() => typeof window.bench === 'function');
const runs = [];
for (let i = 0; i < 3; i++) runs.push(await p.evaluate(() => window.bench()));
await browser.close();
const med = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
console.log(JSON.stringify({
  nodes: runs[0].nodes,
  build_ms: +med(runs.map((r) => r.buildMs)).toFixed(1),
  first_draw_ms: +med(runs.map((r) => r.firstDrawMs)).toFixed(1),
  zoom_draw_ms_median: +med(runs.flatMap((r) => r.zoomDrawMs)).toFixed(1),
  zoom_draw_ms_max: +Math.max(...runs.flatMap((r) => r.zoomDrawMs)).toFixed(1),
}));
