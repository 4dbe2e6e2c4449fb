// Runs the router page's latency bench in headless Chromium and saves the
// page's own JSON export (bench-decide's schema), so the browser and native
// reports come from the same protocol and can be compared file to file.
//
//   node tests/e2e/bench-browser.mjs [--lengths 15,256,1024] [--warmup 5] [--iterations 25]
//        [--out reports/router-latency.browser.json] [--compare reports/router-latency.cpu.json] [--precision int8|f32]
//
// Needs the built site (pkg/, from scripts/build-site.sh).
import { resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { serve, launch, newPage, screenshot, root } from './harness.js';
import { runPageBench } from './page-bench.js';

const { values: args } = parseArgs({
  options: {
    lengths: { type: 'string', default: '15,256,1024' },
    warmup: { type: 'string', default: '5' },
    iterations: { type: 'string', default: '25' },
    out: { type: 'string', default: 'reports/router-latency.browser.json' },
    compare: { type: 'string' },
    // int8 or f32 (the page's `precision=`); absent, the router's default.
    precision: { type: 'string' },
  },
});

const server = await serve();
const browser = await launch();
try {
  const page = await newPage(browser, { acceptDownloads: true });
  await runPageBench(page, server.url, { ...args, out: resolve(root, args.out), log: (m) => console.error(`bench-browser: ${m}`) });
  if (args.compare) {
    await page.getByTestId('bench-compare-file').setInputFiles(resolve(root, args.compare));
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
