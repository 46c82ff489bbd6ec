//! The claude-code adapter's costs (issue 22):
//!
//! * the hook's decision latency, from the start of a `cc-hook` process to its answer,
//!   for an allowed Bash call: under 10 ms median, since it runs before every Bash
//!   call. Measured on the run's agent socket from the host (the envelope adds its
//!   loopback bridge, ~0.1 ms); beside it, the floor of any process, `/bin/true`.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::runs::{ccctl, path_str};
use crate::{report, sibling, start, stats};

const WARM_UP: usize = 20;
const SAMPLES: usize = 300;

/// What Claude Code gives its PreToolUse hook for a Bash call.
const HOOK_INPUT: &str = r#"{"session_id":"bench","cwd":"/w","permission_mode":"bypassPermissions","hook_event_name":"PreToolUse","tool_name":"Bash","tool_input":{"command":"ls -la src","description":"list"},"tool_use_id":"toolu_bench"}"#;

fn hook_once(hook: &std::path::Path, socket: &str) -> anyhow::Result<Duration> {
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

pub fn run() -> anyhow::Result<()> {
    let tmp = tempfile::Builder::new().prefix("cc-bench-adapters-").tempdir()?;
    let root = std::fs::canonicalize(tmp.path())?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755))?;
    let repo = crate::runs::demo_repo(&root.join("repo"))?;
    let (_supervisor, _) = start(&root, 0)?;
    let data = root.join("d0");
    ccctl(&data, &["repo", "add", path_str(&repo)?, "--name", "demo"])?;
    let conversation = ccctl(&data, &["conversation", "new", "--repo", "demo", "--worktree-backend", "copy"])?;
    let run = ccctl(&data, &["run", "start", "--conversation", conversation.trim(), "--adapter", "claude-code"])?
        .trim()
        .to_owned();
    let socket = data.join("gateway/runs").join(&run).join("agent.sock");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !socket.exists() {
        if Instant::now() > deadline {
            bail!("the run's agent socket did not appear");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let address = format!("unix:{}", path_str(&socket)?);
    let hook = sibling("cc-hook")?;
    let (mut decided, mut floor) = (Vec::new(), Vec::new());
    for i in 0..WARM_UP + SAMPLES {
        let d = hook_once(&hook, &address)?;
        let t = Instant::now();
        Command::new("/bin/true").status()?;
        if i >= WARM_UP {
            decided.push(d);
            floor.push(t.elapsed());
        }
    }
    report("cc-hook: process start to an allowed Bash call", &stats(decided), Duration::from_millis(10));
    report("exec of /bin/true (the floor for any process)", &stats(floor), Duration::from_millis(10));
    Ok(())
}
