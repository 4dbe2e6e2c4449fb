//! Conversations and their assembly into the routing text.

use serde::{Deserialize, Serialize};

/// Who said a turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    User,
    Assistant,
}

impl Role {
    pub fn name(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    pub role: Role,
    pub content: String,
}

/// The turns a routing decision looks at.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Conversation {
    pub messages: Vec<Message>,
}

impl Conversation {
    /// A conversation of one user turn.
    pub fn user(text: impl Into<String>) -> Conversation {
        Conversation { messages: vec![Message { role: Role::User, content: text.into() }] }
    }

    /// Prepends a system turn.
    pub fn with_system(mut self, text: impl Into<String>) -> Conversation {
        self.messages.insert(0, Message { role: Role::System, content: text.into() });
        self
    }

    /// The routing text: the turns in the layout the checkpoint was
    /// trained on (its tokenizer knows which, [`TurnLayout`]).
    pub fn routing_text(&self, layout: TurnLayout) -> String {
        let mut text = String::new();
        match layout {
            TurnLayout::ChatMl => {
                for m in &self.messages {
                    text.push_str("<|im_start|>");
                    text.push_str(m.role.name());
                    text.push('\n');
                    text.push_str(&m.content);
                    text.push_str("<|im_end|>\n");
                }
            }
            TurnLayout::Gemma => {
                // Gemma has no system role: its chat template writes the
                // system text at the head of the first user turn, then a
                // blank line. Assistant turns are the `model`'s.
                let mut pending_system: Option<&str> = None;
                for m in &self.messages {
                    let role = match m.role {
                        Role::System => {
                            pending_system = Some(&m.content);
                            continue;
                        }
                        Role::User => "user",
                        Role::Assistant => "model",
                    };
                    text.push_str("<start_of_turn>");
                    text.push_str(role);
                    text.push('\n');
                    if let Some(system) = pending_system.take() {
                        text.push_str(system);
                        text.push_str("\n\n");
                    }
                    text.push_str(&m.content);
                    text.push_str("<end_of_turn>\n");
                }
                if let Some(system) = pending_system {
                    // A system turn with nothing after it still counts.
                    text.push_str("<start_of_turn>user\n");
                    text.push_str(system);
                    text.push_str("<end_of_turn>\n");
                }
            }
        }
        text
    }
}

impl Conversation {
    /// The prompt a chat model answers: the turns in the checkpoint's
    /// layout, then the opening of the assistant's turn (the chat
    /// template's `add_generation_prompt`).
    pub fn generation_prompt(&self, layout: TurnLayout) -> String {
        let mut text = self.routing_text(layout);
        text.push_str(match layout {
            TurnLayout::ChatMl => "<|im_start|>assistant\n",
            TurnLayout::Gemma => "<start_of_turn>model\n",
        });
        text
    }
}

/// How a checkpoint writes turns, as its chat template shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TurnLayout {
    /// `<|im_start|>role\n…<|im_end|>\n` (SmolLM2, Qwen).
    #[default]
    ChatMl,
    /// `<start_of_turn>user\n…<end_of_turn>\n`, system text folded into
    /// the first user turn (Gemma).
    Gemma,
}

impl TurnLayout {
    /// The layout a GGUF's `tokenizer.chat_template` writes, by its turn
    /// markers; ChatML when there is no template or it is not recognised.
    pub fn from_chat_template(template: Option<&str>) -> TurnLayout {
        match template {
            Some(t) if t.contains("<start_of_turn>") => TurnLayout::Gemma,
            _ => TurnLayout::ChatMl,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gemma_folds_the_system_turn_into_the_first_user_turn() {
        let conv = Conversation::user("Fix the test.").with_system("You route.");
        assert_eq!(conv.routing_text(TurnLayout::Gemma), "<start_of_turn>user\nYou route.\n\nFix the test.<end_of_turn>\n");
        assert_eq!(
            conv.routing_text(TurnLayout::ChatMl),
            "<|im_start|>system\nYou route.<|im_end|>\n<|im_start|>user\nFix the test.<|im_end|>\n"
        );
        let reply = Conversation {
            messages: vec![Message { role: Role::User, content: "a".into() }, Message { role: Role::Assistant, content: "b".into() }],
        };
        assert_eq!(reply.routing_text(TurnLayout::Gemma), "<start_of_turn>user\na<end_of_turn>\n<start_of_turn>model\nb<end_of_turn>\n");
        assert_eq!(TurnLayout::from_chat_template(Some("{{ '<start_of_turn>' + role }}")), TurnLayout::Gemma);
        assert_eq!(TurnLayout::from_chat_template(None), TurnLayout::ChatMl);
        assert_eq!(
            Conversation::user("Hi").generation_prompt(TurnLayout::ChatMl),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
        );
        assert_eq!(
            Conversation::user("Hi").generation_prompt(TurnLayout::Gemma),
            "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n"
        );
    }
}
