//! The roofline readout of a decide (`bench::roofline`), shown the same
//! on the router page and in the latency widget's details: this device's
//! ceilings, each part of the decide against its own, and the sentence
//! saying whether the speed is what the device allows.

use bench::report::format_ms;
use bench::roofline::{Bound, DeviceCeilings, Roofline};
use leptos::prelude::*;
use router::{Decision, FlopModel};

use crate::worker_client::WorkerBuild;

/// The button's label: the question the readout answers.
pub const QUESTION: &str = "Is this speed what this device allows? (measures its ceilings, about a second)";

/// The readout of `decision` against `ceilings`, or why there is none.
#[component]
pub fn RooflineView(ceilings: DeviceCeilings, flops: FlopModel, decision: Decision) -> impl IntoView {
    let device = format!(
        "This device: f32 GEMM {:.1} GFLOP/s, int8 GEMM {:.1} GOP/s ({}), memory {:.1} GB/s; {} thread(s). {} Projections: {} of {} on the integer kernels, {:.1} MiB of weights.",
        ceilings.f32.gflops,
        ceilings.int8.gflops,
        ceilings.int8.kernel,
        ceilings.bandwidth.gb_per_s,
        ceilings.threads,
        WorkerBuild::detect().sentence(),
        ceilings.integer_projections,
        ceilings.projections,
        ceilings.projection_bytes as f64 / (1u64 << 20) as f64,
    );
    let readout = match Roofline::of(&ceilings, &flops, &decision) {
        Err(why) => {
            view! { <p class="note warn" data-testid="roofline-problem">{format!("No roofline for this decide: {why}.")}</p> }.into_any()
        }
        Ok(roofline) => {
            let verdict = roofline.verdict();
            let share = roofline.share_of_limit();
            view! {
                <div class="table-wrap">
                    <table class="bench-table" data-testid="roofline-table">
                        <caption>{format!("The last decide ({} tokens prefilled, {}) against this device's ceilings", roofline.prefilled_tokens, format_ms(roofline.decide_ms))}</caption>
                        <thead><tr>
                            <th scope="col">"part"</th><th scope="col">"time"</th><th scope="col">"achieved"</th>
                            <th scope="col">"ceiling"</th><th scope="col">"bound by"</th><th scope="col">"of ceiling"</th><th scope="col">"at ceiling"</th>
                        </tr></thead>
                        <tbody>
                            {roofline.parts.iter().map(|p| view! {
                                <tr data-testid="roofline-part" data-part=p.part.name() data-share=p.share().to_string()>
                                    <th scope="row">{p.part.name()}</th>
                                    <td class="num">{format_ms(p.ms)}</td>
                                    <td class="num">{format!("{:.1} GFLOP/s", p.achieved_gflops)}</td>
                                    <td class="num">{format!("{:.1} GFLOP/s", p.ceiling_gflops)}</td>
                                    <td>{match p.bound { Bound::Compute => format!("compute: {}", p.ceiling_source), Bound::Memory => p.ceiling_source.clone() }}</td>
                                    <td class="num">{format!("{:.0} %", 100.0 * p.share())}</td>
                                    <td class="num">{format_ms(p.floor_ms)}</td>
                                </tr>
                            }).collect_view()}
                            <tr data-testid="roofline-part" data-part="rest">
                                <th scope="row">"rest"</th>
                                <td class="num">{format_ms(roofline.rest_ms)}</td>
                                <td colspan="4">"norms, RoPE, the K/V copy, tokenizing, the head: no probe bounds them"</td>
                                <td class="num">{format_ms(roofline.rest_ms)}</td>
                            </tr>
                        </tbody>
                    </table>
                </div>
                <p class="note" data-testid="roofline-verdict" data-share-of-limit=share.to_string()>{verdict}</p>
            }
            .into_any()
        }
    };
    view! {
        <div class="roofline" data-testid="roofline">
            <p class="note" data-testid="roofline-device">{device}</p>
            {readout}
        </div>
    }
}
