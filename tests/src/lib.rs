//! The harness for end-to-end tests: real binaries, a temporary data directory each,
//! readiness from the supervisor's own signals (its stdout line and systemd's
//! `READY=1`), never from sleeping.
#![forbid(unsafe_code)]

pub mod approver;
pub mod claude_world;
pub mod fs;
pub mod gateway_world;
pub mod git_host;
pub mod github_api;
pub mod model_api;
pub mod runs;
pub mod sandbox;
pub mod terminal;
pub mod tls_front;

use std::io::{BufRead, BufReader};
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

use cc_client::Client;
use cc_proto::common::v1::Event;
use cc_proto::supervisor::v1 as pb;
use tokio_stream::StreamExt;

/// Where cargo put the workspace's binaries (the test binary lives in `deps/` below it).
pub fn bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let dir = exe.parent().and_then(Path::parent).expect("target dir");
    let path = dir.join(name);
    assert!(
        path.is_file(),
        "{} is missing: build the binaries first with `cargo build --workspace --bins`",
        path.display()
    );
    path
}

/// Whether a test that needs root may run. Without root it is skipped with a message,
/// unless `CC_REQUIRE_PRIVILEGED=1` (CI), where it fails.
pub fn privileged(what: &str) -> bool {
    if nix::unistd::geteuid().is_root() {
        return true;
    }
    if std::env::var("CC_REQUIRE_PRIVILEGED").as_deref() == Ok("1") {
        panic!("{what} needs root, and CC_REQUIRE_PRIVILEGED=1 forbids skipping it");
    }
    eprintln!("skipping ({what} needs root)");
    false
}

/// Checks the probe's word on how paths beneath a run's roots are resolved. Under
/// `without-openat2` (CI's second pass of the envelope suite) it must be the walk, for
/// the filter's reason: a pass that did not take the walk would prove nothing.
pub fn assert_path_resolution(detail: &str) {
    let filtered = std::env::var("CC_TEST_OPENAT2_FILTERED").as_deref() == Ok("1");
    let want = if filtered { "paths by component walk (openat2: ENOSYS" } else { "paths by " };
    assert!(detail.contains(want), "the probe should say {want:?}: {detail}");
}

/// Makes this test process the reaper of orphans, so that a helper whose supervisor
/// died becomes our child and can be waited for instead of polled.
pub fn become_subreaper() {
    nix::sys::prctl::set_child_subreaper(true).expect("PR_SET_CHILD_SUBREAPER");
}

/// Options for one supervisor under test.
#[derive(Default, Clone)]
pub struct Options {
    /// TOML written to `$DATA/config.toml`.
    pub config: Option<String>,
    pub args: Vec<String>,
    /// Run the supervisor as this uid (and gid); needs root.
    pub uid: Option<u32>,
    /// A command the supervisor is started through (it must exec its arguments), for
    /// a service manager's restrictions: `[unshare, …, sh, -c, …]`.
    pub launcher: Vec<String>,
}

/// A supervisor running on a temporary data directory.
pub struct Supervisor {
    pub child: Child,
    pub data_dir: PathBuf,
    pub stdout_lines: Vec<String>,
    notify: UnixDatagram,
    _stdout: BufReader<ChildStdout>,
    _tmp: Option<tempfile::TempDir>,
}

impl Supervisor {
    /// Starts a supervisor and returns once its API socket serves.
    pub fn start(options: Options) -> Self {
        let tmp = tempfile::Builder::new().prefix("cc-test-").tempdir().expect("tempdir");
        let data_dir = tmp.path().join("data");
        let mut sup = Self::start_on(&data_dir, options);
        sup._tmp = Some(tmp);
        sup
    }

    /// Starts a supervisor on `data_dir` (which the caller owns).
    pub fn start_on(data_dir: &Path, options: Options) -> Self {
        Self::try_start_on(data_dir, options).unwrap_or_else(|output| panic!("supervisor did not start: {output}"))
    }

    /// Like [`Supervisor::start_on`], but a supervisor that exits before serving is
    /// an `Err` with its stderr.
    pub fn try_start_on(data_dir: &Path, options: Options) -> Result<Self, String> {
        std::fs::create_dir_all(data_dir).expect("data dir");
        if let Some(uid) = options.uid {
            std::os::unix::fs::chown(data_dir, Some(uid), Some(uid)).expect("chown data dir");
        }
        if let Some(config) = &options.config {
            std::fs::write(data_dir.join("config.toml"), config).expect("config");
        }
        let notify_path = data_dir.parent().unwrap_or(data_dir).join(format!("notify-{}.sock", unique()));
        let notify = UnixDatagram::bind(&notify_path).expect("notify socket");
        notify.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
        let mut command = match options.launcher.split_first() {
            Some((program, args)) => {
                let mut command = Command::new(program);
                command.args(args).arg(bin("cc-supervisor"));
                command
            }
            None => Command::new(bin("cc-supervisor")),
        };
        if let Some(uid) = options.uid {
            use std::os::unix::process::CommandExt;
            command.uid(uid).gid(uid);
        }
        let mut child = command
            .arg("--data-dir")
            .arg(data_dir)
            .args(&options.args)
            .env("NOTIFY_SOCKET", &notify_path)
            .env("CC_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn cc-supervisor");
        let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
        let mut lines = Vec::new();
        loop {
            let mut line = String::new();
            if stdout.read_line(&mut line).unwrap_or(0) == 0 {
                let output = child.wait_with_output().expect("wait");
                return Err(format!("{}{}", lines.join(""), String::from_utf8_lossy(&output.stderr)));
            }
            let serving = line.starts_with("cc-supervisor: serving ");
            lines.push(line);
            if serving {
                break;
            }
        }
        // Keep draining stderr so that the supervisor never blocks on a full pipe.
        if let Some(stderr) = child.stderr.take() {
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut BufReader::new(stderr), &mut std::io::sink());
            });
        }
        Ok(Self {
            child,
            data_dir: data_dir.to_owned(),
            stdout_lines: lines.into_iter().map(|l| l.trim_end().to_owned()).collect(),
            notify,
            _stdout: stdout,
            _tmp: None,
        })
    }

    /// Blocks until an event `matches` (from the start of the log), or panics after `limit`.
    pub fn await_event(&self, limit: Duration, matches: impl Fn(&Event) -> bool) -> Event {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        runtime.block_on(async {
            let mut client = self.client().await;
            wait_for_event(&mut client, 0, limit, matches).await
        })
    }

    /// Waits for the supervisor's `READY=1` to systemd.
    pub fn wait_ready(&self) {
        let mut buf = [0u8; 256];
        let n = self.notify.recv(&mut buf).expect("READY=1 within 10 s");
        assert_eq!(&buf[..n], b"READY=1");
    }

    pub fn api_socket(&self) -> PathBuf {
        self.data_dir.join("sock/api.sock")
    }

    /// Runs ccctl against this supervisor.
    pub fn ccctl(&self, args: &[&str]) -> Output {
        self.ccctl_command(args).output().expect("run ccctl")
    }

    /// ccctl against this supervisor, for a test that spawns it and reads it as it goes.
    pub fn ccctl_command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(bin("ccctl"));
        command.arg("--data-dir").arg(&self.data_dir).args(args);
        command
    }

    /// `ccctl approvals watch --name NAME EXTRA…`, its stdin held open (an interactive
    /// approver that is never answered holds its questions), waited for until it says
    /// it is watching. Its output is read to the end by the caller: a closed pipe would
    /// end it before it answers.
    pub fn approver(&self, name: &str, extra: &[&str]) -> (Child, BufReader<ChildStdout>) {
        let mut child = self
            .ccctl_command(&["approvals", "watch", "--name", name])
            .args(extra)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start ccctl approvals watch");
        let mut out = BufReader::new(child.stdout.take().expect("piped stdout"));
        let mut line = String::new();
        out.read_line(&mut line).expect("read the watcher's first line");
        assert!(line.contains("watching") && line.contains(name), "{line:?}");
        (child, out)
    }

    /// Runs ccctl with `--json` and parses its output; panics on failure.
    pub fn ccctl_json(&self, args: &[&str]) -> serde_json::Value {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        let out = self.ccctl(&all);
        assert!(out.status.success(), "ccctl {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).expect("ccctl --json prints JSON")
    }

    pub async fn client(&self) -> Client {
        cc_client::connect(&self.api_socket()).await.expect("connect to api.sock")
    }

    /// pid of each running helper, by name, from a live status. A helper without a
    /// process is left out rather than given pid 0, which `kill` reads as "my whole
    /// process group": a test killing a helper that had not started would kill itself.
    pub fn helper_pids(&self) -> Vec<(String, u32)> {
        let status = self.ccctl_json(&["status"]);
        status["helpers"]
            .as_array()
            .expect("helpers")
            .iter()
            .filter_map(|h| {
                let pid = h["pid"].as_u64().filter(|pid| *pid > 0)?;
                Some((h["name"].as_str().unwrap().to_owned(), pid as u32))
            })
            .collect()
    }

    pub fn signal(&self, signal: nix::sys::signal::Signal) {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.child.id() as i32), signal).expect("signal supervisor");
    }

    /// SIGTERM, then waits at most `limit` for the exit.
    pub fn terminate(&mut self, limit: Duration) -> (ExitStatus, Duration) {
        let started = Instant::now();
        self.signal(nix::sys::signal::Signal::SIGTERM);
        let status = wait_with_limit(&mut self.child, limit);
        (status, started.elapsed())
    }
}

impl Drop for Supervisor {
    /// A clean stop, so that its helpers are gone too (a test's filesystem can then be
    /// unmounted); a kill if it does not stop in time.
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
            let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
            let watchdog = std::thread::spawn(move || {
                if done_rx.recv_timeout(Duration::from_secs(5)).is_err() {
                    let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
                }
            });
            let _ = self.child.wait();
            let _ = done_tx.send(());
            let _ = watchdog.join();
        }
    }
}

/// Waits for `child`, killing it if it outlives `limit` (then panics). A child that
/// leads its own process group is killed with the group: everything it started goes too.
pub fn wait_with_limit(child: &mut Child, limit: Duration) -> ExitStatus {
    let pid = child.id();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let watchdog = std::thread::spawn(move || {
        if done_rx.recv_timeout(limit).is_err() {
            let pid = nix::unistd::Pid::from_raw(pid as i32);
            let kill = nix::sys::signal::Signal::SIGKILL;
            if nix::unistd::getpgid(Some(pid)) == Ok(pid) {
                let _ = nix::sys::signal::killpg(pid, kill);
            } else {
                let _ = nix::sys::signal::kill(pid, kill);
            }
            return true;
        }
        false
    });
    let status = child.wait().expect("wait");
    let _ = done_tx.send(());
    assert!(!watchdog.join().unwrap(), "process {pid} did not exit within {limit:?}");
    status
}

/// Follows the event log from `since` until `matches` accepts an event, or panics after `limit`.
pub async fn wait_for_event(
    client: &mut Client,
    since: u64,
    limit: Duration,
    matches: impl Fn(&Event) -> bool,
) -> Event {
    let mut stream = client
        .system
        .watch_events(pb::WatchEventsRequest { since, follow: true })
        .await
        .expect("watch events")
        .into_inner();
    let found = tokio::time::timeout(limit, async {
        while let Some(event) = stream.next().await {
            let event = event.expect("event stream").event.expect("an event");
            if matches(&event) {
                return Some(event);
            }
        }
        None
    })
    .await;
    match found {
        Ok(Some(event)) => event,
        Ok(None) => panic!("event stream ended before the event arrived"),
        Err(_) => panic!("no matching event within {limit:?}"),
    }
}

/// Waits until `done` holds, for at most `limit`, or panics saying `what`: for what
/// another process does in its own time and announces to no one (an envelope made
/// ahead, a process gone). What is announced is waited for on the event log instead
/// ([`wait_for_event`], [`Supervisor::await_event`]).
pub fn eventually(limit: Duration, what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !done() {
        assert!(Instant::now() < deadline, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Every stored event (no follow).
pub async fn all_events(client: &mut Client) -> Vec<Event> {
    let mut stream = client
        .system
        .watch_events(pb::WatchEventsRequest { since: 0, follow: false })
        .await
        .expect("watch events")
        .into_inner();
    let mut out = Vec::new();
    while let Some(event) = stream.next().await {
        out.extend(event.expect("event").event);
    }
    out
}

pub fn payload(event: &Event) -> serde_json::Value {
    serde_json::from_str(&event.payload_json).expect("payload is JSON")
}

/// The command lines (arguments joined by spaces) of every process whose command line
/// mentions `needle`.
pub fn processes_mentioning(needle: &Path) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        if let Ok(cmdline) = std::fs::read(entry.path().join("cmdline"))
            && String::from_utf8_lossy(&cmdline).contains(needle.to_str().unwrap())
        {
            found.push(String::from_utf8_lossy(&cmdline).replace('\0', " "));
        }
    }
    found
}

/// The processes whose program (`argv[0]`) is `program`, by pid.
pub fn processes_running(program: &Path) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .expect("/proc")
        .flatten()
        .filter_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
            let argv0 = cmdline.split(|b| *b == 0).next()?;
            (argv0 == program.as_os_str().as_encoded_bytes()).then_some(pid)
        })
        .collect()
}

/// Whether a process with this pid exists (zombies included).
pub fn alive(pid: u32) -> bool {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), None).is_ok()
}

fn unique() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!("{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed))
}
