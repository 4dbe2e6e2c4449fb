//! Fork–join parallelism for the prefill: `for_each(tasks, work)` runs
//! `work(i)` for every `i` and returns when all are done.
//!
//! Natively the tasks run on rayon's global pool, the pool `gemm` already
//! runs the f32 projections on, so a native process has one set of worker
//! threads. Rayon replaced this module's own pool natively because an
//! alternated A/B of warm decides at 15 and 1,024 tokens, f32 and int8,
//! found it no slower (the figures are in the commit that made the change).
//!
//! In the browser there is no rayon of our own: the threads build is
//! wasm-bindgen's `no-modules` output, started with `importScripts` by
//! `router_worker_loader.js`, and its helpers by `router_helper.js`.
//! wasm-bindgen-rayon needs wasm-bindgen's `--target web` output instead:
//! the router worker and its helpers as module workers (`type: "module"`,
//! the helpers' script found through `import.meta.url`), and
//! `initThreadPool(n)` awaited in the worker before its first job. That is a
//! change of the worker's build and start-up for no measured gain (rayon
//! only matched our pool natively), so the threads build keeps this module's
//! own helpers: Web Workers that share the wasm memory (`+atomics`) and call
//! [`serve`], which never returns. Without helpers (the single-thread build,
//! or before the Web Workers have started) the caller runs every task itself,
//! so nothing waits for a helper that never comes. The helper pool is
//! compiled natively too, so its tests run with `cargo test`.
//!
//! Splitting never changes arithmetic: a task's result does not depend on
//! which thread ran it, so one thread and many give identical bits.

#![allow(unsafe_code)]

use std::cell::Cell;
use std::marker::PhantomData;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, OnceLock};

/// The job being run: the work closure (lifetime erased, see `for_each`),
/// the number of tasks, and the next unclaimed task index.
#[derive(Clone, Copy)]
struct Job {
    work: *const (dyn Fn(usize) + Sync),
    tasks: usize,
    next: *const AtomicUsize,
}

// SAFETY: the pointers are only dereferenced while `for_each`'s frame, which
// owns what they point to, is still waiting for every helper to leave the job.
unsafe impl Send for Job {}

thread_local! {
    /// Set while this thread runs a task: a task that calls `for_each` again
    /// runs its inner tasks itself instead of waiting for the pool it is
    /// part of (which would deadlock).
    static IN_TASK: Cell<bool> = const { Cell::new(false) };
}

#[derive(Default)]
struct State {
    job: Option<Job>,
    /// Bumped per job, so a helper never takes the same job twice.
    generation: u64,
    /// Helpers currently inside the job (holding its pointers).
    inside: usize,
    /// Helpers attached to the pool.
    helpers: usize,
    /// A task panicked on a helper during the current job (natively; in wasm
    /// a panic aborts the instance).
    helper_panicked: bool,
}

#[derive(Default)]
struct Pool {
    state: Mutex<State>,
    job_posted: Condvar,
    job_left: Condvar,
    /// One job at a time: `for_each` from two threads at once would otherwise
    /// overwrite each other's job.
    caller: Mutex<()>,
    /// `state.generation` and `state.inside` as last written, read without
    /// the lock by threads spinning for a change ([`spin_until`]); the
    /// locked state stays the authority.
    posted: AtomicU64,
    inside: AtomicUsize,
}

/// How many times a thread looks for a change before it sleeps on a
/// condition variable. Waking a sleeping thread costs the browser a
/// `memory.atomic.notify` and the woken worker a scheduler round trip, for
/// each of a decode step's ~240 products of a few microseconds; a helper
/// that has just finished a task and a caller waiting for its helpers
/// usually see the change within microseconds. In wasm, where
/// `spin_loop` is no instruction, this is 20,000 atomic loads, tens of
/// microseconds, so an idle pool sleeps almost at once. (Natively only
/// this module's tests run the helper pool, where `pause` makes it longer.)
const SPINS: u32 = 20_000;

/// Whether `ready()` became true within [`SPINS`] looks.
fn spin_until(ready: impl Fn() -> bool) -> bool {
    for _ in 0..SPINS {
        if ready() {
            return true;
        }
        std::hint::spin_loop();
    }
    false
}

fn pool() -> &'static Pool {
    static POOL: OnceLock<Pool> = OnceLock::new();
    POOL.get_or_init(|| {
        #[cfg(not(target_arch = "wasm32"))]
        {
            // Natively (only the helper pool's own tests use it there) the
            // helpers are ours to start: one per extra core.
            let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
            for _ in 1..cores {
                let spawned = std::thread::Builder::new().name("router-pool".into()).spawn(serve);
                if spawned.is_err() {
                    break;
                }
            }
        }
        Pool::default()
    })
}

/// Threads that run tasks: natively rayon's; in the browser the caller
/// plus the attached helpers.
pub fn threads() -> usize {
    #[cfg(not(target_arch = "wasm32"))]
    return rayon::current_num_threads();
    #[cfg(target_arch = "wasm32")]
    return helper_threads();
}

/// The caller plus the helpers attached to this module's own pool.
#[cfg_attr(not(any(target_arch = "wasm32", test)), allow(dead_code))]
fn helper_threads() -> usize {
    1 + lock(&pool().state).helpers
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A poisoned lock only means another task panicked; the state itself
    // (counters and an optional job) is always consistent.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Attaches the calling thread to the pool as a helper; never returns.
pub fn serve() {
    let pool = pool();
    let mut seen = 0u64;
    let mut state = lock(&pool.state);
    state.helpers += 1;
    loop {
        loop {
            match state.job {
                Some(_) if state.generation != seen => break,
                // A job withdrawn before this helper came: nothing to join.
                None => seen = state.generation,
                Some(_) => {}
            }
            // Look for the next job with the lock released, then sleep.
            drop(state);
            let posted = spin_until(|| pool.posted.load(Ordering::Acquire) != seen);
            state = lock(&pool.state);
            if !posted && (state.job.is_none() || state.generation == seen) {
                state = pool.job_posted.wait(state).unwrap_or_else(|e| e.into_inner());
            }
        }
        seen = state.generation;
        let job = state.job.expect("checked above");
        state.inside += 1;
        pool.inside.store(state.inside, Ordering::Release);
        drop(state);
        // SAFETY: `for_each` keeps the closure and counter alive until
        // `inside` is back to zero, which happens only after this call. A
        // panicking task must not skip the bookkeeping below, or the caller
        // would wait for this helper forever.
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| unsafe { claim(job) }));
        state = lock(&pool.state);
        state.helper_panicked |= outcome.is_err();
        state.inside -= 1;
        pool.inside.store(state.inside, Ordering::Release);
        if state.inside == 0 {
            pool.job_left.notify_all();
        }
    }
}

/// Runs tasks of `job` until none are left unclaimed.
///
/// SAFETY: the caller guarantees the job's pointers are alive.
unsafe fn claim(job: Job) {
    let (work, next) = unsafe { (&*job.work, &*job.next) };
    // Restored on return and on unwinding alike.
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            IN_TASK.with(|flag| flag.set(self.0));
        }
    }
    let _restore = Restore(IN_TASK.with(|flag| flag.replace(true)));
    loop {
        let i = next.fetch_add(1, Ordering::Relaxed);
        if i >= job.tasks {
            break;
        }
        work(i);
    }
}

/// Withdraws the posted job and waits for every helper inside it to leave,
/// also when the caller's own task unwinds: helpers hold pointers into the
/// caller's frame, so that frame must not end before they are out.
struct Withdraw<'a>(&'a Pool);

impl Drop for Withdraw<'_> {
    fn drop(&mut self) {
        let mut state = lock(&self.0.state);
        state.job = None;
        if state.inside > 0 {
            // The helpers are finishing their last tasks: look before sleeping.
            drop(state);
            spin_until(|| self.0.inside.load(Ordering::Acquire) == 0);
            state = lock(&self.0.state);
        }
        while state.inside > 0 {
            state = self.0.job_left.wait(state).unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// Runs `work(i)` for every `i in 0..tasks`, spread over the pool's threads,
/// and returns when all have finished. A panic in a task reaches the caller.
pub fn for_each(tasks: usize, work: impl Fn(usize) + Sync) {
    #[cfg(not(target_arch = "wasm32"))]
    {
        use rayon::prelude::*;
        match tasks {
            0 => {}
            1 => work(0),
            _ => (0..tasks).into_par_iter().for_each(&work),
        }
    }
    #[cfg(target_arch = "wasm32")]
    helper_for_each(tasks, work);
}

/// Runs `op` where [`for_each`]'s tasks are cheapest to hand out: natively
/// on one of rayon's worker threads, so that every `for_each` inside it
/// is a worker splitting its own work (the other workers steal it while
/// they spin) instead of the calling thread injecting a job into the pool
/// and sleeping on a lock until the job's last task wakes it: two context
/// switches per product. A decode step is about 240 products of a few
/// microseconds each (SmolLM2, one sequence); from outside the pool one
/// row times a 16 × 64 weight took 12 µs (median, `gemm-probe --m 1 --k 64
/// --n 16 --precision int8`; 0.6 µs on one thread), and a job of two 10 µs
/// tasks 19.5 µs against 11.9 µs from a worker (`tests::dispatch_cost`).
/// In the browser (and inside a worker already) `op` runs here.
pub fn on_workers<R: Send>(op: impl FnOnce() -> R + Send) -> R {
    #[cfg(not(target_arch = "wasm32"))]
    if rayon::current_thread_index().is_none() {
        return rayon::scope(|_| op());
    }
    op()
}

/// [`for_each`] on this module's own helpers: the browser's threads build.
#[cfg_attr(not(any(target_arch = "wasm32", test)), allow(dead_code))]
fn helper_for_each(tasks: usize, work: impl Fn(usize) + Sync) {
    if tasks == 0 {
        return;
    }
    let pool = pool();
    let helpers = lock(&pool.state).helpers;
    if tasks == 1 || helpers == 0 || IN_TASK.with(Cell::get) {
        (0..tasks).for_each(work);
        return;
    }
    let _one_caller = lock(&pool.caller);
    let next = AtomicUsize::new(0);
    let work_ref: &(dyn Fn(usize) + Sync) = &work;
    // SAFETY: the lifetime is erased so helpers can hold the pointer; this
    // frame outlives every use, because `Withdraw` (dropped before `work` and
    // `next`, also on unwinding) waits until no helper is inside the job.
    let work_ptr: *const (dyn Fn(usize) + Sync) = unsafe { std::mem::transmute(work_ref) };
    let job = Job { work: work_ptr, tasks, next: &next };
    {
        let mut state = lock(&pool.state);
        state.generation += 1;
        state.job = Some(job);
        state.helper_panicked = false;
        pool.posted.store(state.generation, Ordering::Release);
    }
    let withdraw = Withdraw(pool);
    pool.job_posted.notify_all();
    // SAFETY: the job's pointers point into this frame.
    unsafe { claim(job) };
    drop(withdraw);
    if std::mem::take(&mut lock(&pool.state).helper_panicked) {
        panic!("a parallel task panicked on a helper thread");
    }
}

/// Splits `data` into runs of `rows_per_task` rows of `row` values and runs
/// `work(first_row, run)` for each, spread over the pool: the safe way to
/// hand tasks disjoint parts of one buffer (row-wise norms, activations,
/// residual adds). Results do not depend on the thread count: each run is
/// one task's, computed in one order.
pub fn for_each_rows_mut<T: Send>(data: &mut [T], row: usize, rows_per_task: usize, work: impl Fn(usize, &mut [T]) + Sync) {
    let row = row.max(1);
    let chunk = row * rows_per_task.max(1);
    let tasks = data.len().div_ceil(chunk);
    let len = data.len();
    let out = DisjointOut::new(data);
    for_each(tasks, |t| {
        let start = t * chunk;
        // SAFETY: task t alone gets [start, start + chunk) ∩ the buffer.
        let run = unsafe { out.run(start..(start + chunk).min(len)) };
        work(start / row, run);
    });
}

/// [`for_each_rows_mut`] over two buffers with the same number of rows
/// (of `row_a` and `row_b` values): `work(first_row, run_a, run_b)` gets
/// the same rows of both, so one pass can fill a row's values and its
/// per-row metadata (the integer kernels' bytes and scales).
pub fn for_each_rows_mut2<A: Send, B: Send>(
    a: &mut [A],
    row_a: usize,
    b: &mut [B],
    row_b: usize,
    rows_per_task: usize,
    work: impl Fn(usize, &mut [A], &mut [B]) + Sync,
) {
    let (row_a, row_b, per) = (row_a.max(1), row_b.max(1), rows_per_task.max(1));
    let rows = a.len() / row_a;
    assert!(
        rows * row_a == a.len() && rows * row_b == b.len(),
        "{} and {} values are not the same rows of {row_a} and {row_b}",
        a.len(),
        b.len()
    );
    let (out_a, out_b) = (DisjointOut::new(a), DisjointOut::new(b));
    for_each(rows.div_ceil(per), |t| {
        let (first, end) = (t * per, ((t + 1) * per).min(rows));
        // SAFETY: task t alone gets rows [first, end) of each buffer.
        let (run_a, run_b) = unsafe { (out_a.run(first * row_a..end * row_a), out_b.run(first * row_b..end * row_b)) };
        work(first, run_a, run_b);
    });
}

/// Rows per task for a row-wise pass over `rows` rows: a few tasks per
/// thread, none smaller than 32 rows, so a short prompt's passes run in
/// place (waking helpers for 15 rows, 210 times a call, made a 15-token
/// decide 12 % slower).
pub fn rows_per_task(rows: usize) -> usize {
    rows.div_ceil(threads() * 4).max(32)
}

/// One output buffer that a job's tasks write, each a region no other task
/// touches: the mutable borrow, its length and its lifetime travel with the
/// pointer, so every region a task asks for is checked against the buffer
/// (a panic, not a stray write), and none can outlive the borrow. What the
/// type cannot check is that two tasks' regions are disjoint: that is the
/// `unsafe` promise each caller makes, with its reason beside it.
pub(crate) struct DisjointOut<'a, T> {
    ptr: *mut T,
    len: usize,
    _borrow: PhantomData<&'a mut [T]>,
}

// SAFETY: tasks on other threads write disjoint regions of a buffer of
// `Send` values, which the `&'a mut` borrow keeps alive and unaliased.
unsafe impl<T: Send> Sync for DisjointOut<'_, T> {}
unsafe impl<T: Send> Send for DisjointOut<'_, T> {}

impl<'a, T> DisjointOut<'a, T> {
    pub(crate) fn new(out: &'a mut [T]) -> DisjointOut<'a, T> {
        DisjointOut { ptr: out.as_mut_ptr(), len: out.len(), _borrow: PhantomData }
    }

    /// The contiguous run `range` as a slice; panics when it is not inside
    /// the buffer.
    ///
    /// SAFETY: no other task reads or writes `range` while the slice lives.
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn run(&self, range: Range<usize>) -> &mut [T] {
        assert!(range.start <= range.end && range.end <= self.len, "run {range:?} outside a buffer of {}", self.len);
        // SAFETY: inside the buffer (asserted), exclusive per the caller.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(range.start), range.len()) }
    }

    /// A pointer to element `span.start`, for a kernel that writes a
    /// strided region (a tile of rows × columns) lying within `span`;
    /// panics when `span` is not inside the buffer. Writing through it is
    /// the caller's `unsafe`: only inside `span`, and only what no other
    /// task touches.
    pub(crate) fn region(&self, span: Range<usize>) -> *mut T {
        assert!(span.start <= span.end && span.end <= self.len, "region {span:?} outside a buffer of {}", self.len);
        // SAFETY: `span.start` ≤ `len`, so the offset stays inside (or one
        // past) the allocation.
        unsafe { self.ptr.add(span.start) }
    }
}

#[cfg(test)]
mod chunk_tests {
    use super::*;

    #[test]
    fn a_region_outside_the_buffer_is_refused_before_any_write() {
        let mut data = vec![0u8; 10];
        let out = DisjointOut::new(&mut data);
        assert!(std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| out.region(4..11))).is_err());
        // SAFETY: the only task.
        assert!(std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| unsafe { out.run(8..12) }.len())).is_err());
        // SAFETY: the only task.
        unsafe { out.run(2..5) }.fill(7);
        assert_eq!(data, [0, 0, 7, 7, 7, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn rows_reach_every_task_once_with_their_index() {
        let mut data: Vec<usize> = vec![0; 21];
        for_each_rows_mut(&mut data, 3, 2, |first, run| {
            for (i, row) in run.chunks_mut(3).enumerate() {
                row.fill(first + i + 1);
            }
        });
        let want: Vec<usize> = (1..=7).flat_map(|r| [r; 3]).collect();
        assert_eq!(data, want);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both ways of running tasks natively: rayon (what `for_each` runs
    /// here) and the helper pool (what the browser's threads build runs).
    type Runner = fn(usize, &(dyn Fn(usize) + Sync));
    const RUNNERS: [(&str, Runner); 2] = [("for_each (rayon)", |n, w| for_each(n, w)), ("helper pool", |n, w| helper_for_each(n, w))];

    #[test]
    fn every_task_runs_once_and_jobs_can_follow_each_other() {
        for (name, run) in RUNNERS {
            for tasks in [0, 1, 2, 7, 100] {
                let hits: Vec<AtomicUsize> = (0..tasks).map(|_| AtomicUsize::new(0)).collect();
                for _ in 0..50 {
                    run(tasks, &|i| {
                        hits[i].fetch_add(1, Ordering::Relaxed);
                    });
                }
                assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 50), "{name}");
            }
        }
        assert!(threads() >= 1 && helper_threads() >= 1);
    }

    #[test]
    fn a_task_may_run_a_nested_job_and_a_panicking_task_reaches_the_caller() {
        for (name, run) in RUNNERS {
            let sum = AtomicUsize::new(0);
            run(4, &|_| run(5, &|j| _ = sum.fetch_add(j, Ordering::Relaxed)));
            assert_eq!(sum.load(Ordering::Relaxed), 4 * 10, "{name}");
            for _ in 0..20 {
                let caught = std::panic::catch_unwind(|| run(16, &|i| assert!(i != 11, "task 11 fails")));
                assert!(caught.is_err(), "{name}");
            }
            // The pool still works afterwards.
            let count = AtomicUsize::new(0);
            run(64, &|_| _ = count.fetch_add(1, Ordering::Relaxed));
            assert_eq!(count.load(Ordering::Relaxed), 64, "{name}");
        }
    }

    /// Prints what a job of two 10 µs tasks takes on each runner (median
    /// of 2,000, jobs back to back as a decode step's products come; 10 µs
    /// when both threads work, 20 µs when one does both): `cargo test
    /// --release -p router --lib dispatch -- --ignored --nocapture`. A
    /// measurement, not a check.
    #[test]
    #[ignore]
    fn dispatch_cost() {
        let job = |run: Runner| {
            let started = web_time::Instant::now();
            run(2, &|_| {
                let begun = web_time::Instant::now();
                while begun.elapsed().as_secs_f64() < 10e-6 {
                    std::hint::spin_loop();
                }
            });
            started.elapsed().as_secs_f64() * 1e6
        };
        let print = |name: &str, mut times: Vec<f64>| {
            times.sort_by(f64::total_cmp);
            println!("{name}: median {:.1} µs, p90 {:.1} µs", times[1_000], times[1_800]);
        };
        for (name, run) in RUNNERS {
            print(name, (0..2_000).map(|_| job(run)).collect());
        }
        let run = RUNNERS[0].1;
        print("for_each (rayon) inside on_workers", on_workers(|| (0..2_000).map(|_| job(run)).collect()));
    }

    #[test]
    fn callers_on_several_threads_do_not_mix_their_jobs() {
        for (name, run) in RUNNERS {
            std::thread::scope(|s| {
                for t in 0..3 {
                    s.spawn(move || {
                        for _ in 0..20 {
                            let sum = AtomicUsize::new(0);
                            run(10, &|i| {
                                sum.fetch_add(i + t, Ordering::Relaxed);
                            });
                            assert_eq!(sum.load(Ordering::Relaxed), 45 + 10 * t, "{name}");
                        }
                    });
                }
            });
        }
    }
}
