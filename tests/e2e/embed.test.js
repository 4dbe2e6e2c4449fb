// The two widgets the field guide embeds, end to end: the latency widget
// (router/?embed=latency) on its own — first load, a run on the real bundled
// model, a share link rendered read-only — and both widgets in iframes on a
// host page of another origin that is not cross-origin isolated, sizing
// themselves with the documented postMessage, driven by the keyboard, in
// light and dark.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { writeFile, mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { newPage, screenshot, outDir, server, browser, useSite, recordSizes } from './harness.js';

const FIRST_LOAD_LIMIT = 250 * 1024;
const RUN_TIMEOUT = 600_000;

useSite();

/** Waits until the widget's status line says the run finished or failed; fails with its text if it failed. */
async function waitForRun(frame) {
  await frame.waitForFunction(() => {
    const s = document.querySelector('[data-testid=widget-status]')?.textContent ?? '';
    return s.startsWith('Done') || document.querySelector('[data-testid=widget-status].problem');
  }, null, { timeout: RUN_TIMEOUT });
  const status = await frame.getByTestId('widget-status').textContent();
  assert.match(status, /^Done: \d+ calls in /, status);
}

/** The right-hand cells, by prompt length: { 15: { p50, p95, cold } … }. */
async function measuredCells(frame) {
  return frame.locator('[data-testid=latency-row]').evaluateAll((rows) => Object.fromEntries(rows.map((r) => [
    r.dataset.tokens,
    Object.fromEntries(['p50', 'p95', 'cold'].map((k) => [k, r.querySelector(`[data-testid=here-${k}]`).textContent])),
  ])));
}

test('latency widget: the published table and an empty column, first load within 250 KB gzipped, nothing heavy fetched', async () => {
  const page = await newPage(browser, { viewport: { width: 760, height: 560 } });
  const sizes = recordSizes(page);
  const from = server.served.length;
  await page.goto(`${server.url}router/?embed=latency`);
  await page.getByTestId('latency-table').waitFor();
  await page.waitForLoadState('networkidle');
  const total = sizes.reduce((a, s) => a + s.bytes, 0);
  const files = server.served.slice(from);
  assert.ok(files.every((f) => /\.(html|js|wasm|css|svg)$|\/$/.test(f)), files.join(' '));
  assert.ok(!files.some((f) => /router-page|router_worker|threads|gguf|manifest|tokenizer/.test(f)), `no page bundle, worker, model or tokenizer before the click: ${files.join(' ')}`);
  assert.ok(total <= FIRST_LOAD_LIMIT, `first load ${total} bytes`);
  await mkdir(outDir, { recursive: true });
  await writeFile(join(outDir, 'latency-widget-first-load.json'), JSON.stringify({ total_bytes_gzip: total, files: sizes }, null, 2));
  console.log(`latency widget first load: ${(total / 1024).toFixed(1)} KiB gzipped over ${sizes.length} requests`);

  // The guide's rows as published, with its conditions; the browser's column empty.
  const rows = await page.locator('[data-testid=latency-row]').allInnerTexts();
  assert.equal(rows.length, 3);
  assert.match(rows[0], /^15\s+60\s+71\.0 ms\s+77\.0 ms\s+67\.0 ms – 80\.0 ms\s+180 ms/);
  assert.match(rows[2], /^1,024\s+5,229\s+944 ms\s+998 ms\s+917 ms – 1029 ms\s+963 ms/);
  assert.deepEqual(Object.values(await measuredCells(page)).flatMap(Object.values), Array(9).fill(''));
  assert.match(await page.getByTestId('published-conditions').textContent(), /Qwen\/Qwen3-0\.6B.*not a model or a machine/);
  assert.equal(await page.getByTestId('measured-line').textContent(), 'This browser: not measured yet.');
  assert.match(await page.getByTestId('widget-protocol').textContent(), /\(SmolLM2-135M-Instruct Q4_1, \d+\.\d\d MiB\).*15,256,1024 tokens.*2 warm-ups, then 5 timed calls each, with 8-bit activations and integer dot products/);
  assert.deepEqual(page.blocked, []);
  assert.deepEqual(page.problems, []);
  await screenshot(page, 'latency-widget-first-load');

  // A link asking for a protocol the widget cannot run: named, the button off, the table still there.
  const bad = await newPage(browser);
  await bad.goto(`${server.url}router/?embed=latency#router&iters=many&lengths=15,0&precision=int4&colour=red`);
  assert.match(await bad.getByTestId('widget-protocol').textContent(), /iters: `many` is not a whole number; lengths: 0 tokens is outside 1–8192; precision: `int4` is not a precision: use int8 or f32/);
  assert.match(await bad.getByTestId('widget-warnings').textContent(), /unknown parameter `colour`/);
  assert.equal(await bad.getByTestId('widget-run').isDisabled(), true);
  assert.equal(await bad.locator('[data-testid=latency-row]').count(), 3);
  assert.deepEqual(bad.problems, []);
});

test('latency widget: Run fills the column with cold and warm figures, then links to the full bench and shares a read-only result', async () => {
  const page = await newPage(browser, { viewport: { width: 900, height: 700 } });
  await page.goto(`${server.url}router/?embed=latency`);
  assert.match(await page.getByTestId('widget-protocol').textContent(), /the threads build/, 'this server is cross-origin isolated');
  await page.getByTestId('widget-run').click();
  await page.getByTestId('widget-progress').waitFor();
  await waitForRun(page);
  const cells = await measuredCells(page);
  for (const n of ['15', '256', '1024']) {
    for (const k of ['p50', 'p95', 'cold']) assert.match(cells[n][k], /^\d+(\.\d)? ms$/, `${n} ${k}: ${cells[n][k]}`);
  }
  const line = await page.getByTestId('measured-line').textContent();
  assert.match(line, /^This browser: Measured browser \(wasm32-unknown-unknown.*2 warm-ups, 5 timed calls per length\. Model: llama/);
  // The widget's default precision is int8, and the line names its kernel.
  assert.match(line, /integer dot.*relaxed-SIMD/, line);
  assert.match(line, /downloaded now and cached|from this browser's cache/);
  // The threads build really ran with helper threads (their script is a site file, allowed by the CSP).
  const [, cpus] = line.match(/(\d+) logical CPUs reported/);
  const [, threads] = line.match(/(\d+) thread\(s\), cross-origin isolated yes/);
  if (Number(cpus) > 1) assert.ok(Number(threads) > 1, line);
  // After the protocol, the example task's decision: by the trained head, with its confidence.
  const decision = page.getByTestId('widget-decision');
  assert.match(await decision.getAttribute('data-scoring'), /^head-[0-9a-f]{8}$/);
  assert.match(await decision.textContent(), /^Decided for the example task \(\d+ tokens, balanced mode\): route to [\w.-]+, scored by the trained head head-[0-9a-f]{8}\. P\(first place stays ahead of second\) \d+ %; (sure on both counts|unsure: .+)\.$/);
  // Its roofline, in the details, measured only when asked.
  await page.locator('[data-testid=widget-roofline] summary').click();
  assert.equal(await page.getByTestId('roofline').count(), 0, 'no probe runs unasked');
  await page.getByTestId('widget-roofline-measure').click();
  await page.getByTestId('roofline-verdict').waitFor({ timeout: 120_000 });
  assert.deepEqual(await page.locator('[data-testid=roofline-part]').evaluateAll((rows) => rows.map((r) => r.dataset.part)), ['projections', 'attention', 'rest']);
  assert.match(await page.getByTestId('roofline-device').textContent(), /int8 GEMM [\d.]+ GOP\/s .* the threads build/);
  assert.match(await page.getByTestId('roofline-verdict').textContent(), /^At this device's measured ceilings this decide would take [\d.]+ ms instead of [\d.]+ ms/);
  assert.match(await page.getByTestId('widget-status').textContent(), /^Done: /, 'the status returns to the run once the probes end');
  // The full bench with the same protocol, as the page's own fragment.
  assert.equal(await page.getByTestId('widget-full').getAttribute('href'), './#router&iters=5&warmup=2&precision=int8');
  await page.getByTestId('widget-share').click();
  const link = await page.getByTestId('widget-share-link').inputValue();
  assert.match(link, /\/router\/\?embed=latency#router&result=r1\./);
  await screenshot(page, 'latency-widget-run');

  // The shared link: the same figures, labelled, and nothing started.
  const shared = await newPage(browser);
  const from = server.served.length;
  await shared.goto(link);
  await shared.getByTestId('latency-table').waitFor();
  assert.equal(await shared.getByTestId('measured-heading').textContent(), 'shared measurement');
  assert.deepEqual(await measuredCells(shared), cells);
  assert.match(await shared.getByTestId('measured-line').textContent(), /^Shared measurement \(read-only; opening it downloaded no model and ran nothing\)\. Measured browser .* on \d{4}-\d\d-\d\d \d\d:\d\d UTC/);
  assert.equal(await shared.getByTestId('widget-share').count(), 0);
  assert.equal(await shared.getByTestId('widget-decision').count(), 0, 'a shared report carries no decision');
  assert.match(await shared.getByTestId('widget-full').getAttribute('href'), /^\.\/#router&result=r1\./);
  await shared.waitForLoadState('networkidle');
  const fetched = server.served.slice(from);
  assert.ok(!fetched.some((p) => /router_worker|gguf|manifest/.test(p)), fetched.join(' '));
  // A damaged link is named, and the table still shows.
  const damaged = await newPage(browser);
  await damaged.goto(`${server.url}router/?embed=latency#router&result=r1.AAAA`);
  assert.match(await damaged.getByTestId('widget-link-problem').textContent(), /cannot be shown: the shared result is damaged/);
  assert.equal(await damaged.locator('[data-testid=latency-row]').count(), 3);
  assert.deepEqual([...page.problems, ...shared.problems, ...damaged.problems], []);
});

/** A page on another origin that embeds both widgets with the README's listener, not cross-origin isolated. */
function hostPage(workbench) {
  const origin = new URL(workbench).origin;
  return `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Field guide (host)</title>
<style>body { font-family: sans-serif; margin: 1rem; } iframe { width: 100%; border: 0; display: block; }</style></head><body>
<h1>A field-guide page</h1>
<iframe id="kv" title="KV-cache capacity calculator" src="${workbench}?embed=kv&preset=qwen3-0.6b&seqs=4096x8"></iframe>
<p>Between the widgets.</p>
<iframe id="latency" title="Router decide latency" src="${workbench}router/?embed=latency#router&lengths=15,64&iters=2&warmup=1"></iframe>
<script>
  // The README's listener: size each widget's iframe to the height it reports.
  addEventListener('message', (event) => {
    if (event.origin !== ${JSON.stringify(origin)} || event.data?.type !== 'workbench:height') return;
    for (const frame of document.querySelectorAll('iframe')) {
      if (frame.contentWindow === event.source) frame.style.height = event.data.height + 'px';
    }
  });
</script></body></html>`;
}

async function serveHost(html) {
  const host = createServer((req, res) => {
    res.writeHead(200, { 'content-type': 'text/html; charset=utf-8', 'cache-control': 'no-store' });
    res.end(html);
  });
  await new Promise((ok) => host.listen(0, 'localhost', ok));
  return { url: `http://localhost:${host.address().port}/`, close: () => new Promise((ok) => host.close(ok)) };
}

/** Whether an iframe shows its whole document: its height is the content's and nothing scrolls. */
async function fitsWithoutScrollbars(page, id) {
  const frame = page.frame({ url: id === 'kv' ? /embed=kv/ : /embed=latency/ });
  const outer = await page.locator(`#${id}`).evaluate((f) => f.getBoundingClientRect().height);
  const inner = await frame.evaluate(() => ({
    content: Math.ceil(document.documentElement.getBoundingClientRect().height),
    scroll: document.documentElement.scrollHeight,
    client: document.documentElement.clientHeight,
  }));
  return { outer, ...inner, fits: Math.abs(outer - inner.content) <= 1 && inner.scroll <= inner.client };
}

for (const colorScheme of ['light', 'dark']) {
  test(`both widgets embedded on another origin (not cross-origin isolated, ${colorScheme}): they size their iframes, work by keyboard, follow the colour scheme`, async () => {
    // The host is `localhost`, the widgets `127.0.0.1`: two origins.
    const host = await serveHost(hostPage(server.url));
    try {
      // Tall enough for both widgets: Chromium's full-page screenshots draw
      // cross-origin iframes wrongly, so the screenshot below is of the viewport.
      const page = await newPage(browser, { viewport: { width: 820, height: 1500 }, colorScheme });
      await page.goto(host.url);
      const kv = page.frameLocator('#kv');
      const latency = page.frameLocator('#latency');
      await kv.getByTestId('logical-total').waitFor();
      await latency.getByTestId('latency-table').waitFor();
      for (const id of ['kv', 'latency']) {
        await page.waitForFunction((id) => document.getElementById(id).style.height !== '', id);
        const fit = await fitsWithoutScrollbars(page, id);
        assert.ok(fit.fits, `${id}: ${JSON.stringify(fit)}`);
      }
      const frame = page.frame({ url: /embed=latency/ });
      assert.equal(await frame.evaluate(() => crossOriginIsolated), false);
      assert.match(await latency.getByTestId('widget-protocol').textContent(), /single-thread SIMD128 build, because the page is not cross-origin isolated/);

      // Light or dark, as the reader's preference says.
      const background = await frame.evaluate(() => getComputedStyle(document.documentElement).backgroundColor);
      const [r, g, b] = background.match(/\d+/g).map(Number);
      const luminance = (0.2126 * r + 0.7152 * g + 0.0722 * b) / 255;
      assert.ok(colorScheme === 'dark' ? luminance < 0.2 : luminance > 0.8, `${colorScheme}: background ${background}`);

      // Accessibility: the table is named by its caption, the headers are
      // headers, the button and the status line are reachable and named.
      assert.equal(await latency.getByRole('table', { name: /Routing decision latency by prompt length/ }).count(), 1);
      assert.equal(await latency.getByRole('columnheader', { name: 'first call (cold)' }).count(), 2);
      assert.equal(await latency.getByRole('rowheader', { name: '1,024' }).count(), 1);
      assert.equal(await latency.getByRole('status').count(), 1);
      const button = latency.getByRole('button', { name: 'Run in this browser' });
      await button.focus();
      // The widget is a cross-origin iframe, so Chromium runs it in its own
      // process and moves focus across that boundary asynchronously: each
      // key's effect is awaited before the next key, or the check reads the
      // focus mid-move (CI once saw no active element at all).
      await page.keyboard.press('Shift+Tab');
      await frame.waitForFunction(() => !(document.hasFocus() && document.activeElement?.dataset.testid === 'widget-run'), null, { timeout: 5000 });
      await page.keyboard.press('Tab');
      const reached = await frame
        .waitForFunction(() => document.hasFocus() && document.activeElement?.dataset.testid === 'widget-run', null, { timeout: 5000 })
        .then(() => true, () => false);
      assert.ok(reached, `Tab reaches the button (focused: ${await frame.evaluate(() => `${document.hasFocus()} ${document.activeElement?.tagName} ${document.activeElement?.dataset.testid}`)})`);
      const heightBefore = await page.locator('#latency').evaluate((f) => f.getBoundingClientRect().height);
      await page.keyboard.press('Enter');
      assert.equal(await latency.getByRole('progressbar', { name: 'Progress of the run' }).count(), 1);
      await waitForRun(frame);
      const cells = await measuredCells(frame);
      const order = await frame.locator('[data-testid=latency-row]').evaluateAll((rows) => rows.map((r) => r.dataset.tokens));
      assert.deepEqual(order, ['15', '256', '1024', '64'], 'the guide\'s rows first, then the lengths the link added');
      for (const n of ['15', '64']) assert.match(cells[n].cold, /^\d+(\.\d)? ms$/, `${n}: ${cells[n].cold}`);
      assert.equal(cells['256'].cold, '', 'only the lengths the link asked for are measured');
      assert.match(await latency.getByTestId('measured-line').textContent(), /1 thread\(s\), cross-origin isolated no/);
      // The content grew (the measured line, the links): the iframe followed.
      await page.waitForFunction((h) => document.getElementById('latency').getBoundingClientRect().height !== h, heightBefore);
      const fit = await fitsWithoutScrollbars(page, 'latency');
      assert.ok(fit.fits, `after the run: ${JSON.stringify(fit)}`);
      await page.screenshot({ path: join(outDir, `embedded-widgets-${colorScheme}.png`) });
      assert.deepEqual(page.blocked, []);
      assert.deepEqual(page.problems, []);
    } finally {
      await host.close();
    }
  });
}
