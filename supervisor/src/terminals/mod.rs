//! Terminals the supervisor hosts (`cc.supervisor.v1.Terminals`, `ccctl terminal`):
//! a command on a pseudo-terminal that outlives its clients, as a tmux session does.
//!
//! * [`cc_terminal::session`]: scrollback, attached clients, flow control; the same
//!   for every backend;
//! * [`cc_terminal::host`]: a login shell on the host, unsandboxed (the default);
//! * [`native`]: a shell in a run's harness_bash envelope;
//! * [`microvm`]: a shell in a rig's microVM;
//! * [`service`]: the RPC edge.
//!
//! Terminals live in the supervisor's memory: like tmux's sessions with their server,
//! they end when the supervisor does (its stop hangs each up; a SIGKILL closes their
//! terminals, which hangs them up too).

pub mod microvm;
pub mod native;
pub mod service;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use cc_proto::reasons;
use serde_json::json;
use tonic::{Code, Status};

use crate::conversations::{ConversationError, Conversations};
use crate::events::EventLog;
use crate::ids::{ConversationId, RunId, TerminalId};
use crate::runs::{RunError, RunManager};
use cc_config::TerminalsConfig;
use cc_terminal::host;
use cc_terminal::session::{self, Exit, Session, Size};

/// Which backend hosts a terminal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Host,
    Native,
    Microvm,
}

impl Backend {
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Host => "host",
            Backend::Native => "native",
            Backend::Microvm => "microvm",
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum TerminalError {
    #[error("no terminal {0:?}; `ccctl terminal list` shows them")]
    NotFound(String),
    #[error("{0}")]
    BadRequest(String),
    #[error("{backend} terminals are not available on this host: {why}")]
    Unavailable { backend: &'static str, why: String },
    #[error("{0} terminals at once is the most (`[terminals] max_terminals`); delete one first")]
    TooMany(u32),
    #[error("{0}")]
    Conversation(#[from] ConversationError),
    #[error("{0}")]
    Run(#[from] RunError),
    #[error("cannot start the terminal: {0}")]
    CannotStart(String),
    #[error("{}", .0.message())]
    Rig(Status),
}

impl From<TerminalError> for Status {
    fn from(e: TerminalError) -> Status {
        let message = e.to_string();
        match e {
            TerminalError::NotFound(name) => {
                reasons::refusal(Code::NotFound, message, reasons::TERMINAL_NOT_FOUND, &[("name", name)])
            }
            TerminalError::BadRequest(_) => Status::invalid_argument(message),
            TerminalError::Unavailable { backend, .. } => reasons::refusal(
                Code::FailedPrecondition,
                message,
                reasons::BACKEND_UNAVAILABLE,
                &[("backend", backend.to_owned())],
            ),
            TerminalError::TooMany(_) => Status::resource_exhausted(message),
            TerminalError::Conversation(e) => e.into(),
            TerminalError::Run(e) => e.into(),
            TerminalError::CannotStart(_) => Status::internal(message),
            TerminalError::Rig(status) => status,
        }
    }
}

/// What a client asks for.
#[derive(Debug, Clone)]
pub struct CreateRequest {
    pub backend: Backend,
    pub conversation: Option<ConversationId>,
    pub cwd: Option<PathBuf>,
    pub command: Vec<String>,
    pub env: Vec<(String, String)>,
    pub size: Size,
    pub network: bool,
    /// microvm: an existing rig to open the terminal in.
    pub rig: Option<String>,
}

/// One hosted terminal.
pub struct Terminal {
    pub id: TerminalId,
    pub backend: Backend,
    pub conversation: Option<ConversationId>,
    pub run: Option<RunId>,
    pub command: Vec<String>,
    pub created: SystemTime,
    pub confinement: String,
    pub session: Arc<Session>,
}

impl Terminal {
    pub fn name(&self) -> String {
        format!("terminals/{}", self.id)
    }

    /// The line every attach shows first.
    pub fn banner(&self) -> String {
        match self.backend {
            Backend::Host => format!("{}: {} — NOT sandboxed, not an agent run", self.name(), self.confinement),
            _ => format!("{}: {}", self.name(), self.confinement),
        }
    }
}

pub struct TerminalManager {
    terminals: Mutex<BTreeMap<TerminalId, Arc<Terminal>>>,
    config: TerminalsConfig,
    runs: Arc<RunManager>,
    conversations: Arc<Conversations>,
    events: Arc<EventLog>,
    /// Whether sandboxd wraps launches in the native envelope (the probe).
    enveloped: bool,
    /// Creates in flight, counted toward `max_terminals`.
    starting: AtomicUsize,
    /// Set once the supervisor stops: no terminal starts after it.
    stopping: AtomicBool,
    /// The microVM probe, which says why a microVM terminal cannot be had.
    microvm: cc_host::microvm::MicrovmProbe,
    /// Where a microVM terminal's VM comes from.
    rigs: Arc<crate::rigs::RigManager>,
}

impl TerminalManager {
    pub fn new(
        config: TerminalsConfig,
        runs: Arc<RunManager>,
        conversations: Arc<Conversations>,
        events: Arc<EventLog>,
        enveloped: bool,
        microvm: cc_host::microvm::MicrovmProbe,
        rigs: Arc<crate::rigs::RigManager>,
    ) -> Arc<Self> {
        Arc::new(TerminalManager {
            terminals: Mutex::default(),
            config,
            runs,
            conversations,
            events,
            enveloped,
            starting: AtomicUsize::new(0),
            stopping: AtomicBool::new(false),
            microvm,
            rigs,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<TerminalId, Arc<Terminal>>> {
        self.terminals.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `terminals/{id}` or the bare id.
    pub fn get(&self, name: &str) -> Result<Arc<Terminal>, TerminalError> {
        let id = name.strip_prefix("terminals/").unwrap_or(name);
        self.lock()
            .get(&TerminalId::from_wire(id))
            .cloned()
            .ok_or_else(|| TerminalError::NotFound(name.chars().take(64).collect()))
    }

    pub fn list(&self) -> Vec<Arc<Terminal>> {
        self.lock().values().cloned().collect()
    }

    /// Terminals whose command runs, and those being started.
    fn running(&self) -> usize {
        self.lock().values().filter(|t| t.session.exit().is_none()).count() + self.starting.load(Ordering::SeqCst)
    }

    pub async fn create(self: &Arc<Self>, request: CreateRequest) -> Result<Arc<Terminal>, TerminalError> {
        if self.stopping.load(Ordering::SeqCst) {
            return Err(TerminalError::CannotStart("the supervisor is stopping".into()));
        }
        // Counted from here, so that creates in flight cannot together pass the limit.
        self.starting.fetch_add(1, Ordering::SeqCst);
        let _counted = Starting(&self.starting);
        if self.running() > self.config.max_terminals as usize {
            return Err(TerminalError::TooMany(self.config.max_terminals));
        }
        if request.command.iter().any(|a| a.contains('\0')) || request.command.first().is_some_and(String::is_empty) {
            return Err(TerminalError::BadRequest("the command has an empty program or a NUL byte".into()));
        }
        if let Some((name, _)) =
            request.env.iter().find(|(k, v)| k.is_empty() || k.contains(['=', '\0']) || v.contains('\0'))
        {
            return Err(TerminalError::BadRequest(format!("environment variable {name:?} cannot be set")));
        }
        let id = TerminalId::mint().map_err(|e| TerminalError::CannotStart(e.to_string()))?;
        let scrollback = usize::try_from(self.config.scrollback_bytes).unwrap_or(usize::MAX);
        let stalled = Duration::from_millis(self.config.stalled_client_ms.max(1));
        let (senders, inputs) = session::inputs();
        let (hosted, run, command, confinement) = match request.backend {
            Backend::Host => self.start_host(&request, inputs).await?,
            Backend::Native => self.start_native(&request, inputs).await?,
            Backend::Microvm => self.start_microvm(&request, inputs).await?,
        };
        let session = Session::start(hosted, senders, request.size, scrollback, stalled);
        let terminal = Arc::new(Terminal {
            id: id.clone(),
            backend: request.backend,
            conversation: request.conversation.clone(),
            run,
            command,
            created: SystemTime::now(),
            confinement,
            session,
        });
        {
            let mut terminals = self.lock();
            Self::forget_oldest_exited(&mut terminals, self.config.max_terminals as usize);
            terminals.insert(id.clone(), terminal.clone());
        }
        // Stopping began while this one started: it ends at once, as the others did.
        if self.stopping.load(Ordering::SeqCst) {
            terminal.session.hang_up("the supervisor is stopping");
        }
        self.events.record(
            "terminal_created",
            &format!("terminal:{id}"),
            json!({
                "backend": request.backend.as_str(),
                "conversation": request.conversation,
                "run": terminal.run,
                "command": terminal.command,
                "confinement": terminal.confinement,
                "unsandboxed": request.backend == Backend::Host,
            }),
        );
        tokio::spawn(self.clone().watch(terminal.clone()));
        Ok(terminal)
    }

    /// Exited terminals are kept (their scrollback and exit can still be read) until
    /// deleted, but never more than `keep` of them: the oldest go first.
    fn forget_oldest_exited(terminals: &mut BTreeMap<TerminalId, Arc<Terminal>>, keep: usize) {
        let mut exited: Vec<(SystemTime, TerminalId)> =
            terminals.values().filter(|t| t.session.exit().is_some()).map(|t| (t.created, t.id.clone())).collect();
        exited.sort();
        let excess = exited.len().saturating_sub(keep.saturating_sub(1));
        for (_, id) in exited.into_iter().take(excess) {
            terminals.remove(&id);
        }
    }

    async fn start_host(
        &self,
        request: &CreateRequest,
        inputs: session::Inputs,
    ) -> Result<(session::Hosted, Option<RunId>, Vec<String>, String), TerminalError> {
        let cwd = match (&request.cwd, &request.conversation) {
            (Some(cwd), _) => cwd.clone(),
            (None, Some(conversation)) => {
                let (conversations, conversation) = (self.conversations.clone(), conversation.clone());
                tokio::task::spawn_blocking(move || conversations.run_paths(&conversation, "default"))
                    .await
                    .map_err(|e| TerminalError::CannotStart(e.to_string()))??
                    .work_dir
            }
            (None, None) => host::home(),
        };
        if !cwd.is_dir() {
            return Err(TerminalError::BadRequest(format!("{} is not a directory", cwd.display())));
        }
        let (program, arg0, args, command) = match request.command.split_first() {
            Some((program, args)) => {
                (PathBuf::from(program), None, args.iter().map(Into::into).collect(), request.command.clone())
            }
            None => {
                let (shell, arg0) = host::login_shell();
                let shown = vec![arg0.to_string_lossy().into_owned()];
                (shell, Some(arg0), vec![], shown)
            }
        };
        let mut env = vec![("TERM".to_owned(), "xterm-256color".to_owned())];
        env.extend(request.env.iter().cloned());
        let spec = host::Spec { program, args, arg0, cwd, env, size: request.size };
        let hosted = host::start(spec, inputs).map_err(|e| TerminalError::CannotStart(e.to_string()))?;
        let uid = nix::unistd::getuid();
        let confinement = format!("none: a shell on the host as uid {uid}, unsandboxed");
        Ok((hosted, None, command, confinement))
    }

    async fn start_native(
        &self,
        request: &CreateRequest,
        inputs: session::Inputs,
    ) -> Result<(session::Hosted, Option<RunId>, Vec<String>, String), TerminalError> {
        if !self.enveloped {
            return Err(TerminalError::Unavailable {
                backend: "native",
                why: "sandboxd has no envelope on this host (`ccctl sandbox probe`); a host terminal is the unsandboxed choice"
                    .into(),
            });
        }
        let Some(conversation) = request.conversation.clone() else {
            return Err(TerminalError::BadRequest("a native terminal runs in a conversation: give one".into()));
        };
        if request.cwd.is_some() {
            return Err(TerminalError::BadRequest(
                "a native terminal starts in its run's working directory; `cd` once inside".into(),
            ));
        }
        let command = if request.command.is_empty() { native::default_command() } else { request.command.clone() };
        let mut env = vec![("TERM".to_owned(), "xterm-256color".to_owned())];
        env.extend(request.env.iter().cloned());
        let spec =
            native::Spec { conversation, argv: command.clone(), env, size: request.size, network: request.network };
        let (hosted, live) = native::start(&self.runs, spec, inputs).await?;
        let confinement = format!(
            "native envelope of run {} (network {}); typed commands are not classified",
            live.record.id,
            if request.network { "through the run's proxy" } else { "off" }
        );
        Ok((hosted, Some(live.run_id.clone()), command, confinement))
    }

    async fn start_microvm(
        &self,
        request: &CreateRequest,
        inputs: session::Inputs,
    ) -> Result<(session::Hosted, Option<RunId>, Vec<String>, String), TerminalError> {
        if !self.microvm.available {
            let why = self.microvm.line.strip_prefix("microvm=").unwrap_or(&self.microvm.line);
            return Err(TerminalError::Unavailable { backend: "microvm", why: format!("{why}; use host or native") });
        }
        let existing = match &request.rig {
            Some(name) => Some(self.rigs.get(name).await.map_err(|e| TerminalError::Rig(e.into()))?.0),
            None => None,
        };
        let conversation = match (&existing, request.conversation.clone()) {
            (Some(rig), _) => rig.conversation.clone(),
            (None, Some(conversation)) => conversation,
            (None, None) => {
                return Err(TerminalError::BadRequest(
                    "a microvm terminal runs in a conversation or a rig: give one".into(),
                ));
            }
        };
        if request.cwd.is_some() {
            return Err(TerminalError::BadRequest("a microvm terminal starts in the guest's copy of the work".into()));
        }
        if existing.is_some() && request.network {
            return Err(TerminalError::BadRequest(
                "a terminal in a rig has the rig's network; start the rig with it".into(),
            ));
        }
        let command = if request.command.is_empty() { microvm::default_command() } else { request.command.clone() };
        let env = request.env.clone();
        let network = request.network;
        let spec =
            microvm::Spec { conversation, rig: existing, argv: command.clone(), env, size: request.size, network };
        let started = microvm::start(&self.rigs, spec, inputs).await;
        let (hosted, rig) = started.map_err(|e| TerminalError::Rig(e.into()))?;
        let vm = rig.vm();
        let confinement = format!(
            "microVM {} ({}, {} MiB; the conversation's copy shared in, nothing else of the host; network {})",
            rig.name(),
            vm.accel,
            vm.memory_mib,
            if vm.network { "through the run's proxy" } else { "none" }
        );
        Ok((hosted, Some(rig.run.clone()), command, confinement))
    }

    /// Records the terminal's exit; ends it when it has been detached for the idle
    /// timeout.
    async fn watch(self: Arc<Self>, terminal: Arc<Terminal>) {
        let mut exit = terminal.session.watch_exit();
        let mut attached = terminal.session.watch_attached();
        let idle = Duration::from_secs(self.config.idle_timeout_seconds);
        let ended = loop {
            if let Some(exited) = exit.borrow_and_update().clone() {
                break Some(exited);
            }
            let detached = *attached.borrow_and_update() == 0;
            let idle_for = async {
                if detached && !idle.is_zero() {
                    tokio::time::sleep(idle).await
                } else {
                    std::future::pending::<()>().await
                }
            };
            tokio::select! {
                changed = exit.changed() => {
                    if changed.is_err() {
                        break exit.borrow().clone();
                    }
                }
                _ = attached.changed() => {}
                _ = idle_for => {
                    self.hang_up(&terminal, &format!("idle: no client for {} s", idle.as_secs()));
                }
            }
        };
        let Exit { code, signal, reason } = ended.unwrap_or_default();
        self.events.record(
            "terminal_exited",
            &format!("terminal:{}", terminal.id),
            json!({
                "code": code,
                "signal": signal,
                "reason": reason,
                "backend": terminal.backend.as_str(),
                "unsandboxed": terminal.backend == Backend::Host,
            }),
        );
    }

    /// Asks the terminal's backend to end its command; never waits.
    fn hang_up(&self, terminal: &Terminal, why: &str) {
        tracing::info!(terminal = %terminal.id, why, "ending a terminal");
        terminal.session.hang_up(why);
    }

    /// Ends the terminal's command and forgets it.
    pub fn delete(&self, name: &str) -> Result<(), TerminalError> {
        let terminal = self.get(name)?;
        self.lock().remove(&terminal.id);
        self.hang_up(&terminal, "deleted");
        let unsandboxed = terminal.backend == Backend::Host;
        self.events.record(
            "terminal_deleted",
            &format!("terminal:{}", terminal.id),
            json!({ "unsandboxed": unsandboxed }),
        );
        Ok(())
    }

    /// Ends every terminal, and every one still starting (the supervisor is stopping).
    pub fn hang_up_all(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        let all: Vec<Arc<Terminal>> = std::mem::take(&mut *self.lock()).into_values().collect();
        for terminal in all {
            self.hang_up(&terminal, "the supervisor is stopping");
        }
    }
}

/// One create in flight, counted until it is done.
struct Starting<'a>(&'a AtomicUsize);

impl Drop for Starting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}
