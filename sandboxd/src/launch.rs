//! Registered runs and launches: the only place a process that runs agent code starts.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cc_proto::common::v1::{EnvelopeKind, SandboxBackend};
use cc_proto::sandboxd::v1 as pb;
use cc_proto::sandboxd::v1::launch_response::Event;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::{mpsc, oneshot};
use tokio_stream::wrappers::ReceiverStream;
use tonic::Status;

use crate::bwrap::{self, BwrapCommand, Kind};
use crate::error::LaunchError;
use crate::policy::RunPolicy;
use crate::probe::{Backend, ProbeResult};
#[cfg(not(target_os = "macos"))]
use crate::system::SystemView;
use crate::violations::{Deduplicator, scan_line};
use crate::warm::{Warm, WarmKey};
use crate::{environment, protect, spawn, terminal};
use cc_host::ServiceUser;

/// At most this much argv, in bytes.
const MAX_ARGV_BYTES: usize = 1 << 20;
/// Violation reports per launch, at most.
const MAX_VIOLATIONS: usize = 64;
/// How long a launch waits for the envelope being made for it before making its own.
const WARM_WAIT: Duration = Duration::from_secs(5);

#[derive(Default)]
pub struct Runs {
    inner: Mutex<HashMap<String, RunEntry>>,
}

struct RunEntry {
    policy: Arc<RunPolicy>,
    /// Process-group leaders of the run's live launches.
    groups: HashSet<u32>,
    /// The envelope for the run's next launch of each kind ([`crate::warm`]), once
    /// it is made: a launch that comes while it is being made waits for it.
    warm: HashMap<Kind, oneshot::Receiver<Warm>>,
}

impl Runs {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, RunEntry>> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers or replaces a run's policy; its live processes keep running, the
    /// envelopes made for the policy it replaces are killed unused.
    pub fn register(&self, policy: RunPolicy) {
        let mut runs = self.lock();
        let groups = runs.remove(&policy.run_id).map(|e| e.groups).unwrap_or_default();
        runs.insert(policy.run_id.clone(), RunEntry { policy: Arc::new(policy), groups, warm: HashMap::new() });
    }

    pub fn policy(&self, run_id: &str) -> Option<Arc<RunPolicy>> {
        self.lock().get(run_id).map(|e| e.policy.clone())
    }

    /// Kills every live process of the run and forgets it; `None` for an unknown run.
    /// The count is of launches: a waiting envelope is killed too, but ran nothing.
    pub fn unregister(&self, run_id: &str) -> Option<u32> {
        let entry = self.lock().remove(run_id)?;
        for group in &entry.groups {
            kill_group(*group);
        }
        Some(entry.groups.len() as u32)
    }

    fn take_warm(&self, run_id: &str, kind: Kind) -> Option<oneshot::Receiver<Warm>> {
        self.lock().get_mut(run_id)?.warm.remove(&kind)
    }

    /// Where the envelope for the run's next launch of `kind` will be sent. Dropped
    /// (and what is sent through it killed) if the run no longer has `policy`, when
    /// it is registered again or ends, and when a newer one replaces it.
    fn expect_warm(&self, run_id: &str, policy: &Arc<RunPolicy>, kind: Kind) -> oneshot::Sender<Warm> {
        let (sender, receiver) = oneshot::channel();
        if let Some(entry) = self.lock().get_mut(run_id).filter(|e| Arc::ptr_eq(&e.policy, policy)) {
            entry.warm.insert(kind, receiver);
        }
        sender
    }

    /// Counts `group` as one of the run's launches; kills it when the run is gone.
    fn add_or_refuse(&self, run_id: &str, group: u32) -> Result<(), LaunchError> {
        if let Some(e) = self.lock().get_mut(run_id) {
            e.groups.insert(group);
            return Ok(());
        }
        kill_group(group);
        Err(LaunchError::RunEnded(run_id.to_owned()))
    }

    fn remove(&self, run_id: &str, group: u32) {
        if let Some(e) = self.lock().get_mut(run_id) {
            e.groups.remove(&group);
        }
    }
}

pub(crate) fn kill_group(group: u32) {
    // killpg(0) and killpg(1) would reach sandboxd's own group and every process.
    if group <= 1 {
        return;
    }
    let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(group as i32), nix::sys::signal::Signal::SIGKILL);
}

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
            bound: vec![],
            options: vec![],
        })
    }

    /// The envelope program's path, then its arguments and the command.
    fn full_argv(&self, p: &Prepared, create: bool, runner: &Path) -> Result<Vec<OsString>, LaunchError> {
        let mut all = vec![self.probe.program.clone().unwrap_or_default().into_os_string()];
        all.extend(self.envelope_args(p, create, runner)?);
        Ok(all)
    }

    /// The runner's envelope, to be executed by the supervisor (see the proto): the
    /// paths inside the roots bound by descriptors that the supervisor opens. Its
    /// vectors are created as for a launch, because this argv is run.
    pub fn runner_envelope(&self, run_id: &str, program: Option<&Path>) -> Result<pb::Envelope, LaunchError> {
        let p = self.prepare(run_id, EnvelopeKind::Runner as i32, &[])?;
        // On macOS the runner starts unwrapped: the supervisor's check that the socket
        // is served from inside the envelope walks /proc, which macOS does not have.
        #[cfg(target_os = "linux")]
        if self.probe.backend == Backend::Native {
            let protected = self.protected(&p, true)?;
            let command = self.bwrap_command(&p, &protected, program.unwrap_or(&self.runner), true);
            let bound = command.bound.iter().map(|b| b.as_os_str().as_bytes().to_vec()).collect();
            let options = crate::spawn::nul_separated(&command.options);
            let mut argv = vec![self.program()?.as_os_str().as_bytes().to_vec()];
            argv.extend(crate::spawn::options_on_descriptor(&command.init, &command.command));
            return Ok(pb::Envelope {
                backend: SandboxBackend::Native as i32,
                argv,
                env: p.env.into_iter().collect(),
                bound,
                options,
            });
        }
        let _ = program;
        Ok(pb::Envelope {
            backend: SandboxBackend::None as i32,
            argv: vec![],
            env: p.env.into_iter().collect(),
            bound: vec![],
            options: vec![],
        })
    }

    /// Launches `request`; with `stdin`, the process's standard input is what comes
    /// on it, closed when it ends (and, on a terminal, its resizes and signals).
    pub async fn launch(
        self: Arc<Self>,
        request: pb::LaunchRequest,
        mut stdin: Option<mpsc::Receiver<terminal::Input>>,
    ) -> Result<ReceiverStream<Result<pb::LaunchResponse, Status>>, LaunchError> {
        if request.kind == EnvelopeKind::Runner as i32 {
            return Err(LaunchError::BadRequest(
                "the runner kind is not launched: the supervisor starts it from GetRunnerEnvelope".to_owned(),
            ));
        }
        if request.pty.is_some() && (stdin.is_none() || request.host.is_some()) {
            return Err(LaunchError::BadRequest(
                "a terminal is launched interactively, in an envelope (LaunchInteractive, no host launch)".to_owned(),
            ));
        }
        let (p, wrapping) = {
            let this = self.clone();
            let r = request.clone();
            tokio::task::spawn_blocking(move || {
                let mut p = this.prepare(&r.run_id, r.kind, &r.argv)?;
                let policy_names: Vec<&str> = p.policy.env.keys().map(String::as_str).collect();
                environment::add_requested(
                    &mut p.env,
                    r.env.iter().map(|(k, v)| (k.as_str(), v.as_str())),
                    &policy_names,
                );
                // An adapter that runs its agent on the host on purpose: no envelope, and
                // the environment it gives, unsanitized.
                if let Some(host) = r.host {
                    p.env = host.env.into_iter().collect();
                    return Ok::<_, LaunchError>((p, Wrapping::Unwrapped));
                }
                let wrapping = this.wrapping(&p)?;
                Ok::<_, LaunchError>((p, wrapping))
            })
            .await
            .map_err(|e| LaunchError::Internal(e.to_string()))??
        };
        let run_id = request.run_id.clone();
        let bubblewrap = matches!(wrapping, Wrapping::Bubblewrap(..));
        let native = !matches!(wrapping, Wrapping::Unwrapped);
        // A launch is counted as the run's as soon as its process exists, so that an
        // unregistration from then on kills it; one served ahead is counted before its
        // command is given.
        let interactive = stdin.is_some();
        // A terminal's master, kept here; its slave goes to the envelope.
        let mut master = None;
        let (mut child, group, input) = match wrapping {
            Wrapping::Bubblewrap(envelope, _, bound) if let Some(size) = &request.pty => {
                let opened = terminal::open(size, service_user(&p.policy))?;
                let command = spawn::Command::Terminal(&envelope.command, opened.slave);
                let (user, cgroup) = (service_user(&p.policy), &p.policy.limits.cgroup_procs);
                let s = spawn::bubblewrap(self.program()?, &envelope, bound, command, user, cgroup)
                    .map_err(LaunchError::CannotStart)?;
                self.runs.add_or_refuse(&run_id, s.group)?;
                master = Some(opened.master);
                (s.child, s.group, None)
            }
            // A terminal needs our init, which only bubblewrap's envelope has.
            _ if request.pty.is_some() => {
                return Err(LaunchError::Refused(
                    "a terminal needs the native envelope (bubblewrap), which this host does not give".to_owned(),
                ));
            }
            Wrapping::Bubblewrap(envelope, key, bound) => {
                // An envelope made ahead reads its command on stdin: never an interactive one.
                let warm = match self.runs.take_warm(&run_id, p.kind).filter(|_| !interactive) {
                    Some(made) => tokio::time::timeout(WARM_WAIT, made).await.ok().and_then(Result::ok),
                    None => None,
                };
                // A waiting envelope that is not this one is killed here, unused.
                match warm.and_then(|w| w.serving(&key)) {
                    Some(warm) => {
                        self.runs.add_or_refuse(&run_id, warm.group())?;
                        let (child, group) = warm.hand_off(&envelope.command);
                        (child, group, None)
                    }
                    None => {
                        let command = if interactive {
                            spawn::Command::Interactive(&envelope.command)
                        } else {
                            spawn::Command::Now(&envelope.command)
                        };
                        let user = service_user(&p.policy);
                        let cgroup = &p.policy.limits.cgroup_procs;
                        let s = spawn::bubblewrap(self.program()?, &envelope, bound, command, user, cgroup)
                            .map_err(LaunchError::CannotStart)?;
                        self.runs.add_or_refuse(&run_id, s.group)?;
                        (s.child, s.group, s.command_pipe)
                    }
                }
            }
            Wrapping::SandboxExec(args) => {
                let mut c = tokio::process::Command::new(self.program()?);
                c.args(&args);
                let (mut child, group) = self.spawn_plain(c, &p, &run_id, interactive)?;
                let input = child.stdin.take();
                (child, group, input)
            }
            Wrapping::Unwrapped => {
                let mut c = tokio::process::Command::new(&p.argv[0]);
                c.args(&p.argv[1..]);
                let (mut child, group) = self.spawn_plain(c, &p, &run_id, interactive)?;
                let input = child.stdin.take();
                (child, group, input)
            }
        };
        // The caller's input, as it comes; its end closes the process's stdin.
        if let (Some(mut feed), Some(mut input)) = (stdin.take_if(|_| master.is_none()), input) {
            tokio::spawn(async move {
                use tokio::io::AsyncWriteExt;
                while let Some(message) = feed.recv().await {
                    if let terminal::Input::Stdin(chunk) = message
                        && input.write_all(&chunk).await.is_err()
                    {
                        break;
                    }
                }
            });
        }
        // A terminal's output is read from its master; its input is typed there.
        let terminal_output = match master {
            Some(master) => {
                let control = std::os::fd::AsFd::as_fd(&master)
                    .try_clone_to_owned()
                    .map_err(|e| LaunchError::CannotStart(std::io::Error::other(format!("a terminal: {e}"))))?;
                let (read, write) = master.into_split();
                if let Some(feed) = stdin.take() {
                    tokio::spawn(terminal::feed(feed, write, control));
                }
                Some(read)
            }
            None => None,
        };
        let (tx, rx) = mpsc::channel(64);
        let runs = self.runs.clone();
        let next = bubblewrap.then(|| (self.clone(), p.policy.clone(), p.kind));
        // macOS reports Seatbelt's denials in its log, not to the command.
        #[cfg(target_os = "macos")]
        let denials =
            native.then(|| self.denial_feed().map(|f| f.forward(group, tx.clone(), MAX_VIOLATIONS))).flatten();
        tokio::spawn(async move {
            let send = |event: Event| {
                let tx = tx.clone();
                async move { tx.send(Ok(pb::LaunchResponse { event: Some(event) })).await.is_ok() }
            };
            let envelope = if native { SandboxBackend::Native } else { SandboxBackend::None };
            send(Event::Envelope(envelope as i32)).await;
            let stderr_pipe = if native { Pipe::EnvelopeStderr } else { Pipe::Stderr };
            let stdout = match terminal_output {
                Some(terminal) => Some(tokio::spawn(forward(terminal, tx.clone(), Pipe::Stdout))),
                None => child.stdout.take().map(|out| tokio::spawn(forward(out, tx.clone(), Pipe::Stdout))),
            };
            let stderr = child.stderr.take().map(|err| tokio::spawn(forward(err, tx.clone(), stderr_pipe)));
            let limit = request.timeout_seconds;
            let timeout = async {
                if limit == 0 {
                    std::future::pending::<()>().await
                } else {
                    tokio::time::sleep(Duration::from_secs(u64::from(limit))).await
                }
            };
            let (status, timed_out) = tokio::select! {
                status = child.wait() => (status.ok(), false),
                _ = timeout => {
                    kill_group(group);
                    (child.wait().await.ok(), true)
                }
                _ = tx.closed() => {
                    kill_group(group);
                    (child.wait().await.ok(), false)
                }
            };
            // Nothing of the launch outlives it: in an envelope our init's exit already
            // ended its pid namespace. Unwrapped, the rest of the process group goes now
            // (setsid escapes it: the residual risk the README states). Its leader is
            // reaped, so the id could in principle be reused: only unwrapped launches,
            // whose members keep the group alive, are signalled after the exit.
            if !native {
                kill_group(group);
            }
            for reader in [stdout, stderr].into_iter().flatten() {
                let _ = tokio::time::timeout(Duration::from_secs(1), reader).await;
            }
            runs.remove(&run_id, group);
            #[cfg(target_os = "macos")]
            if let Some(denials) = denials {
                denials.abort();
            }
            use std::os::unix::process::ExitStatusExt;
            let exit =
                pb::Exit { code: status.and_then(|s| s.code()), signal: status.and_then(|s| s.signal()), timed_out };
            // The next envelope is announced before the exit is reported, so that the
            // next launch waits for it rather than making its own, and made once the exit
            // is queued, so that it never delays it; in a task of its own, so that a
            // client slow to read its events never holds it up.
            let next = next.map(|(launcher, policy, kind)| {
                let sender = runs.expect_warm(&run_id, &policy, kind);
                (launcher, policy, kind, sender)
            });
            let exit = tx.try_send(Ok(pb::LaunchResponse { event: Some(Event::Exit(exit)) }));
            if let Some((launcher, policy, kind, sender)) = next {
                tokio::spawn(launcher.prewarm(run_id, kind, policy, sender));
            }
            if let Err(mpsc::error::TrySendError::Full(exit)) = exit {
                let _ = tx.send(exit).await;
            }
        });
        Ok(ReceiverStream::new(rx))
    }

    /// sandbox-exec or an unwrapped command: they take our environment and directory.
    fn spawn_plain(
        &self,
        mut c: tokio::process::Command,
        p: &Prepared,
        run_id: &str,
        interactive: bool,
    ) -> Result<(tokio::process::Child, u32), LaunchError> {
        c.env_clear().envs(&p.env).current_dir(&p.policy.work_dir);
        let cgroup = cc_host::cgroup::open_procs(&p.policy.limits.cgroup_procs).map_err(LaunchError::CannotStart)?;
        cc_host::cgroup::join::join_on_exec(c.as_std_mut(), cgroup);
        if let Some(user) = service_user(&p.policy) {
            c.uid(user.uid).gid(user.gid);
        }
        let stdin = if interactive { Stdio::piped() } else { Stdio::null() };
        c.stdin(stdin).stdout(Stdio::piped()).stderr(Stdio::piped()).process_group(0).kill_on_drop(true);
        let child = c.spawn().map_err(LaunchError::CannotStart)?;
        let group = child.id().unwrap_or(0);
        self.runs.add_or_refuse(run_id, group)?;
        Ok((child, group))
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
    async fn prewarm(
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

/// Which of a launch's pipes [`forward`] carries.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Pipe {
    Stdout,
    /// An unwrapped launch's stderr: carried as it is.
    Stderr,
    /// An envelope's stderr: also scanned for what the envelope refused.
    EnvelopeStderr,
}

/// Forwards a pipe as chunks, and an envelope's stderr lines as violations too.
async fn forward(mut pipe: impl AsyncRead + Unpin, tx: mpsc::Sender<Result<pb::LaunchResponse, Status>>, which: Pipe) {
    let mut buffer = vec![0u8; 16 * 1024];
    let mut partial: Vec<u8> = Vec::new();
    let mut dedup = Deduplicator::new(MAX_VIOLATIONS);
    let scan = which == Pipe::EnvelopeStderr;
    // Reports the line's violation, if it is one not yet reported; false once the
    // client is gone.
    let report = async |line: &[u8], dedup: &mut Deduplicator| match scan_line(&String::from_utf8_lossy(line)) {
        Some(v) if dedup.admit(&v) => {
            tx.send(Ok(pb::LaunchResponse { event: Some(Event::Violation(v)) })).await.is_ok()
        }
        _ => true,
    };
    loop {
        let n = match pipe.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let chunk = buffer[..n].to_vec();
        let event = if which == Pipe::Stdout { Event::Stdout(chunk.clone()) } else { Event::Stderr(chunk.clone()) };
        if tx.send(Ok(pb::LaunchResponse { event: Some(event) })).await.is_err() {
            return;
        }
        if scan {
            partial.extend_from_slice(&chunk);
            while let Some(end) = partial.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = partial.drain(..=end).collect();
                if !report(&line, &mut dedup).await {
                    return;
                }
            }
            // A line over 64 KiB is scanned as it stands rather than hoarded.
            if partial.len() > 64 * 1024 && !report(&std::mem::take(&mut partial), &mut dedup).await {
                return;
            }
        }
    }
    // The last line, when it has no newline.
    if scan && !partial.is_empty() {
        report(&partial, &mut dedup).await;
    }
}
