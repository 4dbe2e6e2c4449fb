//! Reading a vLLM start-up log for the cross-check.
//!
//! vLLM prints, among others:
//! `Available KV cache memory: 59.95 GiB`,
//! `GPU KV cache size: 491,008 tokens` and
//! `Maximum concurrency for 8,192 tokens per request: 59.94x`
//! (older releases: `# GPU blocks: 30688, # CPU blocks: 2048`).
//! The numbers are per GPU (per worker) under tensor parallelism.

use serde::Serialize;

use crate::units::{self, Decimal};

/// What a pasted log says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct VllmObservation {
    pub kv_tokens: Option<u128>,
    pub kv_memory_bytes: Option<u128>,
    /// `(tokens per request, concurrency)` from the concurrency line.
    pub concurrency: Option<(u128, Decimal)>,
    /// `# GPU blocks` (older releases) with the block size it implies.
    pub gpu_blocks: Option<(u128, u64)>,
}

impl VllmObservation {
    /// The engine's token capacity and where it came from.
    pub fn tokens(&self) -> (u128, String) {
        if let Some(t) = self.kv_tokens {
            return (t, "“GPU KV cache size”".into());
        }
        if let Some((blocks, block)) = self.gpu_blocks {
            return (blocks * block as u128, format!("# GPU blocks × {block}-token blocks"));
        }
        if let Some((per_request, conc)) = self.concurrency {
            let tokens = conc.times_floor(per_request).unwrap_or(0);
            return (tokens, "“Maximum concurrency” × tokens per request".into());
        }
        (0, "none found".into())
    }
}

fn number_after<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    let at = text.find(key)? + key.len();
    let rest = text[at..].trim_start();
    let end = rest.find(|c: char| !(c.is_ascii_digit() || c == ',' || c == '.' || c == '_')).unwrap_or(rest.len());
    let n = rest[..end].trim_end_matches(['.', ',']);
    (!n.is_empty()).then_some(n)
}

fn whole(text: &str) -> Option<u128> {
    text.replace([',', '_'], "").parse().ok()
}

/// Parses whatever known lines the text holds. `block` is the block size used
/// for the old `# GPU blocks` line. Returns an error message when nothing was
/// recognised.
pub fn parse(text: &str, block: u64) -> Result<VllmObservation, String> {
    let mut obs = VllmObservation { kv_tokens: None, kv_memory_bytes: None, concurrency: None, gpu_blocks: None };
    for line in text.lines() {
        if let Some(n) = number_after(line, "GPU KV cache size:") {
            obs.kv_tokens = whole(n);
        }
        if let Some(n) = number_after(line, "Available KV cache memory:") {
            let unit = line[line.find(n).unwrap_or(0) + n.len()..].trim_start();
            let factor: u128 = if unit.starts_with("GiB") {
                1 << 30
            } else if unit.starts_with("MiB") {
                1 << 20
            } else if unit.starts_with("GB") {
                1_000_000_000
            } else {
                1
            };
            obs.kv_memory_bytes = units::parse_decimal(&n.replace(',', "")).ok().and_then(|d| d.times_floor(factor));
        }
        if let Some(n) = number_after(line, "Maximum concurrency for") {
            if let (Some(tokens), Some(c)) = (whole(n), number_after(line, "per request:")) {
                if let Ok(d) = units::parse_decimal(&c.replace(',', "")) {
                    obs.concurrency = Some((tokens, d));
                }
            }
        }
        if let Some(n) = number_after(line, "# GPU blocks:") {
            let block = block.max(1);
            if let Some(blocks) = whole(n) {
                // The tokens are blocks × block size; a count whose product
                // does not fit is refused here, never wrapped later.
                if blocks.checked_mul(block as u128).is_none() {
                    return Err(format!(
                        "“# GPU blocks: {n}” times {block}-token blocks is beyond any real engine (it overflows 128 bits)"
                    ));
                }
                obs.gpu_blocks = Some((blocks, block));
            }
        }
    }
    if obs.kv_tokens.is_none() && obs.concurrency.is_none() && obs.gpu_blocks.is_none() {
        return Err(
            "found no “GPU KV cache size: N tokens”, “Maximum concurrency for M tokens per request: X” or “# GPU blocks: N” line".into()
        );
    }
    Ok(obs)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by the `kv_vllm_log` fuzz target: a block count whose token
    /// count overflowed 128 bits panicked (debug) or wrapped (release).
    #[test]
    fn a_block_count_that_overflows_is_refused() {
        let log = format!("INFO llm_engine.py:340] # GPU blocks: {}, # CPU blocks: 2048", u128::MAX / 8);
        assert!(parse(&log, 16).unwrap_err().contains("overflows 128 bits"));
        let fine = parse(&log, 8).unwrap();
        assert_eq!(fine.tokens().0, u128::MAX / 8 * 8);
    }

    #[test]
    fn reads_v1_lines() {
        let log = "INFO 05-01 12:00:00 [gpu_worker.py:227] Available KV cache memory: 59.95 GiB\n\
                   INFO [kv_cache_utils.py:634] GPU KV cache size: 491,008 tokens\n\
                   INFO [kv_cache_utils.py:637] Maximum concurrency for 8,192 tokens per request: 59.94x";
        let o = parse(log, 16).unwrap();
        assert_eq!(o.kv_tokens, Some(491_008));
        assert_eq!(o.kv_memory_bytes, Some(5995 * (1u128 << 30) / 100));
        assert_eq!(o.concurrency.unwrap().0, 8192);
        assert_eq!(o.tokens().0, 491_008);
    }

    #[test]
    fn concurrency_alone_and_old_blocks() {
        let o = parse("Maximum concurrency for 4096 tokens per request: 2.50x", 16).unwrap();
        assert_eq!(o.tokens().0, 10_240);
        let o = parse("INFO: # GPU blocks: 1000, # CPU blocks: 2048", 16).unwrap();
        assert_eq!(o.tokens().0, 16_000);
        assert!(parse("hello", 16).is_err());
    }
}
