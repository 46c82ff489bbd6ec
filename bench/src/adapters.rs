//! The adapters' costs (issue 22), side by side in one run:
//!
//! * the hook's decision latency, from the start of a `cc-hook` process to its answer,
//!   for an allowed Bash call: under 10 ms median, since it runs before every Bash
//!   call. Measured on the run's agent socket from the host (inside the envelope its
//!   loopback bridge adds ~0.1 ms); beside it, the floor of any process, `/bin/true`;
//! * the MCP tool-call round trip: `tools/call create_ticket` on cc-mcp over stdio,
//!   through the agent socket, the gateway, the gate, the broker's one-write token and
//!   the stand-in GitHub API; beside it, the same POST made straight to the stand-in;
//! * the ACP round trip of an `fs/read_text_file` of 4 KiB, timed by the agent (the
//!   stand-in, `acp-standin`) from its request to its answer: its client is the run's
//!   runner, which asks the supervisor, which has the gate judge it and the runner
//!   read it: under 1 ms median;
//! * the real claude CLI's turn overhead under the native envelope against
//!   unwrapped (claude-code-nosandbox), with the same scripted model: one prompt of
//!   two turns (a Bash call, then text), from `ccctl run prompt` to its exit.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use cc_tests::github_api::GitHubApi;
use cc_tests::model_api::{ModelApi, text, tool};
use serde_json::json;

use crate::runs::{ccctl, path_str};
use crate::scale::rounds;
use crate::summary;
use crate::{report, sibling, start, stats};

const WARM_UP: usize = 20;
const SAMPLES: usize = 300;
const MCP_CALLS: usize = 200;
const CLI_ROUNDS: usize = 5;
const ACP_READS: usize = 1000;

/// What Claude Code gives its PreToolUse hook for a Bash call.
const HOOK_INPUT: &str = r#"{"session_id":"bench","cwd":"/w","permission_mode":"bypassPermissions","hook_event_name":"PreToolUse","tool_name":"Bash","tool_input":{"command":"ls -la src","description":"list"},"tool_use_id":"toolu_bench"}"#;

fn hook_once(hook: &Path, socket: &str) -> anyhow::Result<Duration> {
    let t = Instant::now();
    let mut child = Command::new(hook)
        .args(["--agent", socket])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    child.stdin.take().context("stdin")?.write_all(HOOK_INPUT.as_bytes())?;
    let out = child.wait_with_output()?;
    let elapsed = t.elapsed();
    let answer = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() || !answer.contains(r#""permissionDecision":"allow""#) {
        bail!("the hook did not allow: {answer} {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(elapsed)
}

/// Supervisor `n`'s configuration: the scripted model at `model_port`, reached by each
/// run's model door, the stand-in GitHub for the product's tools, tracker writes
/// allowed.
fn configure(root: &Path, n: usize, model_port: u16, api: &GitHubApi, private: &Path) -> anyhow::Result<PathBuf> {
    let rules = root.join("rules.toml");
    std::fs::write(
        &rules,
        "[[rule]]\neffect = \"access_network\"\ndecision = \"allow\"\n\n\
         [[rule]]\neffect = \"write_external_tracker\"\ndecision = \"allow\"\n",
    )?;
    std::fs::set_permissions(&rules, std::fs::Permissions::from_mode(0o644))?;
    let key = root.join("model.key");
    std::fs::write(&key, "sk-bench\n")?;
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600))?;
    let data = root.join(format!("d{n}"));
    std::fs::create_dir_all(&data)?;
    std::fs::write(
        data.join("config.toml"),
        format!(
            "[gate]\nrules = \"{}\"\n\n[runs]\ngithub_api_url = \"{base}\"\n\n\
             [models.anthropic]\napi = \"anthropic\"\nbase_url = \"http://127.0.0.1:{model_port}\"\nkey_file = \"{}\"\n\n\
             [credentials]\nprovider = \"github-app\"\n[credentials.github_app]\napp_id = \"{}\"\ninstallation_id = {}\n\
             private_key = \"{}\"\napi_base = \"{base}\"\n",
            rules.display(),
            key.display(),
            cc_tests::github_api::APP_ID,
            cc_tests::github_api::INSTALLATION,
            private.display(),
            base = api.base()
        ),
    )?;
    Ok(data)
}

/// One JSON-RPC line to cc-mcp and the answer to it (notifications get none).
struct Mcp {
    child: std::process::Child,
    input: std::process::ChildStdin,
    output: BufReader<std::process::ChildStdout>,
}

impl Mcp {
    fn start(socket: &str) -> anyhow::Result<Self> {
        let mut child = Command::new(sibling("cc-mcp")?)
            .args(["--agent", socket])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        let input = child.stdin.take().context("stdin")?;
        let output = BufReader::new(child.stdout.take().context("stdout")?);
        Ok(Self { child, input, output })
    }

    fn call(&mut self, message: serde_json::Value) -> anyhow::Result<serde_json::Value> {
        writeln!(self.input, "{message}")?;
        let mut line = String::new();
        if self.output.read_line(&mut line)? == 0 {
            bail!("cc-mcp closed its output");
        }
        Ok(serde_json::from_str(&line)?)
    }

    fn notify(&mut self, message: serde_json::Value) -> anyhow::Result<()> {
        Ok(writeln!(self.input, "{message}")?)
    }
}

impl Drop for Mcp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn run() -> anyhow::Result<()> {
    let tmp = tempfile::Builder::new().prefix("cc-bench-adapters-").tempdir()?;
    let root = std::fs::canonicalize(tmp.path())?;
    std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755))?;
    let (private, public) = cc_tests::github_api::key_pair(&root);
    let api = GitHubApi::start(public);
    let model = ModelApi::start(vec![
        vec![tool("Bash", json!({ "command": "echo bench", "description": "b" }))],
        vec![text("ok")],
    ]);
    let repo = crate::runs::demo_repo(&root.join("repo"))?;
    // Two supervisors: runs in envelopes reach the model by a name, unwrapped ones by
    // its address (the other's base URL cannot serve both).
    let mut worlds = Vec::new();
    for n in 0..2 {
        let data = configure(&root, n, model.port, &api, &private)?;
        let (supervisor, _) = start(&root, n)?;
        ccctl(&data, &["repo", "add", path_str(&repo)?, "--name", "demo"])?;
        ccctl(&data, &["workspace", "link-repo", "default", "octo/project"])?;
        let conversation = ccctl(&data, &["conversation", "new", "--repo", "demo", "--worktree-backend", "copy"])?;
        worlds.push((supervisor, data, conversation.trim().to_owned()));
    }
    let start_run = |n: usize, adapter: &str| -> anyhow::Result<String> {
        let (_, data, conversation) = &worlds[n];
        let args = ["run", "start", "--conversation", conversation, "--adapter", adapter, "--network", "on"];
        Ok(ccctl(data, &args)?.trim().to_owned())
    };
    let data = worlds[0].1.clone();
    let run = start_run(0, "claude-code")?;
    let socket = data.join("gateway/runs").join(&run).join("agent.sock");
    if !socket.exists() {
        bail!("the run's agent socket is missing: {}", socket.display());
    }
    let address = format!("unix:{}", path_str(&socket)?);

    // The hook.
    let hook = sibling("cc-hook")?;
    let (mut decided, mut floor) = (Vec::new(), Vec::new());
    for i in 0..rounds(WARM_UP) + rounds(SAMPLES) {
        let d = hook_once(&hook, &address)?;
        let t = Instant::now();
        Command::new("/bin/true").status()?;
        if i >= rounds(WARM_UP) {
            decided.push(d);
            floor.push(t.elapsed());
        }
    }
    let (decided, floor) = (stats(decided), stats(floor));
    report("cc-hook: process start to an allowed Bash call", &decided, Duration::from_millis(10));
    report("exec of /bin/true (the floor for any process)", &floor, Duration::from_millis(10));
    summary::row_under(
        "adapters",
        "`cc-hook` decision, from process start",
        &format!("exec of `/bin/true` {}", summary::time(floor.median)),
        Duration::from_millis(10),
        decided.median,
    );

    // The MCP round trip, against the same POST straight to the stand-in.
    let mut mcp = Mcp::start(&address)?;
    let init = mcp.call(json!({ "jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": { "name": "cc-bench", "version": "0" } } }))?;
    if init["result"]["protocolVersion"] != "2025-11-25" {
        bail!("cc-mcp negotiated {}", init["result"]["protocolVersion"]);
    }
    mcp.notify(json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }))?;
    // A token that may write issues, as the broker's one-write token may.
    let client = direct_post(&api.base(), &api.grant_issues(&["project"]));
    let (mut through, mut direct) = (Vec::new(), Vec::new());
    for i in 0..rounds(WARM_UP) + rounds(MCP_CALLS) {
        let t = Instant::now();
        let answer = mcp.call(json!({ "jsonrpc": "2.0", "id": i + 1, "method": "tools/call",
            "params": { "name": "create_ticket", "arguments": { "title": format!("bench {i}") } } }))?;
        let elapsed = t.elapsed();
        if answer["result"]["isError"] == true || answer.get("error").is_some() {
            bail!("create_ticket failed: {answer}");
        }
        let t = Instant::now();
        client(i)?;
        if i >= rounds(WARM_UP) {
            through.push(elapsed);
            direct.push(t.elapsed());
        }
    }
    report("MCP create_ticket round trip (gate, token, API)", &stats(through), Duration::from_millis(50));
    report("the same POST straight to the API", &stats(direct), Duration::from_millis(50));
    drop(mcp);

    acp_reads(&worlds[0].1, &worlds[0].2)?;

    // The real CLI, native against unwrapped.
    if Command::new("claude").arg("--version").output().map(|o| o.status.success()).unwrap_or(false) {
        let (mut native, mut unwrapped) = (Vec::new(), Vec::new());
        for _ in 0..rounds(CLI_ROUNDS) {
            for (n, adapter, samples) in [(0, "claude-code", &mut native), (1, "claude-code-nosandbox", &mut unwrapped)]
            {
                // A fresh run each time, so every prompt is the same two turns.
                let run = start_run(n, adapter)?;
                let data = &worlds[n].1;
                let t = Instant::now();
                let out = Command::new(sibling("ccctl")?)
                    .arg("--data-dir")
                    .arg(data)
                    .args(["run", "prompt", &run, "go", "--timeout", "120"])
                    .output()?;
                samples.push(t.elapsed());
                if !out.status.success() {
                    bail!(
                        "the {adapter} prompt failed: {}{}",
                        String::from_utf8_lossy(&out.stdout),
                        String::from_utf8_lossy(&out.stderr)
                    );
                }
                ccctl(data, &["run", "stop", &run])?;
            }
        }
        let (n, u) = (stats(native), stats(unwrapped));
        report("claude -p, 2 turns, native envelope", &n, u.median);
        report("claude -p, 2 turns, unwrapped (nosandbox)", &u, u.median);
        let ratio = n.median.as_secs_f64() / u.median.as_secs_f64();
        println!(
            "{:<44} {:+.1} ms median ({ratio:.3}× unwrapped)",
            "envelope's overhead per prompt",
            (n.median.as_secs_f64() - u.median.as_secs_f64()) * 1000.0,
        );
        summary::row(
            "adapters",
            "a claude-code prompt (the real CLI), native envelope",
            &format!("the same unwrapped, {}", summary::time(u.median)),
            "≤ 1.07×",
            summary::times(ratio),
            Some(ratio <= 1.07),
        );
    } else {
        println!("claude CLI not installed: its turn overhead is not measured (.ci/run installs it)");
    }
    Ok(())
}

/// The ACP stand-in, in the run's overlay envelope, reads a 4 KiB file [`rounds(ACP_READS)`]
/// times and says how long each took.
fn acp_reads(data: &Path, conversation: &str) -> anyhow::Result<()> {
    let work = data.join(format!("conversations/{conversation}/agents/default/work"));
    std::fs::create_dir_all(&work)?;
    let agent = work.join("acp-standin");
    let command = format!("'{}' --quiet", path_str(&agent)?);
    let args = ["run", "start", "--conversation", conversation, "--adapter", "acp", "--agent-command", &command];
    let run = ccctl(data, &args)?.trim().to_owned();
    std::fs::copy(sibling("acp-standin")?, &agent)?;
    std::fs::set_permissions(&agent, std::fs::Permissions::from_mode(0o755))?;
    let shown: serde_json::Value = serde_json::from_str(&ccctl(data, &["--json", "run", "show", &run])?)?;
    let file = Path::new(shown["work_dir"].as_str().context("work_dir")?).join("four.txt");
    let script = format!("time-reads {} {}", rounds(ACP_READS), path_str(&file)?);
    let out = ccctl(data, &["--json", "run", "prompt", &run, &script, "--timeout", "120"])?;
    let said: String = out
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["kind"] == "agent_text")
        .filter_map(|e| e["payload"]["text"].as_str().map(str::to_owned))
        .collect();
    let micros = |key: &str| {
        said.split_whitespace()
            .find_map(|w| w.strip_prefix(key))
            .and_then(|v| v.parse::<u64>().ok())
            .with_context(|| format!("the stand-in did not time its reads: {said}"))
    };
    let (median, p90) = (micros("median_us=")?, micros("p90_us=")?);
    let target = 1000.0;
    println!(
        "{:<44} median {:>9.3} ms  p90 {:>9.3} ms  target {:>7.3} ms  median/target {:.3}",
        "ACP fs/read_text_file round trip, 4 KiB",
        median as f64 / 1000.0,
        p90 as f64 / 1000.0,
        target / 1000.0,
        median as f64 / target
    );
    summary::row(
        "adapters",
        "ACP `fs/read_text_file` round trip, 4 KiB",
        "",
        "< 1 ms",
        summary::time(Duration::from_micros(median)),
        Some((median as f64) < target),
    );
    ccctl(data, &["run", "stop", &run])?;
    Ok(())
}

/// A blocking POST of an issue straight to the stand-in, with `token` (a plain TCP
/// client: the bench has no HTTP client of its own, and the stand-in speaks HTTP/1.1).
fn direct_post(base: &str, token: &str) -> impl Fn(usize) -> anyhow::Result<()> + use<> {
    let address = base.trim_start_matches("http://").to_owned();
    let token = token.to_owned();
    move |i| {
        let body = json!({ "title": format!("direct {i}") }).to_string();
        let mut stream = std::net::TcpStream::connect(&address)?;
        write!(
            stream,
            "POST /repos/octo/project/issues HTTP/1.1\r\nHost: {address}\r\nAuthorization: Bearer {token}\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )?;
        let mut answer = String::new();
        std::io::Read::read_to_string(&mut stream, &mut answer)?;
        if !answer.starts_with("HTTP/1.1 201") {
            bail!("the stand-in answered {}", answer.lines().next().unwrap_or(""));
        }
        Ok(())
    }
}
