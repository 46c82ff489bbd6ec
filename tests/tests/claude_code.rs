//! Issue 22: the claude-code adapter, with the real `claude` CLI in the run's overlay
//! envelope, driven by a scripted model (tests/src/model_api.rs) that it reaches
//! through the run's model door (tests/src/claude_world.rs). Each test scripts the
//! tool calls the model makes and checks what the real CLI then did, and what it told
//! the model.

use std::io::BufRead;
use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};
use std::time::Duration;

use cc_tests::claude_world::{DENY_MAIN, DENY_SECRET, bash, stdout, world, world_of, world_with};
use cc_tests::github_api::GitHubApi;
use cc_tests::model_api::{text, tool};
use cc_tests::{bin, eventually};
use nix::sys::signal::Signal;
use serde_json::json;

#[test]
fn bash_calls_are_decided_by_the_gate_before_they_run_and_the_agent_cannot_switch_the_hook_off() {
    let w = world(vec![], DENY_MAIN);
    // The second call also shows what the envelope holds: no model key in the
    // environment, and no way to the model but the proxy.
    let inside = format!(
        "echo made > made-by-agent.txt && tr '\\0' ' ' < /proc/1/cmdline; echo; \
         echo keys=$(env | grep -c -i -e api_key -e sk-scripted); \
         curl -s -m 5 --noproxy '*' -o /dev/null http://127.0.0.1:{}/; echo direct=$?",
        w.model.port
    );
    w.model.set_turns(vec![vec![bash("git push origin main")], vec![bash(&inside)], vec![text("finished")]]);
    // Settings the agent could have written, in its project and in its home: both
    // would switch every hook off, or allow everything. Neither is read.
    let permissive = json!({
        "disableAllHooks": true,
        "hooks": { "PreToolUse": [{ "matcher": "Bash", "hooks": [{ "type": "command", "command": "echo '{}'" }] }] },
    })
    .to_string();
    let copy = w.f.copy();
    std::fs::create_dir_all(copy.join(".claude")).unwrap();
    std::fs::write(copy.join(".claude/settings.json"), &permissive).unwrap();
    let home = copy.parent().unwrap().parent().unwrap().join("agents/default/work/.claude");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(home.join("settings.json"), &permissive).unwrap();
    for dir in [copy.join(".claude"), home.clone()] {
        // As root the run's user must be able to read them (or they would not count).
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    }

    let out = w.prompt("push it, then make a file");
    assert!(out.status.success(), "{}", stdout(&out));
    let results = w.results();
    assert_eq!(results.len(), 2, "{results:?}\n{}", stdout(&out));
    let (denied, is_error) = &results[0];
    assert!(*is_error && denied.contains("direct pushes to main are not allowed"), "{denied}");
    let (ran, is_error) = &results[1];
    // Allowed, it ran inside the envelope: our init is its PID 1.
    assert!(!is_error && ran.contains("/run/cc/init"), "{ran}");
    assert!(ran.contains("keys=0") && !ran.contains("sk-scripted-key"), "{ran}");
    assert!(ran.contains("direct=7"), "no route to the model but the proxy: {ran}");
    assert_eq!(std::fs::read_to_string(copy.join("made-by-agent.txt")).unwrap(), "made\n");
    assert!(!w.f.checkout.join("made-by-agent.txt").exists());

    // The stream became the run's events, and the gate's decisions are there too.
    let events = w.events();
    for kind in ["agent_init", "agent_tool_use", "agent_tool_result", "agent_text", "agent_result", "agent_exited"] {
        assert!(events.contains(&format!("\"{kind}\"")), "{kind} missing");
    }
    assert!(events.contains("git push origin main"), "the denied push is an event");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("-> Bash") && text.contains("success: 3 turns"), "{text}");
    // ccctl run events: the run's own events, its agent's steps as a prompt shows them.
    let events = w.f.sup.ccctl(&["run", "events", &w.run]);
    let listed = String::from_utf8_lossy(&events.stdout);
    assert!(listed.contains("-> Bash git push") || listed.contains("-> Bash {"), "{listed}");
    assert!(listed.contains("gate_decision") && listed.contains("success: 3 turns"), "{listed}");
    assert!(!listed.contains("supervisor_started"), "only the run's: {listed}");
}

/// Issue 37, item 1: the hook asks the push rule about the push the classifier names.
/// With a rule allowing feature branches, that push runs with no approver asked (it
/// used to wait for one, and with none was refused, while the harness's own bash
/// pushed); a push the rule does not name still asks, and with no approver is refused.
#[test]
fn a_push_a_rule_allows_goes_through_the_hook_without_asking() {
    let allow_feature = "[[rule]]\neffect = \"push_remote\"\nbranch = \"feature/*\"\ndecision = \"allow\"\n";
    let w = world(
        vec![
            vec![bash("git push origin HEAD:feature/x; echo after-push")],
            vec![bash("git push origin HEAD:release; echo after-push")],
            vec![text("done")],
        ],
        allow_feature,
    );
    let out = w.prompt("push both");
    assert!(out.status.success(), "{}", stdout(&out));
    let results = w.results();
    assert_eq!(results.len(), 2, "{results:?}");
    // It ran (the push itself has nowhere to go here: the gate let it through).
    assert!(!results[0].0.contains("Control Center") && results[0].0.contains("after-push"), "{results:?}");
    assert!(results[1].1 && results[1].0.contains("Control Center denied"), "{results:?}");
}

/// Issue 37, item 4: what the model reads when a call is refused, as the real CLI
/// hands it over: the action and what decided it (a rule by its author's reason, the
/// fixed list, an approver no one was), whether a person could approve it, and what to
/// do instead. It names no rules file.
#[test]
fn a_refusal_tells_the_model_what_decided_whether_a_person_could_approve_and_what_to_do_instead() {
    let w = world(
        vec![
            vec![bash("git push origin main")],
            vec![bash("sudo apt-get install -y jq")],
            vec![bash("npm install left-pad")],
            vec![tool("Write", json!({ "file_path": "/etc/agent-notes.txt", "content": "hello" }))],
            vec![text("done")],
        ],
        DENY_MAIN,
    );
    let out = w.prompt("try each of these");
    assert!(out.status.success(), "{}", stdout(&out));
    let results = w.results();
    assert_eq!(results.len(), 4, "{results:?}");
    let expect: [&[&str]; 4] = [
        &[
            "Control Center denied `git push origin main`: a rule of this workspace's policy denies push_remote: \
             direct pushes to main are not allowed.",
            "No approver can allow it",
            "Instead: push a branch of your own and open a pull request.",
        ],
        &["`sudo apt-get install -y jq`", "fixed list", "Nothing allows it in this run.", "without sudo"],
        &[
            "`npm install left-pad`: it needs a person's approval and got none (no approver connected).",
            "A person could approve it",
        ],
        &[
            "Control Center denied write /etc/agent-notes.txt: /etc/agent-notes.txt is outside the run's roots: \
             write under its working directory.",
            "Nothing allows it in this run.",
        ],
    ];
    let data = w.f.sup.data_dir.display().to_string();
    for ((result, is_error), parts) in results.iter().zip(expect) {
        assert!(*is_error, "{result}");
        for part in parts {
            assert!(result.contains(part), "{part:?} in {result}");
        }
        assert!(!result.contains("rules.toml") && !result.contains(&data), "no file of the policy: {result}");
    }
}

#[test]
fn file_writes_are_judged_by_path_rules_and_bounded_by_the_envelope() {
    // The paths are known once the world exists; the model is scripted then.
    let w = world(vec![], DENY_SECRET);
    let copy = w.f.copy();
    let outside = w.f.checkout.join("pwned.txt");
    let turns = vec![
        vec![tool("Write", json!({ "file_path": copy.join("secret/key.txt"), "content": "x" }))],
        vec![tool("Write", json!({ "file_path": outside, "content": "x" }))],
        vec![tool("Write", json!({ "file_path": copy.join("notes.txt"), "content": "fine\n" }))],
        vec![text("finished")],
    ];
    w.model.set_turns(turns);
    let out = w.prompt("write three files");
    assert!(out.status.success(), "{}", stdout(&out));
    let results = w.results();
    assert_eq!(results.len(), 3, "{results:?}");
    assert!(results[0].1 && results[0].0.contains("secret/ is off limits"), "{:?}", results[0]);
    assert!(!copy.join("secret/key.txt").exists());
    // Into the registered checkout: the gate says no by where it lands, before any rule
    // (issue 37; the envelope, which does not hold the checkout at all, used to be the
    // only layer to stop it).
    assert!(results[1].1 && results[1].0.contains("is in a registered checkout"), "{:?}", results[1]);
    assert!(!outside.exists());
    assert!(!results[2].1, "{:?}", results[2]);
    assert_eq!(std::fs::read_to_string(copy.join("notes.txt")).unwrap(), "fine\n");
}

#[test]
fn the_hook_fails_closed_when_the_gate_cannot_be_reached_and_recovers_after_a_gateway_kill() {
    let w = world(
        vec![
            vec![bash("echo one > one.txt")],
            vec![text("a")],
            vec![bash("echo two > two.txt")],
            vec![text("b")],
            vec![bash("npm install left-pad; touch installed.txt")],
            vec![text("c")],
        ],
        "",
    );
    let copy = w.f.copy();
    // The run's agent socket is gone: the hook cannot ask, and says no by itself.
    let agent_socket = w.f.sup.data_dir.join("gateway/runs").join(&w.run).join("agent.sock");
    std::fs::remove_file(&agent_socket).unwrap();
    let out = w.prompt("one");
    assert!(out.status.success(), "{}", stdout(&out));
    let results = w.results();
    assert!(results[0].1 && results[0].0.contains("Control Center blocked this call"), "{results:?}");
    assert!(!copy.join("one.txt").exists());

    // kill -9 of the gateway: the new one serves the run's agent socket again.
    let gateway = w.f.sup.helper_pids().into_iter().find(|(n, _)| n == "gateway").unwrap().1;
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(gateway as i32), Signal::SIGKILL).unwrap();
    eventually(Duration::from_secs(10), "a new gateway serves the run's agent socket", || {
        w.f.sup.helper_pids().into_iter().any(|(n, pid)| n == "gateway" && pid != gateway) && agent_socket.exists()
    });
    let out = w.prompt("two");
    assert!(out.status.success(), "{}", stdout(&out));
    assert_eq!(std::fs::read_to_string(copy.join("two.txt")).unwrap(), "two\n", "{:?}", w.results());

    // An ask with no approver connected is a deny.
    let out = w.prompt("three");
    assert!(out.status.success(), "{}", stdout(&out));
    let (reason, is_error) = w.results().pop().unwrap();
    assert!(is_error && reason.contains("Control Center denied"), "{reason}");
    assert!(!copy.join("installed.txt").exists());
}

/// The processes below `root` whose argv[0] is `program`.
fn descendants_running(root: u32, program: &str) -> Vec<u32> {
    let parent_of = |pid: u32| -> Option<u32> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        stat.rsplit_once(')')?.1.split_whitespace().nth(1)?.parse().ok()
    };
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
        let argv = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        if argv.split(|b| *b == 0).next() != Some(program.as_bytes()) {
            continue;
        }
        let mut up = parent_of(pid);
        while let Some(p) = up.filter(|p| *p > 1) {
            if p == root {
                found.push(pid);
                break;
            }
            up = parent_of(p);
        }
    }
    found
}

#[test]
fn a_hook_killed_while_its_question_waits_for_an_approver_is_a_deny() {
    let w = world(vec![vec![bash("npm install left-pad; touch installed.txt")], vec![text("finished")]], "");
    // An approver that shows the question and never answers.
    let (mut watcher, mut questions) = w.f.sup.approver("slow", &[]);
    let prompt = Command::new(bin("ccctl"))
        .arg("--data-dir")
        .arg(&w.f.sup.data_dir)
        .args(["run", "prompt", &w.run, "install it", "--timeout", "120"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    questions.read_line(&mut line).unwrap();
    assert!(line.contains("npm install left-pad"), "{line}");
    let hooks = descendants_running(w.f.sup.child.id(), "/run/cc/hook");
    assert_eq!(hooks.len(), 1, "one hook waits: {hooks:?}");
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(hooks[0] as i32), Signal::SIGKILL).unwrap();
    let out = prompt.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", stdout(&out));
    let (reason, is_error) = w.results().pop().unwrap();
    assert!(is_error && reason.contains("the hook ended without an answer"), "{reason}");
    assert!(!w.f.copy().join("installed.txt").exists());
    let _ = watcher.kill();
    let _ = watcher.wait();
}

/// The stand-in GitHub API and the configuration that points the broker (a GitHub
/// App) and the product's tools at it.
fn github() -> (GitHubApi, String, tempfile::TempDir) {
    let keys = tempfile::tempdir().unwrap();
    let (private, public) = cc_tests::github_api::key_pair(keys.path());
    let api = GitHubApi::start(public);
    let config = format!(
        "[runs]\ngithub_api_url = \"{base}\"\n\n[credentials]\nprovider = \"github-app\"\n[credentials.github_app]\n\
         app_id = \"{}\"\ninstallation_id = {}\nprivate_key = \"{}\"\napi_base = \"{base}\"\n",
        cc_tests::github_api::APP_ID,
        cc_tests::github_api::INSTALLATION,
        private.display(),
        base = api.base()
    );
    (api, config, keys)
}

#[test]
fn the_products_mcp_tools_write_outside_the_envelope_with_a_token_the_agent_never_sees() {
    let (api, config, _keys) = github();
    let ticket = json!({ "title": "flaky test", "body": "seen twice in CI" });
    let allow = "[[rule]]\neffect = \"write_external_tracker\"\ndecision = \"allow\"\n";
    let w = world_with(
        vec![vec![tool("mcp__cc__create_ticket", ticket.clone())], vec![text("filed")]],
        allow,
        &config,
        Some("octo/project"),
    );
    let out = w.prompt("file it");
    assert!(out.status.success(), "{}", stdout(&out));
    let (said, is_error) = w.results().pop().unwrap();
    assert!(!is_error && said.contains("created issue"), "{said}");
    let writes = api.writes();
    assert_eq!(writes.len(), 1, "{writes:?}");
    assert_eq!(
        (writes[0].path.as_str(), &writes[0].body["title"]),
        ("/repos/octo/project/issues", &json!("flaky test"))
    );
    // The token was made for this one write and is refused now; nothing the agent's CLI
    // sent its model (its whole context) holds it.
    let token = &writes[0].token;
    assert!(!api.accepts(token), "the issues token is revoked once GitHub answered");
    assert!(w.model.turns().iter().all(|body| !body.to_string().contains(token.as_str())));
    assert!(w.events().contains("\"product_tool\""));

    // Denied by a rule: nothing reaches GitHub, and the agent hears why.
    let (api, config, _keys) = github();
    let deny =
        "[[rule]]\neffect = \"write_external_tracker\"\ndecision = \"deny\"\nreason = \"no tickets from agents\"\n";
    let w = world_with(
        vec![vec![tool("mcp__cc__create_ticket", ticket)], vec![text("ok")]],
        deny,
        &config,
        Some("octo/project"),
    );
    let out = w.prompt("file it");
    assert!(out.status.success(), "{}", stdout(&out));
    let (said, is_error) = w.results().pop().unwrap();
    assert!(is_error && said.contains("no tickets from agents"), "{said}");
    assert!(api.writes().is_empty());
    assert_eq!(api.issued(), 1, "only the run's read token was ever issued");
}

#[test]
fn without_an_envelope_the_hook_still_refuses_a_write_outside_the_roots_and_every_event_says_so() {
    // The same scripted Write, outside the roots, under each adapter.
    let script = |target: &std::path::Path| {
        vec![vec![tool("Write", json!({ "file_path": target, "content": "escaped\n" }))], vec![text("written")]]
    };
    let native = world(vec![], "");
    let target = native.f.outside(&[]).join("escaped.txt");
    native.model.set_turns(script(&target));
    let out = native.prompt("write it");
    assert!(out.status.success(), "{}", stdout(&out));
    assert!(native.results()[0].1, "in the envelope the path does not exist: {:?}", native.results());
    assert!(!target.exists());

    let host = world_of("claude-code-nosandbox", vec![], DENY_MAIN, "", None, &[]);
    let target = host.f.outside(&[]).join("escaped.txt");
    host.model.set_turns(vec![script(&target).remove(0), vec![bash("git push origin main")], vec![text("done")]]);
    let out = host.prompt("write it, push it");
    assert!(out.status.success(), "{}", stdout(&out));
    let results = host.results();
    // The agent's own Write is judged by where it lands, envelope or not (issue 37);
    // its Bash is still unconfined, as the events below say.
    assert!(results[0].1 && results[0].0.contains("is outside the run's roots"), "{results:?}");
    assert!(!target.exists());
    // Its hook still asks, over the agent socket itself.
    assert!(results[1].1 && results[1].0.contains("direct pushes to main are not allowed"), "{results:?}");
    // Every step of it says so, and so does the run.
    let events = host.events();
    let agent_steps: Vec<&str> = events.lines().filter(|l| l.contains("\"kind\":\"agent_")).collect();
    assert!(!agent_steps.is_empty() && agent_steps.iter().all(|l| l.contains("unsandboxed")), "{events}");
    assert!(events.contains("the agent runs on the host, unconfined"));
    let show = String::from_utf8_lossy(&host.f.sup.ccctl(&["run", "show", &host.run]).stdout).into_owned();
    assert!(show.contains("NO ENVELOPE"), "{show}");
}

#[test]
fn exec_gives_its_command_to_a_claude_code_run_as_the_prompt() {
    let w = world(vec![vec![bash("echo from-exec > exec.txt && cat exec.txt")], vec![text("all done")]], "");
    let out = w.f.sup.ccctl(&[
        "exec",
        "--repo",
        w.f.checkout.to_str().unwrap(),
        "--worktree-backend",
        "copy",
        "--adapter",
        "claude-code",
        "--",
        "make",
        "a file",
    ]);
    assert!(out.status.success(), "{}", stdout(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("<- from-exec") && text.contains("success: 2 turns"), "{text}");
    // Its prompt was the command's words; its work stayed in a copy, removed after.
    let first = &w.model.turns()[0]["messages"][0]["content"];
    assert!(first.to_string().contains("make a file"), "{first}");
    assert!(!w.f.checkout.join("exec.txt").exists());
}

#[test]
fn on_a_host_without_a_backend_claude_code_still_asks_its_hook_and_reaches_its_model_by_the_proxy() {
    // No envelope: the CLI runs unwrapped, with the run's loopback proxies behind their
    // credential, and finds cc-hook where it is installed.
    let w = world_of(
        "claude-code",
        vec![vec![bash("git push origin main")], vec![bash("echo unwrapped > u.txt")], vec![text("done")]],
        DENY_MAIN,
        "",
        None,
        &["--sandbox", "off"],
    );
    let out = w.prompt("push, then write");
    assert!(out.status.success(), "{}", stdout(&out));
    let results = w.results();
    assert!(results[0].1 && results[0].0.contains("direct pushes to main are not allowed"), "{results:?}");
    assert!(!results[1].1, "{results:?}");
    assert_eq!(std::fs::read_to_string(w.f.copy().join("u.txt")).unwrap(), "unwrapped\n");
}

/// With no model key configured, a prompt fails at once, naming what is missing,
/// instead of the CLI printing its key helper's error and waiting out the prompt's
/// timeout (1,800 s by default).
#[test]
fn a_prompt_without_a_model_key_fails_at_once_naming_it() {
    let f = cc_tests::runs::fixture(None);
    let start = f.sup.ccctl(&["run", "start", "--conversation", &f.conversation, "--adapter", "claude-code"]);
    assert!(start.status.success(), "{}", String::from_utf8_lossy(&start.stderr));
    let run = cc_tests::runs::text(&start).0.trim().to_owned();
    let mut prompt =
        f.sup.ccctl_command(&["run", "prompt", &run, "say hi"]).stderr(std::process::Stdio::piped()).spawn().unwrap();
    let status = cc_tests::wait_with_limit(&mut prompt, std::time::Duration::from_secs(60));
    let mut err = String::new();
    std::io::Read::read_to_string(&mut prompt.stderr.take().unwrap(), &mut err).unwrap();
    assert!(!status.success(), "{err}");
    assert!(
        err.starts_with("ccctl: ") && err.contains("no model API key") && err.contains("[models.anthropic]"),
        "{err}"
    );
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
}
