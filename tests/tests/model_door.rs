//! Issue 38, item 1 and 2: the model door. Each run's agent reaches its provider
//! through the gateway's door, holding only a placeholder the broker minted for the
//! run; the door swaps it for the real key on the way out, reads the usage of each
//! answer, and holds the run to its budget. The provider is the scripted one
//! (tests/src/model_api.rs), which, like the real one, takes the real key and nothing
//! else; the agents are the real `claude` CLI and the ACP stand-in.

use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Output};
use std::time::Duration;

use cc_tests::claude_world::{NETWORK, REAL_KEY, bash, stdout, world, world_with};
use cc_tests::model_api::{ModelApi, text};
use cc_tests::runs::{Fixture, fixture};
use cc_tests::tls_front::TlsFront;
use cc_tests::{bin, eventually};
use nix::sys::signal::Signal;

const PLACEHOLDER_PREFIX: &str = "cc-placeholder-";
/// A second Anthropic table names environment variables of its own for ACP agents.
const UNTRUSTED_ENV: &str = "base_url_env = \"UNTRUSTED_BASE_URL\"\napi_key_env = \"UNTRUSTED_API_KEY\"";

/// A Messages API request with `key`, sent by curl to `url` (a door's socket when
/// `socket` is given), as the run's user: `(status, body)`.
fn model_request(f: &Fixture, socket: Option<&std::path::Path>, url: &str, key: &str) -> (u16, String) {
    let mut command = Command::new("curl");
    command.args(["-s", "-m", "20", "-o", "-", "-w", "\n%{http_code}", "-X", "POST", "-H"]);
    command.arg(format!("x-api-key: {key}"));
    command.args(["-H", "anthropic-version: 2023-06-01", "-H", "content-type: application/json", "-d"]);
    command.arg(r#"{"model":"claude-scripted","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}"#);
    if let Some(socket) = socket {
        command.arg("--unix-socket").arg(socket);
    }
    command.arg(url);
    as_run_user(f, &mut command);
    let out = command.output().expect("curl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, status) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (status.trim().parse().unwrap_or(0), body.to_owned())
}

/// Runs `command` as the run's processes run: its user (the service user, as root).
fn as_run_user(f: &Fixture, command: &mut Command) {
    if nix::unistd::geteuid().is_root() {
        use std::os::unix::process::CommandExt;
        std::fs::set_permissions(f.tmp.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
        command.uid(65534).gid(65534);
    }
}

/// The run's placeholder, as its apiKeyHelper (cc-hook on its agent socket) gives it.
fn placeholder_of(f: &Fixture, run: &str) -> String {
    let socket = f.sup.data_dir.join("gateway/runs").join(run).join("agent.sock");
    eventually(Duration::from_secs(10), "the run's agent socket", || socket.exists());
    let mut command = Command::new(bin("cc-hook"));
    command.arg("--agent").arg(format!("unix:{}", socket.display())).arg("--api-key");
    as_run_user(f, &mut command);
    let out = command.output().unwrap();
    assert!(out.status.success(), "{}", stdout(&out));
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

fn door_socket(f: &Fixture, run: &str) -> std::path::PathBuf {
    f.sup.data_dir.join("gateway/runs").join(run).join("model.sock")
}

fn json_of(out: &Output) -> serde_json::Value {
    assert!(out.status.success(), "{}", stdout(out));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn the_real_cli_completes_a_prompt_through_the_door_and_only_the_real_key_reaches_the_provider() {
    let w = world(vec![vec![bash("echo through-the-door")], vec![text("finished")]], "");
    let out = w.prompt("say something");
    assert!(out.status.success(), "{}", stdout(&out));
    let results = w.results();
    assert!(results.iter().any(|(r, err)| !err && r.contains("through-the-door")), "{results:?}\n{}", stdout(&out));
    // Every request the provider saw carried its own key, and no other.
    let keys = w.model.keys_presented();
    assert!(!keys.is_empty() && keys.iter().all(|k| k == REAL_KEY), "{keys:?}");

    // The run's tokens per model, as the door read them from each answer (10 in and
    // 5 out per answer, as the scripted provider reports).
    let run = json_of(&w.f.sup.ccctl(&["--json", "run", "show", &w.run]));
    let per_model = run["model"]["per_model"].as_array().unwrap().clone();
    assert_eq!(per_model.len(), 1, "{run}");
    let requests = per_model[0]["requests"].as_u64().unwrap();
    assert!(requests >= 2, "{run}");
    assert_eq!(per_model[0]["model"], "claude-scripted");
    assert_eq!(per_model[0]["input_tokens"].as_u64(), Some(10 * requests), "{run}");
    assert_eq!(per_model[0]["output_tokens"].as_u64(), Some(5 * requests), "{run}");
    // A model_usage event per request: its metadata, never its content.
    let events = w.events();
    let usage: Vec<&str> = events.lines().filter(|l| l.contains("\"model_usage\"")).collect();
    assert_eq!(usage.len() as u64, requests, "{events}");
    assert!(usage.iter().all(|l| !l.contains("say something") && !l.contains("through-the-door")), "{usage:?}");
    let show = w.f.sup.ccctl(&["run", "show", &w.run]);
    let shown = String::from_utf8_lossy(&show.stdout);
    assert!(shown.contains("anthropic/claude-scripted") && shown.contains("no budget"), "{shown}");
}

#[test]
fn nothing_in_a_run_holds_the_key_and_its_placeholder_opens_only_its_own_door() {
    // The agent looks everywhere it can for the key: every process's environment and
    // command line, the files it can read, what its apiKeyHelper gives it, and what the
    // door says to a wrong key, a CONNECT, another host and another path.
    // The key is spelled in two halves, and grep reads it from a pipe, so that no
    // command line of the scan's (in /proc, and in the CLI's transcript) holds it.
    let (front, back) = REAL_KEY.split_at(6);
    let scan = format!(
        "k={front}; k=${{k}}{back}; echo control=$(echo $k | grep -c -F -f <(echo \"$k\")); \
         echo placeholder=$(/run/cc/hook --api-key); \
         echo environ=$(cat /proc/[0-9]*/environ /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' '\\n' | grep -c -F -f <(echo \"$k\")); \
         echo files=$(grep -rlsF -f <(echo \"$k\") /etc /run /tmp /home \"$HOME\" . 2>/dev/null | head -3); \
         d=http://127.0.0.1:41420; \
         echo wrong=$(curl -s -m 5 -H 'x-api-key: sk-guess' -d '{{}}' $d/anthropic/v1/messages); \
         echo connect=$(curl -s -m 5 -o /dev/null -w '%{{http_code}}' -X CONNECT $d/anthropic/v1/messages); \
         echo host=$(curl -s -m 5 -o /dev/null -w '%{{http_code}}' --proxy $d http://example.com/v1/messages); \
         echo path=$(curl -s -m 5 -o /dev/null -w '%{{http_code}}' -X POST $d/anthropic/v1/files); \
         echo scan-done"
    );
    let w = world(vec![vec![bash(&scan)], vec![text("done")]], "");
    let out = w.prompt("look around");
    assert!(out.status.success(), "{}", stdout(&out));
    let results = w.results();
    let (seen, is_error) = results.first().cloned().unwrap_or_default();
    assert!(!is_error && seen.contains("scan-done"), "{results:?}");
    assert!(!seen.contains(REAL_KEY), "the key was found in the run: {seen}");
    let field = |name: &str| {
        seen.lines().find_map(|l| l.strip_prefix(&format!("{name}="))).unwrap_or_default().trim().to_owned()
    };
    let placeholder = field("placeholder");
    assert!(placeholder.starts_with(PLACEHOLDER_PREFIX), "{seen}");
    // The scan can see: its own spelling of the key is found where it is.
    assert_eq!(field("control"), "1", "{seen}");
    assert_eq!(field("environ"), "0", "{seen}");
    assert_eq!(field("files"), "", "{seen}");
    assert!(field("wrong").contains("authentication_error") && field("wrong").contains("not this run's"), "{seen}");
    assert_eq!(field("connect"), "405", "{seen}");
    assert_eq!(field("host"), "400", "{seen}");
    assert_eq!(field("path"), "404", "{seen}");

    // Outside the run the placeholder is worth nothing: the provider refuses it...
    let (status, body) =
        model_request(&w.f, None, &format!("http://127.0.0.1:{}/v1/messages", w.model.port), &placeholder);
    assert_eq!(status, 401, "{body}");
    // ...and so does another run's door, which opens to its own placeholder only.
    let second = w.f.sup.ccctl(&["run", "start", "--conversation", &w.f.conversation, "--adapter", "claude-code"]);
    assert!(second.status.success(), "{}", stdout(&second));
    let second = String::from_utf8_lossy(&second.stdout).trim().to_owned();
    let theirs = placeholder_of(&w.f, &second);
    assert_ne!(theirs, placeholder);
    let door = door_socket(&w.f, &second);
    let url = "http://door/anthropic/v1/messages";
    let (status, body) = model_request(&w.f, Some(&door), url, &placeholder);
    assert_eq!(status, 401, "{body}");
    assert!(!body.contains(REAL_KEY));
    assert_eq!(model_request(&w.f, Some(&door), url, &theirs).0, 200);

    // kill -9 of the gateway: the new one is told the run again and its door opens to
    // the same placeholder, which the broker kept.
    let gateway = w.f.sup.helper_pids().into_iter().find(|(n, _)| n == "gateway").unwrap().1;
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(gateway as i32), Signal::SIGKILL).unwrap();
    eventually(Duration::from_secs(10), "a new gateway has been told the live runs", || {
        w.f.sup.helper_pids().into_iter().any(|(n, pid)| n == "gateway" && pid != gateway)
            && w.events().contains("git_gateway_synced")
    });
    assert_eq!(model_request(&w.f, Some(&door), url, &theirs).0, 200);
    // kill -9 of the broker: the placeholder is in its database, and the new broker
    // exchanges it as the old one did.
    let broker = w.f.sup.helper_pids().into_iter().find(|(n, _)| n == "broker").unwrap().1;
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(broker as i32), Signal::SIGKILL).unwrap();
    eventually(Duration::from_secs(20), "the door works through a new broker", || {
        w.f.sup.helper_pids().into_iter().any(|(n, pid)| n == "broker" && pid != broker)
            && model_request(&w.f, Some(&door), url, &theirs).0 == 200
    });
    // The run ends: its placeholder is revoked with its other credentials.
    assert!(w.f.sup.ccctl(&["run", "stop", &second]).status.success());
    let leases = json_of(&w.f.sup.ccctl(&["--json", "run", "credentials", &second]));
    let placeholder_lease = leases.as_array().unwrap().iter().find(|l| l["kind"] == "model_placeholder").cloned();
    assert!(placeholder_lease.as_ref().is_some_and(|l| !l["revoked"].is_null()), "{leases}");
    let keys = w.model.keys_presented();
    assert!(keys.iter().all(|k| k == REAL_KEY || *k == placeholder), "{keys:?}");
}

#[test]
fn a_runs_model_budget_stops_its_agent_with_the_providers_own_error_shape() {
    // Every answer costs 15 tokens (10 in, 5 out): 40 is spent at the third request.
    let turns = (0..10).map(|i| vec![bash(&format!("echo step-{i}"))]).collect();
    let w = world_with(turns, "", "[runs]\nmodel_budget_tokens = 40\n", None);
    let out = w.prompt("do ten steps");
    let said = stdout(&out);
    assert!(said.contains("model budget of 40 tokens is spent"), "{said}");
    let ran = w.results().len();
    assert!(ran < 10, "the budget did not stop the agent: {ran} steps ran");
    let run = json_of(&w.f.sup.ccctl(&["--json", "run", "show", &w.run]));
    assert_eq!(run["model"]["budget_tokens"], 40);
    let used: u64 = run["model"]["per_model"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["input_tokens"].as_u64().unwrap() + m["output_tokens"].as_u64().unwrap())
        .sum();
    // The door refuses the request after the one that reached the budget.
    assert!((40..40 + 15).contains(&used), "{run}");
    let events = w.events();
    assert_eq!(events.matches("\"model_budget_reached\"").count(), 1, "{events}");

    // kill -9 of the gateway: the new one is told the run's count and refusal, and its
    // door still refuses, in the provider's shape.
    let door = door_socket(&w.f, &w.run);
    let placeholder = placeholder_of(&w.f, &w.run);
    let gateway = w.f.sup.helper_pids().into_iter().find(|(n, _)| n == "gateway").unwrap().1;
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(gateway as i32), Signal::SIGKILL).unwrap();
    eventually(Duration::from_secs(20), "a new gateway's door that still refuses", || {
        let (status, body) = model_request(&w.f, Some(&door), "http://door/anthropic/v1/messages", &placeholder);
        status == 403 && body.contains("permission_error") && body.contains("model budget of 40 tokens")
    });
}

#[test]
fn a_workspaces_daily_budget_stops_every_run_of_it() {
    // The first run spends the workspace's 40 tokens a day; the second may finish the
    // request it makes before it hears, and is refused from then on.
    let turns = (0..10).map(|i| vec![bash(&format!("echo step-{i}"))]).collect();
    let w = world_with(turns, "", "[runs]\nworkspace_model_budget_tokens_per_day = 40\n", None);
    let out = w.prompt("do ten steps");
    assert!(stdout(&out).contains("model budget of 40 tokens a day is spent"), "{}", stdout(&out));
    let second = w.f.sup.ccctl(&["run", "start", "--conversation", &w.f.conversation, "--adapter", "claude-code"]);
    assert!(second.status.success(), "{}", stdout(&second));
    let second = String::from_utf8_lossy(&second.stdout).trim().to_owned();
    let door = door_socket(&w.f, &second);
    let placeholder = placeholder_of(&w.f, &second);
    let url = "http://door/anthropic/v1/messages";
    // Its first request goes through: its door has not heard yet. Its report is what
    // the supervisor answers with the refusal, recorded for the run...
    assert_eq!(model_request(&w.f, Some(&door), url, &placeholder).0, 200);
    eventually(Duration::from_secs(10), "the second run's refusal recorded", || {
        let events = String::from_utf8_lossy(&w.f.sup.ccctl(&["--json", "run", "events", &second]).stdout).into_owned();
        events.contains("\"model_budget_reached\"")
    });
    // ...and from then on the door refuses it.
    eventually(Duration::from_secs(10), "the second run refused", || {
        let (status, body) = model_request(&w.f, Some(&door), url, &placeholder);
        status == 403 && body.contains("workspace default's model budget")
    });
    let run = json_of(&w.f.sup.ccctl(&["--json", "run", "show", &second]));
    let requests: u64 =
        run["model"]["per_model"].as_array().unwrap().iter().map(|m| m["requests"].as_u64().unwrap()).sum();
    assert!(requests <= 2, "{run}");
}

/// An ACP run: its agent is pointed at the door by its environment, with the
/// placeholder under the key's usual name, and its requests go through the door.
#[test]
fn an_acp_agent_reaches_its_model_through_the_door_and_holds_only_the_placeholder() {
    let model = ModelApi::start(vec![]);
    model.require_key(REAL_KEY);
    let keys = tempfile::tempdir().unwrap();
    let key = keys.path().join("model.key");
    std::fs::write(&key, format!("{REAL_KEY}\n")).unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let rules = keys.path().join("rules.toml");
    std::fs::write(&rules, NETWORK).unwrap();
    std::fs::set_permissions(&rules, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::set_permissions(keys.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let config = format!(
        "[gate]\nrules = \"{}\"\n\n[models.anthropic]\napi = \"anthropic\"\nbase_url = \"http://127.0.0.1:{}\"\nkey_file = \"{}\"\n",
        rules.display(),
        model.port,
        key.display()
    );
    let f = fixture(Some(&config));
    let run = f.start_acp_standin();
    let (front, back) = REAL_KEY.split_at(6);
    let script = format!(
        "getenv ANTHROPIC_BASE_URL\ngetenv ANTHROPIC_API_KEY\nmodel-call\n\
         terminal 0 k={front}; k=${{k}}{back}; cat /proc/[0-9]*/environ /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' '\\n' | grep -c -F -f <(echo \"$k\"); grep -rlsF -f <(echo \"$k\") /etc /run /tmp \"$HOME\" .; echo scanned\n"
    );
    let out = f.sup.ccctl(&["--json", "run", "prompt", &run, &script, "--timeout", "60"]);
    assert!(out.status.success(), "{}", stdout(&out));
    let text: String = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["kind"] == "agent_text")
        .map(|e| e["payload"]["text"].as_str().unwrap_or_default().to_owned())
        .collect();
    let outcomes: Vec<&str> = text.lines().filter_map(|l| l.split_once(" => ").map(|(_, o)| o)).collect();
    assert_eq!(outcomes.len(), 4, "{text}");
    assert_eq!(outcomes[0], "http://127.0.0.1:41420/anthropic");
    assert!(outcomes[1].starts_with(PLACEHOLDER_PREFIX), "{text}");
    assert_eq!(outcomes[2], "200 ok", "{text}");
    assert!(outcomes[3].contains(r#"output="0\nscanned\n""#), "{text}");
    let keys = model.keys_presented();
    assert_eq!(keys, vec![REAL_KEY.to_owned()], "the provider saw the real key, once");
}

#[test]
fn a_provider_behind_a_private_ca_is_reached_over_tls_with_its_ca_file_and_refused_without() {
    // The provider is served over real TLS (socat, a certificate the test's own CA
    // signed). The table that names the CA in ca_file reaches it; the same URL in a
    // table without it is refused with the certificate named, and no key in the words.
    let model = ModelApi::start(vec![]);
    model.require_key(REAL_KEY);
    let tls = TlsFront::start(model.port);
    let keys = tempfile::tempdir().unwrap();
    let key = keys.path().join("model.key");
    std::fs::write(&key, format!("{REAL_KEY}\n")).unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::set_permissions(keys.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let table = |name: &str, ca: &str| {
        format!(
            "[models.{name}]\napi = \"anthropic\"\nbase_url = \"https://127.0.0.1:{}\"\nkey_file = \"{}\"\n{ca}\n",
            tls.port,
            key.display()
        )
    };
    let config = format!(
        "{}{}",
        table("anthropic", &format!("ca_file = \"{}\"", tls.ca_pem.display())),
        table("untrusted", UNTRUSTED_ENV)
    );
    let f = fixture(Some(&config));
    let out = f.sup.ccctl(&["run", "start", "--conversation", &f.conversation]);
    assert!(out.status.success(), "{}", stdout(&out));
    let run = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let placeholder = placeholder_of(&f, &run);
    let door = door_socket(&f, &run);

    let (status, body) = model_request(&f, Some(&door), "http://door/anthropic/v1/messages", &placeholder);
    assert_eq!(status, 200, "{body}");
    assert_eq!(model.keys_presented(), vec![REAL_KEY.to_owned()], "the real key arrived, over TLS");

    let (status, body) = model_request(&f, Some(&door), "http://door/untrusted/v1/messages", &placeholder);
    assert_eq!(status, 502, "{body}");
    assert!(body.contains("certificate") && body.contains("[models.untrusted] ca_file"), "{body}");
    assert!(!body.contains(REAL_KEY), "{body}");
    assert_eq!(model.keys_presented().len(), 1, "nothing reached the provider past an untrusted certificate");
}
