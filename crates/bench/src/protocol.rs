//! The protocol's settings: which prompt lengths, how many warm-ups and timed calls.

/// How many calls at which lengths.
#[derive(Debug, Clone, PartialEq)]
pub struct Protocol {
    pub lengths: Vec<usize>,
    pub warmup: usize,
    pub iterations: usize,
    /// Timed `encode_and_score` calls per length (0 to skip).
    pub encode_iterations: usize,
}

impl Default for Protocol {
    fn default() -> Self {
        Protocol { lengths: vec![15, 256, 1024], warmup: 5, iterations: 25, encode_iterations: 25 }
    }
}

impl Protocol {
    /// Calls made at one length: cold + warm-ups + iterations + encode+scores.
    pub fn calls_per_length(&self) -> usize {
        1 + self.warmup + self.iterations + self.encode_iterations
    }
}
