//! The calculator's "Read a GGUF header" section: a picked or dropped
//! `.gguf` of any size read a slice at a time from its start (the weights
//! never), through the GGUF reader the router's loader uses, into the form.

use crate::browser;
use crate::kv_page::DropZone;
use kv::config_import::Imported;
use kv::{units, Form};
use leptos::prelude::*;
use leptos::task::spawn_local;

/// The section's state: what the last file gave.
#[derive(Debug, Clone, PartialEq)]
enum GgufRead {
    Idle,
    Reading {
        file: String,
    },
    Read {
        model: String,
        read: u64,
        len: u64,
        notes: Vec<String>,
    },
    /// The file could not be read as a model; the form is as it was.
    Failed {
        file: String,
        reason: String,
    },
}

/// Reads `file`'s header a slice at a time: the import, the bytes read and
/// the file's length.
async fn read(file: &web_sys::File) -> Result<(Imported, u64, u64), String> {
    let len = file.size() as u64;
    let mut reader = gguf::PrefixReader::new(len, kv::gguf_import::FIRST_READ, kv::gguf_import::HEADER_LIMIT);
    loop {
        let bytes = browser::read_file_prefix(file, reader.want()).await?;
        if let Some(header) = reader.offer(&bytes).map_err(|e| e.to_string())? {
            let imported = kv::gguf_import::import(&header).map_err(|e| e.to_string())?;
            return Ok((imported, bytes.len() as u64, len));
        }
    }
}

#[component]
pub fn GgufImport(form: RwSignal<Form>) -> impl IntoView {
    let state = RwSignal::new(GgufRead::Idle);
    let load = move |file: Option<web_sys::File>| {
        let Some(file) = file else { return };
        state.set(GgufRead::Reading { file: file.name() });
        spawn_local(async move {
            state.set(match read(&file).await {
                Ok((imported, read, len)) => {
                    form.update(|f| f.apply(&imported.patch));
                    GgufRead::Read { model: imported.model, read, len, notes: imported.notes }
                }
                Err(reason) => GgufRead::Failed { file: file.name(), reason },
            });
        });
    };
    let shown = move || match state.get() {
        GgufRead::Idle => ().into_any(),
        GgufRead::Reading { file } => view! { <p class="hint" role="status">{format!("Reading the header of {file}…")}</p> }.into_any(),
        GgufRead::Read { model, read, len, notes } => view! {
            <p data-testid="gguf-read" role="status">
                {format!(
                    "Read {model} from its header: the first {} bytes ({}) of {} ({}); the weights were not read.",
                    units::group_digits(read as u128),
                    units::binary(read as u128),
                    units::group_digits(len as u128),
                    units::binary(len as u128)
                )}
            </p>
            <ul class="notes" data-testid="gguf-notes">{notes.into_iter().map(|n| view! { <li>{n}</li> }).collect_view()}</ul>
        }
        .into_any(),
        GgufRead::Failed { file, reason } => {
            view! { <p class="error" role="alert" data-testid="gguf-error">{format!("{file}: {reason}. The form is unchanged.")}</p> }
                .into_any()
        }
    };
    view! {
        <details class="wide import" data-testid="gguf-import">
            <summary>"Read a model from its GGUF header (offline)"</summary>
            <DropZone on_file=load>
                <label class="file">
                    "Drop a .gguf of any size here, or choose one: only its header is read "
                    <input type="file" accept=".gguf" data-testid="gguf-file" on:change=move |ev: leptos::ev::Event| load(browser::picked_file(&ev))/>
                </label>
            </DropZone>
            {shown}
        </details>
    }
}
