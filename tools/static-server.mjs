// The static server for the built site (pkg/): used by scripts/serve.sh and by
// the end-to-end tests, so what is tested is what is served. Gzip like a real
// host (except checkpoints, sent as stored with their length so the page's
// progress bar has a total), no caching by the browser, and a list of every
// path answered. Each file is compressed once per modification time, off the
// event loop: gzip level 9 of the 5.3 MB worker wasm takes about 176 ms, which
// done synchronously on every request stalled every other response and
// inflated the load times the tests and benches measure.
//
//   node tools/static-server.mjs [dir] [port]      (defaults: pkg 8080)

import { createServer } from 'node:http';
import { readFile, stat } from 'node:fs/promises';
import { gzip } from 'node:zlib';
import { promisify } from 'node:util';
import { join, extname, normalize, resolve, sep } from 'node:path';
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

const gzipAsync = promisify(gzip);

/** Whether `file` (normalised) is `base` itself or lies below it: a bare prefix test would also take a sibling folder such as `pkg-old` for `pkg`. */
export function isInside(base, file) {
  return file === base || file.startsWith(base.endsWith(sep) ? base : base + sep);
}

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
  // path → { mtimeMs, size, body: Promise<Buffer> }: one compression per file and version.
  const compressed = new Map();
  const gzipped = (file, info) => {
    const hit = compressed.get(file);
    if (hit && hit.mtimeMs === info.mtimeMs && hit.size === info.size) return hit.body;
    const body = readFile(file).then((bytes) => gzipAsync(bytes, { level: 9 }));
    compressed.set(file, { mtimeMs: info.mtimeMs, size: info.size, body });
    body.catch(() => compressed.delete(file));
    return body;
  };
  const server = createServer(async (req, res) => {
    try {
      const path = decodeURIComponent(new URL(req.url, 'http://x').pathname);
      const mount = Object.keys(mounts).find((prefix) => path.startsWith(prefix));
      const base = mount ? resolve(mounts[mount]) : dir;
      let file = normalize(join(base, mount ? path.slice(mount.length) : path));
      if (!isInside(base, file)) throw new Error('outside');
      let info = await stat(file);
      if (info.isDirectory()) {
        // `/router` → `/router/`, as static hosts do, so the page's relative URLs resolve.
        if (!path.endsWith('/')) {
          res.writeHead(301, { location: `${path}/` });
          res.end();
          return;
        }
        file = join(file, 'index.html');
        info = await stat(file);
      }
      const headers = { 'content-type': types[extname(file)] ?? 'application/octet-stream', 'cache-control': 'no-store' };
      if (crossOriginIsolated) {
        headers['cross-origin-opener-policy'] = 'same-origin';
        headers['cross-origin-embedder-policy'] = 'require-corp';
      }
      let body;
      if (extname(file) !== '.gguf' && (req.headers['accept-encoding'] ?? '').includes('gzip')) {
        body = await gzipped(file, info);
        headers['content-encoding'] = 'gzip';
      } else {
        body = await readFile(file);
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
