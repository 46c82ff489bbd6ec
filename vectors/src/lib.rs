//! The code-execution vectors: files where a write becomes code that runs later, in a
//! shell or in git, outside the moment the agent wrote them. Two processes guard them
//! in two ways — sandboxd binds them read-only inside envelopes, the runner refuses its
//! file tools' writes to them — and both must agree on the list, so it lives here.

#![forbid(unsafe_code)]

/// Shell and tool start-up files in HOME: written by an agent, run by the next shell
/// (or, for `.gitconfig`, by the next git) that starts there.
pub const RC_FILES: &[&str] = &[
    ".bashrc",
    ".bash_profile",
    ".bash_login",
    ".bash_logout",
    ".profile",
    ".zshrc",
    ".zshenv",
    ".zprofile",
    ".zlogin",
    ".inputrc",
    ".gitconfig",
];

/// git's other global configuration file, relative to HOME (XDG's place for
/// `.gitconfig`): the runner write-protects it too.
pub const HOME_GIT_CONFIG: &str = ".config/git/config";

/// The entries of a git directory that make git run something: hooks, the
/// configuration (`core.hooksPath`, `core.fsmonitor`, filters, `diff.external`, …) in
/// its three places, and `commondir`, which points git at another repository's.
pub const GIT_DIR_VECTORS: &[&str] = &["hooks", "config", "config.worktree", "commondir", "info"];

/// git config keys whose value git runs as a program (lower-case, as git compares
/// them). The gate's command classifier treats `git -c KEY=…` for any of them as
/// running a program; the hand-back of a copy's work (`ccctl conversation diff` and
/// `fetch`) sets each of them to nothing, so that no value the agent wrote runs.
/// Filter, diff and merge drivers have names of the repository's choosing and are
/// found in its config instead.
pub const GIT_PROGRAM_KEYS: &[&str] = &[
    "core.pager",
    "core.editor",
    "core.sshcommand",
    "core.fsmonitor",
    "core.askpass",
    "core.hookspath",
    "sequence.editor",
    "diff.external",
    "gpg.program",
    "gpg.ssh.program",
    "gpg.x509.program",
    "credential.helper",
    "core.gitproxy",
    "uploadpack.packobjectshook",
    "merge.tool",
    "diff.tool",
];

/// Whether `name` is a start-up file of a shell (or git) starting in HOME.
pub fn is_rc_file(name: &[u8]) -> bool {
    RC_FILES.iter().any(|rc| rc.as_bytes() == name)
}

/// Whether `name`, directly inside a `.git` directory, is one of its vectors.
pub fn is_git_dir_vector(name: &[u8]) -> bool {
    GIT_DIR_VECTORS.iter().any(|v| v.as_bytes() == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_match_exactly() {
        assert!(is_rc_file(b".bashrc") && is_rc_file(b".gitconfig"));
        assert!(!is_rc_file(b"bashrc") && !is_rc_file(b".bashrc.bak") && !is_rc_file(b""));
        assert!(is_git_dir_vector(b"hooks") && is_git_dir_vector(b"config.worktree"));
        assert!(!is_git_dir_vector(b"HEAD") && !is_git_dir_vector(b"objects") && !is_git_dir_vector(b"Config"));
    }
}
