//! The few browser services the page needs, behind plain functions: the URL
//! query, `history.replaceState`, the clipboard and reading a dropped file.
//! Keeping them here keeps the components free of web-sys plumbing.

use wasm_bindgen::{JsCast, JsValue};

/// The current `location.search`, without the `?`.
pub fn current_query() -> String {
    web_sys::window().and_then(|w| w.location().search().ok()).unwrap_or_default().trim_start_matches('?').to_string()
}

/// The page's address without query or fragment.
pub fn page_base() -> String {
    let Some(w) = web_sys::window() else {
        return String::new();
    };
    let loc = w.location();
    format!("{}{}", loc.origin().unwrap_or_default(), loc.pathname().unwrap_or_default())
}

/// Replaces the address bar's query without adding a history entry, so the
/// URL follows every keystroke and Back still leaves the page.
pub fn replace_query(query: &str) {
    let Some(w) = web_sys::window() else { return };
    let hash = w.location().hash().unwrap_or_default();
    let url = if query.is_empty() { format!("{}{hash}", w.location().pathname().unwrap_or_default()) } else { format!("?{query}{hash}") };
    if let Ok(history) = w.history() {
        // A failure here (e.g. a sandboxed iframe) only means the address bar
        // does not follow; the page keeps working.
        let _ = history.replace_state_with_url(&JsValue::NULL, "", Some(&url));
    }
}

/// Copies text with `navigator.clipboard.writeText`. That API is behind
/// web-sys' unstable flag, so it is called through `Reflect` instead.
pub async fn copy_text(text: &str) -> Result<(), String> {
    let window = web_sys::window().ok_or("no window")?;
    let clipboard = js_sys::Reflect::get(&window.navigator(), &"clipboard".into()).map_err(|_| "no clipboard")?;
    if clipboard.is_undefined() {
        return Err("the clipboard needs a secure context (https or localhost)".into());
    }
    let write = js_sys::Reflect::get(&clipboard, &"writeText".into()).map_err(|_| "no writeText")?;
    let write: js_sys::Function = write.dyn_into().map_err(|_| "writeText is not a function")?;
    let promise: js_sys::Promise =
        write.call1(&clipboard, &text.into()).map_err(|e| format!("{e:?}"))?.dyn_into().map_err(|_| "not a promise")?;
    wasm_bindgen_futures::JsFuture::from(promise).await.map(|_| ()).map_err(|_| "the browser refused the copy".to_string())
}

/// Reads a file the user picked or dropped, as text.
pub async fn read_file_text(file: web_sys::File) -> Result<String, String> {
    let text = wasm_bindgen_futures::JsFuture::from(file.text()).await.map_err(|_| format!("could not read {}", file.name()))?;
    text.as_string().ok_or_else(|| format!("{} is not text", file.name()))
}

/// The first file of a drop.
pub fn dropped_file(ev: &web_sys::DragEvent) -> Option<web_sys::File> {
    ev.data_transfer().and_then(|d| d.files()).and_then(|f| f.get(0))
}

/// The first file an `<input type=file>` holds after a change.
pub fn picked_file(ev: &web_sys::Event) -> Option<web_sys::File> {
    ev.target().and_then(|t| t.dyn_into::<web_sys::HtmlInputElement>().ok()).and_then(|i| i.files()).and_then(|f| f.get(0))
}

/// Reads the first `n` bytes of a file the user picked or dropped (a slice
/// of the `Blob`: the rest of the file is never read).
pub async fn read_file_prefix(file: &web_sys::File, n: u64) -> Result<Vec<u8>, String> {
    let slice = file.slice_with_f64_and_f64(0.0, n as f64).map_err(|_| format!("could not slice {}", file.name()))?;
    let buffer = wasm_bindgen_futures::JsFuture::from(slice.array_buffer()).await.map_err(|_| format!("could not read {}", file.name()))?;
    Ok(js_sys::Uint8Array::new(&buffer).to_vec())
}

/// Fetches a text file relative to this page; the error names it and the
/// HTTP status.
pub async fn fetch_text(url: &str) -> Result<String, String> {
    let window = web_sys::window().ok_or("no window")?;
    let response = wasm_bindgen_futures::JsFuture::from(window.fetch_with_str(url))
        .await
        .map_err(|_| format!("{url}: the request failed (offline?)"))?;
    let response: web_sys::Response = response.dyn_into().map_err(|_| format!("{url}: not a response"))?;
    if !response.ok() {
        return Err(format!("{url}: HTTP {}", response.status()));
    }
    let text = response.text().map_err(|_| format!("{url}: unreadable body"))?;
    let text = wasm_bindgen_futures::JsFuture::from(text).await.map_err(|_| format!("{url}: the body could not be read"))?;
    text.as_string().ok_or_else(|| format!("{url}: not text"))
}

/// The current `location.hash`, without the `#`.
pub fn current_fragment() -> String {
    web_sys::window().and_then(|w| w.location().hash().ok()).unwrap_or_default().trim_start_matches('#').to_string()
}

/// Replaces the fragment without a history entry (the query is kept).
pub fn replace_fragment(fragment: &str) {
    let Some(w) = web_sys::window() else { return };
    let search = w.location().search().unwrap_or_default();
    let path = w.location().pathname().unwrap_or_default();
    if let Ok(history) = w.history() {
        let _ = history.replace_state_with_url(&JsValue::NULL, "", Some(&format!("{path}{search}#{fragment}")));
    }
}

/// The full address of this page with `fragment`, for share links.
pub fn link_with_fragment(fragment: &str) -> String {
    let Some(w) = web_sys::window() else { return format!("#{fragment}") };
    format!("{}{}#{fragment}", page_base(), w.location().search().unwrap_or_default())
}

/// Offers `text` as a file download.
pub fn download_text(file_name: &str, text: &str, mime: &str) -> Result<(), String> {
    let document = web_sys::window().and_then(|w| w.document()).ok_or("no document")?;
    let parts = js_sys::Array::of1(&JsValue::from_str(text));
    let options = web_sys::BlobPropertyBag::new();
    options.set_type(mime);
    let blob = web_sys::Blob::new_with_str_sequence_and_options(&parts, &options).map_err(|e| format!("{e:?}"))?;
    let url = web_sys::Url::create_object_url_with_blob(&blob).map_err(|e| format!("{e:?}"))?;
    let anchor: web_sys::HtmlAnchorElement = document.create_element("a").map_err(|e| format!("{e:?}"))?.unchecked_into();
    anchor.set_href(&url);
    anchor.set_download(file_name);
    anchor.click();
    let _ = web_sys::Url::revoke_object_url(&url);
    Ok(())
}

/// Navigates to a relative address, replacing this history entry.
pub fn go_to(relative: &str) {
    if let Some(w) = web_sys::window() {
        let _ = w.location().replace(relative);
    }
}

/// What a widget posts to the page that embeds it, each time its content
/// height changes: `{ type: "workbench:height", widget, height }`, `height`
/// in CSS pixels (whole, rounded up). The README gives the listener.
pub const HEIGHT_MESSAGE_TYPE: &str = "workbench:height";

/// Tells the embedding page this document's content height whenever it
/// changes (a `ResizeObserver` on `<html>`), so an iframe can size itself
/// without scrollbars. Does nothing outside a frame. The message is posted
/// to any origin (`*`): the field guide's host is not known in advance, and
/// a height says nothing private.
pub fn announce_height(widget: &'static str) {
    let Some(window) = web_sys::window() else { return };
    let Ok(Some(parent)) = window.parent() else { return };
    if js_sys::Object::is(&parent, &window) {
        return;
    }
    let Some(root) = window.document().and_then(|d| d.document_element()) else { return };
    let measured = root.clone();
    let last = std::cell::Cell::new(0.0f64);
    let post = wasm_bindgen::closure::Closure::<dyn Fn()>::new(move || {
        let height = measured.get_bounding_client_rect().height().ceil();
        if height == last.get() {
            return;
        }
        last.set(height);
        let message = js_sys::Object::new();
        for (key, value) in
            [("type", JsValue::from_str(HEIGHT_MESSAGE_TYPE)), ("widget", JsValue::from_str(widget)), ("height", JsValue::from_f64(height))]
        {
            let _ = js_sys::Reflect::set(&message, &key.into(), &value);
        }
        // A host that navigated away or a sandbox without scripts only
        // loses the size hint; the widget keeps working.
        let _ = parent.post_message(&message, "*");
    });
    match web_sys::ResizeObserver::new(post.as_ref().unchecked_ref()) {
        Ok(observer) => observer.observe(&root),
        // Without ResizeObserver (very old browsers) the host still gets the first height.
        Err(_) => {
            let _ = post.as_ref().unchecked_ref::<js_sys::Function>().call0(&JsValue::NULL);
        }
    }
    // The observer calls it for the page's lifetime.
    post.forget();
}
