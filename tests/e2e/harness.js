// Shared set-up for the end-to-end tests: a static server for the built site
// (pkg/, served by tools/static-server.mjs like scripts/serve.sh does), and Debian's headless Chromium driven by
// playwright-core with every request outside localhost blocked and recorded.

import { before, after, afterEach } from 'node:test';
import { mkdir } from 'node:fs/promises';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';
import { serve as serveSite } from '../../tools/static-server.mjs';

const here = dirname(fileURLToPath(import.meta.url));
export const root = join(here, '..', '..');
export const site = join(root, 'pkg');
export const outDir = join(root, 'test-output');

/**
 * The site's server and the browser of the test file that called
 * `useSite()`: live bindings, set before its first test and closed after its
 * last (each test file runs in a process of its own).
 */
export let server;
export let browser;

/**
 * The set-up and tear-down every test file shares, registered once: the
 * site served cross-origin isolated, one headless Chromium, and after each
 * test the check that no page reported a Content-Security-Policy violation
 * (every page ships a policy; a test that trips it fails).
 */
export function useSite() {
  before(async () => {
    server = await serve();
    browser = await launch();
  });
  afterEach(assertNoCspViolations);
  after(async () => {
    await browser?.close();
    await server?.close();
  });
}

/**
 * Serves the built site with the same server scripts/serve.sh uses:
 * cross-origin isolated (the router's threads build) unless told otherwise.
 */
export function serve(dir = site, { crossOriginIsolated = true } = {}) {
  return serveSite(dir, 0, { crossOriginIsolated });
}

/** Launches headless Chromium. Flags as the machine notes advise for a closed network. */
export async function launch() {
  return chromium.launch({
    executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
    headless: true,
    // CHROMIUM_ARGS adds flags for one run, e.g. a profile of the worker's
    // wasm: CHROMIUM_ARGS='--js-flags=--perf-basic-prof' under `perf record -a`.
    args: [
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
      ...(process.env.CHROMIUM_ARGS ?? '').split(' ').filter(Boolean),
    ],
  });
}

/**
 * Every Content-Security-Policy violation any page or frame reported, across
 * the test file: each page ships a CSP meta tag, and a test file's
 * `afterEach(assertNoCspViolations)` fails the test that caused one.
 */
export const cspViolations = [];

export function assertNoCspViolations() {
  const found = cspViolations.splice(0);
  if (found.length) throw new Error(`Content-Security-Policy violations:\n${found.join('\n')}`);
}

/**
 * A page that may only talk to localhost. Every other request is aborted and
 * listed in `page.blocked`; console errors and page errors land in `page.problems`.
 */
export async function newPage(browser, options = {}) {
  const context = await browser.newContext({ permissions: ['clipboard-read', 'clipboard-write'], ...options });
  // Runs in every frame before the page's own scripts (and outside its CSP).
  await context.addInitScript(() => {
    document.addEventListener('securitypolicyviolation', (e) => {
      console.error(`CSP violation: ${e.effectiveDirective} blocked ${e.blockedURI || '(inline)'} in ${e.documentURI} (${e.sourceFile}:${e.lineNumber})`);
    });
  });
  const page = await context.newPage();
  page.blocked = [];
  page.problems = [];
  await page.route('**/*', (route) => {
    const host = new URL(route.request().url()).hostname;
    if (host === '127.0.0.1' || host === 'localhost') return route.continue();
    page.blocked.push(route.request().url());
    return route.abort();
  });
  page.on('pageerror', (e) => page.problems.push(`pageerror: ${e.message}`));
  page.on('console', (m) => {
    if (m.type() !== 'error') return;
    page.problems.push(`console: ${m.text()}`);
    if (/CSP violation|Content Security Policy/.test(m.text())) cspViolations.push(m.text());
  });
  return page;
}

/**
 * Opens a shared link in a fresh page, as a visitor would, and waits for the
 * read-only result. `fetched()` lists what the server answered since the
 * link was opened: a shared result must download no model and start no
 * worker.
 */
export async function openShared(link) {
  const viewer = await newPage(browser);
  const from = server.served.length;
  await viewer.goto(link);
  await viewer.getByTestId('shared-result').waitFor();
  return { viewer, fetched: () => server.served.slice(from) };
}

/** Records the bytes of every response `page` receives (body and headers), for a first-load budget. */
export function recordSizes(page) {
  const sizes = [];
  page.on('requestfinished', async (req) => {
    const s = await req.sizes();
    sizes.push({ url: req.url(), bytes: s.responseBodySize + s.responseHeadersSize });
  });
  return sizes;
}

/** Waits until the router page's worker has started (its Load button is live). */
export async function workerReady(page) {
  await page.waitForFunction(() => document.querySelector('[data-testid=model-load]') && !document.querySelector('[data-testid=model-load]').disabled, null, { timeout: 120_000 });
}

/** Loads the bundled checkpoint on the router page; fails with the page's alert. */
export async function loadBundled(page) {
  await workerReady(page);
  await page.getByTestId('model-load').click();
  await page.waitForFunction(() => ['ready', 'failed'].includes(document.querySelector('[data-testid=model-status]')?.textContent), null, { timeout: 300_000 });
  const status = await page.getByTestId('model-status').textContent();
  if (status !== 'ready') throw new Error(`model did not load: ${await page.getByTestId('router-alert').innerText().catch(() => status)}`);
}

/**
 * `loadBundled`, timed inside the page: from the Load button's click event to
 * the mutation that shows `ready`, in milliseconds. Playwright's own click
 * (its actionability checks, about 90 ms here) and its polling are not the
 * page's start-up, so they are left out.
 */
export async function timedLoad(page) {
  await workerReady(page);
  await page.evaluate(() => {
    const button = document.querySelector('[data-testid=model-load]');
    window.__timedLoad = {};
    button.addEventListener('click', () => (window.__timedLoad.clicked = performance.now()), { capture: true, once: true });
    // A page that has loaded before still says `ready` when the click
    // comes: only a `ready` after the status has left it counts.
    const seen = new MutationObserver(() => {
      if (window.__timedLoad.clicked === undefined) return;
      const ready = document.querySelector('[data-testid=model-status]')?.textContent === 'ready';
      if (!ready) window.__timedLoad.left = true;
      else if (window.__timedLoad.left) {
        window.__timedLoad.ready = performance.now();
        seen.disconnect();
      }
    });
    seen.observe(document.body, { subtree: true, childList: true, characterData: true });
  });
  await loadBundled(page);
  const { clicked, ready } = await page.evaluate(() => window.__timedLoad);
  return Math.round(ready - clicked);
}

export async function screenshot(page, name) {
  await mkdir(outDir, { recursive: true });
  await page.screenshot({ path: join(outDir, `${name}.png`), fullPage: true });
}
