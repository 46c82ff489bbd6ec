//! Issue 22: the acp adapter. A stand-in ACP agent (tests/src/bin/acp-standin.rs,
//! written with the crate's agent side) runs in the run's overlay envelope; each
//! prompt is a script of what it asks the product, and its answer says what came of
//! each step. The product is its client: every request goes through the gate, the
//! runner's confinement, the harness's bash envelope or the approvers.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::process::{Child, ChildStdout, Output, Stdio};
use std::time::Duration;

use cc_tests::eventually;
use cc_tests::runs::{Fixture, fixture};
use nix::sys::signal::Signal;

const DENY_MAIN: &str = "[[rule]]\neffect = \"push_remote\"\nbranch = \"main\"\ndecision = \"deny\"\nreason = \"direct pushes to main are not allowed\"\n";
const DENY_SECRET: &str = "[[rule]]\neffect = \"write_file\"\npath = \"secret/**\"\ndecision = \"deny\"\nreason = \"secret/ is off limits\"\n";
const ALLOW_FEATURE: &str = "[[rule]]\neffect = \"push_remote\"\nbranch = \"feature/*\"\ndecision = \"allow\"\n";

struct World {
    f: Fixture,
    run: String,
    work: std::path::PathBuf,
    _rules: tempfile::TempDir,
}

/// A supervisor with the rules above and an acp run whose agent is the stand-in,
/// copied into the agent's home (inside its envelope; the test's build directory is not).
fn world() -> World {
    world_with_rules(&format!("{DENY_MAIN}{DENY_SECRET}"))
}

fn world_with_rules(text: &str) -> World {
    let rules = tempfile::tempdir().unwrap();
    let path = rules.path().join("rules.toml");
    std::fs::write(&path, text).unwrap();
    std::fs::set_permissions(rules.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let f = fixture(Some(&format!("[gate]\nrules = \"{}\"\n", path.display())));
    let (run, work) = (f.start_acp_standin(), f.agent_work());
    World { f, run, work, _rules: rules }
}

impl World {
    fn prompt(&self, script: &str) -> Output {
        self.f.sup.ccctl(&["--json", "run", "prompt", &self.run, script, "--timeout", "60"])
    }

    /// The outcome of each step, in order, from the agent's answer.
    fn outcomes(&self, script: &str) -> Vec<String> {
        let out = self.prompt(script);
        assert!(out.status.success(), "{}", both(&out));
        let text: String = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|e| e["kind"] == "agent_text")
            .map(|e| e["payload"]["text"].as_str().unwrap_or_default().to_owned())
            .collect();
        let outcomes: Vec<String> =
            text.lines().filter_map(|l| l.split_once(" => ").map(|(_, o)| o.to_owned())).collect();
        assert_eq!(outcomes.len(), script.lines().filter(|l| !l.trim().is_empty()).count(), "{text}");
        outcomes
    }

    /// A prompt sent by a ccctl of its own, returned once the agent has begun on it
    /// (its first thought), with the stream still being read.
    fn prompt_in_background(&self, script: &str) -> (Child, BufReader<ChildStdout>) {
        let mut caller = self
            .f
            .sup
            .ccctl_command(&["--json", "run", "prompt", &self.run, script, "--timeout", "600"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut streamed = BufReader::new(caller.stdout.take().unwrap());
        let mut line = String::new();
        while !line.contains("\"agent_thought\"") {
            line.clear();
            assert!(streamed.read_line(&mut line).unwrap() > 0, "the prompt's stream ended before the agent began");
        }
        (caller, streamed)
    }

    fn events(&self) -> String {
        String::from_utf8_lossy(&self.f.sup.ccctl(&["--json", "events"]).stdout).into_owned()
    }
}

fn both(out: &Output) -> String {
    format!("{}\n--- stderr:\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// The processes of `w`'s agent (tests run side by side, each with its own).
fn agents_running(w: &World) -> Vec<u32> {
    cc_tests::processes_running(&std::fs::canonicalize(&w.work).unwrap().join("acp-standin"))
}

#[test]
fn an_acp_agents_file_requests_are_confined_and_judged_and_its_own_writes_bounded_by_the_envelope() {
    let w = world();
    let copy = w.f.copy();
    let outside = w.f.tmp.path().join("outside.txt");
    std::fs::write(&outside, "untouched\n").unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let script = format!(
        "read src/nested/lib.rs\n\
         read {copy}/README.md\n\
         read {outside}\n\
         read ../../../../../../etc/hostname\n\
         read link-outside\n\
         write notes.txt from the agent\n\
         write secret/key pwned\n\
         write {outside} pwned\n\
         write .git/hooks/pre-commit pwned\n\
         direct-write {outside}\n\
         direct-write {copy}/made-by-agent.txt\n\
         getenv CARGO_PKG_NAME\n\
         getenv HOME\n\
         connect {addr}\n",
        copy = copy.display(),
        outside = outside.display(),
        addr = listener.local_addr().unwrap(),
    );
    let o = w.outcomes(&script);
    assert_eq!(o[0], "ok pub fn f() {}\\n");
    assert_eq!(o[1], "ok # demo\\n");
    for (i, what) in [(2, "a file outside the roots"), (3, "a climb out"), (4, "a link leading out")] {
        assert!(o[i].starts_with("refused Control Center"), "{what}: {}", o[i]);
    }
    assert_eq!(o[5], "ok ");
    assert_eq!(std::fs::read_to_string(copy.join("notes.txt")).unwrap(), "from the agent");
    assert!(
        o[6].starts_with(
            "refused Control Center denied write secret/key: a rule of this workspace's policy denies write_file: \
             secret/ is off limits. No approver can allow it"
        ),
        "{}",
        o[6]
    );
    assert!(o[7].starts_with("refused Control Center"), "{}", o[7]);
    assert!(o[8].starts_with("refused Control Center"), "{}", o[8]);
    // The agent's own write outside its roots meets the envelope; inside, it lands.
    assert!(o[9].starts_with("refused"), "{}", o[9]);
    assert_eq!(o[10], "ok written");
    assert!(copy.join("made-by-agent.txt").exists());
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "untouched\n");
    assert!(!copy.join("secret/key").exists());
    // The sanitized environment: nothing of the supervisor's, its HOME the agent's.
    assert_eq!(o[11], "unset");
    assert_eq!(o[12], std::fs::canonicalize(&w.work).unwrap().to_str().unwrap());
    // Its network namespace is empty: loopback on the host is not there.
    assert!(o[13].starts_with("refused"), "{}", o[13]);

    let events = w.events();
    for kind in ["\"agent_init\"", "\"agent_text\"", "\"agent_result\"", "\"tool_refused\""] {
        assert!(events.contains(kind), "{kind}: {events}");
    }
    // The product's MCP server was offered to the session, at its path inside.
    assert!(events.contains("asked through session/request_permission"), "{events}");
    let show = w.f.sup.ccctl(&["run", "show", &w.run]);
    assert!(String::from_utf8_lossy(&show.stdout).contains("agent command: "), "{}", both(&show));
}

#[test]
fn terminals_are_gated_capped_and_killable_and_permissions_go_to_the_gate() {
    let w = world();
    let script = "terminal 0 echo hi; echo err >&2; exit 3\n\
                  terminal 10 seq 1 1000\n\
                  terminal 0 npm install left-pad\n\
                  kill exec sleep 1061\n\
                  permission execute {\"command\":\"git push origin main\"}\n\
                  permission execute {\"command\":\"ls -la\"}\n\
                  permission execute {\"command\":[\"npm\",\"install\",\"left-pad\"]}\n\
                  permission edit {\"path\":\"secret/k\"}\n\
                  permission edit {\"path\":\"src/ok.rs\"}\n\
                  permission other {\"command\":\"ls\"}\n\
                  terminal 10 seq 1 300000\n\
                  terminal 0 kill -TERM $$\n";
    let o = w.outcomes(script);
    assert!(o[0].starts_with("ok exit=Some(3) signal=None truncated=false"), "{}", o[0]);
    assert!(o[0].contains("hi\\n") && o[0].contains("err\\n"), "{}", o[0]);
    // outputByteLimit: the last 10 bytes, and said so.
    assert!(o[1].starts_with("ok exit=Some(0) signal=None truncated=true bytes=10 "), "{}", o[1]);
    assert!(o[1].ends_with("output=\"\\n999\\n1000\\n\""), "{}", o[1]);
    // An install asks, and with no approver it is refused before anything runs.
    assert!(o[2].starts_with("refused Control Center denied `exec bash -c 'npm install left-pad'`: "), "{}", o[2]);
    // A killed terminal's command is gone, and its exit says how.
    assert!(o[3].starts_with("ok exit=None signal=Some(\"SIGKILL\")"), "{}", o[3]);
    eventually(Duration::from_secs(10), "the killed terminal's command is gone", || {
        !std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .any(|e| std::fs::read(e.path().join("cmdline")).is_ok_and(|c| c.starts_with(b"sleep\x001061")))
    });
    // Permissions: the option of the gate's decision, once; an ask with no approver is no.
    assert_eq!(&o[4..10], ["ok no", "ok yes", "ok no", "ok no", "ok yes", "ok no"]);
    // A terminal is a live command, not a call: past the bash output cap (1 MiB) it
    // runs on, and only its tail is kept.
    assert!(o[10].starts_with("ok exit=Some(0) signal=None truncated=true bytes=10 "), "{}", o[10]);
    assert!(o[10].ends_with("\\n300000\\n\""), "{}", o[10]);
    // A command its signal ended says which, not the shell's 128 + n.
    assert!(o[11].starts_with("ok exit=None signal=Some(\"SIGTERM\")"), "{}", o[11]);

    // With an approver that says yes, the ask is a yes.
    // Its output is read to the end: a closed pipe would end it before it answers.
    let (mut approver, mut questions) = w.f.sup.approver("acp-test", &["--answer", "allow", "--count", "1"]);
    let o = w.outcomes("permission execute {\"command\":\"npm install left-pad\"}\n");
    assert_eq!(o, ["ok yes"]);
    assert!(approver.wait().unwrap().success());
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut questions, &mut rest).unwrap();
    assert!(rest.contains("npm install left-pad"), "{rest}");
    let events = w.events();
    assert!(events.contains("\"agent_permission\""), "{events}");
}

/// Issue 37, item 2: a permission to write is judged by where the write lands before
/// any rule is asked, as the harness's own write is in the runner: outside the run's
/// roots, or into the registered checkout, the answer is no, and the run's events say
/// why. (Before, `/etc/passwd` was answered `allow-once` and only the envelope stopped
/// the write.)
#[test]
fn a_permission_to_write_outside_the_roots_or_into_the_checkout_is_denied_with_the_reason() {
    let w = world();
    let script = format!(
        "permission edit {{\"path\":\"/etc/passwd\"}}\n\
         permission edit {{\"path\":\"{checkout}/src/lib.rs\"}}\n\
         permission edit {{\"path\":\"../../../../../../../etc/shadow\"}}\n\
         permission edit {{\"path\":\"notes.txt\"}}\n\
         permission read {{\"path\":\"/etc/hostname\"}}\n",
        checkout = w.f.checkout.display(),
    );
    let o = w.outcomes(&script);
    assert_eq!(o, ["ok no", "ok no", "ok no", "ok yes", "ok yes"]);
    let events = w.events();
    let refused: Vec<&str> = events.lines().filter(|l| l.contains("\"tool_refused\"")).collect();
    assert_eq!(refused.len(), 3, "{events}");
    assert!(refused[0].contains("/etc/passwd is outside the run's roots"), "{}", refused[0]);
    assert!(refused[1].contains("is in a registered checkout"), "{}", refused[1]);
    assert!(refused[2].contains("/etc/shadow is outside the run's roots"), "{}", refused[2]);
    assert!(refused.iter().all(|l| l.contains("the run's roots")), "{refused:?}");
}

/// Issue 37, item 1: with a rule that allows pushes to feature branches, an ACP
/// agent's permission to push one is a yes, with no approver asked, as its terminal's
/// push and the harness's are; a push the rule does not name still asks (and with no
/// approver, is a no).
#[test]
fn a_push_a_rule_allows_is_a_yes_to_the_agents_permission_and_its_terminal() {
    let w = world_with_rules(ALLOW_FEATURE);
    let script = "permission execute {\"command\":\"git push origin HEAD:feature/x\"}\n\
                  permission execute {\"command\":\"bash -c 'git push -u origin feature/y'\"}\n\
                  permission execute {\"command\":\"git push origin HEAD:release\"}\n\
                  terminal 0 git push origin HEAD:feature/x; echo after-push\n";
    let o = w.outcomes(script);
    assert_eq!(&o[..3], ["ok yes", "ok yes", "ok no"], "{o:?}");
    // The terminal's command ran (the push itself has no upstream here: the gate let it go).
    assert!(o[3].starts_with("ok exit=Some(0)") && o[3].contains("after-push"), "{}", o[3]);
    let out = w.f.sup.ccctl(&["policy", "check", "--", "git push origin HEAD:feature/x"]);
    let said = String::from_utf8_lossy(&out.stdout);
    // What it prints is the reason for its decision: no part of it says ask.
    assert_eq!(said.lines().next(), Some("allow"), "{said}");
    assert!(!said.lines().any(|l| l.trim_start().starts_with("ask ")), "{said}");
}

#[test]
fn the_agent_lives_for_the_run_and_one_that_dies_is_started_again() {
    let w = world();
    let o = w.outcomes("say one\n");
    assert_eq!(o, ["ok one"]);
    let first = agents_running(&w);
    assert_eq!(first.len(), 1, "one agent for the run");
    // A second prompt finds the same agent.
    assert_eq!(w.outcomes("say two\n"), ["ok two"]);
    assert_eq!(agents_running(&w), first);

    // An agent that exits mid-prompt: the prompt fails in one line with its reason.
    let out = w.prompt("exit 7\n");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(err.contains("the ACP agent exited (code 7)") && err.trim_end().lines().count() == 1, "{err}");
    assert_eq!(w.outcomes("say three\n"), ["ok three"], "a new agent serves the next prompt");

    // A prompt the agent answers with an error fails with it; the agent lives on.
    let third = agents_running(&w);
    let out = w.prompt("fail the model is overloaded\n");
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "{}", both(&out));
    assert!(err.contains("answered the prompt with an error: the model is overloaded"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert_eq!(w.outcomes("say four\n"), ["ok four"]);
    assert_eq!(agents_running(&w), third, "the same agent, in the same session");

    // A prompt in flight: a second one is refused as busy; kill -9 of the agent fails
    // the first at once.
    let (waiting, _stream) = w.prompt_in_background("wait 120\n");
    let busy = w.prompt("say four\n");
    assert!(String::from_utf8_lossy(&busy.stderr).contains("already working on a prompt"), "{}", both(&busy));
    let agent = agents_running(&w);
    assert_eq!(agent.len(), 1);
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(agent[0] as i32), Signal::SIGKILL).unwrap();
    let ended = waiting.wait_with_output().unwrap();
    assert!(!ended.status.success());
    assert!(String::from_utf8_lossy(&ended.stderr).contains("the ACP agent exited (signal 9)"), "{ended:?}");
    assert_eq!(w.outcomes("say five\n"), ["ok five"]);

    // kill -9 of sandboxd under the live agent: the agent goes with it, and the next
    // prompt starts one on the new sandboxd.
    let sandboxd = w.f.sup.helper_pids().into_iter().find(|(n, _)| n == "sandboxd").unwrap().1;
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(sandboxd as i32), Signal::SIGKILL).unwrap();
    eventually(Duration::from_secs(10), "the agent dies with sandboxd", || agents_running(&w).is_empty());
    eventually(Duration::from_secs(20), "a new sandboxd serves", || {
        w.f.sup.helper_pids().into_iter().any(|(n, pid)| n == "sandboxd" && pid != sandboxd)
    });
    assert_eq!(w.outcomes("say six\n"), ["ok six"]);
    let events = w.events();
    assert!(events.matches("\"agent_init\"").count() >= 4, "a new session each time: {events}");

    // The run's end ends its agent.
    assert!(w.f.sup.ccctl(&["run", "stop", &w.run]).status.success());
    eventually(Duration::from_secs(10), "the agent ends with its run", || agents_running(&w).is_empty());
}

#[test]
fn an_acp_run_needs_a_usable_agent_command_and_only_acp_takes_one() {
    let f = fixture(None);
    let start = |args: &[&str]| {
        let mut all = vec!["run", "start", "--conversation", f.conversation.as_str()];
        all.extend_from_slice(args);
        f.sup.ccctl(&all)
    };
    for (args, words) in [
        (vec!["--adapter", "acp"], "needs --agent-command"),
        (vec!["--adapter", "acp", "--agent-command", "agent 'unclosed"], "unclosed quote"),
        (vec!["--agent-command", "agent"], "is for the acp adapter"),
        (vec!["--adapter", "nope"], "unknown adapter"),
    ] {
        let out = start(&args);
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(!out.status.success() && err.contains(words), "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    }
    // An agent that cannot start fails its prompt in one line, and the run lives on.
    let out = start(&["--adapter", "acp", "--agent-command", "/nonexistent/agent"]);
    let run = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let prompt = f.sup.ccctl(&["run", "prompt", &run, "hello", "--timeout", "30"]);
    // Its own words first (what our init said), then ours, in one line.
    let err = String::from_utf8_lossy(&prompt.stderr).into_owned();
    let last = err.trim_end().lines().last().unwrap_or_default().to_owned();
    assert!(!prompt.status.success() && last.starts_with("ccctl: the ACP agent exited (code 127)"), "{err}");
    assert!(err.contains("cannot run /nonexistent/agent"), "{err}");
    // The run's runner starts in the background, so it may still be "starting" here;
    // what matters is that it comes up and is not ended by its agent's failure.
    eventually(Duration::from_secs(30), "the run comes up despite its agent", || {
        let show = f.sup.ccctl(&["--json", "run", "show", &run]);
        let text = String::from_utf8_lossy(&show.stdout).into_owned();
        assert!(
            show.status.success() && ["\"stopped\"", "\"failed\""].iter().all(|s| !text.contains(s)),
            "{}",
            both(&show)
        );
        text.contains("\"running\"")
    });
}

#[test]
fn a_prompt_past_its_timeout_is_cancelled_and_an_agent_deaf_to_that_is_killed() {
    let w = world();
    assert_eq!(w.outcomes("say up\n"), ["ok up"]);
    let agent = agents_running(&w);
    // The agent hears session/cancel and stops: the prompt fails with the timeout's
    // reason, and the same agent serves the next one.
    let out = w.f.sup.ccctl(&["run", "prompt", &w.run, "wait 300", "--timeout", "1"]);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success() && err.contains("the prompt's answer"), "{}", both(&out));
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert_eq!(w.outcomes("say still\n"), ["ok still"]);
    assert_eq!(agents_running(&w), agent, "the same agent");
    // One that goes on regardless is killed once the grace has passed.
    let out = w.f.sup.ccctl(&["run", "prompt", &w.run, "deaf 300", "--timeout", "1"]);
    assert!(!out.status.success(), "{}", both(&out));
    eventually(Duration::from_secs(30), "the deaf agent is killed", || agents_running(&w) != agent);
    assert_eq!(w.outcomes("say again\n"), ["ok again"], "a new agent serves the next prompt");
    assert!(w.events().contains("\"agent_disconnected\""));
}

#[test]
fn a_cancelled_prompt_answers_its_pending_permissions_cancelled_and_withdraws_their_questions() {
    let w = world();
    // An approver that is there and never answers: the question waits.
    let (mut approver, mut watched) = w.f.sup.approver("silent", &["--json"]);
    // The agent up first, so that the timeout below is the prompt's alone.
    assert_eq!(w.outcomes("say up\n"), ["ok up"]);
    let script = "permission execute {\"command\":\"npm install left-pad\"}\nsay after\n";
    let out = w.f.sup.ccctl(&["--json", "run", "prompt", &w.run, script, "--timeout", "3"]);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success() && err.contains("the prompt's answer"), "{}", both(&out));
    // What the agent said before it stopped reached the caller: the request was
    // answered "cancelled", and the agent took no further step.
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(said.contains("=> ok cancelled"), "{said}");
    assert!(!said.contains("say after"), "{said}");
    // The question was put, then withdrawn with the prompt.
    let mut question = String::new();
    watched.read_line(&mut question).unwrap();
    assert!(question.contains("npm install left-pad"), "{question}");
    let mut resolved = String::new();
    watched.read_line(&mut resolved).unwrap();
    assert!(resolved.contains("\"resolved\"") && resolved.contains("the asker went away"), "{resolved}");
    let events = w.events();
    assert!(events.contains("cancelled before the gate answered"), "{events}");
    let agent = agents_running(&w);
    assert_eq!(w.outcomes("say next\n"), ["ok next"]);
    assert_eq!(agents_running(&w), agent, "the same agent, which heard the cancel");

    // A caller that goes away (ccctl killed) cancels its prompt: the agent stops,
    // and the run takes its next prompt.
    let (mut caller, streamed) = w.prompt_in_background("wait 300\n");
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(caller.id() as i32), Signal::SIGKILL).unwrap();
    caller.wait().unwrap();
    drop(streamed);
    eventually(Duration::from_secs(30), "the run takes a prompt again", || {
        let out = w.prompt("say back\n");
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("=> ok back")
    });
    assert_eq!(agents_running(&w), agent, "the agent stopped its prompt rather than being killed");
    let _ = approver.kill();
    approver.wait().unwrap();
}
