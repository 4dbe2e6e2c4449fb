// Runs the router page's prefix-reuse protocol (note 04, panel 4) in
// headless Chromium and prints its table and target line: the browser side
// of `bench-decide --prefix-protocol`.
//
//   node tests/e2e/prefix-browser.mjs [--tokens 1000] [--not-isolated]
//
// Cross-origin isolated (the threads build) by default; --not-isolated runs
// the single-thread SIMD128 build. Needs the built site (scripts/build-site.sh).
import { parseArgs } from 'node:util';
import { serve, launch, newPage, screenshot } from './harness.js';

const { values: args } = parseArgs({
  options: { tokens: { type: 'string', default: '1000' }, 'not-isolated': { type: 'boolean', default: false } },
});

const server = await serve(undefined, { crossOriginIsolated: !args['not-isolated'] });
const browser = await launch();
try {
  const page = await newPage(browser);
  await page.goto(`${server.url}router/#router`);
  console.error(`prefix-browser: ${await page.getByTestId('worker-build').innerText()}`);
  await page.waitForFunction(() => !document.querySelector('[data-testid=model-load]')?.disabled, null, { timeout: 120_000 });
  await page.getByTestId('model-load').click();
  await page.waitForFunction(() => document.querySelector('[data-testid=model-status]')?.textContent === 'ready', null, { timeout: 300_000 });
  await page.getByTestId('prefix-tokens').selectOption(args.tokens);
  await page.getByTestId('prefix-run').click();
  await page.getByTestId('prefix-report').waitFor({ timeout: 1_800_000 });
  console.log(await page.getByTestId('prefix-report').innerText());
  await screenshot(page, 'prefix-browser');
} finally {
  await browser.close();
  await server.close();
}
