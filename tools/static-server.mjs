// The static server for the built site (pkg/): used by scripts/serve.sh and by
// the end-to-end tests, so what is tested is what is served. Gzip like a real
// host (except checkpoints, sent as stored with their length so the page's
// progress bar has a total), no caching, and a list of every path answered.
//
//   node tools/static-server.mjs [dir] [port]      (defaults: pkg 8080)

import { createServer } from 'node:http';
import { readFile, stat } from 'node:fs/promises';
import { gzipSync } from 'node:zlib';
import { join, extname, normalize, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';

const types = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript',
  '.wasm': 'application/wasm',
  '.css': 'text/css',
  '.json': 'application/json',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.mjs': 'text/javascript',
};

/**
 * Serves `dir` on 127.0.0.1 (port 0: any free one); returns { url, served, close }.
 * Options: `mounts` maps URL prefixes to other folders (`{ '/peers/': 'tests/peers' }`);
 * `crossOriginIsolated` (default on) sends COOP/COEP, which the router's threads build
 * (SharedArrayBuffer) needs; off, the page falls back to its single-thread worker.
 * `record` keeps the list of paths answered (tests read it; the long-running server does not keep it).
 */
export async function serve(dir, port = 0, { mounts = {}, crossOriginIsolated = true, record = true } = {}) {
  dir = resolve(dir);
  await stat(join(dir, 'index.html')); // fail early with a clear error when the site was not built
  const served = [];
  const server = createServer(async (req, res) => {
    try {
      const path = decodeURIComponent(new URL(req.url, 'http://x').pathname);
      const mount = Object.keys(mounts).find((prefix) => path.startsWith(prefix));
      const base = mount ? resolve(mounts[mount]) : dir;
      let file = normalize(join(base, mount ? path.slice(mount.length) : path));
      if (!file.startsWith(base)) throw new Error('outside');
      if ((await stat(file)).isDirectory()) {
        // `/router` → `/router/`, as static hosts do, so the page's relative URLs resolve.
        if (!path.endsWith('/')) {
          res.writeHead(301, { location: `${path}/` });
          res.end();
          return;
        }
        file = join(file, 'index.html');
      }
      let body = await readFile(file);
      const headers = { 'content-type': types[extname(file)] ?? 'application/octet-stream', 'cache-control': 'no-store' };
      if (crossOriginIsolated) {
        headers['cross-origin-opener-policy'] = 'same-origin';
        headers['cross-origin-embedder-policy'] = 'require-corp';
      }
      if (extname(file) !== '.gguf' && (req.headers['accept-encoding'] ?? '').includes('gzip')) {
        body = gzipSync(body, { level: 9 });
        headers['content-encoding'] = 'gzip';
      }
      headers['content-length'] = body.length;
      if (record) served.push(path);
      res.writeHead(200, headers);
      res.end(body);
    } catch {
      res.writeHead(404, { 'content-type': 'text/plain' });
      res.end('not found');
    }
  });
  await new Promise((ok) => server.listen(port, '127.0.0.1', ok));
  return {
    url: `http://127.0.0.1:${server.address().port}/`,
    served,
    close: () => new Promise((ok) => {
      server.closeAllConnections?.();
      server.close(ok);
    }),
  };
}

if (import.meta.url === pathToFileURL(process.argv[1]).href) {
  // node tools/static-server.mjs [dir] [port] [--not-isolated]
  const args = process.argv.slice(2);
  const [dir = 'pkg', port = '8080'] = args.filter((a) => !a.startsWith('--'));
  const { url } = await serve(dir, Number(port), { record: false, crossOriginIsolated: !args.includes('--not-isolated') });
  console.log(`serving ${dir} on ${url}  (router page: ${url}router/, widget: ${url}?embed=kv)`);
}
