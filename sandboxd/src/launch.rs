//! Launches: the only place a process that runs agent code starts.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use cc_proto::common::v1::{EnvelopeKind, SandboxBackend};
use cc_proto::sandboxd::v1 as pb;
use tokio::sync::{mpsc, oneshot};
use tokio_stream::wrappers::ReceiverStream;
use tonic::Status;

use crate::bwrap::{self, BwrapCommand, Kind};
use crate::error::LaunchError;
use crate::policy::RunPolicy;
use crate::probe::{Backend, ProbeResult};
use crate::report::{self, Process, Report};
pub use crate::runs::Runs;
#[cfg(not(target_os = "macos"))]
use crate::system::SystemView;
use crate::warm::{Warm, WarmKey};
use crate::{environment, protect, spawn, terminal};
use cc_host::ServiceUser;

/// At most this much argv, in bytes.
const MAX_ARGV_BYTES: usize = 1 << 20;
/// How long a launch waits for the envelope being made for it before making its own.
const WARM_WAIT: Duration = Duration::from_secs(5);

pub struct Launcher {
    probe: ProbeResult,
    /// The system view and our init: what a bubblewrap envelope is made of.
    #[cfg(not(target_os = "macos"))]
    system: SystemView,
    #[cfg(not(target_os = "macos"))]
    init: PathBuf,
    runner: PathBuf,
    runs: Arc<Runs>,
    data_dir: PathBuf,
    #[cfg(target_os = "macos")]
    denials: std::sync::OnceLock<Option<crate::seatbelt::DenialFeed>>,
}

/// How a launch is wrapped, computed off the runtime's threads (it reads the disk).
enum Wrapping {
    /// On Linux, with what a waiting envelope must match to serve it, and the
    /// descriptors of the paths it binds by descriptor.
    #[cfg_attr(target_os = "macos", allow(dead_code))]
    Bubblewrap(BwrapCommand, WarmKey, Vec<std::os::fd::OwnedFd>),
    /// On macOS: sandbox-exec's arguments, the command last.
    #[cfg_attr(not(target_os = "macos"), allow(dead_code))]
    SandboxExec(Vec<OsString>),
    Unwrapped,
}

impl Wrapping {
    /// The envelope a launch in this wrapping reports.
    fn backend(&self) -> SandboxBackend {
        match self {
            Wrapping::Unwrapped => SandboxBackend::None,
            Wrapping::Bubblewrap(..) | Wrapping::SandboxExec(_) => SandboxBackend::Native,
        }
    }
}

/// How the caller talks to a launch's process: the other half of how it starts.
enum Io {
    /// No input; it may be served by an envelope made ahead ([`crate::warm`]).
    Batch,
    /// Its stdin is what the caller sends, closed when the caller's stream ends.
    Piped(mpsc::Receiver<terminal::Input>),
    /// A pseudo-terminal: the caller types into it, resizes it and signals its
    /// foreground job.
    Terminal(pb::PtySize, mpsc::Receiver<terminal::Input>),
}

impl Io {
    /// What `request` asks for, refused where it cannot be had.
    fn asked(request: &pb::LaunchRequest, stdin: Option<mpsc::Receiver<terminal::Input>>) -> Result<Io, LaunchError> {
        let runner = request.kind == EnvelopeKind::Runner as i32;
        if runner && (stdin.is_none() || request.pty.is_some() || request.host.is_some()) {
            return Err(LaunchError::BadRequest(
                "the runner is launched interactively, in its envelope, without a terminal: its handshake is on its stdio"
                    .to_owned(),
            ));
        }
        match (request.pty, stdin) {
            (None, None) => Ok(Io::Batch),
            (None, Some(input)) => Ok(Io::Piped(input)),
            (Some(size), Some(input)) if request.host.is_none() => Ok(Io::Terminal(size, input)),
            (Some(_), _) => Err(LaunchError::BadRequest(
                "a terminal is launched interactively, in an envelope (LaunchInteractive, no host launch)".to_owned(),
            )),
        }
    }
}

/// Everything a launch or an explanation is computed from.
struct Prepared {
    policy: Arc<RunPolicy>,
    kind: Kind,
    argv: Vec<OsString>,
    env: BTreeMap<String, String>,
}

impl Launcher {
    pub fn new(probe: ProbeResult, runs: Arc<Runs>, data_dir: PathBuf) -> Self {
        // cc-init, installed next to cc-sandboxd.
        let init = std::env::current_exe()
            .map(|exe| exe.with_file_name("cc-init"))
            .unwrap_or_else(|_| PathBuf::from("cc-init"));
        let runner = init.with_file_name("cc-runner");
        Self {
            probe,
            #[cfg(not(target_os = "macos"))]
            system: SystemView::discover(),
            #[cfg(not(target_os = "macos"))]
            init,
            runner,
            runs,
            data_dir,
            #[cfg(target_os = "macos")]
            denials: Default::default(),
        }
    }

    /// The one reader of Seatbelt's denials, started at the first launch (it needs the
    /// runtime); `None` when `log` cannot run.
    #[cfg(target_os = "macos")]
    fn denial_feed(&self) -> Option<&crate::seatbelt::DenialFeed> {
        self.denials.get_or_init(crate::seatbelt::DenialFeed::start).as_ref()
    }

    /// A registered run's policy, its roots checked again.
    pub fn policy_of(&self, run_id: &str) -> Result<Arc<RunPolicy>, LaunchError> {
        let policy = self.runs.policy(run_id).ok_or_else(|| LaunchError::RunNotFound(run_id.to_owned()))?;
        policy.verify().map_err(LaunchError::RootChanged)?;
        Ok(policy)
    }

    pub fn probe(&self) -> &ProbeResult {
        &self.probe
    }

    pub fn data_dir(&self) -> &std::path::Path {
        &self.data_dir
    }

    /// The run's policy first (an unknown run is that, whatever else is wrong), then
    /// the request's kind and argv.
    fn prepare(&self, run_id: &str, kind: i32, argv: &[Vec<u8>]) -> Result<Prepared, LaunchError> {
        let policy = self.runs.policy(run_id).ok_or_else(|| LaunchError::RunNotFound(run_id.to_owned()))?;
        policy.verify().map_err(LaunchError::RootChanged)?;
        let kind = kind_of(kind)?;
        let bad = |why: &str| Err(LaunchError::BadRequest(why.to_owned()));
        if kind != Kind::Runner && (argv.is_empty() || argv[0].is_empty()) {
            return bad("argv is empty");
        }
        if argv.iter().any(|a| a.contains(&0)) {
            return bad("an argument contains a NUL byte");
        }
        // Each with its NUL, as it travels to an envelope made ahead.
        if argv.iter().map(|a| a.len() + 1).sum::<usize>() > MAX_ARGV_BYTES {
            return bad("argv is over 1 MiB");
        }
        let argv: Vec<OsString> = if kind == Kind::Runner {
            vec![OsString::from(bwrap::RUNNER_INSIDE)]
        } else {
            argv.iter().map(|a| OsStr::from_bytes(a).to_owned()).collect()
        };
        let home = bwrap::home(&policy, kind);
        // vars_os: a host variable that is not UTF-8 is dropped, never a panic.
        let inherited: Vec<(String, String)> =
            std::env::vars_os().filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?))).collect();
        let env = environment::build(
            inherited.iter().map(|(k, v)| (k.as_str(), v.as_str())),
            policy.env.iter().map(|(k, v)| (k.as_str(), v.as_str())),
            &home.to_string_lossy(),
        );
        Ok(Prepared { policy, kind, argv, env })
    }

    /// The code-execution vectors inside the kind's writable roots, created when
    /// missing if `create`.
    fn protected(&self, p: &Prepared, create: bool) -> Result<Vec<PathBuf>, LaunchError> {
        let (writable, _) = bwrap::roots(&p.policy, p.kind);
        let found = protect::prepare(&writable, &bwrap::home(&p.policy, p.kind), create).and_then(|mut found| {
            found.extend(protect::shared_vectors(&p.policy.shared_git)?);
            Ok(found)
        });
        found.map_err(|e| match &e {
            protect::ProtectError::Link { path, .. } => {
                LaunchError::LinkInRoot { path: path.clone(), message: e.to_string() }
            }
            protect::ProtectError::Root { .. } => LaunchError::Refused(e.to_string()),
        })
    }

    fn wrapping(&self, p: &Prepared) -> Result<Wrapping, LaunchError> {
        if self.probe.backend == Backend::None {
            return Ok(Wrapping::Unwrapped);
        }
        #[cfg(target_os = "macos")]
        {
            Ok(Wrapping::SandboxExec(self.envelope_args(p, true, &self.runner)?))
        }
        #[cfg(not(target_os = "macos"))]
        {
            let protected = self.protected(p, true)?;
            let envelope = self.bwrap_command(p, &protected, &self.runner, true);
            let bound = open_bound(&p.policy, &envelope)?;
            let key = WarmKey::new(&envelope, service_user(&p.policy), &bound);
            Ok(Wrapping::Bubblewrap(envelope, key, bound))
        }
    }

    /// The runner's wrapping: its envelope, with `program` bound as the runner, where
    /// the native backend is bubblewrap; else the program itself. On macOS the runner
    /// starts unwrapped: the supervisor's check that its socket is served from inside
    /// the envelope walks /proc, which macOS does not have.
    fn runner_wrapping(&self, p: &mut Prepared, program: &Path) -> Result<Wrapping, LaunchError> {
        #[cfg(target_os = "linux")]
        if self.probe.backend == Backend::Native {
            let protected = self.protected(p, true)?;
            let envelope = self.bwrap_command(p, &protected, program, true);
            let bound = open_bound(&p.policy, &envelope)?;
            let key = WarmKey::new(&envelope, service_user(&p.policy), &bound);
            return Ok(Wrapping::Bubblewrap(envelope, key, bound));
        }
        p.argv = vec![program.as_os_str().to_owned()];
        Ok(Wrapping::Unwrapped)
    }

    /// The envelope program's arguments: bubblewrap's options and our init on Linux,
    /// every bind by path (an explanation), the SBPL profile for sandbox-exec on
    /// macOS; the command last.
    fn envelope_args(&self, p: &Prepared, create: bool, runner: &Path) -> Result<Vec<OsString>, LaunchError> {
        let protected = self.protected(p, create)?;
        #[cfg(target_os = "macos")]
        {
            let _ = runner;
            let home = nix::unistd::User::from_uid(nix::unistd::geteuid()).ok().flatten().map(|u| u.dir);
            crate::seatbelt::envelope_args(&p.policy, p.kind, &protected, home.as_deref(), &self.data_dir, &p.argv)
                .map_err(|e| LaunchError::Refused(e.to_string()))
        }
        #[cfg(not(target_os = "macos"))]
        Ok(self.bwrap_command(p, protected.as_slice(), runner, false).argv())
    }

    /// `by_descriptor`: as a launch runs it ([`bwrap::BwrapCommand::bound`]), or every
    /// bind by path, as an explanation shows it.
    #[cfg(not(target_os = "macos"))]
    fn bwrap_command(&self, p: &Prepared, protected: &[PathBuf], runner: &Path, by_descriptor: bool) -> BwrapCommand {
        use crate::bwrap::Envelope;
        use crate::system::Reader;
        let reader = match service_user(&p.policy) {
            Some(user) => Reader::User { uid: user.uid, gid: user.gid },
            None => Reader::Ourselves,
        };
        let envelope = Envelope {
            policy: &p.policy,
            kind: p.kind,
            system: &self.system.for_reader(reader),
            protected,
            init: &self.init,
            runner,
            env: &p.env,
            argv: &p.argv,
            data_dir: Some(&self.data_dir),
        };
        if by_descriptor { envelope.bwrap_command() } else { envelope.bwrap_command_by_path() }
    }

    /// The envelope of a launch of `kind`, every bind by path (to be pasted).
    pub fn explain(&self, run_id: &str, kind: i32, argv: &[Vec<u8>]) -> Result<pb::Envelope, LaunchError> {
        let p = self.prepare(run_id, kind, argv)?;
        let argv = match self.probe.backend {
            Backend::Native => self.full_argv(&p, false, &self.runner)?,
            Backend::None => p.argv.clone(),
        };
        Ok(pb::Envelope {
            backend: SandboxBackend::from(self.probe.backend) as i32,
            argv: argv.iter().map(|a| a.as_bytes().to_vec()).collect(),
            env: p.env.into_iter().collect(),
        })
    }

    /// The envelope program's path, then its arguments and the command.
    fn full_argv(&self, p: &Prepared, create: bool, runner: &Path) -> Result<Vec<OsString>, LaunchError> {
        let mut all = vec![self.probe.program.clone().unwrap_or_default().into_os_string()];
        all.extend(self.envelope_args(p, create, runner)?);
        Ok(all)
    }

    /// Launches `request`; with `stdin`, the process's standard input is what comes
    /// on it, closed when it ends (and, on a terminal, its resizes and signals).
    ///
    /// One straight sequence: what the caller asked for, the run's envelope for it
    /// (computed off the runtime's threads: it reads the disk), the process, then the
    /// task that reports its output and exit. How the process starts is the one place
    /// the wrapping and the caller's way of talking to it meet ([`Launcher::start`]).
    pub async fn launch(
        self: Arc<Self>,
        request: pb::LaunchRequest,
        stdin: Option<mpsc::Receiver<terminal::Input>>,
    ) -> Result<ReceiverStream<Result<pb::LaunchResponse, Status>>, LaunchError> {
        let arrived = std::time::Instant::now();
        let io = Io::asked(&request, stdin)?;
        let (p, wrapping) = {
            let this = self.clone();
            let request = request.clone();
            tokio::task::spawn_blocking(move || this.prepare_launch(&request))
                .await
                .map_err(|e| LaunchError::Internal(e.to_string()))??
        };
        let envelope = wrapping.backend();
        // The next launch of the kind gets an envelope made ahead; a run has one runner.
        let ahead = matches!(wrapping, Wrapping::Bubblewrap(..)) && p.kind != Kind::Runner;
        let next = ahead.then(|| (self.clone(), p.policy.clone(), p.kind));
        let process = self.start(&p, wrapping, io).await?;
        let started = std::time::Instant::now();
        let (tx, events) = report::channel();
        #[cfg(target_os = "macos")]
        let denials = (envelope == SandboxBackend::Native)
            .then(|| self.denial_feed().map(|feed| feed.forward(process.group, tx.clone(), report::MAX_VIOLATIONS)))
            .flatten();
        #[cfg(not(target_os = "macos"))]
        let denials = None;
        let report = Report {
            run_id: p.policy.run_id.clone(),
            envelope,
            timeout_seconds: request.timeout_seconds,
            arrived,
            started,
        };
        tokio::spawn(report.run(process, self.runs.clone(), next, tx, denials));
        Ok(events)
    }

    /// The run's policy, the launch's environment and its wrapping. An adapter that
    /// runs its agent on the host on purpose gets no envelope, and the environment it
    /// gives, unsanitized.
    fn prepare_launch(&self, request: &pb::LaunchRequest) -> Result<(Prepared, Wrapping), LaunchError> {
        let mut p = self.prepare(&request.run_id, request.kind, &request.argv)?;
        if p.kind == Kind::Runner {
            let program = match request.argv.first() {
                Some(program) if !program.is_empty() => PathBuf::from(OsStr::from_bytes(program)),
                _ => self.runner.clone(),
            };
            // By path, not by handle: the runner binary is the supervisor's to name (its
            // trusted config's `runner`, or cc-runner beside it in the install directory,
            // sent over our authenticated socket), never a path in a run's roots, which
            // no agent-written tree can supply. It is bound read-only, outside the roots.
            if !program.is_absolute() || !program.is_file() {
                let why = format!("the runner program {} must be an absolute path to a file", program.display());
                return Err(LaunchError::BadRequest(why));
            }
            let wrapping = self.runner_wrapping(&mut p, &program)?;
            return Ok((p, wrapping));
        }
        if let Some(host) = &request.host {
            p.env = host.env.clone().into_iter().collect();
            return Ok((p, Wrapping::Unwrapped));
        }
        let policy_names: Vec<&str> = p.policy.env.keys().map(String::as_str).collect();
        environment::add_requested(
            &mut p.env,
            request.env.iter().map(|(k, v)| (k.as_str(), v.as_str())),
            &policy_names,
        );
        let wrapping = self.wrapping(&p)?;
        Ok((p, wrapping))
    }

    /// Starts the launch's process: each wrapping with each way of talking to it. A
    /// launch is counted as the run's as soon as its process exists, so that an
    /// unregistration from then on kills it.
    async fn start(&self, p: &Prepared, wrapping: Wrapping, io: Io) -> Result<Process, LaunchError> {
        match (wrapping, io) {
            (Wrapping::Bubblewrap(envelope, _, bound), Io::Terminal(size, input)) => {
                self.start_terminal(p, &envelope, bound, &size, input)
            }
            // A terminal needs our init, which only bubblewrap's envelope has.
            (_, Io::Terminal(..)) => Err(LaunchError::Refused(
                "a terminal needs the native envelope (bubblewrap), which this host does not give".to_owned(),
            )),
            (Wrapping::Bubblewrap(envelope, key, bound), Io::Batch) => self.start_batch(p, &envelope, key, bound).await,
            (Wrapping::Bubblewrap(envelope, _, bound), Io::Piped(input)) => {
                let command = spawn::Command::Interactive(&envelope.command);
                let started = self.spawn_envelope(p, &envelope, bound, command)?;
                feed_stdin(input, started.command_pipe);
                Ok(Process { child: started.child, group: started.group, terminal: None, warm: false })
            }
            (Wrapping::SandboxExec(args), io) => {
                let mut c = tokio::process::Command::new(self.program()?);
                c.args(&args);
                self.spawn_plain(c, p, io)
            }
            (Wrapping::Unwrapped, io) => {
                let mut c = tokio::process::Command::new(&p.argv[0]);
                c.args(&p.argv[1..]);
                self.spawn_plain(c, p, io)
            }
        }
    }

    /// A batch launch in bubblewrap: the envelope made ahead for it when there is one
    /// that matches (a waiting envelope that does not is killed here, unused), else
    /// its own.
    async fn start_batch(
        &self,
        p: &Prepared,
        envelope: &BwrapCommand,
        key: WarmKey,
        bound: Vec<std::os::fd::OwnedFd>,
    ) -> Result<Process, LaunchError> {
        let run_id = &p.policy.run_id;
        let warm = match self.runs.take_warm(run_id, p.kind) {
            Some(made) => tokio::time::timeout(WARM_WAIT, made).await.ok().and_then(Result::ok),
            None => None,
        };
        if let Some(ready) = warm.and_then(|w| w.serving(&key)) {
            // Counted before its command is given.
            self.runs.add_or_refuse(run_id, ready.group())?;
            let (child, group) = ready.hand_off(&envelope.command);
            return Ok(Process { child, group, terminal: None, warm: true });
        }
        let started = self.spawn_envelope(p, envelope, bound, spawn::Command::Now(&envelope.command))?;
        Ok(Process { child: started.child, group: started.group, terminal: None, warm: false })
    }

    /// A terminal launch: the slave goes to the envelope, the master stays here; the
    /// caller's input is typed, resizes and signals are set on it.
    fn start_terminal(
        &self,
        p: &Prepared,
        envelope: &BwrapCommand,
        bound: Vec<std::os::fd::OwnedFd>,
        size: &pb::PtySize,
        input: mpsc::Receiver<terminal::Input>,
    ) -> Result<Process, LaunchError> {
        let opened = terminal::open(size, service_user(&p.policy))?;
        let command = spawn::Command::Terminal(&envelope.command, opened.slave);
        let started = self.spawn_envelope(p, envelope, bound, command)?;
        let master = opened.master;
        let control = std::os::fd::AsFd::as_fd(&master)
            .try_clone_to_owned()
            .map_err(|e| LaunchError::CannotStart(std::io::Error::other(format!("a terminal: {e}"))))?;
        let (read, write) = master.into_split();
        tokio::spawn(terminal::feed(input, write, control));
        Ok(Process { child: started.child, group: started.group, terminal: Some(read), warm: false })
    }

    /// bubblewrap with `envelope`, as the run's user, in the run's cgroup, counted as
    /// the run's.
    fn spawn_envelope(
        &self,
        p: &Prepared,
        envelope: &BwrapCommand,
        bound: Vec<std::os::fd::OwnedFd>,
        command: spawn::Command<'_>,
    ) -> Result<spawn::Started, LaunchError> {
        let (user, cgroup) = (service_user(&p.policy), &p.policy.limits.cgroup_procs);
        let started = spawn::bubblewrap(self.program()?, envelope, bound, command, user, cgroup)
            .map_err(LaunchError::CannotStart)?;
        self.runs.add_or_refuse(&p.policy.run_id, started.group)?;
        Ok(started)
    }

    /// sandbox-exec or an unwrapped command: they take our environment and directory.
    fn spawn_plain(&self, mut c: tokio::process::Command, p: &Prepared, io: Io) -> Result<Process, LaunchError> {
        c.env_clear().envs(&p.env).current_dir(&p.policy.work_dir);
        let cgroup = cc_host::cgroup::open_procs(&p.policy.limits.cgroup_procs).map_err(LaunchError::CannotStart)?;
        cc_host::cgroup::join::join_on_exec(c.as_std_mut(), cgroup);
        if let Some(user) = service_user(&p.policy) {
            c.uid(user.uid).gid(user.gid);
        }
        let stdin = if matches!(io, Io::Batch) { Stdio::null() } else { Stdio::piped() };
        c.stdin(stdin).stdout(Stdio::piped()).stderr(Stdio::piped()).process_group(0).kill_on_drop(true);
        let mut child = c.spawn().map_err(LaunchError::CannotStart)?;
        let group = child.id().unwrap_or(0);
        self.runs.add_or_refuse(&p.policy.run_id, group)?;
        if let Io::Piped(input) = io {
            feed_stdin(input, child.stdin.take());
        }
        Ok(Process { child, group, terminal: None, warm: false })
    }

    fn program(&self) -> Result<&Path, LaunchError> {
        self.probe
            .program
            .as_deref()
            .ok_or_else(|| LaunchError::Internal("the native backend has no envelope program".into()))
    }

    /// Makes the envelope for the run's next launch of `kind` ([`crate::warm`]) and
    /// sends it to `sender`, from `policy` only: if the run was registered again or
    /// ended meanwhile, nothing is made. A failure is left for that launch to meet and
    /// report.
    pub(crate) async fn prewarm(
        self: Arc<Self>,
        run_id: String,
        kind: Kind,
        policy: Arc<RunPolicy>,
        sender: oneshot::Sender<Warm>,
    ) {
        let made = {
            let this = self.clone();
            let run_id = run_id.clone();
            tokio::task::spawn_blocking(move || {
                // Any command: only the envelope and our init's options are used.
                let p = this.prepare(&run_id, wire_kind(kind) as i32, &[b"true".to_vec()])?;
                let wrapping = this.wrapping(&p)?;
                Ok::<_, LaunchError>((p, wrapping))
            })
            .await
        };
        let Ok(Ok((p, Wrapping::Bubblewrap(envelope, key, bound)))) = made else { return };
        let Ok(program) = self.program() else { return };
        if !Arc::ptr_eq(&p.policy, &policy) || sender.is_closed() {
            return;
        }
        // Here, on a runtime thread, not in the blocking closure: see spawn::bubblewrap.
        let (user, cgroup) = (service_user(&p.policy), &p.policy.limits.cgroup_procs);
        match spawn::bubblewrap(program, &envelope, bound, spawn::Command::Later, user, cgroup) {
            // Unwanted by now, it comes back and is killed.
            Ok(started) => drop(sender.send(Warm::new(key, started))),
            Err(e) => tracing::debug!(run = %crate::short(&run_id), error = %e, "cannot make the next envelope"),
        }
    }
}

/// The wire's name for a kind.
fn wire_kind(kind: Kind) -> EnvelopeKind {
    match kind {
        Kind::Overlay => EnvelopeKind::Overlay,
        Kind::HarnessBash => EnvelopeKind::HarnessBash,
        Kind::Runner => EnvelopeKind::Runner,
    }
}

/// The kind of a request, checked.
pub fn kind_of(kind: i32) -> Result<Kind, LaunchError> {
    match EnvelopeKind::try_from(kind) {
        Ok(EnvelopeKind::Overlay) => Ok(Kind::Overlay),
        Ok(EnvelopeKind::HarnessBash) => Ok(Kind::HarnessBash),
        Ok(EnvelopeKind::Runner) => Ok(Kind::Runner),
        _ => Err(LaunchError::BadRequest(format!("unknown envelope kind {kind}"))),
    }
}

/// The descriptors of what `envelope` binds by descriptor, opened beneath the run's
/// registered roots with no link followed ([`crate::beneath::open_bound`]).
#[cfg(target_os = "linux")]
fn open_bound(policy: &RunPolicy, envelope: &BwrapCommand) -> Result<Vec<std::os::fd::OwnedFd>, LaunchError> {
    crate::beneath::open_bound(&policy.identities, &envelope.bound).map_err(|e| match &e {
        crate::beneath::BindError::Link { path } => {
            LaunchError::LinkInRoot { path: path.clone(), message: e.to_string() }
        }
        _ => LaunchError::Refused(e.to_string()),
    })
}

/// The caller's input to the process's stdin, as it comes; its end closes it.
fn feed_stdin(mut input: mpsc::Receiver<terminal::Input>, pipe: Option<tokio::process::ChildStdin>) {
    let Some(mut pipe) = pipe else { return };
    tokio::spawn(async move {
        use tokio::io::AsyncWriteExt;
        while let Some(message) = input.recv().await {
            if let terminal::Input::Stdin(chunk) = message
                && pipe.write_all(&chunk).await.is_err()
            {
                break;
            }
        }
    });
}

/// Who a launch runs as when sandboxd is root: the owner of the run's working
/// directory, or the service user when that is root itself. `None` when we are not root.
pub fn service_user(policy: &RunPolicy) -> Option<ServiceUser> {
    let service = ServiceUser::when_root()?;
    // By handle, like every look into the run's roots: the working directory lies in
    // `repos/`, which the agent writes.
    let owner = crate::beneath::open_dir_no_links(&policy.work_dir).and_then(|dir| nix::sys::stat::fstat(&dir));
    match owner {
        Ok(st) if st.st_uid != 0 => Some(ServiceUser { uid: st.st_uid, gid: st.st_gid }),
        _ => Some(service),
    }
}
