//! The adapters' names, as the CLI, the store and the events spell them. The enum
//! itself is `cc.common.v1.Adapter`: one for the wire and for Rust.

use crate::common::v1::Adapter;

impl Adapter {
    /// Every adapter, in the order `ccctl adapters` shows them.
    pub const ALL: [Adapter; 4] = [Adapter::Harness, Adapter::ClaudeCode, Adapter::ClaudeCodeNosandbox, Adapter::Acp];

    /// `harness`, `claude-code`, `claude-code-nosandbox` or `acp`; unset is the harness.
    pub fn name(self) -> &'static str {
        match self {
            Adapter::Unspecified | Adapter::Harness => "harness",
            Adapter::ClaudeCode => "claude-code",
            Adapter::ClaudeCodeNosandbox => "claude-code-nosandbox",
            Adapter::Acp => "acp",
        }
    }

    /// Every adapter's name, for a refusal to list: `harness, claude-code, …`.
    pub fn listed() -> String {
        Self::ALL.map(Adapter::name).join(", ")
    }

    /// The adapter `name` names, if any.
    pub fn from_name(name: &str) -> Option<Adapter> {
        Self::ALL.into_iter().find(|a| a.name() == name)
    }

    /// A value from the wire: unset is the harness; None for a value this build does
    /// not know.
    pub fn from_wire(value: i32) -> Option<Adapter> {
        match Adapter::try_from(value) {
            Ok(Adapter::Unspecified) => Some(Adapter::Harness),
            Ok(adapter) => Some(adapter),
            Err(_) => None,
        }
    }

    /// Whether its agent is the Claude Code CLI, in an envelope or on the host.
    pub fn is_claude_code(self) -> bool {
        matches!(self, Adapter::ClaudeCode | Adapter::ClaudeCodeNosandbox)
    }

    /// Whether it has an agent to prompt.
    pub fn has_agent(self) -> bool {
        !matches!(self, Adapter::Unspecified | Adapter::Harness)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unset_is_the_harness() {
        for adapter in Adapter::ALL {
            assert_eq!(Adapter::from_name(adapter.name()), Some(adapter));
            assert_eq!(Adapter::from_wire(adapter as i32), Some(adapter));
        }
        assert_eq!(Adapter::from_wire(0), Some(Adapter::Harness));
        assert_eq!(Adapter::from_wire(99), None);
        assert_eq!(Adapter::from_name("claude"), None);
    }
}
