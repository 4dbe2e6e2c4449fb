// Runs the router page's serving test (card 6) in headless Chromium, on the
// cross-origin-isolated site (the threads build), and saves the page's own
// JSON export: the browser's load sweep in bench-decide --serve's schema.
//
//   node tests/e2e/serve-browser.mjs [--rates 0.05,0.1,0.2,0.3] [--chunks whole] [--policy fcfs]
//        [--duration 180] [--warmup 10] [--seed 1] [--timeout 30000] [--queue 16] [--slo 20000]
//        [--out reports/router-serve.browser.json]
//
// Needs the built site (pkg/, from scripts/build-site.sh).
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { serve, launch, newPage, root, loadBundled } from './harness.js';

const { values: args } = parseArgs({
  options: {
    rates: { type: 'string', default: '0.05,0.1,0.2,0.3' },
    chunks: { type: 'string', default: 'whole' },
    policy: { type: 'string', default: 'fcfs' },
    duration: { type: 'string', default: '180' },
    warmup: { type: 'string', default: '10' },
    seed: { type: 'string', default: '1' },
    timeout: { type: 'string', default: '30000' },
    queue: { type: 'string', default: '16' },
    slo: { type: 'string', default: '20000' },
    out: { type: 'string', default: 'reports/router-serve.browser.json' },
  },
});

const server = await serve();
const browser = await launch();
try {
  const page = await newPage(browser, { acceptDownloads: true });
  await page.goto(`${server.url}router/`);
  await loadBundled(page);
  const fields = { rates: args.rates, chunks: args.chunks, duration: args.duration, warmup: args.warmup, seed: args.seed, timeout: args.timeout, 'queue-limit': args.queue, slo: args.slo };
  for (const [id, value] of Object.entries(fields)) await page.getByTestId(`serve-${id}`).fill(value);
  await page.getByTestId('serve-policy').selectOption(args.policy);
  await page.getByTestId('serve-run').click();
  let last = '';
  while (!(await page.getByTestId('serve-export').count())) {
    const stage = await page.getByTestId('serve-stage').innerText().catch(() => '');
    if (stage && stage.split(' · ')[0] !== last) {
      last = stage.split(' · ')[0];
      console.error(`serve-browser: ${stage}`);
    }
    const alert = await page.getByTestId('router-alert').count();
    if (alert) throw new Error(await page.getByTestId('router-alert').innerText());
    await page.waitForTimeout(1000);
  }
  const [download] = await Promise.all([page.waitForEvent('download'), page.getByTestId('serve-export').click()]);
  const report = JSON.parse(await readFile(await download.path(), 'utf8'));
  report.serve.note = `${report.serve.note}; driven by tests/e2e/serve-browser.mjs (headless Chromium, cross-origin isolated: threads build), nothing else computing`;
  await writeFile(join(root, args.out), `${JSON.stringify(report, null, 2)}\n`);
  for (const line of await page.locator('[data-testid=serve-verdicts]').last().locator('li').allInnerTexts()) console.log(`- ${line}`);
  const rows = await page.locator('[data-testid=serve-table]').last().innerText();
  console.log(rows);
  console.log(`browser build: ${report.environment.threads} threads, cross-origin isolated: ${report.environment.cross_origin_isolated}; wrote ${args.out}`);
} finally {
  await browser.close();
  await server.close();
}
