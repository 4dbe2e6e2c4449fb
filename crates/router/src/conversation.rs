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

    /// The routing text: the turns in the ChatML layout both supported
    /// backbones were trained on (`<|im_start|>role\n…<|im_end|>\n`).
    pub fn routing_text(&self) -> String {
        let mut text = String::new();
        for m in &self.messages {
            text.push_str("<|im_start|>");
            text.push_str(m.role.name());
            text.push('\n');
            text.push_str(&m.content);
            text.push_str("<|im_end|>\n");
        }
        text
    }
}
