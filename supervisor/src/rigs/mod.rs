//! Rigs (`cc.supervisor.v1.Rigs`, `ccctl rig`): a microVM that stays up for a
//! conversation, in a run of its own, reached by commands the gate judges as it judges
//! bash. sandboxd boots and owns the VM ([`cc_sandboxd`]'s `microvm::vms`); the rig is
//! the supervisor's record of it: its conversation, its run, its VM.
//!
//! A rig ends with its conversation (the run's unregistration stops its VM), with
//! `StopRig`, or when its VM ends (QEMU killed, sandboxd restarted): the next look at
//! it (Get, List, Exec) says so and stops its run.

pub mod service;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use cc_proto::reasons;
use cc_proto::sandboxd::v1 as sb;
use serde_json::json;
use tokio::sync::mpsc;
use tonic::{Code, Status};

use crate::events::EventLog;
use crate::helpers::HelperKind;
use crate::ids::{ConversationId, RunId};
use crate::runs::{RunError, RunManager, StartRequest};

/// How long a boot may take, emulated guests included.
const BOOT_WITHIN: Duration = Duration::from_secs(90);
/// Rigs at once.
const MAX_RIGS: usize = 16;

#[derive(Debug, thiserror::Error)]
pub enum RigError {
    #[error("no rig {0:?}; `ccctl rig list` shows them")]
    NotFound(String),
    #[error("rig {name} has ended ({why}); start a new one")]
    Ended { name: String, why: String },
    #[error("{0}")]
    BadRequest(String),
    #[error("microVM rigs are not available on this host: {0}")]
    Unavailable(String),
    #[error("{0}")]
    Run(#[from] RunError),
    #[error("{0}")]
    Sandboxd(Status),
}

impl From<RigError> for Status {
    fn from(e: RigError) -> Status {
        let message = e.to_string();
        match e {
            RigError::NotFound(name) => {
                reasons::refusal(Code::NotFound, message, reasons::RIG_NOT_FOUND, &[("name", name)])
            }
            RigError::Ended { name, why } => {
                reasons::refusal(Code::FailedPrecondition, message, reasons::RIG_ENDED, &[("name", name), ("why", why)])
            }
            RigError::BadRequest(_) => Status::invalid_argument(message),
            RigError::Unavailable(_) => reasons::refusal(
                Code::FailedPrecondition,
                message,
                reasons::BACKEND_UNAVAILABLE,
                &[("backend", "microvm".to_owned())],
            ),
            RigError::Run(e) => e.into(),
            // sandboxd's own refusal (BACKEND_UNAVAILABLE, …), passed on.
            RigError::Sandboxd(status) => status,
        }
    }
}

/// One rig, as the supervisor knows it.
pub struct Rig {
    pub id: String,
    pub conversation: ConversationId,
    pub run: RunId,
    pub vm_id: String,
    pub created: SystemTime,
    /// What sandboxd said of the VM last.
    vm: Mutex<sb::Vm>,
}

impl Rig {
    pub fn name(&self) -> String {
        format!("rigs/{}", self.id)
    }

    pub fn vm(&self) -> sb::Vm {
        self.vm.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

pub struct RigManager {
    rigs: Mutex<BTreeMap<String, Arc<Rig>>>,
    runs: Arc<RunManager>,
    events: Arc<EventLog>,
    /// The microVM probe: a rig is refused at once where it says unavailable.
    microvm: cc_host::microvm::MicrovmProbe,
}

/// A rig's command's output and exit.
pub type Output = mpsc::Receiver<Result<sb::LaunchResponse, Status>>;

impl RigManager {
    pub fn new(runs: Arc<RunManager>, events: Arc<EventLog>, microvm: cc_host::microvm::MicrovmProbe) -> Arc<Self> {
        Arc::new(RigManager { rigs: Mutex::default(), runs, events, microvm })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Arc<Rig>>> {
        self.rigs.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn find(&self, name: &str) -> Result<Arc<Rig>, RigError> {
        let id = name.strip_prefix("rigs/").unwrap_or(name);
        self.lock().get(id).cloned().ok_or_else(|| RigError::NotFound(name.chars().take(64).collect()))
    }

    /// Boots a rig for `conversation`, in a run of its own.
    pub async fn start(
        &self,
        conversation: ConversationId,
        memory_mib: u32,
        cpus: u32,
        network: bool,
    ) -> Result<Arc<Rig>, RigError> {
        if !self.microvm.available {
            let why = self.microvm.line.strip_prefix("microvm=").unwrap_or(&self.microvm.line);
            return Err(RigError::Unavailable(why.to_owned()));
        }
        if self.lock().values().filter(|r| r.vm().running).count() >= MAX_RIGS {
            return Err(RigError::BadRequest(format!("{MAX_RIGS} rigs at once is the most; stop one")));
        }
        let live = self
            .runs
            .start(StartRequest {
                conversation: conversation.clone(),
                agent: "default".into(),
                mode: cc_policy::Mode::default(),
                adapter: cc_proto::common::v1::Adapter::Harness,
                agent_command: String::new(),
                network,
                limits: None,
                model_budget_tokens: 0,
                forwards: vec![],
            })
            .await?;
        // 0: no limit configured.
        let limit_mib = match u32::try_from(live.limits.memory_max_bytes >> 20).unwrap_or(u32::MAX) {
            0 => u32::MAX,
            m => m,
        };
        if memory_mib > limit_mib {
            let _ = self.runs.stop(&live.run_id, "its rig asked for more memory than its limit").await;
            return Err(RigError::BadRequest(format!(
                "{memory_mib} MiB is over the run's memory limit ({limit_mib} MiB, `[runs.limits] memory_max_mb`)"
            )));
        }
        let memory_mib = if memory_mib == 0 { 512.min(limit_mib) } else { memory_mib };
        let started = self.start_vm(&live.run_id, memory_mib, cpus, network).await;
        let vm = match started {
            Ok(vm) => vm,
            Err(e) => {
                let _ = self.runs.stop(&live.run_id, "its rig did not start").await;
                return Err(e);
            }
        };
        let rig = Arc::new(Rig {
            id: vm.vm_id.clone(),
            conversation,
            run: live.run_id.clone(),
            vm_id: vm.vm_id.clone(),
            created: SystemTime::now(),
            vm: Mutex::new(vm.clone()),
        });
        self.lock().insert(rig.id.clone(), rig.clone());
        self.events.record(
            "rig_started",
            &format!("rig:{}", rig.id),
            json!({
                "conversation": rig.conversation,
                "run": rig.run,
                "memory_mib": vm.memory_mib,
                "cpus": vm.cpus,
                "boot_ms": vm.boot_ms,
                "accel": vm.accel,
                "mounts": vm.mounts,
                "network": vm.network,
            }),
        );
        Ok(rig)
    }

    async fn start_vm(&self, run: &RunId, memory_mib: u32, cpus: u32, network: bool) -> Result<sb::Vm, RigError> {
        let channels = self.runs.channels();
        let mut sandboxd = channels.sandboxd().await.map_err(RigError::Sandboxd)?;
        let request = sb::StartVmRequest { run_id: run.to_string(), memory_mib, cpus, network };
        match tokio::time::timeout(BOOT_WITHIN, sandboxd.start_vm(request)).await {
            Ok(Ok(response)) => response
                .into_inner()
                .vm
                .ok_or_else(|| RigError::Sandboxd(Status::internal("sandboxd started a VM and said nothing of it"))),
            Ok(Err(status)) => Err(RigError::Sandboxd(status)),
            Err(_) => Err(RigError::Sandboxd(reasons::helper_timeout("sandboxd", "a microVM's boot", BOOT_WITHIN))),
        }
    }

    /// The rig as sandboxd has it now; a rig whose VM has ended has its run stopped.
    pub async fn refresh(&self, rig: &Rig) -> sb::Vm {
        let channels = self.runs.channels();
        let asked = async {
            let mut sandboxd = channels.sandboxd().await?;
            let call = sandboxd.get_vm(sb::GetVmRequest { vm_id: rig.vm_id.clone() });
            channels.within(HelperKind::Sandboxd, "GetVm", call).await
        };
        let now = match asked.await {
            Ok(response) => response.into_inner().vm,
            // sandboxd no longer has it: it restarted, and the VM died with it.
            Err(status) if status.code() == Code::NotFound => None,
            // sandboxd cannot say now: what was known stands.
            Err(_) => return rig.vm(),
        };
        let vm = now.unwrap_or_else(|| sb::Vm {
            running: false,
            ended_reason: "sandboxd restarted, and the VM ended with it".into(),
            qemu_pid: 0,
            ..rig.vm()
        });
        let was_running = {
            let mut known = rig.vm.lock().unwrap_or_else(|p| p.into_inner());
            let was = known.running;
            *known = vm.clone();
            was
        };
        if was_running && !vm.running {
            self.ended(rig, &vm.ended_reason).await;
        }
        vm
    }

    async fn ended(&self, rig: &Rig, why: &str) {
        let _ = self.runs.stop(&rig.run, &format!("its rig ended: {why}")).await;
        self.events.record("rig_ended", &format!("rig:{}", rig.id), json!({ "reason": why, "run": rig.run }));
    }

    pub async fn get(&self, name: &str) -> Result<(Arc<Rig>, sb::Vm), RigError> {
        let rig = self.find(name)?;
        let vm = self.refresh(&rig).await;
        Ok((rig, vm))
    }

    pub async fn list(&self) -> Vec<(Arc<Rig>, sb::Vm)> {
        let all: Vec<Arc<Rig>> = self.lock().values().cloned().collect();
        let mut out = Vec::with_capacity(all.len());
        for rig in all {
            let vm = self.refresh(&rig).await;
            out.push((rig, vm));
        }
        out
    }

    /// Judges `command_line` as a bash call of the rig's run, then runs it in the VM.
    pub async fn exec(&self, name: &str, command_line: &str, timeout_seconds: u32) -> Result<Output, RigError> {
        let (rig, vm) = self.get(name).await?;
        if !vm.running {
            return Err(RigError::Ended { name: rig.name(), why: vm.ended_reason });
        }
        let limits = self.runs.config();
        let timeout = match timeout_seconds {
            0 => limits.bash_timeout_seconds,
            t if t > limits.bash_max_timeout_seconds => {
                return Err(RigError::BadRequest(format!(
                    "a timeout of {t} s is over the configured maximum of {} s",
                    limits.bash_max_timeout_seconds
                )));
            }
            t => t,
        };
        self.runs.tools().judge_command(&rig.run, command_line).await?;
        let argv = vec![b"/bin/sh".to_vec(), b"-c".to_vec(), command_line.as_bytes().to_vec()];
        let start = sb::ExecVmStart {
            vm_id: rig.vm_id.clone(),
            argv,
            pty: None,
            env: Default::default(),
            timeout_seconds: timeout,
        };
        self.exec_vm(start).await.map(|(output, _)| output)
    }

    /// Runs `start` in its VM through sandboxd: its events, and where its input goes.
    pub async fn exec_vm(&self, start: sb::ExecVmStart) -> Result<(Output, mpsc::Sender<sb::ExecVmRequest>), RigError> {
        use sb::exec_vm_request::Input;
        let channels = self.runs.channels();
        let mut sandboxd = channels.sandboxd().await.map_err(RigError::Sandboxd)?;
        let (inputs, input_rx) = mpsc::channel::<sb::ExecVmRequest>(16);
        let _ = inputs.send(sb::ExecVmRequest { input: Some(Input::Start(start)) }).await;
        let call = sandboxd.exec_vm(tokio_stream::wrappers::ReceiverStream::new(input_rx));
        let mut events =
            channels.within(HelperKind::Sandboxd, "ExecVm", call).await.map_err(RigError::Sandboxd)?.into_inner();
        let (tx, rx) = mpsc::channel(64);
        tokio::spawn(async move {
            use tokio_stream::StreamExt;
            loop {
                let next = tokio::select! {
                    next = events.next() => next,
                    _ = tx.closed() => return,
                };
                let message = match next {
                    Some(Ok(sb::ExecVmResponse { event: Some(event) })) => Ok(event),
                    Some(Ok(_)) => continue,
                    Some(Err(status)) => Err(status),
                    None => return,
                };
                if tx.send(message).await.is_err() {
                    return;
                }
            }
        });
        Ok((rx, inputs))
    }

    /// Stops the rig's VM and its run, and forgets it.
    pub async fn stop(&self, name: &str) -> Result<(Arc<Rig>, sb::Vm), RigError> {
        let rig = self.find(name)?;
        let channels = self.runs.channels();
        if let Ok(mut sandboxd) = channels.sandboxd().await {
            let call = sandboxd.stop_vm(sb::StopVmRequest { vm_id: rig.vm_id.clone() });
            let _ = tokio::time::timeout(Duration::from_secs(15), call).await;
        }
        let vm = self.refresh(&rig).await;
        let _ = self.runs.stop(&rig.run, "its rig was stopped").await;
        self.lock().remove(&rig.id);
        self.events.record("rig_stopped", &format!("rig:{}", rig.id), json!({ "run": rig.run }));
        Ok((rig, vm))
    }
}
