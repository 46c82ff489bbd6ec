//! The vocabulary of the gate: effect classes, command classes, decisions and modes.

use std::fmt;
use std::str::FromStr;

/// What an action can do to the world. Every mutation tool declares the ones it can
/// produce; rules are written against them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Effect {
    WriteFile,
    DeleteFile,
    RunCommand,
    CreateCommit,
    PushRemote,
    OpenPullRequest,
    PublishReviewOrMerge,
    WriteExternalTracker,
    InstallPackage,
    PublishPackage,
    AccessNetwork,
}

impl Effect {
    pub const ALL: [Effect; 11] = [
        Effect::WriteFile,
        Effect::DeleteFile,
        Effect::RunCommand,
        Effect::CreateCommit,
        Effect::PushRemote,
        Effect::OpenPullRequest,
        Effect::PublishReviewOrMerge,
        Effect::WriteExternalTracker,
        Effect::InstallPackage,
        Effect::PublishPackage,
        Effect::AccessNetwork,
    ];

    /// Effects whose whole reach is the run's own copy (a file written, a commit made):
    /// allowed by default, and needing no rule of their own beside a remote one.
    pub fn stays_in_the_copy(self) -> bool {
        matches!(self, Effect::WriteFile | Effect::DeleteFile | Effect::RunCommand | Effect::CreateCommit)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Effect::WriteFile => "write_file",
            Effect::DeleteFile => "delete_file",
            Effect::RunCommand => "run_command",
            Effect::CreateCommit => "create_commit",
            Effect::PushRemote => "push_remote",
            Effect::OpenPullRequest => "open_pull_request",
            Effect::PublishReviewOrMerge => "publish_review_or_merge",
            Effect::WriteExternalTracker => "write_external_tracker",
            Effect::InstallPackage => "install_package",
            Effect::PublishPackage => "publish_package",
            Effect::AccessNetwork => "access_network",
        }
    }
}

/// What a simple command is, as far as the command policy is concerned. One command can
/// be several (`sudo rm -rf /` is privilege escalation and system destruction).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CommandClass {
    ReadOnly,
    Mutation,
    RemoteMutation,
    PrivilegeEscalation,
    SystemDestruction,
    NamespaceEscape,
    /// We cannot see what it does: it does not parse, or its command is computed.
    Opaque,
}

impl CommandClass {
    pub fn as_str(self) -> &'static str {
        match self {
            CommandClass::ReadOnly => "read_only",
            CommandClass::Mutation => "mutation",
            CommandClass::RemoteMutation => "remote_mutation",
            CommandClass::PrivilegeEscalation => "privilege_escalation",
            CommandClass::SystemDestruction => "system_destruction",
            CommandClass::NamespaceEscape => "namespace_escape",
            CommandClass::Opaque => "opaque",
        }
    }
}

/// Ordered from least to most restrictive, so `max` combines decisions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Decision {
    Allow,
    Ask,
    Deny,
}

impl Decision {
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Allow => "allow",
            Decision::Ask => "ask",
            Decision::Deny => "deny",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum Mode {
    #[default]
    Chat,
    Plan,
    Review,
    Orchestrate,
}

impl Mode {
    pub const ALL: [Mode; 4] = [Mode::Chat, Mode::Plan, Mode::Review, Mode::Orchestrate];

    /// Read-only modes have no mutation tools and deny every mutating command.
    pub fn is_read_only(self) -> bool {
        self != Mode::Chat
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Chat => "chat",
            Mode::Plan => "plan",
            Mode::Review => "review",
            Mode::Orchestrate => "orchestrate",
        }
    }
}

/// A name that is not one of ours; the message lists the ones that are.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {kind} {name:?} (known: {known})")]
pub struct UnknownName {
    pub kind: &'static str,
    pub name: String,
    pub known: String,
}

fn parse_named<T: Copy>(kind: &'static str, s: &str, all: &[T], name: fn(T) -> &'static str) -> Result<T, UnknownName> {
    all.iter().copied().find(|v| name(*v) == s).ok_or_else(|| UnknownName {
        kind,
        name: s.to_owned(),
        known: all.iter().map(|v| name(*v)).collect::<Vec<_>>().join(", "),
    })
}

impl FromStr for Effect {
    type Err = UnknownName;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse_named("effect class", s, &Effect::ALL, Effect::as_str)
    }
}

impl FromStr for Decision {
    type Err = UnknownName;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse_named("decision", s, &[Decision::Allow, Decision::Ask, Decision::Deny], Decision::as_str)
    }
}

impl FromStr for Mode {
    type Err = UnknownName;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse_named("mode", s, &Mode::ALL, Mode::as_str)
    }
}

macro_rules! display_as_str {
    ($($t:ty),*) => {$(
        impl fmt::Display for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
    )*};
}
display_as_str!(Effect, CommandClass, Decision, Mode);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for e in Effect::ALL {
            assert_eq!(e.as_str().parse::<Effect>(), Ok(e));
        }
        for m in Mode::ALL {
            assert_eq!(m.as_str().parse::<Mode>(), Ok(m));
        }
        let err = "push".parse::<Effect>().unwrap_err().to_string();
        assert!(err.contains("unknown effect class \"push\"") && err.contains("push_remote"), "{err}");
    }

    #[test]
    fn decisions_order_by_restriction() {
        assert!(Decision::Allow < Decision::Ask && Decision::Ask < Decision::Deny);
        assert_eq!([Decision::Ask, Decision::Deny, Decision::Allow].into_iter().max(), Some(Decision::Deny));
    }
}
