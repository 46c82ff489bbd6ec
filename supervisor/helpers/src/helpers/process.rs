//! Starting one helper process: spawned in a process group of its own with only the
//! environment it needs, the handshake (HELLO, the bootstrap on stdin, READY), and its
//! stop (SIGTERM to the group, SIGKILL after a grace).

use std::process::Stdio;
use std::time::Duration;

use cc_proto::bootstrap::Bootstrap;
use cc_proto::helper::{HELLO_LINE, READY_LINE};
use cc_proto::secret::PeerSecret;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};

use super::{Helper, ProcessTimeouts, SUPERVISOR_PEER, SuperviseEnv};

/// Environment variables a helper inherits; everything else is dropped.
const PASSED_ENV: &[&str] =
    &["PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "TZ", "TMPDIR", "CC_LOG", "RUST_BACKTRACE"];

/// A start that did not reach "serving".
pub(super) struct LaunchFailure {
    pub pid: Option<u32>,
    pub status: Option<std::process::ExitStatus>,
    pub message: String,
}

/// Spawns the helper, hands it its bootstrap on stdin, and waits for its ready line.
pub(super) async fn launch(helper: &Helper, env: &SuperviseEnv) -> Result<GroupChild, LaunchFailure> {
    let launch = &helper.launch;
    let secret = PeerSecret::generate().map_err(|e| LaunchFailure {
        pid: None,
        status: None,
        message: format!("cannot make a secret: {e}"),
    })?;
    if let Ok(mut current) = helper.secret.lock() {
        *current = secret.clone();
    }
    let bootstrap = Bootstrap {
        name: launch.kind.name().to_owned(),
        socket: launch.socket.clone(),
        data_dir: env.data_dir.clone(),
        log_format: env.log_format,
        peers: launch.peers.clone().into_iter().chain([(SUPERVISOR_PEER.to_owned(), secret)]).collect(),
        supervisor_pid: std::process::id(),
        options: launch.options.clone(),
        calls: launch.calls.clone(),
    };
    let timeouts = ProcessTimeouts { ready: env.policy.ready_timeout(), stop: env.policy.stop_timeout() };
    start_process(&launch.program, &launch.args, &bootstrap, timeouts, launch.kind.name()).await
}

/// Spawns a helper: it says HELLO, gets `bootstrap` on stdin, and must say READY
/// within `ready`; `stop` is the grace a failed start gets before SIGKILL. (A run's
/// runner speaks the same handshake over its launch by sandboxd: `runs::runner`.)
async fn start_process(
    program: &std::path::Path,
    args: &[String],
    bootstrap: &Bootstrap,
    ProcessTimeouts { ready, stop }: ProcessTimeouts,
    name: &'static str,
) -> Result<GroupChild, LaunchFailure> {
    let mut command = Command::new(program);
    command
        .args(args)
        .env_clear()
        .envs(PASSED_ENV.iter().filter_map(|k| std::env::var_os(k).map(|v| (k, v))))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        // Its own process group: a Ctrl-C in the supervisor's terminal reaches the
        // supervisor, which stops helpers in order, rather than every helper at once.
        .process_group(0)
        .kill_on_drop(true);
    let mut child = GroupChild(command.spawn().map_err(|e| LaunchFailure {
        pid: None,
        status: None,
        message: format!("cannot start {}: {e}", program.display()),
    })?);
    let pid = child.id();
    let (Some(mut stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
        return Err(fail(child, pid, "no stdio pipes".into(), stop).await);
    };
    let mut lines = BufReader::new(stdout).lines();
    let handshake = async {
        // The bootstrap (and its secret) is written only once the helper has said it
        // is non-dumpable.
        expect_line(&mut lines, HELLO_LINE).await?;
        // A helper that exits at once closes its stdin: the write fails, and the read
        // below then sees end-of-file, which is the error worth reporting.
        let _ = stdin.write_all(&bootstrap.to_json_line()).await;
        drop(stdin);
        expect_line(&mut lines, READY_LINE).await
    };
    match tokio::time::timeout(ready, handshake).await {
        Ok(Ok(())) => {
            // Whatever it prints later goes to the log, and never meets a closed pipe.
            tokio::spawn(async move {
                while let Ok(Some(line)) = lines.next_line().await {
                    tracing::info!(helper = name, stdout = %line, "helper output");
                }
            });
            Ok(child)
        }
        Ok(Err(message)) => Err(fail(child, pid, message, stop).await),
        Err(_) => Err(fail(child, pid, format!("not serving after {ready:?}"), stop).await),
    }
}

async fn expect_line(
    lines: &mut tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
    expected: &str,
) -> Result<(), String> {
    match lines.next_line().await {
        Ok(Some(line)) if line == expected => Ok(()),
        Ok(Some(line)) => Err(format!("said {:?} instead of {expected:?}", truncate(&line))),
        Ok(None) => Err("exited before serving its socket".into()),
        Err(e) => Err(format!("cannot read its {expected} line: {e}")),
    }
}

async fn fail(mut child: GroupChild, pid: Option<u32>, message: String, grace: Duration) -> LaunchFailure {
    let status = stop_child(&mut child, grace).await;
    LaunchFailure { pid, status, message }
}

/// A process started as the leader of a process group of its own (`process_group(0)`),
/// signalled and killed as that group, so that nothing it started is left behind (as
/// sandboxd does for every launch: issue 16). Dropped before it is reaped, the whole
/// group is killed.
pub(super) struct GroupChild(Child);

impl GroupChild {
    /// Signals the group, while its leader is not reaped (so the id is still ours).
    pub(super) fn signal_group(&self, signal: nix::sys::signal::Signal) {
        if let Some(pid) = self.0.id().filter(|pid| *pid > 1) {
            let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pid as i32), signal);
        }
    }
}

impl std::ops::Deref for GroupChild {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for GroupChild {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for GroupChild {
    fn drop(&mut self) {
        self.signal_group(nix::sys::signal::Signal::SIGKILL);
    }
}

/// SIGTERM to the process's group, then SIGKILL after `grace`. Returns the exit status.
pub(super) async fn stop_child(child: &mut GroupChild, grace: Duration) -> Option<std::process::ExitStatus> {
    if let Ok(Some(status)) = child.try_wait() {
        return Some(status);
    }
    child.signal_group(nix::sys::signal::Signal::SIGTERM);
    match tokio::time::timeout(grace, child.wait()).await {
        Ok(status) => status.ok(),
        Err(_) => {
            child.signal_group(nix::sys::signal::Signal::SIGKILL);
            child.wait().await.ok()
        }
    }
}

fn truncate(line: &str) -> String {
    line.chars().take(80).collect()
}
