//! The agent's steps as the run's events name them. The steps themselves are
//! `cc.runner.v1.AgentEvent`, read by the run's process from the agent's own protocol;
//! this is the one list of their kinds and the one bound on what each may carry.

/// The most of one event's text kept: a message of the agent's, a tool's input or result.
pub const MAX_EVENT_TEXT: usize = 16 * 1024;
/// The most of one identifier kept: a session id, a model's or a tool's name, a cwd.
pub const MAX_EVENT_ID: usize = 1024;
/// The most tool names or MCP servers one `agent_init` lists.
pub const MAX_EVENT_LIST: usize = 512;

/// Every kind of step an agent's output becomes, one event kind each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AgentEventKind {
    Init,
    Text,
    Thought,
    ToolUse,
    ToolResult,
    Update,
    Permission,
    Result,
}

impl AgentEventKind {
    /// The event's kind in the run's event log (docs/reference/events.md).
    pub fn name(self) -> &'static str {
        match self {
            Self::Init => "agent_init",
            Self::Text => "agent_text",
            Self::Thought => "agent_thought",
            Self::ToolUse => "agent_tool_use",
            Self::ToolResult => "agent_tool_result",
            Self::Update => "agent_update",
            Self::Permission => "agent_permission",
            Self::Result => "agent_result",
        }
    }
}

/// `text` cut to at most `max` bytes on a character boundary, saying how long it was.
pub fn clipped(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes in all)", &text[..end], text.len())
}

/// An identifier cut to [`MAX_EVENT_ID`] bytes, whole characters, with no note: it
/// stays one word.
pub fn clipped_id(text: &str) -> String {
    let mut end = text.len().min(MAX_EVENT_ID);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clipping_keeps_whole_characters_and_says_how_long_the_text_was() {
        assert_eq!(clipped("short", 16), "short");
        let long = "é".repeat(20);
        let cut = clipped(&long, 5);
        assert_eq!(cut, format!("éé… (40 bytes in all)"));
        assert_eq!(clipped_id(&"é".repeat(MAX_EVENT_ID)).len(), MAX_EVENT_ID);
        assert_eq!(clipped_id(&format!("a{}", "é".repeat(MAX_EVENT_ID))).len(), MAX_EVENT_ID - 1);
    }
}
