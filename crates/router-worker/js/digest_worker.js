// Computes one SHA-256 for the router worker, on this thread instead of
// the worker's. Chromium's WebCrypto digests on the thread that calls it
// (about 140 ms for the bundled 100 MB checkpoint on a 2-core Xeon, with
// nothing left to await afterwards), so a digest started on the worker's own
// thread could not overlap the weight build it was meant to run beside.
//
// The message is the checkpoint's bytes: in the threads build a view of the
// worker's shared wasm memory (nothing copied on the worker's thread), else
// a copy whose buffer was transferred. The answer is `{ digest }` (an
// ArrayBuffer) or `{ error }`.
//
// Copied beside the page into pkg/router/ by Trunk (router/index.html); a
// file and not a Blob URL, so the page's Content-Security-Policy can allow
// same-origin workers only.
self.onmessage = async ({ data: bytes }) => {
  try {
    // WebCrypto refuses shared memory, so a view of it is copied here first.
    const input = bytes.buffer instanceof ArrayBuffer ? bytes : bytes.slice();
    self.postMessage({ digest: await crypto.subtle.digest('SHA-256', input) });
  } catch (e) {
    self.postMessage({ error: `${e}` });
  }
};
