//! A supervisor with the demo checkout registered and one conversation on the copy
//! backend: what every run test starts from, and the ccctl calls they make.

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use crate::fs::make_checkout;
use crate::{Options, Supervisor, bin};

pub struct Fixture {
    pub sup: Supervisor,
    pub checkout: PathBuf,
    pub conversation: String,
    pub tmp: tempfile::TempDir,
}

/// stdout and stderr, lossily decoded.
pub fn text(out: &Output) -> (String, String) {
    (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// A refusal (`word` is "refused" or "denied"): ccctl's documented exit 125 and its
/// one-line reason.
pub fn assert_refused(out: &Output, word: &str, what: &str) {
    let (_, err) = text(out);
    assert_eq!(out.status.code(), Some(125), "{what}: {err}");
    assert!(err.starts_with(&format!("ccctl: {word}: ")), "{what}: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{what}: one line: {err}");
}

pub fn fixture(config: Option<&str>) -> Fixture {
    fixture_with(Options { config: config.map(str::to_owned), ..Default::default() })
}

/// [`fixture`] with the supervisor's options (its arguments, say `--sandbox off`).
pub fn fixture_with(options: Options) -> Fixture {
    let tmp = tempfile::tempdir().unwrap();
    let checkout = make_checkout(&tmp.path().join("checkout"));
    let sup = Supervisor::start_on(&tmp.path().join("data"), options);
    assert!(sup.ccctl(&["repo", "add", checkout.to_str().unwrap(), "--name", "demo"]).status.success());
    let out = sup.ccctl(&["conversation", "new", "--repo", "demo", "--worktree-backend", "copy"]);
    assert!(out.status.success(), "{}", text(&out).1);
    let conversation = text(&out).0.trim().to_owned();
    Fixture { sup, checkout, conversation, tmp }
}

impl Fixture {
    /// The agent's work directory, where its envelope finds programs put there.
    pub fn agent_work(&self) -> PathBuf {
        self.sup.data_dir.join(format!("conversations/{}/agents/default/work", self.conversation))
    }

    /// An acp run whose agent is the stand-in (tests/src/bin/acp-standin.rs), copied
    /// into the agent's work directory (inside its envelope; the build directory is
    /// not): the run's id.
    pub fn start_acp_standin(&self) -> String {
        let agent = self.agent_work().join("acp-standin");
        let command = format!("'{}' --quiet", agent.display());
        let out = self.sup.ccctl(&[
            "run",
            "start",
            "--conversation",
            &self.conversation,
            "--adapter",
            "acp",
            "--agent-command",
            &command,
        ]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        std::fs::copy(bin("acp-standin"), &agent).unwrap();
        std::fs::set_permissions(&agent, std::fs::Permissions::from_mode(0o755)).unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    pub fn start_run(&self, mode: &str) -> String {
        let out = self.sup.ccctl(&["run", "start", "--conversation", &self.conversation, "--mode", mode]);
        assert!(out.status.success(), "{}", text(&out).1);
        text(&out).0.trim().to_owned()
    }

    /// The payloads of `run`'s recorded events of `kind`, in order.
    pub fn run_events(&self, run: &str, kind: &str) -> Vec<serde_json::Value> {
        let out = self.sup.ccctl(&["--json", "events"]);
        let subject = format!("run:{run}");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|line| serde_json::from_str::<serde_json::Value>(line).expect("ccctl --json events: a JSON line each"))
            .filter(|e| e["kind"] == kind && e["subject"] == subject.as_str())
            .map(|e| e["payload"].clone())
            .collect()
    }

    pub fn tool(&self, run: &str, args: &[&str]) -> Output {
        let mut all = vec!["tool", run];
        all.extend_from_slice(args);
        self.sup.ccctl(&all)
    }

    /// A tool call with arguments that need not be UTF-8.
    pub fn tool_os(&self, run: &str, args: &[&std::ffi::OsStr]) -> Output {
        Command::new(bin("ccctl"))
            .arg("--data-dir")
            .arg(&self.sup.data_dir)
            .args(["tool", run])
            .args(args)
            .output()
            .unwrap()
    }

    pub fn tool_stdin(&self, run: &str, args: &[&str], stdin: &str) -> Output {
        let mut child = Command::new(bin("ccctl"))
            .arg("--data-dir")
            .arg(&self.sup.data_dir)
            .args(["tool", run])
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
        child.wait_with_output().unwrap()
    }

    /// The conversation's copy of the checkout: the run's working directory.
    pub fn copy(&self) -> PathBuf {
        std::fs::canonicalize(self.sup.data_dir.join(format!("conversations/{}/repos/demo", self.conversation)))
            .unwrap()
    }

    /// A directory beside the data dir, open to everyone (as root the runner is the
    /// service user), so that only confinement stands between the run and it.
    pub fn outside(&self, files: &[(&str, &str)]) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let dir = self.tmp.path().join("outside");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        for (name, content) in files {
            std::fs::write(dir.join(name), content).unwrap();
            std::fs::set_permissions(dir.join(name), std::fs::Permissions::from_mode(0o666)).unwrap();
        }
        dir
    }
}

/// The cgroup directories of run `run` on this host (cgroup v1, where the tests run
/// as root): `<our cgroup>/cc-<instance>/<run>` in each hierarchy that has it. The
/// supervisor under test is in our cgroups, since we started it.
pub fn run_cgroups(run: &str) -> Vec<PathBuf> {
    let ours = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let mut found = Vec::new();
    for controller in ["pids", "memory", "cpu", "cpuacct"] {
        let Some(path) = ours.lines().find_map(|l| {
            let mut parts = l.splitn(3, ':');
            let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
            controllers.split(',').any(|c| c == controller).then(|| path.to_owned())
        }) else {
            continue;
        };
        let dir = PathBuf::from(format!("/sys/fs/cgroup/{controller}{path}"));
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries.flatten() {
            let candidate = entry.path().join(run);
            if entry.file_name().to_string_lossy().starts_with("cc-") && candidate.is_dir() {
                found.push(candidate);
            }
        }
    }
    found
}
