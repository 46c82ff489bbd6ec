//! Hosted terminals (`ccctl terminal`, `cc.supervisor.v1.Terminals`), on real
//! pseudo-terminals: typed under tmux as a person types, attached by several clients,
//! flooded, confined (native), and their supervisor killed.

use std::process::Command;
use std::time::Duration;

use cc_proto::common::v1::Event;
use cc_proto::reasons;
use cc_proto::supervisor::v1 as pb;
use cc_proto::supervisor::v1::attach_terminal_request::Input;
use cc_tests::runs::fixture;
use cc_tests::terminal::{attach, create};
use cc_tests::{Options, Supervisor, alive, bin, eventually, payload, wait_for_event};

const LIMIT: Duration = Duration::from_secs(30);

/// A tmux server of the test's own (its own socket), killed with the test.
struct Tmux {
    socket: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl Tmux {
    /// A session of `columns` × `rows` running `command` (a shell line).
    fn start(columns: u16, rows: u16, command: &str) -> Tmux {
        let dir = tempfile::tempdir().unwrap();
        let tmux = Tmux { socket: dir.path().join("tmux.sock"), _dir: dir };
        let (x, y) = (columns.to_string(), rows.to_string());
        let out = tmux.run(&["new-session", "-d", "-x", &x, "-y", &y, command]);
        assert!(out.status.success(), "tmux: {}", String::from_utf8_lossy(&out.stderr));
        tmux
    }

    fn run(&self, args: &[&str]) -> std::process::Output {
        Command::new("tmux").arg("-S").arg(&self.socket).args(args).env_remove("TMUX").output().expect("tmux runs")
    }

    fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", "0"];
        args.extend_from_slice(keys);
        assert!(self.run(&args).status.success());
    }

    /// The pane's text, its history included.
    fn pane(&self) -> String {
        String::from_utf8_lossy(&self.run(&["capture-pane", "-p", "-S", "-200", "-t", "0"]).stdout).into_owned()
    }

    /// Waits until the pane shows `needle` at least `times` times.
    fn shows(&self, needle: &str, times: usize) -> String {
        let mut last = String::new();
        let found = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            eventually(LIMIT, needle, || {
                last = self.pane();
                last.matches(needle).count() >= times
            })
        }));
        assert!(found.is_ok(), "{needle:?} ×{times} not shown; the pane:\n{last}");
        last
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.run(&["kill-server"]);
    }
}

fn ccctl_line(sup: &Supervisor, args: &str) -> String {
    format!("{} --data-dir {} {args}", bin("ccctl").display(), sup.data_dir.display())
}

/// A person's session under tmux: typing, a resize that `stty size` sees inside,
/// Ctrl-C reaching the foreground job, a detach with `~.` and a reattach that replays
/// the scrollback, then an exit whose status ccctl exits with.
#[test]
fn a_host_terminal_under_tmux_types_resizes_interrupts_detaches_and_replays() {
    let sup = Supervisor::start(Options::default());
    let out = sup.ccctl(&["terminal", "new", "--", "/bin/bash", "--norc", "--noprofile", "-i"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let name = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    assert!(name.starts_with("terminals/t"), "{name}");

    let attach_line = ccctl_line(&sup, &format!("terminal attach {name}"));
    let tmux = Tmux::start(100, 30, &format!("{attach_line}; echo ATTACH-ENDED rc=$?; sleep 600"));
    tmux.shows("NOT sandboxed", 1);
    tmux.keys(&["echo typed-$((6*7))", "Enter"]);
    tmux.shows("typed-42", 1);
    tmux.keys(&["stty size", "Enter"]);
    tmux.shows("30 100", 1);
    assert!(tmux.run(&["resize-window", "-t", "0", "-x", "120", "-y", "40"]).status.success());
    // The resize reaches the terminal as ccctl's SIGWINCH does; typed until seen, as
    // the signal and the next line race.
    eventually(LIMIT, "stty sees the resize", || {
        tmux.keys(&["stty size", "Enter"]);
        tmux.pane().contains("40 120")
    });
    // The job says it is up once it is the foreground job; only then is Ctrl-C typed.
    tmux.keys(&["sh -c 'echo up-$((1+1)); exec sleep 600'", "Enter"]);
    tmux.shows("up-2", 1);
    tmux.keys(&["C-c"]);
    tmux.keys(&["echo status=$?", "Enter"]);
    tmux.shows("status=130", 1);
    // Detach: `~.` after a newline.
    tmux.keys(&["Enter", "~."]);
    let pane = tmux.shows("ATTACH-ENDED rc=0", 1);
    assert!(pane.contains(&format!("detached from {name}")), "{pane}");
    // The command runs on, detached.
    let listed = sup.ccctl_json(&["terminal", "list"]);
    let terminal = listed.as_array().unwrap().iter().find(|t| t["name"] == name.as_str()).unwrap().clone();
    assert_eq!(terminal["state"], "running");
    assert_eq!(terminal["attached_clients"], 0);

    // A new attach replays what was shown, then goes on live; the exit status is
    // ccctl's.
    let again = Tmux::start(120, 40, &format!("{attach_line}; echo REATTACH-ENDED rc=$?; sleep 600"));
    again.shows("typed-42", 1);
    again.shows("status=130", 1);
    again.keys(&["exit 7", "Enter"]);
    let pane = again.shows("REATTACH-ENDED rc=7", 1);
    assert!(pane.contains("the command exited with code 7"), "{pane}");
}

/// Two clients attached at once see the same output, whichever of them types.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_clients_see_the_same_output() {
    let sup = Supervisor::start(Options::default());
    let mut client = sup.client().await;
    let terminal = create(&mut client, pb::TerminalBackend::Host, "", &["/bin/bash", "--norc", "--noprofile", "-i"])
        .await
        .unwrap();
    let mut first = attach(&mut client, &terminal.name).await.unwrap();
    let mut second = attach(&mut client, &terminal.name).await.unwrap();
    first.type_text("echo from-first-$((2+3))\n").await;
    let (a, b) = (first.seen.len(), second.seen.len());
    first.read_until("from-first-5", a, LIMIT).await;
    second.read_until("from-first-5", b, LIMIT).await;
    second.type_text("echo from-second-$((3+4))\n").await;
    first.read_until("from-second-7", a, LIMIT).await;
    second.read_until("from-second-7", b, LIMIT).await;
    let got = client.terminals.get_terminal(pb::GetTerminalRequest { name: terminal.name.clone() }).await.unwrap();
    assert_eq!(got.into_inner().terminal.unwrap().attached_clients, 2);
    // The exit reaches both.
    first.type_text("exit 3\n").await;
    first.read_to_end(LIMIT).await;
    second.read_to_end(LIMIT).await;
    assert_eq!(first.exit.as_ref().and_then(|e| e.code), Some(3));
    assert_eq!(second.exit.as_ref().and_then(|e| e.code), Some(3));
}

fn rss_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with(field)).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// 2 GiB of output through a terminal, with a client that reads and one that never
/// does (detached after `stalled_client_ms`): the supervisor's peak memory grows by
/// less than the stated bound (32 MiB; the scrollback is 256 KiB and each client's
/// queue at most 256 KiB). `stty -opost`: `yes` writes two-byte lines, and the line
/// discipline's newline translation of those runs at ~5 MB/s on this VM (seven
/// minutes for 2 GiB); without it the flood takes seconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_output_does_not_grow_the_supervisor() {
    // Long enough that the reading client, on a loaded machine, is never taken for
    // a stuck one.
    let config = "[terminals]\nstalled_client_ms = 3000\n";
    let sup = Supervisor::start(Options { config: Some(config.into()), ..Default::default() });
    let pid = sup.child.id();
    let mut client = sup.client().await;
    let before = rss_kib(pid, "VmHWM:");
    // It waits for the reader: output with no client attached rolls through the
    // 256 KiB scrollback, which would leave the reader short of 2 GiB.
    let flood = "read go; stty -opost; yes | head -c 2G; echo; echo flood-done";
    let terminal = create(&mut client, pb::TerminalBackend::Host, "", &["/bin/sh", "-c", flood]).await.unwrap();
    // Never read, on a connection of its own: it holds the output back until it is
    // detached.
    let mut stuck = attach(&mut sup.client().await, &terminal.name).await.unwrap();
    let mut reader = attach(&mut client, &terminal.name).await.unwrap();
    reader.type_text("go\n").await;
    let mut read = 0u64;
    let reading = async {
        loop {
            let had = reader.seen.len();
            let more = reader.read_one().await;
            read += (reader.seen.len() - had) as u64;
            reader.seen.drain(..reader.seen.len().saturating_sub(64));
            if !more {
                break;
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(600), reading).await.expect("the flood ends");
    assert!(String::from_utf8_lossy(&reader.seen).contains("flood-done"));
    assert_eq!(reader.exit.as_ref().and_then(|e| e.code), Some(0));
    // Every byte: 2 GiB, the echo of "go" (CR LF), the blank line and the marker.
    let expected = (2u64 << 30) + "go\r\n".len() as u64 + "\nflood-done\n".len() as u64;
    assert_eq!(read, expected, "the reader saw all of it, once");
    // The stuck client, read now, has what its queue held, then its detachment.
    stuck.read_to_end(LIMIT).await;
    let refused = stuck.refused.expect("the stuck client was detached");
    assert_eq!(refused.code(), tonic::Code::ResourceExhausted, "{refused:?}");
    let after = rss_kib(pid, "VmHWM:");
    let grown_mib = after.saturating_sub(before) / 1024;
    assert!(grown_mib < 32, "the supervisor's peak memory grew by {grown_mib} MiB ({before} → {after} KiB)");
    // The exit was recorded.
    let exited = wait_for_event(&mut client, 0, LIMIT, |e: &Event| {
        e.kind == "terminal_exited" && e.subject == format!("terminal:{}", &terminal.name["terminals/".len()..])
    })
    .await;
    assert_eq!(payload(&exited)["code"], 0);
}

/// A host terminal is the person's, and says so: in its event, on every attach, in
/// the listing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_terminal_says_it_is_unsandboxed() {
    let sup = Supervisor::start(Options::default());
    let mut client = sup.client().await;
    let terminal = create(&mut client, pb::TerminalBackend::Unspecified, "", &["/bin/cat"]).await.unwrap();
    assert_eq!(terminal.backend, pb::TerminalBackend::Host as i32, "host is the default");
    assert!(terminal.confinement.contains("unsandboxed"), "{}", terminal.confinement);
    let id = terminal.name.trim_start_matches("terminals/");
    let created = wait_for_event(&mut client, 0, LIMIT, |e: &Event| e.kind == "terminal_created").await;
    assert_eq!(created.subject, format!("terminal:{id}"));
    assert_eq!(payload(&created)["unsandboxed"], true);
    assert_eq!(payload(&created)["backend"], "host");
    let attached = attach(&mut client, &terminal.name).await.unwrap();
    assert!(attached.attached.banner.contains("NOT sandboxed"), "{}", attached.attached.banner);
    let listed = sup.ccctl_json(&["terminal", "list"]);
    assert_eq!(listed[0]["unsandboxed"], true);
    assert!(alive(terminal.pid));
    client.terminals.delete_terminal(pb::DeleteTerminalRequest { name: terminal.name.clone() }).await.unwrap();
    eventually(LIMIT, "the deleted terminal's command is gone", || !alive(terminal.pid));
    let exited = wait_for_event(&mut client, 0, LIMIT, |e: &Event| e.kind == "terminal_exited").await;
    assert_eq!(payload(&exited)["reason"], "deleted");
}

/// The native backend: the shell runs in a run's envelope on a real terminal. It
/// cannot see the registered checkout, TIOCSTI stays refused, Ctrl-C reaches its
/// foreground job, and it gets the sanitized environment.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_native_terminal_is_confined_and_keeps_tiocsti_refused() {
    let f = fixture(None);
    let mut client = f.sup.client().await;
    let request = pb::CreateTerminalRequest {
        backend: pb::TerminalBackend::Native as i32,
        conversation_id: f.conversation.clone(),
        command: vec!["/bin/bash".into(), "--norc".into(), "--noprofile".into(), "-i".into()],
        env: [("TERM".to_owned(), "vt100".to_owned()), ("LD_PRELOAD".to_owned(), "/tmp/evil.so".to_owned())].into(),
        ..Default::default()
    };
    let terminal = client.terminals.create_terminal(request).await.unwrap().into_inner().terminal.unwrap();
    assert!(!terminal.run_id.is_empty());
    assert!(terminal.confinement.contains("native envelope"), "{}", terminal.confinement);
    let mut t = attach(&mut client, &terminal.name).await.unwrap();
    let checkout = f.checkout.display().to_string();
    t.type_text(&format!("ls {checkout} >/dev/null 2>&1 || echo checkout-$((1+1))-hidden\n")).await;
    t.read_until("checkout-2-hidden", 0, LIMIT).await;
    t.type_text("echo term=$TERM preload=${LD_PRELOAD:-none}-x\n").await;
    t.read_until("term=vt100 preload=none-x", 0, LIMIT).await;
    let tiocsti = "python3 -c 'import fcntl,termios; fcntl.ioctl(0, termios.TIOCSTI, b\"x\")' 2>&1 | tail -1";
    t.type_text(&format!("{tiocsti}; echo tiocsti-$((3+3))\n")).await;
    let at = t.read_until("tiocsti-6", 0, LIMIT).await;
    let shown = String::from_utf8_lossy(&t.seen[..at]).into_owned();
    assert!(shown.contains("PermissionError: [Errno 1] Operation not permitted"), "{shown}");
    // Each job says it is up once it is the foreground job; only then is it signalled.
    let job = "sh -c 'echo up-$((1+1)); exec sleep 600'\n";
    let mark = t.seen.len();
    t.type_text(job).await;
    t.read_until("up-2", mark, LIMIT).await;
    t.send(Input::Data(vec![3])).await;
    t.type_text("echo status=$?-x\n").await;
    t.read_until("status=130-x", mark, LIMIT).await;
    // A signal by message reaches the foreground job too.
    let mark = t.seen.len();
    t.type_text(job).await;
    t.read_until("up-2", mark, LIMIT).await;
    t.send(Input::Signal(nix::sys::signal::Signal::SIGQUIT as i32)).await;
    t.type_text("echo status=$?-y\n").await;
    t.read_until("status=131-y", mark, LIMIT).await;
    // The shell's exit ends the terminal and its run.
    t.type_text("exit 5\n").await;
    t.read_to_end(LIMIT).await;
    assert_eq!(t.exit.as_ref().and_then(|e| e.code), Some(5));
    let run = terminal.run_id.clone();
    eventually(LIMIT, "the terminal's run ends with it", || {
        let shown = f.sup.ccctl_json(&["run", "show", &run]);
        shown["state"] != "running" && shown["state"] != "starting"
    });
}

/// Refusals a client can tell apart, and bad input that loses nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_and_bad_input() {
    let sup = Supervisor::start(Options::default());
    let mut client = sup.client().await;
    // Unavailable here, or without the conversation it needs (tests/tests/microvm.rs
    // has the unavailable case on every host).
    let status = create(&mut client, pb::TerminalBackend::Microvm, "", &[]).await.unwrap_err();
    assert!(matches!(status.code(), tonic::Code::FailedPrecondition | tonic::Code::InvalidArgument), "{status:?}");
    let status = create(&mut client, pb::TerminalBackend::Native, "", &[]).await.unwrap_err();
    assert!(matches!(status.code(), tonic::Code::InvalidArgument | tonic::Code::FailedPrecondition), "{status:?}");
    let status = create(&mut client, pb::TerminalBackend::Native, "c0000000000000000", &[]).await.unwrap_err();
    assert!(matches!(status.code(), tonic::Code::NotFound | tonic::Code::FailedPrecondition), "{status:?}");
    let status = match attach(&mut client, "terminals/tnothere").await {
        Err(status) => status,
        Ok(_) => panic!("attached to a terminal that does not exist"),
    };
    assert_eq!(reasons::reason_of(&status).unwrap().0, reasons::TERMINAL_NOT_FOUND);
    for size in [(0, 24), (5000, 24), (80, 70_000)] {
        let request = pb::CreateTerminalRequest {
            size: Some(pb::TerminalSize { columns: size.0, rows: size.1 }),
            ..Default::default()
        };
        let status = client.terminals.create_terminal(request).await.unwrap_err();
        assert_eq!(status.code(), tonic::Code::InvalidArgument, "{size:?}");
        assert!(status.message().contains("a terminal has 1 to 1000"), "{}", status.message());
    }
    let request = pb::CreateTerminalRequest { command: vec!["a\0b".into()], ..Default::default() };
    assert_eq!(client.terminals.create_terminal(request).await.unwrap_err().code(), tonic::Code::InvalidArgument);
    // A bad signal ends that attach with its refusal; the terminal goes on.
    let terminal = create(&mut client, pb::TerminalBackend::Host, "", &["/bin/cat"]).await.unwrap();
    let mut t = attach(&mut client, &terminal.name).await.unwrap();
    t.send(Input::Signal(nix::sys::signal::Signal::SIGSEGV as i32)).await;
    t.read_to_end(LIMIT).await;
    let refused = t.refused.expect("refused");
    assert_eq!(refused.code(), tonic::Code::InvalidArgument);
    assert!(refused.message().contains("is not one a terminal takes"), "{}", refused.message());
    let mut t = attach(&mut client, &terminal.name).await.unwrap();
    t.type_text("still-here\n").await;
    t.read_until("still-here", 0, LIMIT).await;
    let out = sup.ccctl(&["terminal", "attach", "terminals/tnothere"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.starts_with("ccctl: no terminal") && err.trim_end().lines().count() == 1, "{err}");
}

/// A terminal no client has been attached to for the idle timeout ends, saying why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_terminal_ends() {
    let config = "[terminals]\nidle_timeout_seconds = 1\n";
    let sup = Supervisor::start(Options { config: Some(config.into()), ..Default::default() });
    let mut client = sup.client().await;
    let terminal = create(&mut client, pb::TerminalBackend::Host, "", &["/bin/cat"]).await.unwrap();
    let exited = wait_for_event(&mut client, 0, LIMIT, |e: &Event| e.kind == "terminal_exited").await;
    assert_eq!(payload(&exited)["reason"], "idle: no client for 1 s");
    assert!(!alive(terminal.pid));
}

/// kill -9 of the supervisor: its terminals' masters close, which hangs their
/// commands up (the shell passes the hangup to its jobs, as in any terminal; a job the
/// person `nohup`ed survives, as it would there).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_supervisor_sigkill_leaves_no_terminal_behind() {
    let mut sup = Supervisor::start(Options::default());
    let mut client = sup.client().await;
    let shell = create(&mut client, pb::TerminalBackend::Host, "", &["/bin/bash", "--norc", "--noprofile", "-i"])
        .await
        .unwrap();
    let mut t = attach(&mut client, &shell.name).await.unwrap();
    t.type_text("sleep 600 & echo job=$!-$((1+1))x\n").await;
    let at = t.read_until("-2x", 0, LIMIT).await;
    let shown = String::from_utf8_lossy(&t.seen[..at]).into_owned();
    let job: u32 = shown.rsplit("job=").next().unwrap().trim().parse().unwrap();
    assert!(alive(shell.pid) && alive(job));
    sup.child.kill().unwrap();
    sup.child.wait().unwrap();
    eventually(LIMIT, "the shell and its job are hung up", || !alive(shell.pid) && !alive(job));
    // The next start sweeps what the killed one left (its cgroups).
    drop(Supervisor::start_on(&sup.data_dir, Options::default()));
}

/// sandboxd killed under a native terminal: the envelope dies with it, the terminal
/// ends saying so, and its run is stopped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_native_terminal_ends_clearly_when_sandboxd_is_killed() {
    let f = fixture(None);
    let mut client = f.sup.client().await;
    let terminal = create(&mut client, pb::TerminalBackend::Native, &f.conversation, &[]).await.unwrap();
    let mut t = attach(&mut client, &terminal.name).await.unwrap();
    t.type_text("echo ready-$((4*4))\n").await;
    t.read_until("ready-16", 0, LIMIT).await;
    let sandboxd = f.sup.helper_pids().into_iter().find(|(name, _)| name == "sandboxd").unwrap().1;
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(sandboxd as i32), nix::sys::signal::Signal::SIGKILL).unwrap();
    t.read_to_end(LIMIT).await;
    let exit = t.exit.expect("an exit");
    assert_ne!(exit.code, Some(0), "{exit:?}");
    assert!(exit.reason.starts_with("sandboxd"), "the exit says sandboxd ended it: {exit:?}");
    let got = client.terminals.get_terminal(pb::GetTerminalRequest { name: terminal.name.clone() }).await.unwrap();
    assert_eq!(got.into_inner().terminal.unwrap().state, pb::TerminalState::Exited as i32);
    let run = terminal.run_id.clone();
    eventually(LIMIT, "the terminal's run ends with it", || {
        let shown = f.sup.ccctl_json(&["run", "show", &run]);
        shown["state"] != "running" && shown["state"] != "starting"
    });
}

/// A command that reads nothing, under typing that fills its terminal: the typing
/// waits, but a delete (from anyone) still ends it at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminal_that_reads_nothing_can_still_be_deleted() {
    let sup = Supervisor::start(Options::default());
    let mut client = sup.client().await;
    // Raw: a canonical terminal discards what overflows its line; a raw one makes the
    // writer wait.
    let job = "stty raw -echo; echo up-$((1+1)); exec sleep 600";
    let terminal = create(&mut client, pb::TerminalBackend::Host, "", &["/bin/sh", "-c", job]).await.unwrap();
    let mut t = attach(&mut client, &terminal.name).await.unwrap();
    t.read_until("up-2", 0, LIMIT).await;
    // 768 KiB that nothing reads: far more than the terminal's input and every queue
    // on the way hold.
    for _ in 0..48 {
        t.send(Input::Data(vec![b'x'; 16 << 10])).await;
    }
    let deleted = tokio::time::timeout(
        LIMIT,
        client.terminals.delete_terminal(pb::DeleteTerminalRequest { name: terminal.name.clone() }),
    )
    .await
    .expect("the delete answers at once");
    deleted.unwrap();
    let exited = wait_for_event(&mut client, 0, LIMIT, |e: &Event| e.kind == "terminal_exited").await;
    assert_eq!(payload(&exited)["reason"], "deleted");
    eventually(LIMIT, "the command is gone", || !alive(terminal.pid));
}
