//! The CLI's words for the API's enums, in one place: what `--worktree-backend`,
//! `--kind` and the output say for each value.

use cc_proto::common::v1::{EnvelopeKind, SandboxBackend, WorktreeBackend};

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
    fn every_word_round_trips() {
        for word in ["reflink", "copy", "git-worktree"] {
            assert_eq!(worktree_backend_name(worktree_backend(word) as i32), word);
        }
        assert_eq!(envelope_kind("overlay"), EnvelopeKind::Overlay);
        assert_eq!(envelope_kind("harness-bash"), EnvelopeKind::HarnessBash);
        assert_eq!((envelope_name(1), envelope_name(2)), ("native", "unwrapped"));
    }
}
