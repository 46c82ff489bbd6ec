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

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeResult {
    pub backend: Backend,
    /// Why: "bubblewrap 0.8.0", "bubblewrap not found", "--sandbox off", …
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
    if choice == SandboxChoice::Off {
        return ProbeResult { backend: Backend::None, detail: "--sandbox off".into(), program: None };
    }
    native_probe(bwrap)
}

/// Where macOS keeps Seatbelt's tool.
pub const SANDBOX_EXEC: &str = "/usr/bin/sandbox-exec";

/// A test launch under the smallest profile, as the Linux probe does with
/// bubblewrap: the tool exists, and this user may use it.
#[cfg(target_os = "macos")]
fn native_probe(_bwrap: Option<&Path>) -> ProbeResult {
    use std::process::{Command, Stdio};
    let none = |detail: String| ProbeResult { backend: Backend::None, detail, program: None };
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
    let none = |detail: String| ProbeResult { backend: Backend::None, detail, program: None };
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
    // The smallest envelope that needs everything a real one needs: new user, pid,
    // net, ipc and uts namespaces (a required user namespace, not --unshare-all's
    // "try"), no capabilities, mounts, and an exec inside.
    let mut launch = Command::new(&bwrap);
    if nix::unistd::geteuid().is_root() {
        use std::os::unix::process::CommandExt;
        // As the user launches run as: a test launch as root would prove what root can
        // do rather than what launches can.
        let user = crate::ServiceUser::NOBODY;
        launch.uid(user.uid).gid(user.gid).current_dir("/");
    }
    let launch = launch
        .args(["--unshare-user", "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts"])
        .args(["--cap-drop", "ALL", "--die-with-parent", "--new-session"])
        .args(["--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev", "--", "true"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .output();
    match launch {
        Ok(out) if out.status.success() => ProbeResult { backend: Backend::Native, detail: name, program: Some(bwrap) },
        Ok(out) => {
            let stderr = String::from_utf8_lossy(&out.stderr);
            let first = stderr.lines().next().unwrap_or("no message").trim().to_owned();
            none(format!("{name} cannot create a sandbox: {first}{}", userns_hint(&read_userns_sysctls())))
        }
        Err(e) => none(format!("{name} cannot run: {e}")),
    }
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
        assert_eq!(p.line(), "sandbox backend=none (--sandbox off)");
    }

    #[test]
    fn missing_binary() {
        let p = probe(SandboxChoice::Auto, Some(Path::new("/nonexistent/bwrap")));
        assert_eq!(p.line(), "sandbox backend=none (bubblewrap not found)");
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
