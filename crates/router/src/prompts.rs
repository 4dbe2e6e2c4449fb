//! Bench prompts with an exact token count, made deterministically from real
//! task texts.
//!
//! A prompt of `N` tokens is a single user turn whose *routing text* (the
//! assembled ChatML conversation the router prefills) is exactly `N` tokens:
//! its content is a prefix of the task texts joined by blank lines, starting
//! at the first task (or the next one when no prefix lands exactly). Prefill
//! cost is what the latency table measures, so the count that matters is the
//! prefilled one.

use crate::conversation::Conversation;
use crate::error::{Result, RouterError};
use crate::tokenizer::RouterTokenizer;

/// A prompt and its sizes.
#[derive(Debug, Clone, PartialEq)]
pub struct BenchPrompt {
    pub conversation: Conversation,
    /// Tokens of the routing text (what is prefilled).
    pub tokens: usize,
    /// Characters of the user turn.
    pub characters: usize,
}

/// Builds a conversation whose routing text has exactly `target` tokens from
/// `texts` (task prompts, in order): the corpus starts at the first task and
/// moves to the next one when no prefix lands on the count.
pub fn exact_prompt(tokenizer: &RouterTokenizer, texts: &[String], target: usize) -> Result<BenchPrompt> {
    for start in 0..texts.len() {
        let corpus = texts[start..].join("\n\n");
        if let Some(prompt) = exact_prefix(tokenizer, &corpus, target)? {
            return Ok(prompt);
        }
    }
    Err(RouterError::Request(format!("no prefix of the {} prompt texts has exactly {target} tokens", texts.len())))
}

/// The prefix of `corpus` whose routing text has exactly `target` tokens, if
/// one lies near the token-boundary estimate.
fn exact_prefix(tokenizer: &RouterTokenizer, corpus: &str, target: usize) -> Result<Option<BenchPrompt>> {
    let count =
        |content: &str| -> Result<usize> { Ok(tokenizer.encode(&Conversation::user(content).routing_text(tokenizer.layout))?.len()) };
    let overhead = count("")?;
    if target <= overhead {
        return Err(RouterError::Request(format!("{target} tokens is no more than the chat template's own {overhead}")));
    }
    let (_, ends) = tokenizer.encode_with_ends(corpus)?;
    if ends.len() + overhead < target {
        return Ok(None);
    }
    // Cut at the token boundary the template leaves room for, then search
    // character boundaries around it: joining content to the template can
    // merge tokens at a seam, and a line break (`\r\n`) followed by text adds
    // two tokens at once, so some counts are reachable only elsewhere.
    let estimate = ends[target - overhead - 1];
    let boundaries: Vec<usize> = corpus.char_indices().map(|(i, _)| i).chain([corpus.len()]).collect();
    let at = boundaries.partition_point(|&b| b < estimate);
    for delta in 0..64usize {
        for i in [at + delta, at.wrapping_sub(delta)] {
            let Some(&end) = boundaries.get(i) else { continue };
            let content = &corpus[..end];
            if !content.is_empty() && count(content)? == target {
                return Ok(Some(BenchPrompt {
                    characters: content.chars().count(),
                    conversation: Conversation::user(content),
                    tokens: target,
                }));
            }
        }
    }
    Ok(None)
}
