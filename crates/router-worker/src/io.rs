//! The worker's browser I/O: fetching, streaming a body with progress, the
//! Cache API, SHA-256 through SubtleCrypto and the storage estimate. Each
//! failure becomes a sentence naming what failed.

use js_sys::{Array, Reflect, Uint8Array};
use wasm_bindgen::closure::Closure;
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;
use web_sys::{Cache, ReadableStream, ReadableStreamDefaultReader, Response, WorkerGlobalScope};

/// The Cache API bucket holding bundled checkpoints. A new layout of what is
/// stored gets a new name.
pub const CACHE_NAME: &str = "workbench-models-v1";

pub fn scope() -> WorkerGlobalScope {
    js_sys::global().unchecked_into()
}

/// A path of the router page's site (`models/…`) as an absolute URL. The
/// single-thread worker's script sits beside the page; the threads build's
/// one folder below it (`threads/`), so both read (and cache) the same files.
pub fn site_url(path: &str) -> String {
    let relative = if cfg!(target_feature = "atomics") { format!("../{path}") } else { path.to_string() };
    let here = js_sys::global().unchecked_into::<web_sys::WorkerGlobalScope>().location().href();
    web_sys::Url::new_with_base(&relative, &here).map(|url| url.href()).unwrap_or(relative)
}

/// A JS exception or rejection as text.
pub fn describe(value: &JsValue) -> String {
    if let Some(e) = value.dyn_ref::<js_sys::Error>() {
        return String::from(e.message());
    }
    value.as_string().unwrap_or_else(|| format!("{value:?}"))
}

/// `fetch(url)`, failing on a network error or a non-2xx status.
pub async fn fetch(url: &str) -> Result<Response, String> {
    let response = JsFuture::from(scope().fetch_with_str(url)).await.map_err(|e| format!("{url}: could not fetch ({})", describe(&e)))?;
    let response: Response = response.unchecked_into();
    if !response.ok() {
        return Err(format!("{url}: the server answered {} {}", response.status(), response.status_text()));
    }
    Ok(response)
}

pub async fn fetch_text(url: &str) -> Result<String, String> {
    let response = fetch(url).await?;
    let text = response.text().map_err(|e| format!("{url}: {}", describe(&e)))?;
    JsFuture::from(text).await.map_err(|e| format!("{url}: {}", describe(&e)))?.as_string().ok_or_else(|| format!("{url}: not text"))
}

/// Reads a stream of `size` bytes (the manifest's or the file's) to the end
/// into wasm memory, calling `progress(done)` every 1 % of it; a stream that ends
/// short of `size` or runs past it is an error. The chunks are also kept as JS arrays, so the caller can store
/// them (as a Blob) without copying the bytes back out of wasm.
pub async fn read_stream(stream: ReadableStream, what: &str, size: u64, progress: &mut dyn FnMut(u64)) -> Result<(Vec<u8>, Array), String> {
    // Validate before allocating: the declared size must fit in what this
    // wasm32 instance can still address, and the buffer is reserved
    // fallibly, so a file too large for the browser is named instead of
    // crashing the worker (a 5 GiB file would otherwise be cut to a 32-bit
    // length here and then abort on the first resize past 4 GiB).
    let left = ADDRESSABLE_BYTES.saturating_sub(crate::wasm_memory_bytes());
    if size > left {
        return Err(format!(
            "{what} is {} but this worker can address only {} more (wasm32 addresses {} in all): it is too large to load in a browser; bench-decide loads it natively",
            binary(size),
            binary(left),
            binary(ADDRESSABLE_BYTES)
        ));
    }
    let mut bytes = Vec::new();
    bytes.try_reserve_exact(size as usize).map_err(|_| format!("{what}: the browser refused {} of memory for it", binary(size)))?;
    let reader: ReadableStreamDefaultReader = stream.get_reader().unchecked_into();
    let chunks = Array::new();
    let mut reported = 0;
    loop {
        let result = JsFuture::from(reader.read()).await.map_err(|e| format!("{what}: reading stopped ({})", describe(&e)))?;
        let done = Reflect::get(&result, &"done".into()).map(|d| d.is_truthy()).unwrap_or(true);
        if done {
            break;
        }
        let value = Reflect::get(&result, &"value".into()).map_err(|e| format!("{what}: {}", describe(&e)))?;
        let chunk: Uint8Array = value.dyn_into().map_err(|_| format!("{what}: the stream did not yield bytes"))?;
        let start = bytes.len();
        if (start + chunk.length() as usize) as u64 > size {
            return Err(format!("{what}: more than the {} it was declared to hold arrived; nothing was loaded", binary(size)));
        }
        bytes.resize(start + chunk.length() as usize, 0);
        chunk.copy_to(&mut bytes[start..]);
        chunks.push(&chunk);
        // A message per chunk would be hundreds per second of reading; the
        // page's bar moves in steps of 1 %.
        if bytes.len() as u64 >= reported + size / 100 || bytes.len() as u64 == size {
            reported = bytes.len() as u64;
            progress(reported);
        }
    }
    if (bytes.len() as u64) < size {
        return Err(format!(
            "{what}: the transfer ended after {} of {} (a truncated download or file); nothing was loaded",
            binary(bytes.len() as u64),
            binary(size)
        ));
    }
    Ok((bytes, chunks))
}

/// What a wasm32 instance can address: 4 GiB.
pub const ADDRESSABLE_BYTES: u64 = 1 << 32;

/// `3.25 GiB`, `98.02 MiB`: sizes in the messages above.
fn binary(n: u64) -> String {
    if n >= 1 << 30 {
        format!("{:.2} GiB", n as f64 / (1u64 << 30) as f64)
    } else {
        format!("{:.2} MiB", n as f64 / (1u64 << 20) as f64)
    }
}

/// The cache bucket, or why there is none (insecure context, disabled storage).
pub async fn open_cache() -> Result<Cache, String> {
    let storage = scope().caches().map_err(|e| format!("the Cache API is unavailable here ({})", describe(&e)))?;
    let cache = JsFuture::from(storage.open(CACHE_NAME)).await.map_err(|e| format!("the Cache API refused to open ({})", describe(&e)))?;
    Ok(cache.unchecked_into())
}

/// The cached response for `url`, if any.
pub async fn cached(cache: &Cache, url: &str) -> Option<Response> {
    let hit = JsFuture::from(cache.match_with_str(url)).await.ok()?;
    hit.dyn_into::<Response>().ok()
}

/// Stores `chunks` under `url`.
pub async fn store(cache: &Cache, url: &str, chunks: &Array) -> Result<(), String> {
    let blob = web_sys::Blob::new_with_u8_array_sequence(chunks).map_err(|e| describe(&e))?;
    let response = Response::new_with_opt_blob(Some(&blob)).map_err(|e| describe(&e))?;
    JsFuture::from(cache.put_with_str(url, &response))
        .await
        .map(|_| ())
        .map_err(|e| format!("could not keep the checkpoint in the browser ({})", describe(&e)))
}

/// The bytes cached under `url`, if any (a small entry: read whole).
pub async fn cached_bytes(cache: &Cache, url: &str) -> Option<Vec<u8>> {
    let response = cached(cache, url).await?;
    let buffer = JsFuture::from(response.array_buffer().ok()?).await.ok()?;
    Some(js_sys::Uint8Array::new(&buffer).to_vec())
}

/// Stores `bytes` under `url`.
pub async fn store_bytes(cache: &Cache, url: &str, bytes: &[u8]) -> Result<(), String> {
    let chunks = Array::of1(&js_sys::Uint8Array::from(bytes));
    store(cache, url, &chunks).await
}

/// Deletes the whole bucket.
pub async fn clear_cache() -> Result<bool, String> {
    let storage = scope().caches().map_err(|e| format!("the Cache API is unavailable here ({})", describe(&e)))?;
    let deleted = JsFuture::from(storage.delete(CACHE_NAME)).await.map_err(|e| describe(&e))?;
    Ok(deleted.is_truthy())
}

/// Hex SHA-256 through SubtleCrypto (native speed; the wasm alternative
/// takes several times longer on 98 MB).
pub async fn sha256_hex(bytes: &[u8]) -> Result<String, String> {
    Sha256Job::start(bytes, None).finish().await
}

/// `digest_worker.js`, a worker that takes one SHA-256 off this thread.
/// Chromium's WebCrypto hashes on the thread that calls it, so calling it
/// here would put the whole digest (about 140 ms for the bundled checkpoint)
/// before the weight build instead of beside it. Spawn it before the bytes
/// are read: a nested worker starts only while this thread yields, and a
/// weight build does not yield.
pub struct DigestHelper {
    worker: web_sys::Worker,
}

/// A SHA-256 of `bytes` under way on a [`DigestHelper`] while this thread
/// goes on. The job borrows the bytes, so they cannot change or go before
/// [`Sha256Job::finish`]; where the helper cannot run (no worker, its
/// script missing), `finish` hashes them here.
pub struct Sha256Job<'a> {
    bytes: &'a [u8],
    on_helper: Option<Answer>,
}

/// A helper's answer to come, and the handlers that settle it (kept alive
/// until it does).
struct Answer {
    _helper: DigestHelper,
    done: JsFuture,
    _on_message: Closure<dyn FnMut(web_sys::MessageEvent)>,
    _on_error: Closure<dyn FnMut(JsValue)>,
}

impl<'a> Sha256Job<'a> {
    /// On `helper` if there is one, else on this thread at `finish`.
    pub fn start(bytes: &'a [u8], helper: Option<DigestHelper>) -> Self {
        Self { bytes, on_helper: helper.and_then(|helper| helper.digest(bytes).ok()) }
    }

    /// The hex digest.
    pub async fn finish(self) -> Result<String, String> {
        if let Some(mut answer) = self.on_helper {
            if let Ok(digest) = (&mut answer.done).await {
                return Ok(router::gguf::hex(&Uint8Array::new(&digest).to_vec()));
            }
            // A helper that failed (its script, its memory) is not the
            // file's fault: the digest is taken here instead.
        }
        let subtle = scope().crypto().map_err(|e| format!("no WebCrypto ({})", describe(&e)))?.subtle();
        // In the threads build the wasm memory is a SharedArrayBuffer, which
        // WebCrypto refuses to read; there the bytes are copied first.
        let promise = if cfg!(target_feature = "atomics") {
            subtle.digest_with_str_and_buffer_source("SHA-256", &Uint8Array::from(self.bytes))
        } else {
            subtle.digest_with_str_and_u8_array("SHA-256", self.bytes)
        }
        .map_err(|e| format!("SHA-256: {}", describe(&e)))?;
        let digest = JsFuture::from(promise).await.map_err(|e| format!("SHA-256: {}", describe(&e)))?;
        Ok(router::gguf::hex(&Uint8Array::new(&digest).to_vec()))
    }
}

impl DigestHelper {
    /// `None` where no worker can be made: the digest is then taken here.
    pub fn spawn() -> Option<Self> {
        web_sys::Worker::new(&site_url("digest_worker.js")).ok().map(|worker| Self { worker })
    }

    fn digest(self, bytes: &[u8]) -> Result<Answer, JsValue> {
        let mut settle = None;
        let done = js_sys::Promise::new(&mut |resolve, reject| settle = Some((resolve, reject)));
        let (resolve, reject) = settle.ok_or("Promise::new did not run its executor")?;
        let fail = reject.clone();
        let on_message = Closure::<dyn FnMut(web_sys::MessageEvent)>::new(move |event: web_sys::MessageEvent| {
            let data = event.data();
            let _ = match Reflect::get(&data, &"digest".into()) {
                Ok(digest) if digest.is_instance_of::<js_sys::ArrayBuffer>() => resolve.call1(&JsValue::NULL, &digest),
                _ => reject.call1(&JsValue::NULL, &Reflect::get(&data, &"error".into()).unwrap_or_default()),
            };
        });
        let on_error = Closure::<dyn FnMut(JsValue)>::new(move |event: JsValue| {
            let _ = fail.call1(&JsValue::NULL, &event);
        });
        let worker = &self.worker;
        worker.set_onmessage(Some(on_message.as_ref().unchecked_ref()));
        worker.set_onerror(Some(on_error.as_ref().unchecked_ref()));
        if cfg!(target_feature = "atomics") {
            // A view of the shared memory, made by JS's own constructor:
            // `post_message` clones it as a view of the same
            // SharedArrayBuffer (shared memory is never detached by
            // growth), and `Sha256Job` borrows the bytes until the helper
            // has answered, so they stay where the view points.
            let memory: js_sys::WebAssembly::Memory = wasm_bindgen::memory().unchecked_into();
            let view = Uint8Array::new_with_byte_offset_and_length(&memory.buffer(), bytes.as_ptr() as u32, bytes.len() as u32);
            worker.post_message(&view)?;
        } else {
            // Unshared memory cannot be lent: one copy, whose buffer moves.
            let copy = Uint8Array::from(bytes);
            worker.post_message_with_transfer(&copy, &Array::of1(&copy.buffer()))?;
        }
        Ok(Answer { _helper: self, done: JsFuture::from(done), _on_message: on_message, _on_error: on_error })
    }
}

impl Drop for DigestHelper {
    /// One digest a helper: it goes once answered, or unused.
    fn drop(&mut self) {
        self.worker.terminate();
    }
}

/// `navigator.storage.estimate()`: (usage, quota) in bytes.
pub async fn storage_estimate() -> Result<(f64, f64), String> {
    let navigator: web_sys::WorkerNavigator = scope().navigator();
    let manager =
        Reflect::get(&navigator, &"storage".into()).ok().filter(|v| !v.is_undefined()).ok_or("navigator.storage is unavailable here")?;
    let manager: web_sys::StorageManager = manager.unchecked_into();
    let promise = manager.estimate().map_err(|e| describe(&e))?;
    let estimate = JsFuture::from(promise).await.map_err(|e| describe(&e))?;
    let number = |key: &str| Reflect::get(&estimate, &key.into()).ok().and_then(|v| v.as_f64()).unwrap_or(f64::NAN);
    Ok((number("usage"), number("quota")))
}
