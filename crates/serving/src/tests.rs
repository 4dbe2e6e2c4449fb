//! The scheduler against [`crate::testing::TimedEngine`]: what the server
//! decides is checked exactly. The real engine's behaviour under load is
//! what `bench-decide --serve` measures.

use crate::testing::*;
use crate::*;
use std::cell::Cell;
use std::rc::Rc;

#[test]
fn poisson_arrivals_come_from_the_seed_alone() {
    let a = poisson_trace(4.0, 100.0, 7, 176);
    assert_eq!(a, poisson_trace(4.0, 100.0, 7, 176));
    assert_ne!(a, poisson_trace(4.0, 100.0, 8, 176));
    // 400 expected; a Poisson count's standard deviation is 20.
    assert!((340..=460).contains(&a.len()), "{} arrivals", a.len());
    assert!(a.windows(2).all(|w| w[0].at_ms <= w[1].at_ms) && a.last().unwrap().at_ms < 100_000.0);
    assert!(a.iter().all(|x| x.prompt < 176));
    assert!(poisson_trace(4.0, 100.0, 7, 0).is_empty());
}

#[test]
fn a_short_request_runs_between_a_long_ones_chunks_only_when_shortest_first() {
    // The long prompt starts at 0; the short one arrives at 100 ms.
    let trace = arrivals(&[(0.0, 1), (100.0, 0)]);
    let run = |chunk, policy| {
        let clock = Rc::new(Cell::new(0.0));
        let mut e = engine(&clock);
        drive(Server::new(settings(chunk, policy), prompts(), trace.clone()).unwrap(), &mut e, &clock)
    };
    let whole = run(None, Policy::ShortestFirst);
    let fcfs = run(Some(128), Policy::Fcfs);
    let shortest = run(Some(128), Policy::ShortestFirst);
    let short_e2e = |r: &ServeRun| r.records[1].elapsed_ms();
    let long_e2e = |r: &ServeRun| r.records[0].elapsed_ms();
    // One prefill: long = 1 + 5 + 1024 + 1 = 1031 ms; the short one waits for it.
    assert_eq!(long_e2e(&whole), 1031.0);
    assert_eq!(whole.records[1].queue_ms, 931.0);
    // FCFS with chunks: the long one keeps the engine and pays 8 calls' overhead.
    assert_eq!(long_e2e(&fcfs), 1066.0);
    assert!(short_e2e(&fcfs) > short_e2e(&whole));
    // Shortest first: the short one runs after the chunk in progress
    // (begin 1 ms + 133 ms), for 1 + 69 + 1 ms.
    assert_eq!(shortest.records[1].queue_ms, 34.0);
    assert_eq!(short_e2e(&shortest), 34.0 + 71.0);
    assert_eq!(long_e2e(&shortest), long_e2e(&fcfs) + 71.0);
    assert_eq!(shortest.records[0].preempted_ms, 71.0);
    assert_eq!(shortest.records[0].chunks, 8);
    assert!(shortest.records.iter().all(|r| r.outcome == Outcome::Served));
    assert_eq!(shortest.records[1].top.as_deref(), Some("top-of-short"));
}

#[test]
fn overload_keeps_every_request_rejected_timed_out_or_unfinished() {
    // 40 long requests in 2 s against 1 s of work each, a queue of 4.
    let trace = arrivals(&(0..40).map(|i| (i as f64 * 50.0, 1)).collect::<Vec<_>>());
    let settings = ServeSettings {
        duration_s: 2.0,
        warmup_s: 0.5,
        drain_s: 2.5,
        timeout_ms: 3_000.0,
        queue_limit: 4,
        slo_ms: 1_500.0,
        ..ServeSettings::default()
    };
    let clock = Rc::new(Cell::new(0.0));
    let mut e = engine(&clock);
    let run = drive(Server::new(settings, prompts(), trace).unwrap(), &mut e, &clock);
    assert_eq!(run.records.len(), 40, "every arrival has a record");
    assert_eq!(run.records.iter().map(|r| r.id).collect::<Vec<_>>(), (0..40).collect::<Vec<_>>());
    let s = &run.summary;
    let total: usize = s.outcomes.iter().chain(&s.warmup_outcomes).map(|(_, n)| n).sum();
    assert_eq!(total, 40);
    assert_eq!(s.measured, 30);
    assert!(s.outcome(Outcome::Rejected) > 20, "{s:?}");
    assert!(s.outcome(Outcome::TimedOut) + s.outcome(Outcome::Unfinished) >= 1, "{s:?}");
    // Full: the limit held where the server admits (`drive` checks it);
    // counted from the arrival times, arrivals during a step come on top
    // until the server reads them and turns them away.
    assert!(s.max_in_system >= 4, "{s:?}");
    // Most measured requests are not served: the high percentiles say so.
    assert_eq!(s.end_to_end.p95, None);
    assert!(s.goodput_per_s < s.offered_per_s);
    // The run stops at duration + drain; the last record ends there or before.
    assert!(run.records.iter().all(|r| r.end_ms <= 4_500.0 + 1_100.0));
}

#[test]
fn timeouts_drop_waiting_requests_and_late_decisions_are_not_served() {
    // Three long requests at once; each takes 1,031 ms; the client waits 1.5 s.
    let trace = arrivals(&[(0.0, 1), (0.0, 1), (0.0, 1)]);
    let settings = ServeSettings { timeout_ms: 1_500.0, ..settings(None, Policy::Fcfs) };
    let clock = Rc::new(Cell::new(0.0));
    let mut e = engine(&clock);
    let run = drive(Server::new(settings, prompts(), trace).unwrap(), &mut e, &clock);
    let outcomes: Vec<Outcome> = run.records.iter().map(|r| r.outcome).collect();
    // The second finishes at 2,062 ms (late); the third was dropped at 1,500 ms
    // when the engine next looked, without running.
    assert_eq!(outcomes, [Outcome::Served, Outcome::TimedOut, Outcome::TimedOut]);
    assert_eq!(run.records[1].top.as_deref(), Some("top-of-long"));
    assert_eq!(run.records[2].start_ms, None);
    assert_eq!(run.records[2].end_ms, 1_500.0);
    assert_eq!(run.summary.throughput_per_s, 2.0 / 10.0);
}

#[test]
fn the_queue_counts_an_arrival_from_when_it_came_not_when_the_server_saw_it() {
    // The long request runs 0 → 1,031 ms in one step; the short one arrives
    // at 100 ms but the server only sees it after the step.
    let trace = arrivals(&[(0.0, 1), (100.0, 0)]);
    let clock = Rc::new(Cell::new(0.0));
    let mut e = engine(&clock);
    let run = drive(Server::new(settings(None, Policy::Fcfs), prompts(), trace).unwrap(), &mut e, &clock);
    assert_eq!(run.summary.max_in_system, 2);
    let at_100 = run.queue.iter().find(|q| q.t_ms == 100.0).expect("a sample when the second arrived");
    assert_eq!((at_100.in_system, at_100.waiting), (2, 1));
    assert_eq!(run.records[1].queue_ms, run.records[0].end_ms - 100.0);
    // Derived again from the records, the run is the same.
    assert_eq!(run.derived_again(), run);
}

#[test]
fn engine_failures_are_kept_as_failed() {
    let trace = arrivals(&[(0.0, 0), (10.0, 1)]);
    let clock = Rc::new(Cell::new(0.0));
    let mut e = TimedEngine { fail_task: Some("short"), ..engine(&clock) };
    let run = drive(Server::new(settings(None, Policy::Fcfs), prompts(), trace).unwrap(), &mut e, &clock);
    assert_eq!(run.records[0].outcome, Outcome::Failed);
    assert_eq!(run.records[0].error.as_deref(), Some("the engine refused it"));
    assert_eq!(run.records[1].outcome, Outcome::Served);
}

#[test]
fn percentiles_count_unserved_requests_as_beyond() {
    let p = Percentiles::of([Some(1.0), Some(2.0), Some(3.0), None]);
    assert_eq!((p.n, p.p50, p.p95, p.p99), (4, Some(2.0), None, None));
    let p = Percentiles::of((1..=100).map(|x| Some(x as f64)));
    assert_eq!((p.p50, p.p95, p.p99), (Some(50.0), Some(95.0), Some(99.0)));
    assert_eq!(Percentiles::of([]).p50, None);
}

#[test]
fn the_knee_is_the_last_sustained_rate() {
    // Arrivals as drawn: exactly the nominal rate over the measurement
    // interval, unless a test says otherwise.
    let run = |offered: f64, goodput: f64| drawn_run(offered, offered, goodput);
    let runs = [run(0.5, 0.5), run(1.0, 0.95), run(1.5, 1.2), run(2.0, 1.9)];
    assert_eq!(knee(&runs.iter().collect::<Vec<_>>(), KNEE_SHARE), Some(1.0));
    assert_eq!(knee(&runs[2..].iter().collect::<Vec<_>>(), KNEE_SHARE), None);
    // A draw that fell short of its nominal rate is judged by what arrived.
    let short_draw = [run(0.5, 0.5), drawn_run(1.0, 0.6, 0.58), run(1.5, 1.0)];
    assert_eq!(knee(&short_draw.iter().collect::<Vec<_>>(), KNEE_SHARE), Some(1.0));
}

#[test]
fn bad_settings_and_traces_are_named() {
    let bad = |s: ServeSettings| s.check().unwrap_err().to_string();
    assert!(bad(ServeSettings { rate_per_s: 0.0, ..ServeSettings::default() }).starts_with("rate:"));
    assert!(bad(ServeSettings { warmup_s: 30.0, ..ServeSettings::default() }).starts_with("warmup:"));
    assert!(bad(ServeSettings { chunk: Some(0), ..ServeSettings::default() }).starts_with("chunk:"));
    assert!(bad(ServeSettings { timeout_ms: f64::NAN, ..ServeSettings::default() }).starts_with("timeout:"));
    assert!(bad(ServeSettings { queue_limit: 0, ..ServeSettings::default() }).starts_with("queue limit:"));
    let trace = "{\"at_ms\": 0, \"task\": \"a\"}\n\n{\"at_ms\": 5, \"conversation\": {\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}}\n";
    assert_eq!(parse_trace(trace).unwrap().len(), 2);
    assert_eq!(
        parse_trace("{\"at_ms\": 9, \"task\": \"a\"}\n{\"at_ms\": 5, \"task\": \"b\"}").unwrap_err().to_string(),
        "trace line 2: at_ms = 5 comes before the previous line's 9"
    );
    assert!(parse_trace("{\"at_ms\": 1}").unwrap_err().to_string().contains("exactly one"));
    assert!(parse_trace("nope").unwrap_err().to_string().starts_with("trace line 1:"));
    assert!(parse_trace("\n").is_err());
    assert_eq!(parse_trace("{\"at_ms\": 0, \"task\": \"a\", \"max_tokens\": 48}").unwrap()[0].max_tokens, Some(48));
    assert_eq!(
        parse_trace("{\"at_ms\": 0, \"task\": \"a\", \"max_tokens\": 0}").unwrap_err().to_string(),
        "trace line 1: max_tokens = 0 is not between 1 and 1048576"
    );
    assert_eq!(Policy::parse("shortest_first").unwrap(), Policy::ShortestFirst);
    assert!(Policy::parse("lifo").unwrap_err().to_string().starts_with("policy:"));
    let out_of_set = Server::<TimedJob>::new(ServeSettings::default(), prompts(), arrivals(&[(0.0, 5)]));
    assert!(out_of_set.is_err());
}

#[cfg(not(target_arch = "wasm32"))]
mod properties {
    use super::*;
    use proptest::prelude::*;

    fn trace() -> impl Strategy<Value = Vec<(f64, usize)>> {
        prop::collection::vec((0.0..4_000.0f64, 0..2usize), 0..40).prop_map(|mut v| {
            v.sort_by(|a, b| a.0.total_cmp(&b.0));
            v
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        /// Whatever the trace and settings, every arrival ends with exactly
        /// one record whose times are in order, the outcome counts add up,
        /// and the queue never holds more than its limit.
        #[test]
        fn every_arrival_is_accounted_for_once(
            trace in trace(),
            chunk in prop::option::of(1usize..300),
            shortest in any::<bool>(),
            queue_limit in 1usize..6,
            timeout_ms in 200.0..3_000.0f64,
            drain_s in 0.0..2.0f64,
        ) {
            let settings = ServeSettings {
                duration_s: 4.0,
                warmup_s: 1.0,
                drain_s,
                chunk,
                policy: if shortest { Policy::ShortestFirst } else { Policy::Fcfs },
                timeout_ms,
                queue_limit,
                ..ServeSettings::default()
            };
            let clock = Rc::new(Cell::new(0.0));
            let mut e = engine(&clock);
            let run = drive(Server::new(settings, prompts(), arrivals(&trace)).unwrap(), &mut e, &clock);
            prop_assert_eq!(run.records.iter().map(|r| r.id).collect::<Vec<_>>(), (0..trace.len()).collect::<Vec<_>>());
            let s = &run.summary;
            prop_assert_eq!(s.outcomes.iter().chain(&s.warmup_outcomes).map(|(_, n)| n).sum::<usize>(), trace.len());
            prop_assert!(run.queue.windows(2).all(|w| w[0].t_ms <= w[1].t_ms), "queue samples in time order");
            prop_assert!(run.queue.iter().all(|q| q.waiting <= q.in_system), "{:?}", run.queue);
            prop_assert_eq!(run.queue.last().map(|q| q.in_system), Some(0), "everyone leaves");
            // At each sample, exactly the requests that had arrived and not
            // yet ended (rejected ones never enter).
            for q in &run.queue[1..] {
                let inside = run.records.iter().filter(|r| r.outcome != Outcome::Rejected && r.arrival_ms <= q.t_ms && r.end_ms > q.t_ms).count();
                prop_assert_eq!(q.in_system, inside, "at {} ms", q.t_ms);
            }
            for r in &run.records {
                prop_assert!(r.end_ms >= r.arrival_ms, "{:?}", r);
                if let Some(start) = r.start_ms {
                    prop_assert!(start >= r.arrival_ms && r.end_ms >= start, "{:?}", r);
                }
                match r.outcome {
                    Outcome::Served => prop_assert!(r.top.is_some() && r.elapsed_ms() <= timeout_ms),
                    Outcome::Rejected => prop_assert!(r.start_ms.is_none() && r.end_ms == r.arrival_ms),
                    Outcome::TimedOut => prop_assert!(r.elapsed_ms() >= timeout_ms - 1e-9),
                    Outcome::Failed => prop_assert!(false, "the engine never fails here"),
                    Outcome::Unfinished => prop_assert!(r.end_ms >= 4_000.0 + drain_s * 1000.0),
                }
                if let (Outcome::Served, Some(c)) = (r.outcome, chunk) {
                    prop_assert_eq!(r.chunks, r.tokens.div_ceil(c));
                }
            }
        }
    }
}

#[test]
fn a_cancelled_run_records_what_was_in_the_system_as_unfinished() {
    let trace = arrivals(&[(0.0, 1), (10.0, 1), (20.0, 0), (5_000.0, 0)]);
    let clock = Rc::new(Cell::new(0.0));
    let mut e = engine(&clock);
    let mut server = Server::new(settings(None, Policy::Fcfs), prompts(), trace).unwrap();
    let read = clock.clone();
    // The first long request runs (1,031 ms), then the user cancels.
    assert_eq!(server.step(&mut e, &mut || read.get()), Step::Worked);
    server.stop(clock.get());
    let run = server.finish("cancelled".into());
    let outcomes: Vec<Outcome> = run.records.iter().map(|r| r.outcome).collect();
    // The arrival due at 5 s never came; the two that came after the first wait, unfinished.
    assert_eq!(outcomes, [Outcome::Served, Outcome::Unfinished, Outcome::Unfinished]);
    assert_eq!(run.summary.arrivals, 3);
    assert_eq!(run.summary.unfinished, 2);
}
