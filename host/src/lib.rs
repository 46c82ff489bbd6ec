//! What the supervisor and sandboxd both know of the host they run on, in a crate of
//! its own so that the supervisor does not link sandboxd's envelope builder:
//!
//! * [`probe`]: the sandbox backend probe (a real test launch) and the person's choice;
//! * [`cgroup`]: per-run resource limits (cgroup v2 or v1);
//! * [`orphan`]: a child the kernel kills with its parent;
//! * [`microvm`]: what this host has of what a microVM needs, and the verdict;
//! * [`terminal`]: the sizes and signals a hosted terminal takes;
//! * [`beneath`]: reaching inside a directory tree an agent controls without following
//!   its links;
//! * [`resolve`]: opening a path beneath a handle, by `openat2` or, where that call is
//!   filtered or missing, by a walk with the same guarantee;
//! * [`lock`], [`sd_notify`]: a service's hold on its data directory, and its word to
//!   systemd that it is ready;
//! * [`ServiceUser`], [`SYSTEM_PATH`], [`FIRST_BOUND_FD`], [`OPTIONS_FD`]: facts both sides must agree on.
// Denied rather than forbidden: `cgroup::join`, `orphan` and `terminal::foreground`
// allow it, each for one system call.
#![deny(unsafe_code)]

pub mod beneath;
pub mod cgroup;
pub mod lock;
pub mod microvm;
pub mod orphan;
pub mod probe;
#[cfg(target_os = "linux")]
pub mod resolve;
pub mod sd_notify;
pub mod terminal;

/// The unprivileged user every launch, runner and provisioned copy belongs to when the
/// supervisor runs as root.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServiceUser {
    pub uid: u32,
    pub gid: u32,
}

impl ServiceUser {
    /// nobody:nogroup, which owns nothing else on a Debian host.
    pub const NOBODY: ServiceUser = ServiceUser { uid: 65534, gid: 65534 };

    /// The service user when this process is root; `None` otherwise (then everything is
    /// this process's own user's).
    pub fn when_root() -> Option<ServiceUser> {
        nix::unistd::geteuid().is_root().then_some(ServiceUser::NOBODY)
    }
}

/// Every envelope's PATH starts with the system's program directories, never the host's
/// PATH; the supervisor's own git calls on agent trees use it too.
pub const SYSTEM_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The runner's envelope binds its paths by descriptor: the one at index i of
/// `Envelope.bound` is descriptor `FIRST_BOUND_FD + i` of the process the supervisor
/// starts (0–2 are stdio; 3 carries bubblewrap's options).
pub const FIRST_BOUND_FD: i32 = 4;

/// bubblewrap reads its options from this descriptor (`--args 3`), never from its
/// command line: they hold the environment's values, which /proc/<pid>/cmdline shows
/// to every local user.
pub const OPTIONS_FD: i32 = 3;

impl From<probe::Backend> for cc_proto::common::v1::SandboxBackend {
    fn from(backend: probe::Backend) -> Self {
        match backend {
            probe::Backend::Native => Self::Native,
            probe::Backend::None => Self::None,
        }
    }
}
