//! The VMs sandboxd runs for registered runs: started from a run's policy (its repos
//! and agent work dir shared in, nothing else), watched until QEMU ends, stopped with
//! their run.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cc_host::microvm::MicrovmProbe;
use cc_proto::sandboxd::v1 as pb;
use cc_proto::sandboxd::v1::launch_response::Event;
use cc_proto::vmagent::v1 as agent;
use tokio::sync::{mpsc, oneshot, watch};
use tokio_stream::StreamExt;
use tonic::Status;

use super::{Layout, Programs, Share, Vm};
use crate::error::LaunchError;
use crate::policy::RunPolicy;

/// How long a guest may take to answer after QEMU starts (emulated guests take
/// seconds).
const READY_WITHIN: Duration = Duration::from_secs(60);
const DEFAULT_MEMORY_MIB: u32 = 512;
const MAX_MEMORY_MIB: u32 = 16 << 10;
const MAX_CPUS: u32 = 8;
/// VMs at once, over all runs.
const MAX_VMS: usize = 16;

/// Where a run's directories appear in its guest.
pub const GUEST_REPOS: &str = "/work";
pub const GUEST_HOME: &str = "/home/agent";
pub const GUEST_ATTACHMENTS: &str = "/attachments";

/// The guest path of a host path inside one of the shares, if it is inside one.
pub fn guest_path(host: &Path, shares: &[Share]) -> Option<String> {
    shares.iter().find_map(|s| {
        let rest = host.strip_prefix(&s.source).ok()?;
        let rest = rest.to_str()?;
        Some(if rest.is_empty() { s.guest_path.clone() } else { format!("{}/{rest}", s.guest_path) })
    })
}

/// The shares of a run's VM: its repos at /work and its agent work dir at /home/agent,
/// read-write; the workspace's attachments at /attachments, read-only.
pub fn shares(policy: &RunPolicy) -> Vec<Share> {
    let share = |tag: &str, source: &PathBuf, guest_path: &str, read_only| Share {
        tag: tag.into(),
        source: source.clone(),
        guest_path: guest_path.into(),
        read_only,
    };
    let mut shares = Vec::new();
    if let Some(repos) = &policy.repos {
        shares.push(share("repos", repos, GUEST_REPOS, false));
    }
    if let Some(home) = &policy.agent_work {
        shares.push(share("home", home, GUEST_HOME, false));
    }
    if let Some(attachments) = &policy.attachments {
        shares.push(share("attachments", attachments, GUEST_ATTACHMENTS, true));
    }
    shares
}

struct Entry {
    info: Mutex<pb::Vm>,
    agent: cc_proto::vmagent::v1::vm_agent_client::VmAgentClient<tonic::transport::Channel>,
    /// The directory the guest starts commands in.
    cwd: String,
    /// The run's proxy variables, when its network is on.
    proxies: Vec<(String, String)>,
    /// The host ends of the bridges, ended with the VM.
    bridges: Vec<tokio::task::AbortHandle>,
    home: String,
    /// Ends the VM with this reason.
    stop: Mutex<Option<oneshot::Sender<String>>>,
    ended: watch::Receiver<bool>,
}

impl Entry {
    fn info(&self) -> pb::Vm {
        self.info.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

pub struct VmHost {
    pub probe: MicrovmProbe,
    image: PathBuf,
    programs: Option<Programs>,
    kvm: bool,
    accel: String,
    tsc_khz: Option<u64>,
    dir: PathBuf,
    vms: Mutex<HashMap<String, Arc<Entry>>>,
}

impl VmHost {
    /// The host's VMs, from the probe's facts; `dir` holds each VM's directory.
    pub fn new(facts: &cc_host::microvm::Facts, image: PathBuf, dir: PathBuf) -> VmHost {
        let probe = cc_host::microvm::judge(facts);
        let programs = match (&facts.vsock, &facts.virtiofsd) {
            (cc_host::microvm::Vsock::VhostUser(vsock), Some(virtiofsd)) => Some(Programs {
                qemu: PathBuf::from("qemu-system-x86_64"),
                vhost_device_vsock: vsock.clone(),
                virtiofsd: virtiofsd.clone(),
                unshare: PathBuf::from("unshare"),
                user: cc_host::ServiceUser::when_root(),
            }),
            _ => None,
        };
        let kvm = facts.accel == cc_host::microvm::Accel::Kvm;
        let accel = match &facts.accel {
            cc_host::microvm::Accel::Kvm => "kvm".to_owned(),
            cc_host::microvm::Accel::TcgUnderPvm => "tcg (/dev/kvm is kvm_pvm)".to_owned(),
            cc_host::microvm::Accel::TcgWithoutKvm(why) => format!("tcg ({why})"),
        };
        VmHost { probe, image, programs, kvm, accel, tsc_khz: super::host_tsc_khz(), dir, vms: Mutex::default() }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Entry>>> {
        self.vms.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn entry(&self, vm_id: &str) -> Result<Arc<Entry>, LaunchError> {
        self.lock().get(vm_id).cloned().ok_or_else(|| LaunchError::VmNotFound(vm_id.chars().take(64).collect()))
    }

    pub fn get(&self, vm_id: &str) -> Result<pb::Vm, LaunchError> {
        Ok(self.entry(vm_id)?.info())
    }

    /// Boots a VM for the run of `policy`.
    pub async fn start(
        self: &Arc<Self>,
        policy: &RunPolicy,
        memory_mib: u32,
        cpus: u32,
        network: bool,
    ) -> Result<pb::Vm, LaunchError> {
        let Some(programs) = self.programs.clone().filter(|_| self.probe.available) else {
            let why = self.probe.line.strip_prefix("microvm=").unwrap_or(&self.probe.line).to_owned();
            return Err(LaunchError::Unavailable(why));
        };
        if self.lock().values().filter(|e| !*e.ended.borrow()).count() >= MAX_VMS {
            return Err(LaunchError::Refused(format!("{MAX_VMS} microVMs at once is the most; stop one")));
        }
        // The supervisor holds it to the run's memory limit; this is the machine's sense.
        let memory_mib = match memory_mib {
            0 => DEFAULT_MEMORY_MIB,
            m if !(128..=MAX_MEMORY_MIB).contains(&m) => {
                return Err(LaunchError::BadRequest(format!("a microVM has 128 to {MAX_MEMORY_MIB} MiB, not {m}")));
            }
            m => m,
        };
        let cpus = match cpus {
            0 => 1,
            c if c > MAX_CPUS => return Err(LaunchError::BadRequest(format!("{c} vCPUs: {MAX_CPUS} at most"))),
            c => c,
        };
        let vm_id = format!("v{:012x}", rand_u64() & 0xffff_ffff_ffff);
        let shares = shares(policy);
        let cwd = guest_path(&policy.work_dir, &shares).unwrap_or_else(|| GUEST_REPOS.to_owned());
        let home = if policy.agent_work.is_some() { GUEST_HOME } else { GUEST_REPOS }.to_owned();
        // Network off: no bridge at all, so the guest has no route anywhere.
        let bridged: Vec<(u16, PathBuf)> = if network {
            policy.bridges.iter().map(|(port, socket)| (*port, socket.clone())).collect()
        } else {
            vec![]
        };
        let layout = Layout {
            image: self.image.clone(),
            dir: self.dir.join(&vm_id),
            memory_mib,
            cpus,
            kvm: self.kvm,
            tsc_khz: self.tsc_khz,
            shares,
            bridges: bridged.iter().map(|(port, _)| *port).collect(),
        };
        // The bridges' host ends listen before the guest can connect.
        std::fs::create_dir_all(&layout.dir).map_err(LaunchError::CannotStart)?;
        // The VM's directory becomes the service user's (its daemons write there), who
        // could swap a socket for a link between bind and chown: the chown goes by the
        // directory's handle, never follows a link, and changes only a socket. (fchown on
        // the listener would change the socket's sockfs inode, not the name QEMU opens.)
        let vm_dir =
            cc_host::beneath::open_dir_no_links(&layout.dir).map_err(|e| LaunchError::CannotStart(e.into()))?;
        let mut bridges = Vec::new();
        for (port, socket) in &bridged {
            let path = layout.bridge_socket(*port);
            let listener = tokio::net::UnixListener::bind(&path).map_err(LaunchError::CannotStart)?;
            if let (Some(user), Some(name)) = (programs.user, path.file_name()) {
                cc_host::beneath::chown_socket(&vm_dir, name, user.uid, user.gid)
                    .map_err(|e| LaunchError::CannotStart(e.into()))?;
            }
            bridges.push(tokio::spawn(carry_bridge(listener, socket.clone())).abort_handle());
        }
        let vm = match Vm::boot(layout, &programs, READY_WITHIN).await {
            Ok(vm) => vm,
            Err(e) => {
                bridges.iter().for_each(tokio::task::AbortHandle::abort);
                return Err(LaunchError::Refused(e.to_string()));
            }
        };
        let proxies: Vec<(String, String)> = if network {
            let proxy = |k: &String| k.to_ascii_uppercase().ends_with("_PROXY");
            policy.env.iter().filter(|(k, _)| proxy(k)).map(|(k, v)| (k.clone(), v.clone())).collect()
        } else {
            vec![]
        };
        let mounts = vm.status().await.map(|s| s.mounts).unwrap_or_default();
        let info = pb::Vm {
            vm_id: vm_id.clone(),
            run_id: policy.run_id.clone(),
            running: true,
            ended_reason: String::new(),
            boot_ms: vm.boot_time.as_millis() as u64,
            qemu_pid: vm.qemu_pid().unwrap_or(0),
            memory_mib,
            cpus,
            mounts,
            accel: self.accel.clone(),
            network,
        };
        let (stop_tx, stop_rx) = oneshot::channel();
        let (ended_tx, ended) = watch::channel(false);
        let entry = Arc::new(Entry {
            info: Mutex::new(info.clone()),
            agent: vm.agent(),
            cwd,
            proxies,
            bridges,
            home,
            stop: Mutex::new(Some(stop_tx)),
            ended,
        });
        self.lock().insert(vm_id.clone(), entry.clone());
        tokio::spawn(watch_vm(vm, entry, stop_rx, ended_tx));
        Ok(info)
    }

    /// Stops a VM and waits until it is gone.
    pub async fn stop(&self, vm_id: &str, why: &str) -> Result<(), LaunchError> {
        let entry = self.entry(vm_id)?;
        if let Some(stop) = entry.stop.lock().unwrap_or_else(|p| p.into_inner()).take() {
            let _ = stop.send(why.to_owned());
        }
        let mut ended = entry.ended.clone();
        let _ = tokio::time::timeout(Duration::from_secs(10), ended.wait_for(|e| *e)).await;
        Ok(())
    }

    /// Stops every VM of a run (its unregistration); returns how many ran.
    pub async fn stop_run(&self, run_id: &str) -> u32 {
        let ids: Vec<String> = self
            .lock()
            .iter()
            .filter(|(_, e)| e.info().run_id == run_id && e.info().running)
            .map(|(id, _)| id.clone())
            .collect();
        for id in &ids {
            let _ = self.stop(id, "its run ended").await;
        }
        ids.len() as u32
    }

    /// Runs a command in a VM (see the `ExecVm` RPC).
    pub async fn exec(
        &self,
        start: pb::ExecVmStart,
        mut inputs: mpsc::Receiver<pb::exec_vm_request::Input>,
    ) -> Result<mpsc::Receiver<Result<pb::LaunchResponse, Status>>, LaunchError> {
        use agent::exec_request::Input as AgentInput;
        use pb::exec_vm_request::Input;
        let entry = self.entry(&start.vm_id)?;
        if *entry.ended.borrow() {
            let why = entry.info().ended_reason;
            return Err(LaunchError::Refused(format!("microVM {} has ended ({why})", start.vm_id)));
        }
        if start.argv.is_empty() || start.argv[0].is_empty() {
            return Err(LaunchError::BadRequest("argv is empty".into()));
        }
        let mut env: HashMap<String, String> = start.env.into_iter().collect();
        env.extend(entry.proxies.iter().cloned());
        env.insert("PATH".into(), "/bin:/usr/bin:/sbin".into());
        env.insert("HOME".into(), entry.home.clone());
        if start.pty.is_some() {
            env.entry("TERM".into()).or_insert_with(|| "xterm-256color".into());
        }
        let first = agent::ExecRequest {
            input: Some(AgentInput::Start(agent::ExecStart {
                argv: start.argv,
                env,
                cwd: entry.cwd.clone().into_bytes(),
                pty: start.pty.map(|p| agent::TerminalSize { columns: p.columns, rows: p.rows }),
            })),
        };
        let (to_agent, agent_rx) = mpsc::channel(16);
        let _ = to_agent.send(first).await;
        tokio::spawn(async move {
            while let Some(input) = inputs.recv().await {
                let input = match input {
                    Input::Stdin(bytes) => AgentInput::Stdin(bytes),
                    Input::CloseStdin(close) => AgentInput::CloseStdin(close),
                    Input::Resize(size) => {
                        AgentInput::Resize(agent::TerminalSize { columns: size.columns, rows: size.rows })
                    }
                    Input::Signal(signal) => match cc_host::terminal::signal(signal) {
                        Some(signal) => AgentInput::Signal(signal as i32),
                        None => continue,
                    },
                    Input::Start(_) => continue,
                };
                if to_agent.send(agent::ExecRequest { input: Some(input) }).await.is_err() {
                    return;
                }
            }
        });
        let mut client = entry.agent.clone();
        let call = client.exec(tokio_stream::wrappers::ReceiverStream::new(agent_rx));
        let mut events = match tokio::time::timeout(Duration::from_secs(10), call).await {
            Ok(Ok(events)) => events.into_inner(),
            Ok(Err(status)) => return Err(LaunchError::Refused(format!("the guest's agent: {}", status.message()))),
            Err(_) => return Err(LaunchError::Refused("the guest's agent did not answer within 10 s".into())),
        };
        let (tx, rx) = mpsc::channel(64);
        let limit = start.timeout_seconds;
        let mut ended = entry.ended.clone();
        tokio::spawn(async move {
            let send = |event: Event| {
                let tx = tx.clone();
                async move { tx.send(Ok(pb::LaunchResponse { event: Some(event) })).await.is_ok() }
            };
            send(Event::Envelope(cc_proto::common::v1::SandboxBackend::Native as i32)).await;
            let timeout = async {
                if limit == 0 {
                    std::future::pending::<()>().await
                } else {
                    tokio::time::sleep(Duration::from_secs(u64::from(limit))).await
                }
            };
            tokio::pin!(timeout);
            let exit = loop {
                tokio::select! {
                    event = events.next() => match event {
                        Some(Ok(agent::ExecResponse { event: Some(e) })) => match e {
                            agent::exec_response::Event::Stdout(b) => { if !send(Event::Stdout(b)).await { return } }
                            agent::exec_response::Event::Stderr(b) => { if !send(Event::Stderr(b)).await { return } }
                            agent::exec_response::Event::Exit(e) => {
                                break pb::Exit { code: e.code, signal: e.signal, timed_out: false, timings: None };
                            }
                            agent::exec_response::Event::Started(_) => {}
                        },
                        Some(Ok(_)) => {}
                        // The guest or its agent went away: no exit to tell.
                        Some(Err(_)) | None => break pb::Exit { code: None, signal: None, timed_out: false, timings: None },
                    },
                    _ = &mut timeout => break pb::Exit { code: None, signal: Some(9), timed_out: true, timings: None },
                    _ = async { ended.wait_for(|e| *e).await.map(|_| ()) } => {
                        break pb::Exit { code: None, signal: Some(9), timed_out: false, timings: None };
                    }
                    _ = tx.closed() => return,
                }
            };
            send(Event::Exit(exit)).await;
        });
        Ok(rx)
    }
}

/// Owns the VM until QEMU ends or it is stopped; then records why.
async fn watch_vm(mut vm: Vm, entry: Arc<Entry>, stop: oneshot::Receiver<String>, ended: watch::Sender<bool>) {
    let vm_bridges: Vec<PathBuf> = vm.layout.bridges.iter().map(|port| vm.layout.bridge_socket(*port)).collect();
    let why = tokio::select! {
        status = vm.wait() => match status {
            Ok(status) => format!("QEMU exited ({status})"),
            Err(e) => format!("QEMU could not be waited for: {e}"),
        },
        why = stop => why.unwrap_or_else(|_| "stopped".to_owned()),
    };
    vm.stop().await;
    for bridge in &entry.bridges {
        bridge.abort();
    }
    for socket in &vm_bridges {
        let _ = std::fs::remove_file(socket);
    }
    {
        let mut info = entry.info.lock().unwrap_or_else(|p| p.into_inner());
        info.running = false;
        info.ended_reason = why;
        info.qemu_pid = 0;
    }
    let _ = ended.send(true);
}

/// Each guest connection vhost-device-vsock hands to a bridge's host end, carried to
/// the run's own socket (its proxy, its git gateway), as our init's bridges do for an
/// envelope.
async fn carry_bridge(listener: tokio::net::UnixListener, socket: PathBuf) {
    while let Ok((mut guest, _)) = listener.accept().await {
        let socket = socket.clone();
        tokio::spawn(async move {
            if let Ok(mut run) = tokio::net::UnixStream::connect(&socket).await {
                let _ = tokio::io::copy_bidirectional(&mut guest, &mut run).await;
            }
        });
    }
}

fn rand_u64() -> u64 {
    let mut bytes = [0u8; 8];
    let _ = std::fs::File::open("/dev/urandom").and_then(|mut f| std::io::Read::read_exact(&mut f, &mut bytes));
    u64::from_le_bytes(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_paths_map_into_the_guest_only_inside_a_share() {
        let shares = vec![
            Share { tag: "repos".into(), source: "/d/c1/repos".into(), guest_path: "/work".into(), read_only: false },
            Share {
                tag: "home".into(),
                source: "/d/c1/agents/default/work".into(),
                guest_path: "/home/agent".into(),
                read_only: false,
            },
        ];
        assert_eq!(guest_path(Path::new("/d/c1/repos/demo"), &shares).as_deref(), Some("/work/demo"));
        assert_eq!(guest_path(Path::new("/d/c1/repos"), &shares).as_deref(), Some("/work"));
        assert_eq!(guest_path(Path::new("/d/c1/agents/default/work"), &shares).as_deref(), Some("/home/agent"));
        assert_eq!(guest_path(Path::new("/d/c1/reposx"), &shares), None);
        assert_eq!(guest_path(Path::new("/etc"), &shares), None);
    }
}
