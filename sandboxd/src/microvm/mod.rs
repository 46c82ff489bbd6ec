//! The microVM backend's launcher: a VM of QEMU's `microvm` machine with the project's
//! guest image (`deploy/microvm/build-image`), its vsock served by rust-vmm's
//! `vhost-device-vsock` and each share by QEMU's `virtiofsd`, all three started here and
//! killed with us (`PR_SET_PDEATHSIG`: a SIGKILL of sandboxd leaves none behind). The
//! guest's agent (`cc-vm-agent`) is reached over vsock, through the Unix socket the vsock
//! daemon exposes, with Firecracker's `CONNECT <port>` handshake ([`vsock`]).
//!
//! [`vms`] keeps the VMs of registered runs, for the supervisor's rigs and microVM
//! terminals.

pub mod late;
pub mod qemu;
pub mod vms;
pub mod vsock;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use cc_proto::vmagent::v1 as pb;
use cc_proto::vmagent::v1::vm_agent_client::VmAgentClient;
use tokio::process::{Child, Command};
use tonic::transport::Channel;

pub use qemu::{Layout, Share};

/// How long the daemons may take to listen.
const DAEMON_READY: Duration = Duration::from_secs(5);
/// Every call to the agent waits at most this (an exec's stream is the caller's).
const AGENT_CALL: Duration = Duration::from_secs(10);
/// One try at the booting guest's agent.
const ATTEMPT: Duration = Duration::from_secs(2);

#[derive(Debug, thiserror::Error)]
pub enum VmError {
    #[error("a microVM share is not TAG:/PATH with plain names ({0:?})")]
    BadShare(String),
    #[error("cannot start {what}: {source}")]
    Spawn { what: &'static str, source: std::io::Error },
    #[error("{what} did not listen within {within:?}")]
    NotListening { what: &'static str, within: Duration },
    #[error("the guest's agent did not answer within {within:?} (console: {console})")]
    NotReady { within: Duration, console: String },
    #[error("{0} exited before the guest was ready (console: {1})")]
    Died(&'static str, String),
    #[error("the guest's agent: {0}")]
    Agent(String),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// The host programs a VM needs.
#[derive(Debug, Clone)]
pub struct Programs {
    pub qemu: PathBuf,
    pub vhost_device_vsock: PathBuf,
    pub virtiofsd: PathBuf,
    /// util-linux's unshare: virtiofsd sandboxes itself in namespaces of its own,
    /// which takes capabilities sandboxd has dropped; in a user namespace of its own
    /// it has them there, and only there.
    pub unshare: PathBuf,
    /// Who the VM's processes run as (the service user when sandboxd is root); `None`:
    /// as sandboxd.
    pub user: Option<cc_host::ServiceUser>,
}

/// A running VM; dropping it kills QEMU and its daemons.
pub struct Vm {
    pub layout: Layout,
    qemu: Child,
    daemons: Vec<Child>,
    agent: VmAgentClient<Channel>,
    /// From the spawn of QEMU to the agent's first answer.
    pub boot_time: Duration,
}

/// The host's TSC rate in kHz, for an emulated guest (see [`Layout::tsc_khz`]).
pub fn host_tsc_khz() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    let mhz: f64 = info.lines().find(|l| l.starts_with("cpu MHz"))?.split(':').nth(1)?.trim().parse().ok()?;
    Some((mhz * 1000.0) as u64)
}

fn plain(s: &str, extra: &[char]) -> bool {
    !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || extra.contains(&c))
}

fn spawn(
    program: &Path,
    args: &[std::ffi::OsString],
    what: &'static str,
    log: Option<&Path>,
    user: Option<cc_host::ServiceUser>,
    share: Option<&Path>,
) -> Result<Child, VmError> {
    use std::os::unix::process::CommandExt;
    let mut command = std::process::Command::new(program);
    command.args(args).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
    // A share's path reaches the wrapper's script as a variable, never in its text.
    if let Some(share) = share {
        command.env("CC_SHARE", share);
    }
    if let Some(user) = user {
        command.uid(user.uid).gid(user.gid);
    }
    if let Some(log) = log {
        let file = std::fs::File::create(log)?;
        command.stderr(file);
    }
    cc_host::orphan::die_with_parent(&mut command);
    let mut command = Command::from(command);
    command.kill_on_drop(true);
    command.spawn().map_err(|source| VmError::Spawn { what, source })
}

/// Waits for `path` to exist (a daemon's socket), or for `child` to die.
async fn listening(path: &Path, child: &mut Child, what: &'static str) -> Result<(), VmError> {
    let until = Instant::now() + DAEMON_READY;
    while !path.exists() {
        if let Ok(Some(_)) = child.try_wait() {
            return Err(VmError::Died(what, String::new()));
        }
        if Instant::now() > until {
            return Err(VmError::NotListening { what, within: DAEMON_READY });
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    Ok(())
}

fn console_tail(layout: &Layout) -> String {
    let text = std::fs::read_to_string(layout.console_log()).unwrap_or_default();
    let last: Vec<&str> = text.lines().rev().take(3).collect();
    last.into_iter().rev().collect::<Vec<_>>().join(" | ")
}

impl Vm {
    /// Boots a VM of `layout` and waits, at most `ready_within`, for its agent.
    pub async fn boot(layout: Layout, programs: &Programs, ready_within: Duration) -> Result<Vm, VmError> {
        for share in &layout.shares {
            let path_ok = share.guest_path.starts_with('/') && plain(&share.guest_path[1..], &['/', '.']);
            if !plain(&share.tag, &[]) || !path_ok {
                return Err(VmError::BadShare(format!("{}:{}", share.tag, share.guest_path)));
            }
        }
        std::fs::create_dir_all(&layout.dir)?;
        // The VM's processes make their sockets and logs here.
        if let Some(user) = programs.user {
            std::os::unix::fs::chown(&layout.dir, Some(user.uid), Some(user.gid))?;
        }
        let user = programs.user;
        let mut daemons = Vec::new();
        let vsock_args = qemu::vsock_args(&layout);
        let mut vsock = spawn(&programs.vhost_device_vsock, &vsock_args, "vhost-device-vsock", None, user, None)?;
        listening(&layout.vhost_vsock_socket(), &mut vsock, "vhost-device-vsock").await?;
        daemons.push(vsock);
        for share in &layout.shares {
            let log = layout.dir.join(format!("virtiofsd-{}.log", share.tag));
            let mut args = qemu::unshare_args(&programs.virtiofsd, share);
            args.extend(qemu::virtiofsd_args(&layout, share));
            let mut fs = spawn(&programs.unshare, &args, "virtiofsd", Some(&log), user, Some(&share.source))?;
            listening(&layout.share_socket(share), &mut fs, "virtiofsd").await?;
            daemons.push(fs);
        }
        let started = Instant::now();
        let log = layout.dir.join("qemu.log");
        let mut qemu = spawn(&programs.qemu, &qemu::qemu_args(&layout), "qemu", Some(&log), user, None)?;
        let until = started + ready_within;
        // Tried again and again while the guest boots, each try short, the pause
        // between them growing: a connection the guest is not yet there to accept is
        // refused at once, and a flood of them is no help to the vsock daemon.
        let mut pause = Duration::from_millis(20);
        let agent = loop {
            if let Ok(Some(_)) = qemu.try_wait() {
                return Err(VmError::Died("qemu", console_tail(&layout)));
            }
            let attempt = async {
                let channel = vsock::connect(&layout.vsock_socket(), qemu::AGENT_PORT).await.ok()?;
                let mut client = VmAgentClient::new(channel);
                client.get_status(pb::GetStatusRequest {}).await.ok()?;
                Some(client)
            };
            if let Ok(Some(client)) = tokio::time::timeout(ATTEMPT, attempt).await {
                break client;
            }
            if Instant::now() > until {
                return Err(VmError::NotReady { within: ready_within, console: console_tail(&layout) });
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(250));
        };
        Ok(Vm { layout, qemu, daemons, agent, boot_time: started.elapsed() })
    }

    /// The agent's status (mounts, uptime).
    pub async fn status(&self) -> Result<pb::GetStatusResponse, VmError> {
        let mut agent = self.agent.clone();
        match tokio::time::timeout(AGENT_CALL, agent.get_status(pb::GetStatusRequest {})).await {
            Ok(Ok(status)) => Ok(status.into_inner()),
            Ok(Err(status)) => Err(VmError::Agent(status.message().to_owned())),
            Err(_) => Err(VmError::Agent(format!("no answer within {AGENT_CALL:?}"))),
        }
    }

    /// Starts a command in the guest: `input` carries its start first, then its input.
    pub async fn exec(
        &self,
        input: impl tokio_stream::Stream<Item = pb::ExecRequest> + Send + 'static,
    ) -> Result<tonic::Streaming<pb::ExecResponse>, VmError> {
        let mut agent = self.agent.clone();
        match tokio::time::timeout(AGENT_CALL, agent.exec(input)).await {
            Ok(Ok(stream)) => Ok(stream.into_inner()),
            Ok(Err(status)) => Err(VmError::Agent(status.message().to_owned())),
            Err(_) => Err(VmError::Agent(format!("no answer within {AGENT_CALL:?}"))),
        }
    }

    /// A client of the guest's agent (cheap to clone: one channel).
    pub fn agent(&self) -> VmAgentClient<Channel> {
        self.agent.clone()
    }

    /// QEMU's process id.
    pub fn qemu_pid(&self) -> Option<u32> {
        self.qemu.id()
    }

    /// The daemons' process ids (vsock, then each share's).
    pub fn daemon_pids(&self) -> Vec<u32> {
        self.daemons.iter().filter_map(Child::id).collect()
    }

    /// Waits for QEMU to exit (the guest ended, or QEMU was killed).
    pub async fn wait(&mut self) -> std::io::Result<std::process::ExitStatus> {
        self.qemu.wait().await
    }

    /// Ends the VM: QEMU, then its daemons, and its directory's sockets.
    pub async fn stop(mut self) {
        let _ = self.qemu.kill().await;
        for daemon in &mut self.daemons {
            let _ = daemon.kill().await;
        }
        for path in [self.layout.vhost_vsock_socket(), self.layout.vsock_socket()] {
            let _ = std::fs::remove_file(path);
        }
        for share in &self.layout.shares {
            let _ = std::fs::remove_file(self.layout.share_socket(share));
        }
    }
}
