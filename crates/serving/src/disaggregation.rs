//! Note 06's P/D separation beside colocated serving: one load served by
//! several engine instances, either each doing all of a request
//! (colocated replicas behind a round-robin balancer) or one prefilling
//! every prompt to its first token and handing the sequence, its K/V as
//! bytes, to another that decodes the rest (disaggregated).
//!
//! The instances run on one machine, so their steps cannot run at once
//! here; each instance keeps a clock of its own instead. An instance's
//! step runs alone, with the whole machine, and its clock advances by the
//! time the step took (read from the caller's stopwatch); the instance
//! whose clock is earliest steps next, so no instance sees an arrival from
//! another's future. That is two machines' worth of compute on a timeline
//! each, compared with colocated replicas of the same count, so equal
//! hardware stands on both sides; a single colocated instance is the
//! one-machine baseline. Idle time costs nothing to run (a clock jumps to
//! the next arrival), so a run is as long as its work.
//!
//! A hand-off's transfer time is the measured time to take the K/V out as
//! bytes and to write them into the receiver's pages, plus, when a link is
//! stated, its bytes at the link's rate. It is charged to neither instance's
//! clock (transfer engines copy beside the compute) but delays the
//! request: its second token waits for the transfer and then for the
//! decode instance's next iteration.

use serde::{Deserialize, Serialize};

use crate::batching::KvBytes;
use crate::generation::{GenOutcome, GenRecord, GenRequest, GenServer, GenSettings, GenStep, Iteration, StepEngine};

/// How the instances share a load.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Layout {
    /// `replicas` instances, each serving every `replicas`-th arrival whole.
    Colocated { replicas: usize },
    /// One instance prefills, another decodes.
    Disaggregated,
}

impl Layout {
    /// `single`, `replicas:N` (N ≥ 1) or `pd`, as the CLI spells them.
    pub fn parse(text: &str) -> Result<Layout, String> {
        match text.trim() {
            "single" => Ok(Layout::Colocated { replicas: 1 }),
            "pd" => Ok(Layout::Disaggregated),
            other => match other.strip_prefix("replicas:").map(|n| n.trim().parse::<usize>()) {
                Some(Ok(replicas)) if replicas > 0 => Ok(Layout::Colocated { replicas }),
                _ => Err(format!("`{other}` is not a layout: use single, replicas:N with N ≥ 1, or pd")),
            },
        }
    }

    pub fn instances(self) -> usize {
        match self {
            Layout::Colocated { replicas } => replicas,
            Layout::Disaggregated => 2,
        }
    }

    /// What instance `index` of this layout does, in a few words.
    pub fn role(self, index: usize) -> String {
        match self {
            Layout::Colocated { replicas: 1 } => "the instance".into(),
            Layout::Colocated { .. } => format!("replica {}", index + 1),
            Layout::Disaggregated if index == 0 => "prefill".into(),
            Layout::Disaggregated => "decode".into(),
        }
    }

    pub fn label(self) -> String {
        match self {
            Layout::Colocated { replicas: 1 } => "one instance".into(),
            Layout::Colocated { replicas } => format!("{replicas} colocated replicas"),
            Layout::Disaggregated => "P/D: 1 prefill + 1 decode instance".into(),
        }
    }
}

/// What a disaggregated run needs of its engines beyond stepping.
pub trait HandOff: StepEngine {
    /// A sequence's K/V on its way between instances.
    type Parcel;
    /// Takes `sequence`'s K/V out as bytes; returns the sequence without it.
    fn hand_off(&mut self, sequence: Self::Seq) -> Result<(Self::Seq, Self::Parcel), String>;
    /// The K/V bytes a parcel carries.
    fn parcel_bytes(parcel: &Self::Parcel) -> u64;
    /// The calculator's payload for a sequence holding `held_tokens`: what
    /// a parcel of them should weigh, recorded beside what it did.
    fn payload_bytes(&self, held_tokens: usize) -> u64;
    /// Writes a parcel into this instance's pages under `sequence`.
    fn receive(&mut self, sequence: Self::Seq, parcel: Self::Parcel) -> Result<Self::Seq, String>;
}

/// One hand-off.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Transfer {
    pub id: u64,
    /// K/V bytes moved.
    pub bytes: u64,
    /// Tokens whose K/V the sender held.
    pub held_tokens: usize,
    /// When the first token was made (the sender's clock).
    pub sent_ms: f64,
    /// When the decode instance could admit it.
    pub arrived_ms: f64,
    /// Measured: out of the sender's pages as bytes, into the receiver's.
    pub copy_ms: f64,
    /// The calculator's payload for the tokens held (0 in older runs).
    #[serde(default)]
    pub payload_bytes: u64,
}

/// One instance's requests now: running, and admitted or arrived but
/// waiting (a decode instance's waiting are hand-offs it has not taken).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstanceQueue {
    pub running: usize,
    pub waiting: usize,
}

/// Several instances' queues as one.
impl std::iter::Sum for InstanceQueue {
    fn sum<I: Iterator<Item = InstanceQueue>>(iter: I) -> InstanceQueue {
        iter.fold(InstanceQueue::default(), |a, b| InstanceQueue { running: a.running + b.running, waiting: a.waiting + b.waiting })
    }
}

/// The cluster's settings beyond each instance's.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ClusterSettings {
    pub layout: Layout,
    /// A link between the instances, Gbit/s: its time for the bytes is
    /// added to each transfer (none: the in-process copy alone).
    pub link_gbit_per_s: Option<f64>,
}

struct Instance<E: StepEngine> {
    server: GenServer<E>,
    engine: E,
    /// This instance's clock, ms.
    now: f64,
    /// When it may next do something (infinite: waiting for a hand-off).
    ready: f64,
    done: bool,
    busy_ms: f64,
}

/// What one [`Cluster::step`] did.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ClusterStep {
    /// Stepped the instance with the earliest clock, now at `now_ms`.
    Stepped {
        instance: usize,
        now_ms: f64,
    },
    Done,
}

/// Several instances serving one load.
pub struct Cluster<E: HandOff> {
    settings: ClusterSettings,
    gen: GenSettings,
    instances: Vec<Instance<E>>,
    transfers: Vec<Transfer>,
    /// Requests lost between the instances (a hand-off that failed).
    lost: Vec<GenRecord>,
}

impl<E: HandOff> Cluster<E> {
    /// `engines`: one per instance of the layout (the prefill instance's
    /// first when disaggregated).
    pub fn new(
        settings: ClusterSettings,
        gen: GenSettings,
        requests: Vec<GenRequest>,
        end_of_arrivals_ms: f64,
        engines: Vec<E>,
    ) -> Result<Cluster<E>, String> {
        let count = settings.layout.instances();
        if engines.len() != count {
            return Err(format!("{} needs {count} engines, not {}", settings.layout.label(), engines.len()));
        }
        let mut requests = requests;
        requests.sort_by(|a, b| a.arrival_ms.total_cmp(&b.arrival_ms));
        let servers: Vec<GenServer<E>> = match settings.layout {
            Layout::Colocated { replicas } => (0..replicas)
                .map(|r| {
                    let share = requests.iter().skip(r).step_by(replicas).cloned().collect();
                    GenServer::new(gen, share, end_of_arrivals_ms)
                })
                .collect(),
            Layout::Disaggregated => {
                vec![GenServer::new(gen, requests, end_of_arrivals_ms).handing_off(), GenServer::open(gen, end_of_arrivals_ms)]
            }
        };
        let instances = servers
            .into_iter()
            .zip(engines)
            .map(|(server, engine)| Instance { server, engine, now: 0.0, ready: 0.0, done: false, busy_ms: 0.0 })
            .collect();
        Ok(Cluster { settings, gen, instances, transfers: Vec::new(), lost: Vec::new() })
    }

    pub fn settings(&self) -> ClusterSettings {
        self.settings
    }

    /// Steps the instance whose clock is earliest; `stopwatch` reads real
    /// time in ms (only differences are used).
    pub fn step(&mut self, stopwatch: &mut dyn FnMut() -> f64) -> ClusterStep {
        let Some(index) = (0..self.instances.len())
            .filter(|&i| !self.instances[i].done && self.instances[i].ready.is_finite())
            .min_by(|&a, &b| self.instances[a].ready.total_cmp(&self.instances[b].ready))
        else {
            return ClusterStep::Done;
        };
        let instance = &mut self.instances[index];
        instance.now = instance.now.max(instance.ready);
        let base = instance.now;
        let mark = stopwatch();
        let outcome = instance.server.step(&mut instance.engine, &mut || base + (stopwatch() - mark));
        instance.now = base + (stopwatch() - mark);
        match outcome {
            GenStep::Worked => {
                instance.busy_ms += instance.now - base;
                instance.ready = instance.now;
            }
            GenStep::IdleUntil(t) => instance.ready = t.max(instance.now),
            GenStep::Done => instance.done = true,
        }
        if self.settings.layout == Layout::Disaggregated && index == 0 {
            self.move_handed_off(stopwatch);
        }
        ClusterStep::Stepped { instance: index, now_ms: self.instances[index].now }
    }

    /// Sends what the prefill instance handed off to the decode instance,
    /// and closes the decode instance once the prefill instance is done.
    fn move_handed_off(&mut self, stopwatch: &mut dyn FnMut() -> f64) {
        let (prefill, decode) = self.instances.split_at_mut(1);
        let (prefill, decode) = (&mut prefill[0], &mut decode[0]);
        for (request, sequence, sent_ms) in prefill.server.take_handed_off() {
            let started = stopwatch();
            let moved = prefill.engine.hand_off(sequence).and_then(|(shell, parcel)| {
                let bytes = E::parcel_bytes(&parcel);
                decode.engine.receive(shell, parcel).map(|sequence| (sequence, bytes))
            });
            let copy_ms = stopwatch() - started;
            match moved {
                Ok((sequence, bytes)) => {
                    let wire_ms = self.settings.link_gbit_per_s.map_or(0.0, |gbit| bytes as f64 * 8.0 / (gbit * 1e6));
                    let arrived_ms = sent_ms + copy_ms + wire_ms;
                    let payload_bytes = prefill.engine.payload_bytes(request.prompt_tokens);
                    self.transfers.push(Transfer {
                        id: request.id,
                        bytes,
                        held_tokens: request.prompt_tokens,
                        sent_ms,
                        arrived_ms,
                        copy_ms,
                        payload_bytes,
                    });
                    decode.server.arrive(GenRequest { arrival_ms: arrived_ms, ..request }, sequence);
                    decode.ready = decode.ready.min(arrived_ms.max(decode.now));
                }
                Err(_) => {
                    let mut record = prefill
                        .server
                        .records()
                        .iter()
                        .rev()
                        .find(|r| r.id == request.id)
                        .cloned()
                        .expect("a handed-off request has its record");
                    record.outcome = GenOutcome::Failed;
                    record.end_ms = sent_ms + copy_ms;
                    self.lost.push(record);
                }
            }
        }
        if prefill.done {
            decode.server.close();
            decode.ready = decode.ready.min(decode.now);
        }
    }

    /// Ends the run now: what is running or waiting anywhere is unfinished.
    pub fn stop(&mut self) {
        for instance in &mut self.instances {
            instance.server.stop(instance.now);
            instance.done = true;
        }
    }

    /// Every request's record, one each: a handed-off request's two
    /// records (prefill, then decode) joined into one, its first gap the
    /// wait from the first token to the second across the transfer.
    pub fn records(&self) -> Vec<GenRecord> {
        let mut records: Vec<GenRecord> = Vec::new();
        match self.settings.layout {
            Layout::Colocated { .. } => records.extend(self.instances.iter().flat_map(|i| i.server.records().iter().cloned())),
            Layout::Disaggregated => {
                let decoded = self.instances[1].server.records();
                for first in self.instances[0].server.records() {
                    if first.outcome != GenOutcome::HandedOff {
                        records.push(first.clone());
                    } else if let Some(rest) = decoded.iter().find(|r| r.id == first.id) {
                        records.push(join(first, rest));
                    } else if let Some(lost) = self.lost.iter().find(|r| r.id == first.id) {
                        records.push(lost.clone());
                    }
                }
            }
        }
        records.sort_by_key(|r| r.id);
        records
    }

    /// Every instance's iterations, each labelled with its instance.
    pub fn iterations(&self) -> Vec<Iteration> {
        let mut all: Vec<Iteration> = self
            .instances
            .iter()
            .enumerate()
            .flat_map(|(i, instance)| instance.server.iterations().iter().map(move |it| Iteration { instance: i, ..it.clone() }))
            .collect();
        all.sort_by(|a, b| a.start_ms.total_cmp(&b.start_ms));
        all
    }

    pub fn transfers(&self) -> &[Transfer] {
        &self.transfers
    }

    /// Each instance's time stepping work, ms.
    pub fn busy_ms(&self) -> Vec<f64> {
        self.instances.iter().map(|i| i.busy_ms).collect()
    }

    /// The running sequences' K/V now, over every instance.
    pub fn running_kv_bytes(&self) -> KvBytes {
        self.instances.iter().map(|i| i.server.running_kv_bytes()).sum()
    }

    /// K/V blocks the running sequences hold now, over every instance.
    pub fn blocks_in_use(&self) -> usize {
        self.instances.iter().map(|i| i.server.blocks_in_use()).sum()
    }

    /// Requests that have ended for good so far: a hand-off is the first
    /// half of a request, not an end.
    pub fn finished(&self) -> usize {
        let ended = |i: &Instance<E>| i.server.records().iter().filter(|r| r.outcome != GenOutcome::HandedOff).count();
        self.instances.iter().map(ended).sum::<usize>() + self.lost.len()
    }

    /// Requests running and waiting now, instance by instance (the
    /// layout's order: the prefill instance first when disaggregated;
    /// summed, the whole cluster's).
    pub fn queues(&self) -> Vec<InstanceQueue> {
        self.instances
            .iter()
            .map(|i| {
                let (running, waiting) = i.server.queue();
                InstanceQueue { running, waiting }
            })
            .collect()
    }

    pub fn gen_settings(&self) -> GenSettings {
        self.gen
    }
}

/// A request's prefill record and its decode record as one.
fn join(first: &GenRecord, rest: &GenRecord) -> GenRecord {
    let bridge = match (first.first_token_ms, rest.first_token_ms) {
        (Some(one), Some(two)) => Some(two - one),
        _ => None,
    };
    GenRecord {
        start_ms: first.start_ms,
        first_token_ms: first.first_token_ms,
        gaps_ms: bridge.into_iter().chain(rest.gaps_ms.iter().copied()).collect(),
        end_ms: rest.end_ms,
        tokens_out: first.tokens_out + rest.tokens_out,
        prefill_chunks: first.prefill_chunks + rest.prefill_chunks,
        preemptions: first.preemptions + rest.preemptions,
        outcome: rest.outcome,
        ..first.clone()
    }
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use std::cell::Cell;
    use std::rc::Rc;

    use proptest::prelude::*;

    use super::*;
    use crate::batching::{BatchSettings, Memory, Mixing};
    use crate::generation::GenSummary;
    use crate::testing::CountingSeq;

    /// Steps cost 2 ms plus 0.05 ms a token on a stopwatch the engine
    /// advances; a hand-off's parcel is its held tokens × 100 bytes and
    /// costs 0.5 ms to copy.
    struct Counting {
        watch: Rc<Cell<f64>>,
    }

    impl StepEngine for Counting {
        type Seq = CountingSeq;
        fn sequence(&mut self, r: &GenRequest) -> Result<CountingSeq, String> {
            Ok(CountingSeq::new(r.prompt_tokens, r.max_new_tokens))
        }
        fn step(&mut self, batch: &mut [(u64, &mut CountingSeq, usize)]) -> Result<Vec<bool>, String> {
            let tokens: usize = batch.iter().map(|b| b.2).sum();
            self.watch.set(self.watch.get() + 2.0 + 0.05 * tokens as f64);
            Ok(batch.iter_mut().map(|(_, seq, n)| seq.feed(*n)).collect())
        }
    }

    impl HandOff for Counting {
        type Parcel = u64;
        fn hand_off(&mut self, sequence: CountingSeq) -> Result<(CountingSeq, u64), String> {
            self.watch.set(self.watch.get() + 0.25);
            let bytes = sequence.held as u64 * 100;
            Ok((sequence, bytes))
        }
        fn parcel_bytes(parcel: &u64) -> u64 {
            *parcel
        }
        fn payload_bytes(&self, held_tokens: usize) -> u64 {
            held_tokens as u64 * 100
        }
        fn receive(&mut self, sequence: CountingSeq, _: u64) -> Result<CountingSeq, String> {
            self.watch.set(self.watch.get() + 0.25);
            Ok(sequence)
        }
    }

    fn gen_settings() -> GenSettings {
        GenSettings {
            batch: BatchSettings { budget_blocks: 10_000, max_running: 8, mixing: Mixing::PrefillFirst, memory: Memory::Recompute },
            timeout_ms: 1e9,
            warmup_ms: 0.0,
            drain_ms: 1e6,
            ttft_slo_ms: 1e9,
            tpot_slo_ms: 1e9,
        }
    }

    fn run(layout: Layout, requests: Vec<GenRequest>) -> Cluster<Counting> {
        let watch = Rc::new(Cell::new(0.0));
        let engines = (0..layout.instances()).map(|_| Counting { watch: watch.clone() }).collect();
        let end = requests.iter().map(|r| r.arrival_ms).fold(0.0, f64::max) + 1.0;
        let settings = ClusterSettings { layout, link_gbit_per_s: Some(8.0) };
        let mut cluster = Cluster::new(settings, gen_settings(), requests, end, engines).unwrap();
        let mut guard = 0;
        while cluster.step(&mut || watch.get()) != ClusterStep::Done {
            guard += 1;
            assert!(guard < 100_000, "the cluster never finished");
        }
        cluster
    }

    fn load(count: u64, gap_ms: f64) -> Vec<GenRequest> {
        (0..count)
            .map(|i| GenRequest {
                id: i,
                arrival_ms: i as f64 * gap_ms,
                prompt: 0,
                prompt_tokens: 300 + 40 * (i as usize % 5),
                max_new_tokens: 1 + (i as usize * 7) % 40,
            })
            .collect()
    }

    /// Every request is served once with all its tokens, whichever layout;
    /// a disaggregated request's bytes are its prompt's, it arrives at the
    /// decode instance after its first token plus the copy plus the link
    /// (8 Gbit/s: 1 ms a megabyte), and its second token comes after that.
    #[test]
    fn every_layout_serves_every_request_and_transfers_are_accounted() {
        for layout in [Layout::Colocated { replicas: 1 }, Layout::Colocated { replicas: 2 }, Layout::Disaggregated] {
            let requests = load(30, 15.0);
            let cluster = run(layout, requests.clone());
            let records = cluster.records();
            assert_eq!(records.len(), requests.len(), "{layout:?}");
            for (record, request) in records.iter().zip(&requests) {
                assert_eq!(record.id, request.id);
                assert_eq!(record.outcome, GenOutcome::Served, "{layout:?} #{}", record.id);
                assert_eq!(record.tokens_out, request.max_new_tokens);
                assert_eq!(record.gaps_ms.len(), request.max_new_tokens - 1);
            }
            if layout == Layout::Disaggregated {
                let handed = requests.iter().filter(|r| r.max_new_tokens > 1).count();
                assert_eq!(cluster.transfers().len(), handed);
                for t in cluster.transfers() {
                    let request = &requests[t.id as usize];
                    let record = &records[t.id as usize];
                    assert_eq!(t.bytes, request.prompt_tokens as u64 * 100);
                    assert_eq!(t.payload_bytes, t.bytes);
                    assert!((t.copy_ms - 0.5).abs() < 1e-9);
                    assert!((t.arrived_ms - (t.sent_ms + 0.5 + t.bytes as f64 * 8.0 / 8e6)).abs() < 1e-9);
                    assert_eq!(record.first_token_ms, Some(t.sent_ms));
                    assert!(record.first_token_ms.unwrap() + record.gaps_ms[0] > t.arrived_ms);
                }
                // The decode instance never prefills a prompt: its feeds are single tokens.
                assert!(cluster.iterations().iter().filter(|it| it.instance == 1).all(|it| it.feeds.iter().all(|f| f.tokens == 1)));
            } else {
                assert!(cluster.transfers().is_empty());
            }
        }
    }

    /// Under prefill-first on one instance, each new prompt stalls the
    /// running decodes; a decode instance never sees a prompt, so its
    /// worst gaps are shorter even with the transfer in the first one.
    #[test]
    fn separation_removes_the_prefill_stalls_from_the_decodes() {
        let requests: Vec<GenRequest> =
            (0..16).map(|i| GenRequest { id: i, arrival_ms: i as f64 * 40.0, prompt: 0, prompt_tokens: 600, max_new_tokens: 60 }).collect();
        let p99 = |layout| {
            let records = run(layout, requests.clone()).records();
            GenSummary::of(&records, &gen_settings()).itl_ms.p99.unwrap()
        };
        let (colocated, separated) = (p99(Layout::Colocated { replicas: 2 }), p99(Layout::Disaggregated));
        assert!(separated < colocated / 2.0, "ITL p99: P/D {separated} ms against two replicas {colocated} ms");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(150))]

        /// Whatever the load, budget, mixing and timeout, every request
        /// ends in exactly one joined record, no instance's clock runs
        /// two of its iterations at once, and a served request has all
        /// its tokens.
        #[test]
        fn every_request_is_recorded_once_in_every_layout(
            lengths in prop::collection::vec((1usize..60, 1usize..20, 0.0f64..30.0), 1..25),
            chunk in prop::option::of(1usize..48),
            budget_blocks in 3usize..40,
            timeout_ms in 5.0f64..400.0,
            layout in prop_oneof![
                Just(Layout::Disaggregated),
                (1usize..4).prop_map(|replicas| Layout::Colocated { replicas }),
            ],
        ) {
            let requests = crate::testing::gen_requests(&lengths);
            let at = requests.last().map_or(0.0, |r| r.arrival_ms);
            let watch = Rc::new(Cell::new(0.0));
            let engines = (0..layout.instances()).map(|_| Counting { watch: watch.clone() }).collect();
            let mut gen = gen_settings();
            gen.batch.budget_blocks = budget_blocks;
            gen.batch.mixing = chunk.map_or(Mixing::PrefillFirst, |token_budget| Mixing::Chunked { token_budget });
            gen.timeout_ms = timeout_ms;
            let mut cluster = Cluster::new(ClusterSettings { layout, link_gbit_per_s: None }, gen, requests.clone(), at + 1.0, engines).unwrap();
            let mut guard = 0;
            while cluster.step(&mut || watch.get()) != ClusterStep::Done {
                guard += 1;
                prop_assert!(guard < 200_000);
                // What the page's live line sums over the instances: within
                // their budgets, the payload within the pages allocated.
                prop_assert!(cluster.blocks_in_use() <= layout.instances() * budget_blocks);
                let kv = cluster.running_kv_bytes();
                prop_assert!(kv.payload <= kv.allocated, "{kv:?}");
            }
            prop_assert_eq!(cluster.blocks_in_use(), 0);
            prop_assert_eq!(cluster.queues(), vec![InstanceQueue::default(); layout.instances()]);
            let records = cluster.records();
            prop_assert_eq!(cluster.finished(), records.len());
            prop_assert_eq!(records.iter().map(|r| r.id).collect::<Vec<_>>(), (0..requests.len() as u64).collect::<Vec<_>>());
            for r in &records {
                prop_assert!(r.outcome != GenOutcome::HandedOff);
                if r.outcome == GenOutcome::Served {
                    prop_assert_eq!(r.tokens_out, r.max_new_tokens);
                    prop_assert_eq!(r.gaps_ms.len(), r.tokens_out - 1);
                }
            }
            for instance in 0..layout.instances() {
                let mine: Vec<Iteration> = cluster.iterations().into_iter().filter(|it| it.instance == instance).collect();
                for pair in mine.windows(2) {
                    prop_assert!(pair[0].end_ms <= pair[1].start_ms);
                }
            }
        }
    }

    #[test]
    fn layouts_parse_as_the_cli_spells_them() {
        assert_eq!(Layout::parse("single"), Ok(Layout::Colocated { replicas: 1 }));
        assert_eq!(Layout::parse(" replicas:2 "), Ok(Layout::Colocated { replicas: 2 }));
        assert_eq!(Layout::parse("pd"), Ok(Layout::Disaggregated));
        assert_eq!((Layout::Disaggregated.role(0), Layout::Disaggregated.role(1)), ("prefill".into(), "decode".into()));
        assert_eq!(Layout::Colocated { replicas: 3 }.role(2), "replica 3");
        for bad in ["replicas:0", "replicas:", "p/d", ""] {
            assert!(Layout::parse(bad).is_err(), "{bad}");
        }
    }
}
