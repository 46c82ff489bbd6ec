//! `ccctl install`: the unit files from `deploy/`, with this installation's paths.

use std::path::{Path, PathBuf};

const SYSTEMD_SYSTEM: &str = include_str!("../../../deploy/systemd/cc-supervisor.service");
const SYSTEMD_USER: &str = include_str!("../../../deploy/systemd/cc-supervisor.user.service");
const LAUNCHD: &str = include_str!("../../../deploy/launchd/dev.control-center.supervisor.plist");

pub const SYSTEMD_UNIT_NAME: &str = "cc-supervisor.service";
pub const LAUNCHD_LABEL: &str = "dev.control-center.supervisor";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    SystemdSystem,
    SystemdUser,
    Launchd,
}

#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    #[error("{0} is not where this ccctl expects it: install cc-supervisor next to ccctl")]
    MissingSupervisor(PathBuf),
    #[error("path {0} cannot go into a unit file (it contains a newline, a quote, a space or is not UTF-8)")]
    UnsafePath(PathBuf),
    #[error("HOME is not set: cannot tell where user units go")]
    NoHome,
    #[error("cannot write {path}: {source}")]
    Write { path: PathBuf, source: std::io::Error },
}

/// A unit file ready to be written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unit {
    pub path: PathBuf,
    pub contents: String,
    /// What the person runs next.
    pub next_step: String,
}

/// Fills in the template for `target`. `home` is the user's home (user units, launchd).
pub fn render(target: Target, supervisor: &Path, data_dir: &Path, home: Option<&Path>) -> Result<Unit, InstallError> {
    let text = |p: &Path| -> Result<String, InstallError> {
        let s = p.to_str().ok_or_else(|| InstallError::UnsafePath(p.to_owned()))?;
        if s.chars()
            .any(|c| c.is_control() || c.is_whitespace() || matches!(c, '"' | '\'' | '\\' | '<' | '>' | '&' | '%'))
        {
            return Err(InstallError::UnsafePath(p.to_owned()));
        }
        Ok(s.to_owned())
    };
    let fill = |template: &str, log_dir: Option<&str>| -> Result<String, InstallError> {
        // ccctl is installed beside cc-supervisor: `systemctl reload` runs it.
        let ccctl = supervisor.with_file_name("ccctl");
        let mut out = template
            .replace("@SUPERVISOR@", &text(supervisor)?)
            .replace("@CCCTL@", &text(&ccctl)?)
            .replace("@DATA_DIR@", &text(data_dir)?);
        if let Some(log_dir) = log_dir {
            out = out.replace("@LOG_DIR@", log_dir);
        }
        Ok(out)
    };
    let home = || home.map(Path::to_owned).ok_or(InstallError::NoHome);
    Ok(match target {
        Target::SystemdSystem => Unit {
            path: PathBuf::from("/etc/systemd/system").join(SYSTEMD_UNIT_NAME),
            contents: fill(SYSTEMD_SYSTEM, None)?,
            next_step: "systemctl daemon-reload && systemctl enable --now cc-supervisor".into(),
        },
        Target::SystemdUser => {
            let config = std::env::var_os("XDG_CONFIG_HOME")
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
                .map_or_else(|| home().map(|h| h.join(".config")), Ok)?;
            Unit {
                path: config.join("systemd/user").join(SYSTEMD_UNIT_NAME),
                contents: fill(SYSTEMD_USER, None)?,
                next_step: "systemctl --user daemon-reload && systemctl --user enable --now cc-supervisor".into(),
            }
        }
        Target::Launchd => {
            let home = home()?;
            let log_dir = text(&home.join("Library/Logs"))?;
            Unit {
                path: home.join("Library/LaunchAgents").join(format!("{LAUNCHD_LABEL}.plist")),
                contents: fill(LAUNCHD, Some(&log_dir))?,
                next_step: format!("launchctl bootstrap gui/$(id -u) ~/Library/LaunchAgents/{LAUNCHD_LABEL}.plist"),
            }
        }
    })
}

pub fn write(unit: &Unit) -> Result<(), InstallError> {
    let write_err = |source| InstallError::Write { path: unit.path.clone(), source };
    if let Some(dir) = unit.path.parent() {
        std::fs::create_dir_all(dir).map_err(write_err)?;
    }
    // Write beside it and rename, so that a failed write never leaves half a unit.
    let tmp = unit.path.with_extension("tmp");
    std::fs::write(&tmp, &unit.contents).map_err(write_err)?;
    std::fs::rename(&tmp, &unit.path).map_err(write_err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_every_target_without_placeholders() {
        for target in [Target::SystemdSystem, Target::SystemdUser, Target::Launchd] {
            let unit = render(
                target,
                Path::new("/opt/cc/bin/cc-supervisor"),
                Path::new("/var/lib/cc"),
                Some(Path::new("/home/u")),
            )
            .unwrap();
            for placeholder in ["@SUPERVISOR@", "@CCCTL@", "@DATA_DIR@", "@LOG_DIR@"] {
                assert!(!unit.contents.contains(placeholder), "{target:?}: {}", unit.contents);
            }
            assert!(unit.contents.contains("/opt/cc/bin/cc-supervisor"));
            assert!(unit.contents.contains("/var/lib/cc"));
        }
    }

    #[test]
    fn systemd_units_are_type_notify() {
        for target in [Target::SystemdSystem, Target::SystemdUser] {
            let unit = render(target, Path::new("/x/cc-supervisor"), Path::new("/d"), Some(Path::new("/h"))).unwrap();
            assert!(unit.contents.contains("Type=notify"));
            assert!(unit.contents.contains("ExecStart=/x/cc-supervisor --data-dir /d"));
        }
    }

    #[test]
    fn launchd_plist_is_well_formed_enough() {
        let unit = render(Target::Launchd, Path::new("/x/cc-supervisor"), Path::new("/d"), Some(Path::new("/Users/u")))
            .unwrap();
        assert_eq!(unit.path, Path::new("/Users/u/Library/LaunchAgents/dev.control-center.supervisor.plist"));
        // An XML comment may not contain "--".
        for comment in unit.contents.split("<!--").skip(1) {
            let body = comment.split("-->").next().unwrap();
            assert!(!body.contains("--"), "{body}");
        }
        assert!(unit.contents.contains("<string>/Users/u/Library/Logs/cc-supervisor.log</string>"));
    }

    #[test]
    fn refuses_paths_that_would_break_the_unit() {
        for bad in ["/a b/cc-supervisor", "/a\nExecStartPre=/bin/sh/cc-supervisor", "/a\"/cc-supervisor", "/a%h/x"] {
            assert!(matches!(
                render(Target::SystemdSystem, Path::new(bad), Path::new("/d"), None),
                Err(InstallError::UnsafePath(_))
            ));
        }
    }
}
