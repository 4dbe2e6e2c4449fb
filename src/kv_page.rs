//! The KV-cache capacity page (and its compact `?embed=kv` widget).
//!
//! State is one [`Form`] of raw field texts. Every input writes its text into
//! it, the address bar follows it (`replaceState`), and [`kv::evaluate`]
//! turns it into figures. While a field is invalid the last valid figures
//! stay on screen, marked as such, and the message names the field.

use kv::calc::Term;
use kv::presets::PRESETS;
use kv::{units, Dtype, Evaluation, FieldError, Form, Inputs, Report};
use leptos::prelude::*;
use leptos::task::spawn_local;

use crate::browser;
use crate::kv_distribution::{DistributionSection, DistributionState};
use crate::kv_gguf::GgufImport;
use crate::kv_reconcile::{ReconcileSection, ReconcileState};

type Errors = Memo<Vec<FieldError>>;

/// The calculator, bound to the URL query.
#[component]
pub fn KvPage() -> impl IntoView {
    let (initial, query_warnings) = Form::from_query(&browser::current_query());
    let embed = initial.is_embed();
    if embed {
        browser::announce_height("kv");
    }
    let form = RwSignal::new(initial);
    let evaluation = Memo::new(move |_| form.with(kv::evaluate));
    let errors: Errors = Memo::new(move |_| match evaluation.get() {
        Evaluation::Invalid(e) => e,
        _ => Vec::new(),
    });
    let last_good = RwSignal::new(None::<(Box<Inputs>, Box<Report>)>);
    let distribution = DistributionState::new();
    let reconciler = ReconcileState::new();
    Effect::new(move |_| {
        if let Evaluation::Ready { inputs, report } = evaluation.get() {
            last_good.set(Some((inputs, report)));
        }
    });
    // The address bar follows the inputs without a history entry per keystroke.
    Effect::new(move |_| browser::replace_query(&form.with(Form::to_query)));

    let problem = move || match evaluation.get() {
        Evaluation::Invalid(errs) => Some(format!(
            "Fix {} to update the figures: {}",
            if errs.len() == 1 { "this field" } else { "these fields" },
            errs.iter().map(|e| e.to_string()).collect::<Vec<_>>().join(" · ")
        )),
        Evaluation::Failed(message) => Some(message),
        Evaluation::Ready { .. } => None,
    };
    let warnings = (!query_warnings.is_empty()).then(|| {
        view! { <p class="warning" data-testid="query-warnings">{query_warnings.join(" · ")}</p> }
    });

    let results = move || {
        last_good.get().map(|(inputs, report)| {
            view! { <Results inputs=*inputs report=*report form=form embed=embed/> }
        })
    };

    view! {
        <main class="kv" class:embed=embed>
            <header class="page-head">
                {(!embed).then(|| view! {
                    <p class="crumbs"><a href="router/" data-testid="to-router">"Router decide latency in this browser →"</a></p>
                })}
                <h1>"KV-cache capacity"</h1>
                <p class="lede">
                    "B" <sub>"KV"</sub> " = 2 × L × H" <sub>"kv"</sub> " × d" <sub>"head"</sub>
                    " × b × ΣT" <sub>"i"</sub> " — exact integer bytes; KiB = 2" <sup>"10"</sup>
                    ", GiB = 2" <sup>"30"</sup> " bytes, two decimals."
                </p>
            </header>
            {warnings}
            <div class="layout">
                <form class="inputs" on:submit=|ev| ev.prevent_default() aria-label="Calculator inputs">
                    <ModelInputs form=form errors=errors embed=embed/>
                    <fieldset>
                        <legend>"Precision"</legend>
                        <DtypeField form=form errors=errors name="kv_dtype"/>
                        {(!embed).then(|| view! {
                            <ScaleFields form=form errors=errors/>
                            <DtypeField form=form errors=errors name="weight_dtype"/>
                            <TextField form=form errors=errors name="params"/>
                            <TextField form=form errors=errors name="weight_bytes"/>
                        })}
                    </fieldset>
                    <fieldset>
                        <legend>"Workload"</legend>
                        <TextField form=form errors=errors name="seqs"/>
                        {(!embed).then(|| view! {
                            <TextField form=form errors=errors name="block"/>
                            <TextField form=form errors=errors name="prefix"/>
                            <TextField form=form errors=errors name="prefix_seqs"/>
                        })}
                    </fieldset>
                    {(!embed).then(|| view! {
                        <fieldset>
                            <legend>"GPUs and budget"</legend>
                            <TextField form=form errors=errors name="tp"/>
                            <TextField form=form errors=errors name="gpu_gib"/>
                            <TextField form=form errors=errors name="reserve"/>
                        </fieldset>
                        <fieldset>
                            <legend>"Cross-check against vLLM"</legend>
                            <TextArea form=form errors=errors name="vllm"
                                placeholder="GPU KV cache size: 491,008 tokens\nMaximum concurrency for 8,192 tokens per request: 59.94x"/>
                        </fieldset>
                    })}
                </form>
                <section class="results" aria-live="polite" aria-label="Results">
                    {move || problem().map(|p| view! { <p class="problem" role="alert" data-testid="problem">{p}</p> })}
                    <div class:stale=move || !matches!(evaluation.get(), Evaluation::Ready { .. })>{results}</div>
                    {(!embed).then(|| view! { <DistributionSection state=distribution form=form last_good=last_good/> })}
                    {(!embed).then(|| view! { <ReconcileSection state=reconciler last_good=last_good/> })}
                </section>
            </div>
        </main>
    }
}

/// The field's validation message, if any.
fn message_for(errors: Errors, name: &'static str) -> impl Fn() -> Option<String> + Copy {
    move || errors.with(|es| es.iter().find(|e| e.field == name).map(|e| e.message.clone()))
}

fn field_meta(name: &'static str) -> &'static kv::Field {
    kv::form::field(name).unwrap_or_else(|| panic!("the page names a field `{name}` that kv::FIELDS lacks"))
}

/// A labelled text input bound to one form field, with its inline message.
#[component]
fn TextField(form: RwSignal<Form>, errors: Errors, name: &'static str) -> impl IntoView {
    let meta = field_meta(name);
    let message = message_for(errors, name);
    view! {
        <div class="field" class:invalid=move || message().is_some()>
            <label for=format!("f-{name}")>{meta.label}</label>
            <input
                id=format!("f-{name}")
                name=name
                type="text"
                autocomplete="off"
                spellcheck="false"
                data-field=name
                aria-invalid=move || if message().is_some() { "true" } else { "false" }
                aria-describedby=format!("h-{name} e-{name}")
                prop:value=move || form.with(|f| f.get(name).to_string())
                on:input=move |ev| form.update(|f| f.set(name, event_target_value(&ev)))
            />
            <small class="help" id=format!("h-{name}")>{meta.help}</small>
            <span class="error" id=format!("e-{name}") data-error-for=name>
                {move || message().map(|m| format!("{name}: {m}"))}
            </span>
        </div>
    }
}

/// A labelled textarea bound to one form field.
#[component]
fn TextArea(form: RwSignal<Form>, errors: Errors, name: &'static str, placeholder: &'static str) -> impl IntoView {
    let meta = field_meta(name);
    let message = message_for(errors, name);
    view! {
        <div class="field wide" class:invalid=move || message().is_some()>
            <label for=format!("f-{name}")>{meta.label}</label>
            <textarea
                id=format!("f-{name}")
                rows="3"
                spellcheck="false"
                data-field=name
                placeholder=placeholder
                aria-describedby=format!("e-{name}")
                prop:value=move || form.with(|f| f.get(name).to_string())
                on:input=move |ev| form.update(|f| f.set(name, event_target_value(&ev)))
            ></textarea>
            <span class="error" id=format!("e-{name}") data-error-for=name>
                {move || message().map(|m| format!("{name}: {m}"))}
            </span>
        </div>
    }
}

/// A dtype menu. A value from the URL that is not a dtype stays selectable
/// (marked invalid), so a bad link loses nothing.
#[component]
fn DtypeField(form: RwSignal<Form>, errors: Errors, name: &'static str) -> impl IntoView {
    let meta = field_meta(name);
    let message = message_for(errors, name);
    let current = move || form.with(|f| f.get(name).to_string());
    let options = move || {
        let now = current();
        let mut names: Vec<String> = Dtype::ALL.iter().map(|d| d.name().to_string()).collect();
        if !names.contains(&now) {
            names.push(now.clone());
        }
        names
            .into_iter()
            .map(|n| {
                let selected = n == now;
                let label = if Dtype::ALL.iter().any(|d| d.name() == n) { n.clone() } else { format!("{n} (invalid)") };
                view! { <option value=n.clone() selected=selected>{label}</option> }
            })
            .collect_view()
    };
    view! {
        <div class="field" class:invalid=move || message().is_some()>
            <label for=format!("f-{name}")>{meta.label}</label>
            <select
                id=format!("f-{name}")
                data-field=name
                aria-describedby=format!("e-{name}")
                on:change=move |ev| form.update(|f| f.set(name, event_target_value(&ev)))
            >
                {options}
            </select>
            <span class="error" id=format!("e-{name}") data-error-for=name>
                {move || message().map(|m| format!("{name}: {m}"))}
            </span>
        </div>
    }
}

#[component]
fn ScaleFields(form: RwSignal<Form>, errors: Errors) -> impl IntoView {
    view! {
        <TextField form=form errors=errors name="scale_bits"/>
        <TextField form=form errors=errors name="scale_group"/>
    }
}

/// Preset menu, shape fields, layer types and the config.json import.
#[component]
fn ModelInputs(form: RwSignal<Form>, errors: Errors, embed: bool) -> impl IntoView {
    let preset_id = move || form.with(|f| f.get("preset").to_string());
    let on_preset = move |ev: leptos::ev::Event| {
        let id = event_target_value(&ev);
        match kv::presets::find(&id) {
            Some(p) => form.update(|f| f.apply(&p.patch())),
            None => form.update(|f| f.set("preset", "")),
        }
    };
    let preset_info = move || {
        let id = preset_id();
        kv::presets::find(&id).map(|p| {
            let modified = !form.with(|f| f.holds_preset(p));
            view! {
                <p class="preset-source" data-testid="preset-source">
                    {if modified { format!("Modified from {} · ", p.name) } else { format!("{} · ", p.name) }}
                    <a href=p.source target="_blank" rel="noopener">"config.json source"</a>
                    {(!p.note.is_empty()).then(|| format!(" · {}", p.note))}
                </p>
            }
        })
    };
    view! {
        <fieldset>
            <legend>"Model"</legend>
            <div class="field wide">
                <label for="f-preset">"Preset"</label>
                <select id="f-preset" data-field="preset" on:change=on_preset>
                    <option value="" selected=move || preset_id().is_empty()>"Custom (illustrative parameters)"</option>
                    {PRESETS.iter().map(|p| {
                        let id = p.id;
                        view! { <option value=id selected=move || preset_id() == id>{p.name}</option> }
                    }).collect_view()}
                </select>
                {preset_info}
            </div>
            <TextField form=form errors=errors name="layers"/>
            <TextField form=form errors=errors name="kv_heads"/>
            <TextField form=form errors=errors name="head_dim"/>
            {(!embed).then(|| view! {
                <details class="wide" open=move || form.with(|f| !(f.get("layer_types").is_empty() && f.get("layer_kv_heads").is_empty() && f.get("kv_lora_rank").is_empty()))>
                    <summary>"Layer types: sliding window, MLA, per-layer KV heads, recurrent state"</summary>
                    <TextField form=form errors=errors name="layer_types"/>
                    <TextField form=form errors=errors name="window"/>
                    <TextField form=form errors=errors name="layer_kv_heads"/>
                    <TextField form=form errors=errors name="kv_lora_rank"/>
                    <TextField form=form errors=errors name="qk_rope_head_dim"/>
                    <TextField form=form errors=errors name="conv_state"/>
                    <TextField form=form errors=errors name="ssm_state"/>
                    <TextField form=form errors=errors name="state_dtype"/>
                    <TextField form=form errors=errors name="ssm_dtype"/>
                </details>
                <ConfigImport form=form/>
                <GgufImport form=form/>
            })}
        </fieldset>
    }
}

/// Paste, pick or drop a Hugging Face config.json; nothing is fetched.
#[component]
fn ConfigImport(form: RwSignal<Form>) -> impl IntoView {
    let text = RwSignal::new(String::new());
    let notes = RwSignal::new(Vec::<String>::new());
    let error = RwSignal::new(None::<String>);
    let import = move |source: String| {
        match kv::config_import::import(source.as_bytes()) {
            Ok(imported) => {
                form.update(|f| f.apply(&imported.patch));
                let mut all = vec![format!("Imported {}.", imported.model)];
                all.extend(imported.notes);
                notes.set(all);
                error.set(None);
            }
            // The pasted text stays in the box so it can be fixed.
            Err(e) => {
                error.set(Some(e.to_string()));
                notes.set(Vec::new());
            }
        }
    };
    let load_file = move |file: Option<web_sys::File>| {
        if let Some(file) = file {
            spawn_local(async move {
                match browser::read_file_text(file).await {
                    Ok(content) => {
                        text.set(content.clone());
                        import(content);
                    }
                    Err(e) => error.set(Some(e)),
                }
            });
        }
    };
    view! {
        <details class="wide import" data-testid="config-import">
            <summary>"Import a config.json (offline)"</summary>
            <DropZone on_file=load_file>
                <label for="config-text">"Paste or drop a Hugging Face config.json"</label>
                <textarea id="config-text" rows="5" spellcheck="false" data-testid="config-text"
                    prop:value=move || text.get()
                    on:input=move |ev| text.set(event_target_value(&ev))
                ></textarea>
                <div class="row">
                    <button type="button" data-testid="config-import-button" on:click=move |_| import(text.get_untracked())>"Import"</button>
                    <label class="file">
                        "or choose a file "
                        <input type="file" accept=".json,application/json" on:change=move |ev: leptos::ev::Event| load_file(browser::picked_file(&ev))/>
                    </label>
                </div>
            </DropZone>
            {move || error.get().map(|e| view! { <p class="error" role="alert" data-testid="config-error">{e}</p> })}
            <ul class="notes" data-testid="config-notes">
                {move || notes.get().into_iter().map(|n| view! { <li>{n}</li> }).collect_view()}
            </ul>
        </details>
    }
}

/// Pasted input: a text box, a button that reads what it holds, and a file
/// picker whose file is put in the box and read at once. `on_read` gets
/// where the text came from and the text; a file the browser cannot read
/// goes to `on_error`. `children` add to the buttons. Test ids:
/// `{id}-text`, `{id}-read`, `{id}-file`.
#[component]
#[allow(clippy::too_many_arguments)]
pub fn PasteBox<R, E>(
    text: RwSignal<String>,
    id: &'static str,
    label: &'static str,
    placeholder: &'static str,
    /// What the pasted text is called in messages, e.g. "the pasted lengths".
    pasted: &'static str,
    button: &'static str,
    accept: &'static str,
    on_read: R,
    on_error: E,
    #[prop(optional)] children: Option<Children>,
) -> impl IntoView
where
    R: Fn(String, String) + Copy + 'static,
    E: Fn(String) + Copy + 'static,
{
    let on_file = move |ev: leptos::ev::Event| {
        let Some(file) = browser::picked_file(&ev) else { return };
        spawn_local(async move {
            let name = file.name();
            match browser::read_file_text(file).await {
                Ok(content) => {
                    text.set(content.clone());
                    on_read(name, content);
                }
                Err(e) => on_error(e),
            }
        });
    };
    view! {
        <textarea
            data-testid=format!("{id}-text")
            rows="5"
            aria-label=label
            placeholder=placeholder
            prop:value=move || text.get()
            on:input=move |ev| text.set(event_target_value(&ev))
        ></textarea>
        <p class="actions">
            <button type="button" data-testid=format!("{id}-read") on:click=move |_| on_read(pasted.to_string(), text.get_untracked())>{button}</button>
            " "
            <label class="file">"or open a file " <input type="file" accept=accept data-testid=format!("{id}-file") on:change=on_file/></label>
            {children.map(|c| view! { " " {c()} })}
        </p>
    }
}

/// A drop target that hands the first dropped file to `on_file`.
#[component]
pub fn DropZone<F>(on_file: F, children: Children) -> impl IntoView
where
    F: Fn(Option<web_sys::File>) + Copy + 'static,
{
    view! {
        <div
            class="dropzone"
            on:dragover=|ev: leptos::ev::DragEvent| ev.prevent_default()
            on:drop=move |ev: leptos::ev::DragEvent| {
                ev.prevent_default();
                on_file(browser::dropped_file(&ev));
            }
        >
            {children()}
        </div>
    }
}

/// A button that copies `text` and says whether it worked.
#[component]
fn CopyButton(text: String, label: &'static str, testid: &'static str) -> impl IntoView {
    let status = RwSignal::new(String::new());
    let on_click = move |_| {
        let text = text.clone();
        spawn_local(async move {
            status.set(match browser::copy_text(&text).await {
                Ok(()) => "copied".into(),
                Err(e) => e,
            });
        });
    };
    view! {
        <button type="button" class="copy" data-testid=testid on:click=on_click>{label}</button>
        <span class="copy-status" role="status">{move || status.get()}</span>
    }
}

fn term_rows(terms: &[Term]) -> impl IntoView {
    terms
        .iter()
        .map(|t| {
            let sign = if t.negative { "−" } else { "+" };
            view! {
                <tr class:saving=t.negative>
                    <th scope="row">{t.label.clone()}</th>
                    <td class="expr"><code>{t.expression.clone()}</code></td>
                    <td class="num">{format!("{sign}{}", t.bytes_text())}</td>
                    <td class="num">{units::binary_from_bits(t.bits, 1)}</td>
                </tr>
            }
        })
        .collect_view()
}

/// Every figure of a valid calculation.
#[component]
fn Results(inputs: Inputs, report: Report, form: RwSignal<Form>, embed: bool) -> impl IntoView {
    let per_seq_label = if report.per_sequence_is_mean { "Per sequence (mean)" } else { "Per sequence" };
    let share_query = form.with_untracked(Form::to_query);
    let share = format!("{}?{share_query}", browser::page_base());
    let full_link = {
        let mut f = form.get_untracked();
        f.set("embed", "");
        format!("{}?{}", browser::page_base(), f.to_query())
    };
    let svg = kv::plot::svg(&inputs, &report);
    let tp = report.tensor_parallel.clone();
    let headline = view! {
        <div class="headline">
            <div class="figure main">
                <span class="name">"Logical KV payload"</span>
                <span class="value" data-testid="logical-total">{units::binary(report.logical_bytes)}</span>
            </div>
            <div class="figure">
                <span class="name">"Per token · all layers"</span>
                <span class="value" data-testid="per-token">{units::binary(report.per_token_bytes)}</span>
            </div>
            <div class="figure">
                <span class="name">{per_seq_label}</span>
                <span class="value" data-testid="per-sequence">{report.per_sequence_text.clone()}</span>
            </div>
        </div>
        <p class="formula">
            <code data-testid="formula">{report.formula.clone()}</code>
            " "
            <CopyButton text=report.formula.clone() label="Copy formula" testid="copy-formula"/>
        </p>
        <p class="exact">
            <span data-testid="exact-bytes">{format!("{} bytes", units::group_digits(report.logical_bytes))}</span>
            {if report.formula_is_payload {
                " · the formula above is the whole logical payload".to_string()
            } else {
                " · the formula above is the conventional full-attention figure, for comparison; the lines below are this model's payload".to_string()
            }}
        </p>
    };
    if embed {
        return view! {
            {headline}
            <table class="terms" data-testid="logical-terms"><tbody>{term_rows(&report.logical.terms)}</tbody></table>
            <p class="open-full"><a href=full_link target="_blank" rel="noopener">"Open in the full workbench"</a></p>
        }
        .into_any();
    }
    let budget = report.budget.clone().map(|b| {
        view! {
            <section class="budget" data-testid="budget">
                <h2>"GPU budget"</h2>
                <table class="terms"><tbody>
                    <tr><th scope="row">"GPU memory"</th><td class="num">{units::binary(b.gpu_bytes)}</td></tr>
                    <tr><th scope="row">"− reserve"</th><td class="num">{units::binary(b.reserve_bytes)}</td></tr>
                    <tr><th scope="row">{format!("− weights per GPU ({} of {} total)", units::binary(b.weight_bytes_per_gpu), units::binary(b.weight_bytes_total))}</th><td class="num">{units::binary(b.weight_bytes_per_gpu)}</td></tr>
                    <tr class="total"><th scope="row">"= KV budget per GPU"</th><td class="num" data-testid="kv-budget">{units::binary(b.kv_budget_bytes_per_gpu)}</td></tr>
                    <tr><th scope="row">"Max retained tokens (each in every layer)"</th><td class="num" data-testid="max-tokens">{units::group_digits(b.max_retained_tokens)}</td></tr>
                    <tr><th scope="row">"Max concurrent sequences of this length mix"</th><td class="num" data-testid="max-seqs">{units::group_digits(b.max_sequences)}</td></tr>
                </tbody></table>
                <p class:bad=!b.current_mix_fits>{if !b.weights_fit {
                    "The weights alone do not fit in this GPU budget.".to_string()
                } else if b.current_mix_fits {
                    format!("The current mix fits with {} to spare per GPU.", units::binary(b.headroom_bytes as u128))
                } else {
                    format!("The current mix does not fit: {} short per GPU.", units::binary(b.headroom_bytes.unsigned_abs()))
                }}</p>
            </section>
        }
    });
    let cross = report.cross_check.clone().map(|c| {
        view! {
            <section class="cross" data-testid="cross-check">
                <h2>"Cross-check against vLLM"</h2>
                <table class="terms"><tbody>
                    <tr><th scope="row">{format!("Engine tokens ({})", c.tokens_source)}</th><td class="num">{units::group_digits(c.engine_tokens)}</td></tr>
                    <tr><th scope="row">{format!("KV memory ({})", c.kv_memory_source)}</th><td class="num">{units::binary(c.kv_memory_bytes)}</td></tr>
                    <tr><th scope="row">"Implied bytes per token"</th><td class="num" data-testid="implied-per-token">{c.implied_bytes_per_token.clone()}</td></tr>
                    <tr><th scope="row">"Computed bytes per token per GPU (with scales)"</th><td class="num" data-testid="computed-per-token">{units::group_digits(c.computed_bytes_per_token)}</td></tr>
                    <tr><th scope="row">"Difference"</th><td class="num" data-testid="cross-difference">{c.difference_text.clone()}</td></tr>
                </tbody></table>
            </section>
        }
    });
    view! {
        {headline}
        <section data-testid="logical-breakdown">
            <h2>"Logical payload, term by term"</h2>
            <table class="terms" data-testid="logical-terms">
                <thead><tr><th scope="col">"term"</th><th scope="col">"with your numbers"</th><th scope="col" class="num">"bytes"</th><th scope="col" class="num">"binary"</th></tr></thead>
                <tbody>{term_rows(&report.logical.terms)}</tbody>
                <tfoot><tr class="total"><th scope="row">"= logical payload"</th><td></td><td class="num">{units::group_digits(report.logical_bytes)}</td><td class="num">{units::binary(report.logical_bytes)}</td></tr></tfoot>
            </table>
        </section>
        <section data-testid="allocated">
            <h2>{format!("Allocated with {}-token blocks", report.block)}</h2>
            <table class="terms">
                <tbody>
                    <tr><th scope="row">"logical payload"</th><td class="num">{units::group_digits(report.logical_bytes)}</td><td class="num">{units::binary(report.logical_bytes)}</td></tr>
                    <tr><th scope="row">{if report.hybrid_page.is_some() { "+ paged-block rounding and each recurrent state padded to a page" } else { "+ paged-block rounding (⌈Tᵢ / block⌉ × block per sequence)" }}</th><td class="num" data-testid="rounding">{units::group_digits(report.rounding_bytes)}</td><td class="num">{units::binary(report.rounding_bytes)}</td></tr>
                    <tr class="total"><th scope="row">"= allocated"</th><td class="num" data-testid="allocated-bytes">{units::group_digits(report.allocated_bytes)}</td><td class="num" data-testid="allocated-total">{units::binary(report.allocated_bytes)}</td></tr>
                </tbody>
            </table>
            {report.hybrid_page.as_ref().map(|p| view! { <p class="hint" data-testid="hybrid-page">{p.explanation()}</p> })}
        </section>
        <section data-testid="tensor-parallel">
            <h2>{format!("Tensor parallel: TP = {}", tp.degree)}</h2>
            <ul class="placements">
                {tp.placements.iter().map(|p| view! { <li><strong>{p.mode.clone()}</strong>" · "{p.label.clone()}": "{p.explanation.clone()}</li> }).collect_view()}
            </ul>
            <table class="terms"><tbody>
                <tr><th scope="row">"per GPU, logical"</th><td class="num" data-testid="per-gpu-logical">{units::binary(tp.per_gpu_logical_bytes)}</td></tr>
                <tr><th scope="row">"per GPU, allocated"</th><td class="num" data-testid="per-gpu-allocated">{units::binary(tp.per_gpu_allocated_bytes)}</td></tr>
                <tr><th scope="row">"all GPUs, allocated (replicas counted)"</th><td class="num">{units::binary(tp.all_gpus_allocated_bytes)}</td></tr>
                <tr><th scope="row">"of which replicated heads"</th><td class="num">{units::binary(tp.replication_bytes)}</td></tr>
            </tbody></table>
        </section>
        {budget.map(|b| b.into_any()).unwrap_or_else(|| view! { <p class="hint">"Enter a GPU memory size to invert the budget into tokens and sequences."</p> }.into_any())}
        {cross}
        <section class="plot" data-testid="plot">
            <h2>"KV bytes per GPU against context length"</h2>
            <div inner_html=svg></div>
        </section>
        {(!report.notes.is_empty()).then(|| view! { <ul class="notes">{report.notes.iter().map(|n| view! { <li>{n.clone()}</li> }).collect_view()}</ul> })}
        <section class="share">
            <h2>"Share"</h2>
            <p>
                <a href=share.clone() data-testid="share-link">"Link to exactly these numbers"</a>
                " "
                <CopyButton text=share label="Copy link" testid="copy-link"/>
            </p>
        </section>
    }
    .into_any()
}
