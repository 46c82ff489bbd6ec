//! The CLI's words for the API's enums, in one place: what `--worktree-backend`,
//! `--kind` and the output say for each value.

use cc_proto::common::v1::{Adapter, EnvelopeKind, SandboxBackend, WorktreeBackend};

/// `--adapter`'s words: `Adapter::name`'s. Checked here rather than by clap, whose
/// refusal takes several lines.
pub fn adapter(word: &str) -> anyhow::Result<Adapter> {
    Adapter::from_name(word).ok_or_else(|| {
        anyhow::anyhow!("unknown adapter {word:?}: the adapters are {} (`ccctl adapters`)", Adapter::listed())
    })
}

/// An adapter from the wire, or "unknown" (a value of a newer supervisor).
pub fn adapter_name(value: i32) -> &'static str {
    Adapter::from_wire(value).map_or("unknown", Adapter::name)
}

/// `--worktree-backend`'s words (clap has checked them).
pub fn worktree_backend(word: &str) -> WorktreeBackend {
    match word {
        "copy" => WorktreeBackend::Copy,
        "git-worktree" => WorktreeBackend::GitWorktree,
        _ => WorktreeBackend::Reflink,
    }
}

/// A conversation's backend as the CLI and the supervisor's store spell it.
pub fn worktree_backend_name(value: i32) -> &'static str {
    match WorktreeBackend::try_from(value) {
        Ok(WorktreeBackend::Copy) => "copy",
        Ok(WorktreeBackend::GitWorktree) => "git-worktree",
        Ok(WorktreeBackend::Reflink | WorktreeBackend::Unspecified) => "reflink",
        Err(_) => "unknown",
    }
}

pub fn is_git_worktree(value: i32) -> bool {
    value == WorktreeBackend::GitWorktree as i32
}

/// `--kind`'s words (clap has checked them).
pub fn envelope_kind(word: &str) -> EnvelopeKind {
    match word {
        "overlay" => EnvelopeKind::Overlay,
        _ => EnvelopeKind::HarnessBash,
    }
}

/// The sandbox backend: "native", "none", or "unknown" (a value of a newer supervisor).
pub fn sandbox_backend_name(value: i32) -> &'static str {
    match SandboxBackend::try_from(value) {
        Ok(SandboxBackend::Native) => "native",
        Ok(SandboxBackend::None) => "none",
        _ => "unknown",
    }
}

/// How a launch ran: "native" (in its envelope) or "unwrapped".
pub fn envelope_name(value: i32) -> &'static str {
    if value == SandboxBackend::Native as i32 { "native" } else { "unwrapped" }
}

/// `--backend`'s words for a terminal (clap has checked them).
pub fn terminal_backend(word: &str) -> cc_proto::supervisor::v1::TerminalBackend {
    use cc_proto::supervisor::v1::TerminalBackend;
    match word {
        "native" => TerminalBackend::Native,
        "microvm" => TerminalBackend::Microvm,
        _ => TerminalBackend::Host,
    }
}

/// A terminal's backend as `--backend` spells it.
pub fn terminal_backend_name(value: i32) -> &'static str {
    use cc_proto::supervisor::v1::TerminalBackend;
    match TerminalBackend::try_from(value) {
        Ok(TerminalBackend::Host | TerminalBackend::Unspecified) => "host",
        Ok(TerminalBackend::Native) => "native",
        Ok(TerminalBackend::Microvm) => "microvm",
        Err(_) => "unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_adapter_words_are_the_adapters_names() {
        for known in Adapter::ALL {
            assert_eq!(adapter_name(adapter(known.name()).unwrap() as i32), known.name());
        }
        let refused = adapter("claude").unwrap_err().to_string();
        assert_eq!(
            refused,
            "unknown adapter \"claude\": the adapters are harness, claude-code, claude-code-nosandbox, acp (`ccctl adapters`)"
        );
    }

    #[test]
    fn every_word_round_trips() {
        for word in ["reflink", "copy", "git-worktree"] {
            assert_eq!(worktree_backend_name(worktree_backend(word) as i32), word);
        }
        assert_eq!(envelope_kind("overlay"), EnvelopeKind::Overlay);
        assert_eq!(envelope_kind("harness-bash"), EnvelopeKind::HarnessBash);
        assert_eq!((envelope_name(1), envelope_name(2)), ("native", "unwrapped"));
    }
}
