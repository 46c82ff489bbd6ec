//! The macOS backend's launch: `sandbox-exec` with the run's SBPL profile ([`crate::sbpl`])
//! in front of the command, and the live reader of Seatbelt's denials from the unified
//! log ([`crate::seatbelt_log`] parses them). What it is made from is pure and tested on
//! any system; starting `sandbox-exec` and `log stream` is compiled on macOS only.
//!
//! There is no init of ours on macOS: no pid namespace to be PID 1 of, no seccomp. The
//! launch's process group is what sandboxd kills, as for an unwrapped launch, and a
//! `setsid` inside it escapes that (the README's residual risks).

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::bwrap::Kind;
use crate::policy::RunPolicy;
use crate::sbpl::{self, ProfileInputs, SbplError};

pub use cc_host::probe::SANDBOX_EXEC;

/// Paths in the person's home no launch may read: keys, cloud and registry
/// credentials, the keychains.
pub const HOME_SECRETS: &[&str] = &[
    ".ssh",
    ".aws",
    ".gnupg",
    ".kube",
    ".docker",
    ".azure",
    ".config/gcloud",
    ".config/gh",
    ".netrc",
    ".npmrc",
    ".pypirc",
    ".git-credentials",
    "Library/Keychains",
    "Library/Cookies",
];

/// What in the data directory no launch may read: the supervisor's state, its
/// configuration and every socket.
pub const DATA_SECRETS: &[&str] = &["state.db", "state.db-wal", "state.db-shm", "config.toml", "sock"];

/// The unreadable paths of a launch: the person's secrets and the supervisor's.
pub fn secrets(home: Option<&Path>, data_dir: &Path) -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = home.into_iter().flat_map(|h| HOME_SECRETS.iter().map(move |s| h.join(s))).collect();
    paths.extend(DATA_SECRETS.iter().map(|s| data_dir.join(s)));
    paths
}

/// `sandbox-exec`'s arguments after its path: the profile, then the command. `--` so
/// that a command whose name begins with `-` is not read as an option.
pub fn sandbox_exec_args(profile: &str, argv: &[OsString]) -> Vec<OsString> {
    let mut args = vec![OsString::from("-p"), OsString::from(profile), OsString::from("--")];
    args.extend(argv.iter().cloned());
    args
}

/// The envelope of one launch: the profile of the policy for the kind, in front of
/// the command.
pub fn envelope_args(
    policy: &RunPolicy,
    kind: Kind,
    protected: &[PathBuf],
    home: Option<&Path>,
    data_dir: &Path,
    argv: &[OsString],
) -> Result<Vec<OsString>, SbplError> {
    let secrets = secrets(home, data_dir);
    let ports: Vec<u16> = policy.bridges.keys().copied().collect();
    let resolve = |p: &Path| std::fs::canonicalize(p).ok();
    let profile =
        sbpl::profile(&ProfileInputs { policy, kind, secrets: &secrets, protected, ports: &ports, resolve: &resolve })?;
    Ok(sandbox_exec_args(&profile, argv))
}

/// `log stream`'s arguments for Seatbelt's denials, one line each.
pub const LOG_STREAM_ARGS: &[&str] =
    &["stream", "--style", "syslog", "--level", "info", "--predicate", "sender == \"Sandbox\""];

#[cfg(target_os = "macos")]
pub use live::DenialFeed;

#[cfg(target_os = "macos")]
mod live {
    use std::process::Stdio;

    use cc_proto::sandboxd::v1 as pb;
    use tokio::io::AsyncBufReadExt;
    use tokio::sync::{broadcast, mpsc};
    use tonic::Status;

    use crate::seatbelt_log::{self, Denial};
    use crate::violations::Deduplicator;

    /// One `log stream` for all launches, its denials broadcast to whoever listens.
    pub struct DenialFeed {
        tx: broadcast::Sender<(Denial, String)>,
    }

    impl DenialFeed {
        /// Starts the reader; `None` when `log` cannot run (violations then come only
        /// from the commands' stderr).
        pub fn start() -> Option<Self> {
            let mut child = tokio::process::Command::new("/usr/bin/log")
                .args(super::LOG_STREAM_ARGS)
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .kill_on_drop(true)
                .spawn()
                .ok()?;
            let stdout = child.stdout.take()?;
            let (tx, _) = broadcast::channel(256);
            let sender = tx.clone();
            tokio::spawn(async move {
                let _child = child;
                let mut lines = tokio::io::BufReader::new(stdout).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    if let Some(denial) = seatbelt_log::parse(&line).filter(|d| !seatbelt_log::is_noise(d)) {
                        let _ = sender.send((denial, line));
                    }
                }
            });
            Some(Self { tx })
        }

        /// Forwards, as violation events, the denials of processes in `group` until
        /// aborted.
        pub fn forward(
            &self,
            group: u32,
            events: mpsc::Sender<Result<pb::LaunchResponse, Status>>,
            limit: usize,
        ) -> tokio::task::JoinHandle<()> {
            let mut rx = self.tx.subscribe();
            tokio::spawn(async move {
                let mut dedup = Deduplicator::new(limit);
                loop {
                    let (denial, line) = match rx.recv().await {
                        Ok(d) => d,
                        Err(broadcast::error::RecvError::Lagged(_)) => continue,
                        Err(broadcast::error::RecvError::Closed) => return,
                    };
                    let pid = nix::unistd::Pid::from_raw(denial.pid as i32);
                    let ours = nix::unistd::getpgid(Some(pid)).is_ok_and(|g| g.as_raw() as u32 == group);
                    let violation = seatbelt_log::to_violation(&denial, &line);
                    if ours && dedup.admit(&violation) {
                        let event =
                            pb::LaunchResponse { event: Some(pb::launch_response::Event::Violation(violation)) };
                        if events.send(Ok(event)).await.is_err() {
                            return;
                        }
                    }
                }
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_follows_the_profile_after_a_double_dash() {
        let argv = [OsString::from("-rf"), OsString::from("x")];
        let args = sandbox_exec_args("(version 1)", &argv);
        assert_eq!(args, ["-p", "(version 1)", "--", "-rf", "x"].map(OsString::from));
    }

    #[test]
    fn secrets_hold_the_persons_keys_and_the_supervisors_state() {
        let s = secrets(Some(Path::new("/Users/me")), Path::new("/Users/me/Library/cc"));
        for p in [
            "/Users/me/.ssh",
            "/Users/me/Library/Keychains",
            "/Users/me/Library/cc/state.db",
            "/Users/me/Library/cc/sock",
        ] {
            assert!(s.contains(&PathBuf::from(p)), "{p}: {s:?}");
        }
        // Never the data dir as a whole: the run's roots are inside it.
        assert!(!s.contains(&PathBuf::from("/Users/me/Library/cc")));
        assert_eq!(secrets(None, Path::new("/d")).len(), DATA_SECRETS.len());
    }

    #[test]
    fn a_launch_profile_denies_the_secrets_and_runs_the_command() {
        let tmp = tempfile::tempdir().unwrap();
        let data = std::fs::canonicalize(tmp.path()).unwrap();
        let work = data.join("conversations/c1/repos/demo");
        std::fs::create_dir_all(&work).unwrap();
        let policy = RunPolicy {
            run_id: "r1".into(),
            agent_work: None,
            agent_config: None,
            repos: None,
            attachments: None,
            work_dir: work.clone(),
            write_deny: vec![],
            env: Default::default(),
            bridges: Default::default(),
            runner_socket_dir: None,
            shared_git: vec![],
            identities: vec![],
            limits: Default::default(),
        };
        let argv = [OsString::from("/bin/sh"), OsString::from("-c"), OsString::from("true")];
        let args = envelope_args(&policy, Kind::HarnessBash, &[], Some(Path::new("/Users/me")), &data, &argv).unwrap();
        let profile = args[1].to_str().unwrap();
        assert!(profile.contains("/Users/me/.ssh") && profile.contains(&format!("{}/state.db", data.display())));
        assert!(profile.contains(&format!("(subpath \"{}\")", work.display())), "{profile}");
        assert_eq!(&args[2..], ["--", "/bin/sh", "-c", "true"].map(OsString::from));
        // A path SBPL cannot name is an error, not a profile without it.
        let mut bad = policy.clone();
        bad.write_deny = vec![PathBuf::from(format!("/{}", "x".repeat(sbpl::MAX_PATH_BYTES + 1)))];
        assert!(envelope_args(&bad, Kind::HarnessBash, &[], None, &data, &argv).is_err());
    }
}
