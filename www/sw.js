// The service worker that makes the workbench an offline app: after one
// visit online, the calculator and the router page (with its worker and,
// once loaded, its checkpoint, which the router worker keeps in its own
// Cache API entry) load with the network off.
//
// Network first, cache as the fallback: online, every file comes fresh from
// the site (and refreshes its cached copy), so a new build is never hidden
// behind an old one; offline, the last copy answers. It also stores every
// file of each page that asks (`calculator` or `router`, by a message,
// below), because that page's own first load happened before the worker was
// there to see it; a calculator visitor never downloads the router's
// worker. Widgets (`?embed=`) never register it: the field guide's reader
// downloads nothing beyond the widget.
//
// build-site.sh writes the build's digest and the file lists below. A file,
// not inline code, so the pages' Content-Security-Policy covers it
// (worker-src 'self').
const BUILD = '__BUILD__';
const FILES = __FILES__;
const CACHE = `workbench-site-${BUILD}`;

self.addEventListener('install', () => self.skipWaiting());

// A page asks for its files (`{ type: 'keep', pages: 'router' }`) once the
// worker is active, and hears back on the message's port when they are
// stored. Files already stored are not fetched again.
self.addEventListener('message', (event) => {
  if (event.data?.type !== 'keep') return;
  const files = String(event.data.pages).split(',').flatMap((page) => FILES[page] ?? []);
  const port = event.ports[0];
  event.waitUntil(
    caches
      .open(CACHE)
      .then(async (cache) => {
        for (const file of files) {
          const url = new URL(file, self.registration.scope).href;
          if (!(await cache.match(url))) await cache.add(url);
        }
        port?.postMessage({ ok: true, files: files.length });
      })
      .catch((e) => port?.postMessage({ ok: false, error: String(e) })),
  );
});

self.addEventListener('activate', (event) => {
  // Only this site's earlier builds go; the router worker's checkpoint
  // cache has another name and stays.
  event.waitUntil(
    caches
      .keys()
      .then((keys) => Promise.all(keys.filter((k) => k.startsWith('workbench-site-') && k !== CACHE).map((k) => caches.delete(k))))
      .then(() => self.clients.claim()),
  );
});

self.addEventListener('fetch', (event) => {
  const request = event.request;
  const url = new URL(request.url);
  // Checkpoints are the router worker's to cache (it verifies them first).
  if (request.method !== 'GET' || url.origin !== self.location.origin || url.pathname.endsWith('.gguf')) return;
  event.respondWith(
    fetch(request)
      .then((response) => {
        if (response.ok && !response.redirected) {
          const copy = response.clone();
          event.waitUntil(caches.open(CACHE).then((cache) => cache.put(withoutQuery(url), copy)));
        }
        return response;
      })
      .catch(() => caches.open(CACHE).then((cache) => cache.match(withoutQuery(url))).then((hit) => hit ?? Response.error())),
  );
});

// One cached copy per file: `boot.js?v=…` and `?embed=latency` are the same files.
function withoutQuery(url) {
  return `${url.origin}${url.pathname}`;
}
