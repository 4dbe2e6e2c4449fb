// Starts the router page or, with ?embed=latency, the latency widget: two
// bundles behind one address, so the widget's first load is the widget alone
// (the page's bundle is never fetched for it, not even preloaded). A file, not
// an inline script, so a Content-Security-Policy can forbid inline scripts.
// build-site.sh writes a digest of both bundles into `build` below, so a browser
// never pairs one build's glue with another build's wasm from its cache.
const build = '__BUILD__';
const widget = new URLSearchParams(location.search).get('embed') === 'latency';
const bundle = widget ? 'router-widget' : 'router-page';
const glue = await import(`./${bundle}.js?v=${build}`);
await glue.default({ module_or_path: `./${bundle}_bg.wasm?v=${build}` });
// The full page keeps an offline copy of itself. The widget never does, nor
// does a shared result: opening one downloads nothing beyond the page (no
// worker, no model), so it starts no copy of them either.
const shared = /(^|&)result=/.test(location.hash.slice(1));
if (!widget && !shared) {
  const { keepOffline } = await import(`../offline.js?v=${build}`);
  keepOffline(new URL('../', location.href), 'router');
}
