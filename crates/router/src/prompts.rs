//! Bench prompts with an exact token count, made deterministically from real
//! task texts.
//!
//! A prompt of `N` tokens is a single user turn whose *routing text* (the
//! assembled ChatML conversation the router prefills) is exactly `N` tokens:
//! its content is the longest prefix of the corpus (the task texts joined by
//! blank lines, in order) that fits. Prefill cost is what the latency table
//! measures, so the count that matters is the prefilled one.

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

/// Builds a conversation whose routing text has exactly `target` tokens.
pub fn exact_prompt(tokenizer: &RouterTokenizer, corpus: &str, target: usize) -> Result<BenchPrompt> {
    let count = |content: &str| -> Result<usize> { Ok(tokenizer.encode(&Conversation::user(content).routing_text())?.len()) };
    let overhead = count("")?;
    if target <= overhead {
        return Err(RouterError::Request(format!("{target} tokens is no more than the chat template's own {overhead}")));
    }
    let (_, ends) = tokenizer.encode_with_ends(corpus)?;
    if ends.len() + overhead < target {
        return Err(RouterError::Request(format!("the prompt corpus has only {} tokens; {target} were asked for", ends.len())));
    }
    // Start from the token count the template leaves, then nudge: joining
    // the content to the template can merge or split a token at the seams.
    let mut take = target - overhead;
    for _ in 0..64 {
        let content = &corpus[..ends[take - 1]];
        let n = count(content)?;
        if n == target {
            return Ok(BenchPrompt { characters: content.chars().count(), conversation: Conversation::user(content), tokens: n });
        }
        take = if n > target { take - 1 } else { take + 1 };
        if take == 0 || take > ends.len() {
            break;
        }
    }
    Err(RouterError::Request(format!("could not cut the corpus to exactly {target} tokens")))
}
