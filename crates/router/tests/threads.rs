//! The thread count changes nothing a decision says: the same conversation
//! decided on pools of 1, 2 and 3 threads gives the same ranking and the
//! same scores to the bit, at both precisions and at a length that splits
//! every projection and attention head into several tasks.

// Natively the tasks run on rayon, whose pool a test can size; in the
// browser the helper pool's size is the browser's.
#![cfg(not(target_arch = "wasm32"))]

mod common;

use router::{Conversation, Precision, RouterConfig};

#[test]
fn one_two_and_three_threads_decide_identically() {
    // About 2,000 tokens, cut to router_max_tokens (1,024).
    let text: String = (0..150).map(|i| format!("Step {i}: check the parser and fix the failing test in module {}. ", i % 7)).collect();
    for precision in [Precision::DequantizedF32, Precision::IntegerQ8] {
        let router = common::smollm2_router(RouterConfig { precision, ..RouterConfig::default() });
        let conversation = Conversation::user(text.clone());
        let on = |threads: usize| {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
            pool.install(|| {
                assert_eq!(router::parallel::threads(), threads);
                router.decide(&conversation, None).unwrap()
            })
        };
        let one = on(1);
        assert!(one.tokens_used > 512, "{} tokens: too short to split", one.tokens_used);
        for threads in [2, 3] {
            let many = on(threads);
            let bits = |d: &router::Decision| d.ranked.iter().map(|r| (r.id.clone(), r.score.to_bits())).collect::<Vec<_>>();
            assert_eq!(bits(&many), bits(&one), "{precision:?}: {threads} threads");
        }
    }
}
