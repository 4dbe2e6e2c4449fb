// A helper thread of the router worker's threads build (copied beside it into
// pkg/router/threads/ by scripts/build-threads-worker.sh). The worker starts
// one per extra core and posts it the module and the shared memory; the
// helper instantiates the same module on that memory and joins the compute
// pool (`pool_helper` never returns). A file on the site rather than a Blob
// URL, so the page's Content-Security-Policy can allow same-origin workers only.
importScripts('./router_worker.js');
self.onmessage = async (event) => {
  const [module, memory] = event.data;
  await wasm_bindgen({ module_or_path: module, memory });
  wasm_bindgen.pool_helper();
};
