// Starts the calculator (and its ?embed=kv widget). A file, not an inline
// script, so the page's Content-Security-Policy can forbid inline scripts.
// build-site.sh writes a digest of the bundle into `build` below, so a
// browser never pairs one build's glue with another build's wasm from its cache.
const build = '__BUILD__';
const glue = await import(`./workbench.js?v=${build}`);
await glue.default({ module_or_path: `./workbench_bg.wasm?v=${build}` });
// The full page keeps an offline copy of itself; the widget never does.
if (!new URLSearchParams(location.search).has('embed')) {
  const { keepOffline } = await import(`./offline.js?v=${build}`);
  keepOffline(new URL('./', location.href), 'calculator');
}
