//! cc-sandboxd under test, with this test process as its supervisor: the test holds
//! the peer secret, so it drives sandboxd's real gRPC API.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use cc_proto::bootstrap::Bootstrap;
use cc_proto::client::PresentSecret;
pub use cc_proto::common::v1::{EnvelopeKind, SandboxBackend};
use cc_proto::sandboxd::v1 as pb;
use cc_proto::sandboxd::v1::sandboxd_client::SandboxdClient;
use cc_proto::secret::PeerSecret;
use tokio_stream::StreamExt;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

pub type Client = SandboxdClient<InterceptedService<Channel, PresentSecret>>;

pub struct Sandboxd {
    child: Child,
    pub socket: PathBuf,
    secret: PeerSecret,
    _tmp: tempfile::TempDir,
}

impl Sandboxd {
    /// sandboxd for runs whose directories are inside `data_dir`.
    pub fn start(data_dir: &Path, options: BTreeMap<String, String>, env: &[(&str, &str)]) -> Self {
        Self::start_as(None, data_dir, options, env)
    }

    /// As `uid` (its gid the same number), which needs root.
    pub fn start_as(
        uid: Option<u32>,
        data_dir: &Path,
        options: BTreeMap<String, String>,
        env: &[(&str, &str)],
    ) -> Self {
        let tmp = tempfile::Builder::new().prefix("cc-sbx-").tempdir().unwrap();
        if let Some(uid) = uid {
            std::os::unix::fs::chown(tmp.path(), Some(uid), Some(uid)).unwrap();
        }
        let socket = tmp.path().join("sock/sandboxd.sock");
        let secret = PeerSecret::generate().unwrap();
        inheritable_canary();
        let mut cmd = Command::new(crate::bin("cc-sandboxd"));
        if let Some(uid) = uid {
            use std::os::unix::process::CommandExt;
            cmd.uid(uid).gid(uid);
        }
        cmd.env_clear().env("PATH", "/usr/local/bin:/usr/bin:/bin").env("CC_LOG", "warn");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().expect("spawn cc-sandboxd");
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "HELLO");
        let bootstrap = Bootstrap {
            name: "sandboxd".into(),
            socket: socket.clone(),
            data_dir: data_dir.to_owned(),
            log_format: cc_proto::logging::LogFormat::Text,
            peers: [("supervisor".to_owned(), secret.clone())].into(),
            supervisor_pid: std::process::id(),
            options,
            calls: Default::default(),
        };
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(&bootstrap.to_json_line()).unwrap();
        drop(stdin);
        line.clear();
        stdout.read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "READY", "sandboxd did not come up");
        Self { child, socket, secret, _tmp: tmp }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The envelopes sandboxd has made ahead of their launch and that still wait:
    /// bubblewrap processes of ours whose init reads its command from stdin.
    pub fn waiting_envelopes(&self) -> Vec<i32> {
        let parent = self.pid().to_string();
        std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|e| {
                let pid: i32 = e.file_name().to_str()?.parse().ok()?;
                let (state, ppid) = state_and_parent(pid)?;
                let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
                let waiting = String::from_utf8_lossy(&cmdline).contains("--command-stdin");
                (ppid == parent && state != "Z" && waiting).then_some(pid)
            })
            .collect()
    }

    pub async fn client(&self) -> Client {
        let channel = cc_proto::client::connect(&self.socket).await.unwrap();
        SandboxdClient::new(InterceptedService::new(channel, PresentSecret::new("supervisor", &self.secret)))
    }
}

impl Drop for Sandboxd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A process's state letter and parent pid, from /proc/<pid>/stat.
fn state_and_parent(pid: i32) -> Option<(String, String)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // After the command name, which may hold spaces: state, then ppid.
    let mut fields = stat.rsplit_once(')')?.1.split_whitespace();
    Some((fields.next()?.to_owned(), fields.next()?.to_owned()))
}

/// Whether `pid` has exited (a zombie counts: it runs nothing).
pub fn gone(pid: i32) -> bool {
    state_and_parent(pid).is_none_or(|(state, _)| state == "Z")
}

/// A descriptor without close-on-exec, held for the life of the tests, so that every
/// sandboxd started here inherits one, as one started from a careless shell would: none
/// of it may reach a workload.
fn inheritable_canary() {
    static CANARY: std::sync::OnceLock<std::os::fd::OwnedFd> = std::sync::OnceLock::new();
    CANARY.get_or_init(|| {
        nix::fcntl::open("/dev/null", nix::fcntl::OFlag::O_RDONLY, nix::sys::stat::Mode::empty())
            .expect("open /dev/null")
    });
}

/// [`crate::eventually`] with the ten seconds the envelope tests allow.
pub fn eventually(what: &str, done: impl FnMut() -> bool) {
    crate::eventually(std::time::Duration::from_secs(10), what, done)
}

/// What one launch produced.
#[derive(Debug, Default)]
pub struct Outcome {
    pub envelope: String,
    pub stdout: String,
    pub stderr: String,
    pub violations: Vec<pb::Violation>,
    pub exit: Option<pb::Exit>,
    /// The process sandboxd started, the leader of the launch's process group.
    pub process_id: Option<u32>,
}

impl Outcome {
    pub fn code(&self) -> Option<i32> {
        self.exit.as_ref().and_then(|e| e.code)
    }
}

pub async fn run(client: &mut Client, run_id: &str, kind: EnvelopeKind, script: &str) -> Outcome {
    run_argv(client, run_id, kind, vec![b"/bin/sh".to_vec(), b"-c".to_vec(), script.as_bytes().to_vec()]).await
}

pub async fn run_argv(client: &mut Client, run_id: &str, kind: EnvelopeKind, argv: Vec<Vec<u8>>) -> Outcome {
    let request = pb::LaunchRequest {
        run_id: run_id.into(),
        kind: kind as i32,
        argv,
        timeout_seconds: 30,
        host: None,
        ..Default::default()
    };
    let mut stream = client.launch(request).await.expect("launch").into_inner();
    let mut out = Outcome::default();
    while let Some(event) = stream.next().await {
        match event.expect("launch event").event {
            // As the CLI says it: "native" (in the envelope) or "unwrapped".
            Some(pb::launch_response::Event::Envelope(e)) => {
                out.envelope = if e == SandboxBackend::Native as i32 { "native" } else { "unwrapped" }.to_owned()
            }
            Some(pb::launch_response::Event::Stdout(b)) => out.stdout.push_str(&String::from_utf8_lossy(&b)),
            Some(pb::launch_response::Event::Stderr(b)) => out.stderr.push_str(&String::from_utf8_lossy(&b)),
            Some(pb::launch_response::Event::Violation(v)) => out.violations.push(v),
            Some(pb::launch_response::Event::Exit(e)) => out.exit = Some(e),
            Some(pb::launch_response::Event::ProcessId(pid)) => out.process_id = Some(pid),
            None => {}
        }
    }
    out
}

pub fn bytes(p: &Path) -> Vec<u8> {
    use std::os::unix::ffi::OsStrExt;
    p.as_os_str().as_bytes().to_vec()
}

/// The request that registers `policy`.
pub fn registration(policy: pb::RunPolicy) -> pb::RegisterRunRequest {
    pb::RegisterRunRequest { policy: Some(policy) }
}
