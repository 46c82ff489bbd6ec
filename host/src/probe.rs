//! The sandbox backend probe: a real test launch of bubblewrap, not a look at PATH.
//!
//! sandboxd owns it (its envelopes need the bwrap that passed); the supervisor runs
//! the same probe for its startup line. The result feeds, later, both dispatch seams
//! (CLI agents and the harness/ACP wrapper) from one place.

use std::path::{Path, PathBuf};

/// What the person asked for with `--sandbox`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SandboxChoice {
    /// Native when the probe succeeds, none otherwise (said on the startup line).
    #[default]
    Auto,
    /// Native or refuse to start.
    Native,
    /// No OS envelope.
    Off,
}

impl SandboxChoice {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::Native => "native",
            Self::Off => "off",
        }
    }
}

impl std::str::FromStr for SandboxChoice {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(Self::Auto),
            "native" => Ok(Self::Native),
            "off" => Ok(Self::Off),
            other => Err(format!("unknown sandbox backend {other:?} (expected auto, native or off)")),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Native,
    None,
}

/// The options every Linux envelope starts with, and the probe's test launch too:
/// the probe tries what a launch needs, not less.
pub const ENVELOPE_ISOLATION_FLAGS: &[&str] = &[
    "--new-session",
    "--die-with-parent",
    "--unshare-user",
    "--unshare-pid",
    "--unshare-ipc",
    "--unshare-uts",
    "--unshare-net",
    "--unshare-cgroup-try",
    "--cap-drop",
    "ALL",
    "--as-pid-1",
    // user.max_user_namespaces = 1 inside, behind our init's seccomp filter.
    "--disable-userns",
];

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeResult {
    pub backend: Backend,
    /// Why: "bubblewrap 0.8.0", "bubblewrap not found", "--sandbox off", …, then how
    /// paths beneath a run's roots are resolved ("; paths by openat2").
    pub detail: String,
    /// The envelope program that passed the test launch: bubblewrap on Linux,
    /// `sandbox-exec` on macOS.
    pub program: Option<PathBuf>,
}

impl ProbeResult {
    /// `sandbox backend=native (bubblewrap 0.8.0)`.
    pub fn line(&self) -> String {
        let name = match self.backend {
            Backend::Native => "native",
            Backend::None => "none",
        };
        format!("sandbox backend={name} ({})", self.detail)
    }
}

/// Runs the probe. `bwrap` overrides the PATH lookup (configuration). As root, the test
/// launch runs as an unprivileged user, as every real launch does.
pub fn probe(choice: SandboxChoice, bwrap: Option<&Path>) -> ProbeResult {
    let result =
        if choice == SandboxChoice::Off { ProbeResult::none("--sandbox off".into()) } else { native_probe(bwrap) };
    // Said whatever the backend: the runner's file tools and a root supervisor's
    // walks use it with or without an envelope.
    #[cfg(target_os = "linux")]
    let result =
        ProbeResult { detail: format!("{}; {}", result.detail, crate::resolve::Resolver::describe()), ..result };
    result
}

impl ProbeResult {
    fn none(detail: String) -> Self {
        ProbeResult { backend: Backend::None, detail, program: None }
    }
}

/// Where macOS keeps Seatbelt's tool.
pub const SANDBOX_EXEC: &str = "/usr/bin/sandbox-exec";

/// A test launch under the smallest profile, as the Linux probe does with
/// bubblewrap: the tool exists, and this user may use it.
#[cfg(target_os = "macos")]
fn native_probe(_bwrap: Option<&Path>) -> ProbeResult {
    use std::process::{Command, Stdio};
    let none = ProbeResult::none;
    let launch = Command::new(SANDBOX_EXEC)
        .args(["-p", "(version 1)(allow default)", "--", "/usr/bin/true"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .output();
    match launch {
        Ok(out) if out.status.success() => ProbeResult {
            backend: Backend::Native,
            detail: "sandbox-exec (Seatbelt)".into(),
            program: Some(PathBuf::from(SANDBOX_EXEC)),
        },
        Ok(out) => {
            let stderr = String::from_utf8_lossy(&out.stderr);
            none(format!("sandbox-exec cannot apply a profile: {}", stderr.lines().next().unwrap_or("no message")))
        }
        Err(e) => none(format!("sandbox-exec cannot run: {e}")),
    }
}

#[cfg(target_os = "linux")]
fn native_probe(bwrap: Option<&Path>) -> ProbeResult {
    use std::process::{Command, Stdio};
    let none = ProbeResult::none;
    let Some(bwrap) = bwrap.map(Path::to_owned).or_else(|| find_on_path("bwrap")) else {
        return none("bubblewrap not found".into());
    };
    let version = match Command::new(&bwrap).arg("--version").stdin(Stdio::null()).output() {
        Ok(out) if out.status.success() => parse_version(&String::from_utf8_lossy(&out.stdout)),
        Ok(_) => None,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return none("bubblewrap not found".into()),
        Err(e) => return none(format!("bubblewrap at {} cannot run: {e}", bwrap.display())),
    };
    let name = match &version {
        Some(v) => format!("bubblewrap {v}"),
        None => "bubblewrap (unknown version)".to_owned(),
    };
    match test_launch(&bwrap) {
        Ok(()) => ProbeResult { backend: Backend::Native, detail: name, program: Some(bwrap) },
        Err(first) => none(format!("{name} cannot create a sandbox: {first}{}", launch_hint())),
    }
}

/// A launch of `true` in an envelope with every isolation option a real one has, as
/// the user launches run as, under this process's own restrictions (its seccomp
/// filter, its read-only mounts): the first line bubblewrap printed when it fails.
#[cfg(target_os = "linux")]
fn test_launch(bwrap: &Path) -> Result<(), String> {
    use std::process::{Command, Stdio};
    let mut launch = Command::new(bwrap);
    if nix::unistd::geteuid().is_root() {
        use std::os::unix::process::CommandExt;
        // As the user launches run as: a test launch as root would prove what root can
        // do rather than what launches can.
        let user = crate::ServiceUser::NOBODY;
        launch.uid(user.uid).gid(user.gid).current_dir("/");
    }
    let out = launch
        .args(ENVELOPE_ISOLATION_FLAGS)
        .args(["--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev", "--", "true"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run: {e}"))?;
    if out.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    Err(stderr.lines().next().unwrap_or("no message").trim().to_owned())
}

/// Says which setting is in the way of a test launch, and the fix.
#[cfg(target_os = "linux")]
fn launch_hint() -> String {
    // The kernel mounts a new procfs in a user namespace only where an existing one is
    // fully visible; a read-only bind over /proc/sys is a locked mount hiding a
    // directory, so bubblewrap's --proc fails (and --disable-userns cannot write its
    // sysctl). No envelope flag lives with it: binding the host's /proc instead would
    // show the host's processes.
    if proc_sys_read_only() {
        return " (/proc/sys is read-only here, as systemd's ProtectKernelTunables= or a container makes it: \
                 bubblewrap cannot mount an envelope's /proc under it; remove that setting)"
            .into();
    }
    userns_hint(&read_userns_sysctls())
}

/// Whether `/proc/sys` is mounted read-only here (systemd's `ProtectKernelTunables=`,
/// a container runtime's default).
#[cfg(target_os = "linux")]
fn proc_sys_read_only() -> bool {
    nix::sys::statvfs::statvfs("/proc/sys").is_ok_and(|m| m.flags().contains(nix::sys::statvfs::FsFlags::ST_RDONLY))
}

/// `bubblewrap 0.8.0` → `0.8.0`.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
pub fn parse_version(stdout: &str) -> Option<String> {
    let rest = stdout.trim().strip_prefix("bubblewrap")?.trim();
    (!rest.is_empty() && rest.chars().all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-'))
        .then(|| rest.to_owned())
}

#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|dir| dir.join(name)).find(|candidate| {
        use std::os::unix::fs::PermissionsExt;
        candidate.metadata().is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    })
}

/// The kernel settings that commonly forbid unprivileged user namespaces.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct UsernsSysctls {
    pub apparmor_restrict: Option<String>,
    pub unprivileged_clone: Option<String>,
    pub max_user_namespaces: Option<String>,
}

#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
fn read_userns_sysctls() -> UsernsSysctls {
    let read = |p: &str| std::fs::read_to_string(p).ok().map(|s| s.trim().to_owned());
    UsernsSysctls {
        apparmor_restrict: read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns"),
        unprivileged_clone: read("/proc/sys/kernel/unprivileged_userns_clone"),
        max_user_namespaces: read("/proc/sys/user/max_user_namespaces"),
    }
}

/// Says exactly which setting is in the way, and the fix.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
pub fn userns_hint(s: &UsernsSysctls) -> String {
    if s.apparmor_restrict.as_deref() == Some("1") {
        return " (AppArmor restricts unprivileged user namespaces: kernel.apparmor_restrict_unprivileged_userns=1; \
                 add an AppArmor profile for bwrap or set it to 0)"
            .into();
    }
    if s.unprivileged_clone.as_deref() == Some("0") {
        return " (unprivileged user namespaces are disabled: set kernel.unprivileged_userns_clone=1)".into();
    }
    if s.max_user_namespaces.as_deref() == Some("0") {
        return " (user namespaces are disabled: set user.max_user_namespaces above 0)".into();
    }
    String::new()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions() {
        assert_eq!(parse_version("bubblewrap 0.8.0\n").as_deref(), Some("0.8.0"));
        assert_eq!(parse_version("bubblewrap 0.11.0-rc1").as_deref(), Some("0.11.0-rc1"));
        assert_eq!(parse_version("something else"), None);
        assert_eq!(parse_version("bubblewrap \x1b[31m"), None);
        assert_eq!(parse_version(""), None);
    }

    #[test]
    fn off_never_launches() {
        let p = probe(SandboxChoice::Off, Some(Path::new("/nonexistent/bwrap")));
        assert!(p.line().starts_with("sandbox backend=none (--sandbox off; paths by "), "{}", p.line());
    }

    #[test]
    fn missing_binary() {
        let p = probe(SandboxChoice::Auto, Some(Path::new("/nonexistent/bwrap")));
        assert!(p.line().starts_with("sandbox backend=none (bubblewrap not found; paths by "), "{}", p.line());
    }

    #[test]
    fn a_binary_that_is_not_bwrap_fails_the_test_launch() {
        let p = probe(SandboxChoice::Auto, Some(Path::new("/bin/false")));
        assert_eq!(p.backend, Backend::None);
    }

    #[test]
    fn hints() {
        let apparmor = UsernsSysctls { apparmor_restrict: Some("1".into()), ..Default::default() };
        assert!(userns_hint(&apparmor).contains("apparmor_restrict_unprivileged_userns=1"));
        let debian = UsernsSysctls { unprivileged_clone: Some("0".into()), ..Default::default() };
        assert!(userns_hint(&debian).contains("unprivileged_userns_clone=1"));
        let max = UsernsSysctls { max_user_namespaces: Some("0".into()), ..Default::default() };
        assert!(userns_hint(&max).contains("max_user_namespaces"));
        assert_eq!(userns_hint(&UsernsSysctls::default()), "");
    }
}
