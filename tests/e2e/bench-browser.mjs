// Runs the router page's latency bench in headless Chromium and saves the
// page's own JSON export (bench-decide's schema), so the browser and native
// reports come from the same protocol and can be compared file to file.
//
//   node tests/e2e/bench-browser.mjs [--lengths 15,256,1024] [--warmup 5] [--iterations 25]
//        [--out reports/router-latency.browser.json] [--compare reports/router-latency.cpu.json]
//
// Needs the built site (pkg/, from `trunk build --release`).
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { serve, launch, newPage, screenshot, root } from './harness.js';

const { values: args } = parseArgs({
  options: {
    lengths: { type: 'string', default: '15,256,1024' },
    warmup: { type: 'string', default: '5' },
    iterations: { type: 'string', default: '25' },
    out: { type: 'string', default: 'reports/router-latency.browser.json' },
    compare: { type: 'string' },
  },
});

const server = await serve();
const browser = await launch();
try {
  const page = await newPage(browser, { acceptDownloads: true });
  const fragment = `router/#router&lengths=${args.lengths}&warmup=${args.warmup}&iters=${args.iterations}`;
  await page.goto(server.url + fragment);
  await page.waitForFunction(() => !document.querySelector('[data-testid=model-load]')?.disabled, null, { timeout: 120_000 });
  await page.getByTestId('model-load').click();
  await page.waitForFunction(() => ['ready', 'failed'].includes(document.querySelector('[data-testid=model-status]')?.textContent), null, { timeout: 600_000 });
  if ((await page.getByTestId('model-status').textContent()) !== 'ready') throw new Error(await page.getByTestId('router-alert').innerText());
  await page.getByTestId('bench-run').click();
  let last = '';
  const timer = setInterval(async () => {
    const stage = await page.getByTestId('bench-stage').textContent().catch(() => null);
    if (stage && stage !== last) console.error(`bench-browser: ${stage}`);
    last = stage ?? last;
  }, 10_000);
  await page.getByTestId('bench-table').waitFor({ timeout: 4 * 3600_000 });
  clearInterval(timer);
  const [download] = await Promise.all([page.waitForEvent('download'), page.getByTestId('bench-export').click()]);
  const out = join(root, args.out);
  await download.saveAs(out);
  if (args.compare) {
    await page.getByTestId('bench-compare-file').setInputFiles(join(root, args.compare));
    await page.getByTestId('bench-compare').waitFor();
    console.log(`\n${await page.getByTestId('bench-compare').innerText()}\n`);
  }
  console.log(await page.getByTestId('bench-table').innerText());
  console.log(await page.getByTestId('bench-conditions').innerText());
  await screenshot(page, 'bench-browser');
  console.log(`wrote ${args.out}`);
} finally {
  await browser.close();
  await server.close();
}
