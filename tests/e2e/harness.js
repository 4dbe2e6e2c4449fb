// Shared set-up for the end-to-end tests: a static server for the built site
// (pkg/), gzip like a real host, and Debian's headless Chromium driven by
// playwright-core with every request outside localhost blocked and recorded.

import { createServer } from 'node:http';
import { readFile, mkdir, stat } from 'node:fs/promises';
import { gzipSync } from 'node:zlib';
import { join, extname, normalize, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

const here = dirname(fileURLToPath(import.meta.url));
export const root = join(here, '..', '..');
export const site = join(root, 'pkg');
export const outDir = join(root, 'test-output');

const types = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript',
  '.wasm': 'application/wasm',
  '.css': 'text/css',
  '.json': 'application/json',
  '.svg': 'image/svg+xml',
};

/** Serves `dir` on 127.0.0.1 with an ephemeral port; returns { url, close }. */
export async function serve(dir = site) {
  await stat(join(dir, 'index.html')); // fail early with a clear error when pkg/ was not built
  const server = createServer(async (req, res) => {
    try {
      const path = decodeURIComponent(new URL(req.url, 'http://x').pathname);
      let file = normalize(join(dir, path));
      if (!file.startsWith(dir)) throw new Error('outside');
      if (path.endsWith('/')) file = join(file, 'index.html');
      let body = await readFile(file);
      const headers = { 'content-type': types[extname(file)] ?? 'application/octet-stream', 'cache-control': 'no-store' };
      if ((req.headers['accept-encoding'] ?? '').includes('gzip')) {
        body = gzipSync(body, { level: 9 });
        headers['content-encoding'] = 'gzip';
      }
      res.writeHead(200, headers);
      res.end(body);
    } catch {
      res.writeHead(404);
      res.end('not found');
    }
  });
  await new Promise((ok) => server.listen(0, '127.0.0.1', ok));
  const { port } = server.address();
  return { url: `http://127.0.0.1:${port}/`, close: () => new Promise((ok) => server.close(ok)) };
}

/** Launches headless Chromium. Flags as the machine notes advise for a closed network. */
export async function launch() {
  return chromium.launch({
    executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
}

/**
 * A page that may only talk to localhost. Every other request is aborted and
 * listed in `page.blocked`; console errors and page errors land in `page.problems`.
 */
export async function newPage(browser, options = {}) {
  const context = await browser.newContext({ permissions: ['clipboard-read', 'clipboard-write'], ...options });
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
  page.on('console', (m) => m.type() === 'error' && page.problems.push(`console: ${m.text()}`));
  return page;
}

export async function screenshot(page, name) {
  await mkdir(outDir, { recursive: true });
  await page.screenshot({ path: join(outDir, `${name}.png`), fullPage: true });
}
