//! A run's tool calls and the main job, measured with the real binaries:
//!
//! * `read` of a 4 KiB file through the client library → supervisor (gate) → runner:
//!   the round trip, and calls per second on one run (one client, then two at once);
//! * the runner's memory once idle;
//! * `ccctl exec -- true` end to end (against a running supervisor, and cold, with its
//!   own embedded one) beside raw bubblewrap and srt running the same `true`.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use cc_proto::supervisor::v1 as pb;
use cc_proto::supervisor::v1::call_tool_request::Tool;
use cc_proto::supervisor::v1::call_tool_response::Event;
use cc_proto::tools::v1 as rn;
use cc_proto::tools::v1::tool_result::Result as Outcome;
use tokio_stream::StreamExt;

use crate::sandbox::time_command_n;
use crate::scale::rounds;
use crate::summary;
use crate::{report, sibling, start, stats};

const READS: usize = 3_000;
const WARM_UP: usize = 200;
const EXECS: usize = 10;

pub fn run(srt: Option<String>) -> anyhow::Result<()> {
    let tmp = tempfile::Builder::new().prefix("cc-bench-runs-").tempdir()?;
    // As root, runs belong to the service user, who must be able to reach the data dir.
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755))?;
    let repo = demo_repo(&tmp.path().join("repo"))?;
    let (_supervisor, _) = start(tmp.path(), 0)?;
    let data = tmp.path().join("d0");
    ccctl(&data, &["repo", "add", path_str(&repo)?, "--name", "demo"])?;
    let conversation = ccctl(&data, &["conversation", "new", "--repo", "demo", "--worktree-backend", "copy"])?;
    let run_id = ccctl(&data, &["run", "start", "--conversation", conversation.trim()])?.trim().to_owned();

    let socket = data.join("sock/api.sock");
    // One thread, as ccctl has: the client's own thread hand-offs are not the path measured.
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let (one, wall_one, wall_two, get_run, runner_pid) = runtime.block_on(async {
        let mut client = cc_client::connect_runs(&socket).await?;
        let mut samples = Vec::with_capacity(rounds(READS));
        for _ in 0..rounds(WARM_UP) {
            read_four_kib(&mut client, &run_id).await?;
        }
        let t = Instant::now();
        for _ in 0..rounds(READS) {
            let call = Instant::now();
            read_four_kib(&mut client, &run_id).await?;
            samples.push(call.elapsed());
        }
        let wall_one = t.elapsed();
        // Two clients at once, on two connections.
        let t = Instant::now();
        let mut tasks = Vec::new();
        for _ in 0..2 {
            let (socket, run_id) = (socket.clone(), run_id.clone());
            tasks.push(tokio::spawn(async move {
                let mut client = cc_client::connect_runs(&socket).await?;
                for _ in 0..rounds(READS) / 2 {
                    read_four_kib(&mut client, &run_id).await?;
                }
                anyhow::Ok(())
            }));
        }
        for task in tasks {
            task.await??;
        }
        let wall_two = t.elapsed();
        // For comparison, a unary call that stops at the supervisor.
        let mut get_run = Vec::with_capacity(rounds(READS));
        for _ in 0..rounds(READS) {
            let call = Instant::now();
            client.get_run(pb::GetRunRequest { run_id: run_id.clone() }).await?;
            get_run.push(call.elapsed());
        }
        let run = client.get_run(pb::GetRunRequest { run_id: run_id.clone() }).await?.into_inner();
        anyhow::Ok((samples, wall_one, wall_two, get_run, run.run.map_or(0, |r| r.runner_pid)))
    })?;
    let (one, get_run) = (stats(one), stats(get_run));
    report("`read` 4 KiB: client → supervisor → runner", &one, Duration::from_millis(1));
    report("for comparison: GetRun (supervisor only, unary)", &get_run, Duration::from_millis(1));
    summary::row_under(
        "runs",
        "`read` 4 KiB round trip",
        &format!("`GetRun` {}", summary::time(get_run.median)),
        Duration::from_millis(1),
        one.median,
    );
    let per_second = |wall: Duration| rounds(READS) as f64 / wall.as_secs_f64();
    println!(
        "`read` 4 KiB calls per second on one run: {:.0} with one client, {:.0} with two (target at least 2000)",
        per_second(wall_one),
        per_second(wall_two)
    );
    summary::row(
        "runs",
        "`read` calls per second, one client",
        &format!("two clients {:.0}", per_second(wall_two)),
        "≥ 2,000",
        format!("{:.0}", per_second(wall_one)),
        Some(per_second(wall_one) >= 2000.0),
    );
    // Idle: the calls are over; give the runner a moment with nothing to do.
    std::thread::sleep(Duration::from_millis(200));
    let rss = vm_rss_kib(runner_pid)?;
    println!(
        "runner idle after {} calls: {:.2} MiB RSS (target under 15 MiB)",
        rounds(READS) * 2 + rounds(WARM_UP),
        rss as f64 / 1024.0
    );
    let rss_mib = rss as f64 / 1024.0;
    summary::row("runs", "runner idle memory", "", "< 15 MiB", format!("{rss_mib:.1} MiB"), Some(rss_mib < 15.0));
    per_command(&data, &run_id)?;
    ccctl(&data, &["run", "stop", &run_id])?;

    let exec = |data: &Path| {
        let t = Instant::now();
        ccctl(data, &["exec", "--repo", path_str(&repo)?, "--worktree-backend", "copy", "--", "true"])?;
        anyhow::Ok(t.elapsed())
    };
    let warm: Vec<Duration> = (0..rounds(EXECS) + 1).map(|_| exec(&data)).collect::<Result<_, _>>()?;
    let cold_data = tmp.path().join("cold");
    let cold: Vec<Duration> = (0..rounds(EXECS) / 2 + 1).map(|_| exec(&cold_data)).collect::<Result<_, _>>()?;
    let bwrap = time_command_n(&["bwrap", "--unshare-all", "--ro-bind", "/", "/", "true"], rounds(EXECS))?;
    let warm = stats(warm[1..].to_vec());
    let cold = stats(cold[1..].to_vec());
    report("`ccctl exec -- true`, supervisor running", &warm, Duration::from_millis(100));
    report("`ccctl exec -- true`, cold (embedded supervisor)", &cold, Duration::from_millis(300));
    let bwrap = stats(bwrap);
    report("`true` under raw bwrap --unshare-all --ro-bind / /", &bwrap, Duration::from_millis(5));
    let theirs = match srt.filter(|s| Path::new(s).exists()) {
        Some(srt) => {
            let theirs = stats(time_command_n(&[&srt, "true"], rounds(EXECS))?);
            report("`true` under srt (sandbox-runtime)", &theirs, Duration::from_millis(5));
            let ratio = |ours: Duration| theirs.median.as_secs_f64() / ours.as_secs_f64();
            println!(
                "ratio srt / `ccctl exec`: {:.1} with a supervisor running (target at least 20), {:.1} cold (target at least 6)",
                ratio(warm.median),
                ratio(cold.median)
            );
            Some(theirs.median)
        }
        None => {
            println!("srt: not installed (bench/run.sh installs it with npm); no comparison");
            None
        }
    };
    for (what, ours, faster) in
        [("`ccctl exec -- true`, supervisor running", &warm, 20.0), ("`ccctl exec -- true`, cold", &cold, 6.0)]
    {
        let against_bwrap = ours.median.as_secs_f64() / bwrap.median.as_secs_f64();
        let (anchor, measured, met) = match theirs {
            Some(srt) => {
                let ratio = srt.as_secs_f64() / ours.median.as_secs_f64();
                (
                    format!("srt {}; raw bwrap {}", summary::time(srt), summary::time(bwrap.median)),
                    format!(
                        "{ratio:.1}× faster than srt; {} ({against_bwrap:.1}× raw bwrap)",
                        summary::time(ours.median)
                    ),
                    Some(ratio >= faster),
                )
            }
            None => (
                format!("raw bwrap {} (srt not installed)", summary::time(bwrap.median)),
                format!("{} ({against_bwrap:.1}× raw bwrap)", summary::time(ours.median)),
                None,
            ),
        };
        summary::row("runs", what, &anchor, &format!("≥ {faster:.0}× faster than srt"), measured, met);
    }
    Ok(())
}

pub(crate) async fn read_four_kib(client: &mut cc_client::Runs, run_id: &str) -> anyhow::Result<()> {
    let tool = Tool::Read(rn::ReadArgs { path: b"four.txt".to_vec(), offset: 0, limit: 0 });
    let request = pb::CallToolRequest { run_id: run_id.to_owned(), tool: Some(tool) };
    let mut stream = client.call_tool(request).await?.into_inner();
    let mut bytes = 0;
    while let Some(event) = stream.next().await {
        if let Some(Event::Result(rn::ToolResult { result: Some(Outcome::Read(r)) })) = event?.event {
            bytes = r.text.len();
        }
    }
    if bytes != 4096 {
        bail!("read returned {bytes} bytes, expected 4096");
    }
    Ok(())
}

/// A small repository with a 4 KiB text file, committed.
pub(crate) fn demo_repo(dir: &Path) -> anyhow::Result<PathBuf> {
    std::fs::create_dir_all(dir)?;
    let line = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcde\n"; // 64 bytes
    std::fs::write(dir.join("four.txt"), line.repeat(64))?;
    for args in [&["init", "-q"][..], &["add", "-A"], &["commit", "-qm", "bench"]] {
        let status = Command::new("git")
            .args(["-c", "user.name=bench", "-c", "user.email=bench@localhost"])
            .args(args)
            .current_dir(dir)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("HOME", dir)
            .status()?;
        if !status.success() {
            bail!("git {args:?} failed in {}", dir.display());
        }
    }
    Ok(dir.to_owned())
}

pub(crate) fn path_str(p: &Path) -> anyhow::Result<&str> {
    p.to_str().context("the bench's temporary paths must be UTF-8")
}

/// What an agent pays on every command: a whole `ccctl tool RUN bash -- true` process
/// (client start, connect, gate, sandboxd, launch, exit report), against a bare
/// `bwrap --unshare-all` process, in alternating pairs so that both see the same machine.
/// Each call asks for its `--timings`, and the median of each stage is printed.
fn per_command(data: &Path, run_id: &str) -> anyhow::Result<()> {
    let bare_argv = ["bwrap", "--unshare-all", "--ro-bind", "/", "/", "true"];
    let (mut tool, mut bare) = (Vec::new(), Vec::new());
    let mut stages = Stages::default();
    for pair in 0..2 + rounds(30) {
        let t = Instant::now();
        let timings = timed_tool_call(data, run_id)?;
        let tool_time = t.elapsed();
        let t = Instant::now();
        let status = Command::new(bare_argv[0]).args(&bare_argv[1..]).status()?;
        if !status.success() {
            bail!("{bare_argv:?} failed: {status}");
        }
        if pair >= 2 {
            tool.push(tool_time);
            bare.push(t.elapsed());
            stages.add(tool_time, &timings)?;
        }
    }
    let (tool, bare) = (stats(tool), stats(bare));
    report("`ccctl tool RUN bash -- true`, whole process", &tool, bare.median);
    report("a bare `bwrap --unshare-all` process (anchor)", &bare, bare.median);
    stages.print();
    let ratio = tool.median.as_secs_f64() / bare.median.as_secs_f64();
    println!("per-command cost: {ratio:.2}× a bare bwrap process (target ≤ 1.0)");
    summary::row(
        "runs",
        "a command's whole cost: `ccctl tool RUN bash -- true`",
        &format!("a bare `bwrap --unshare-all` process {}", summary::time(bare.median)),
        "≤ 1.0×",
        format!("{} ({ratio:.2}×)", summary::time(tool.median)),
        Some(ratio <= 1.0),
    );
    Ok(())
}

/// One `ccctl --json tool RUN bash --timings -- true`: its timings line.
fn timed_tool_call(data: &Path, run_id: &str) -> anyhow::Result<serde_json::Value> {
    let out = ccctl_output(data, &["--json", "tool", run_id, "bash", "--timings", "--", "true"])?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    let line = stderr.lines().rev().find(|l| l.contains("\"timings\"")).context("ccctl printed no timings")?;
    let parsed: serde_json::Value = serde_json::from_str(line).context("ccctl's timings line")?;
    Ok(parsed["timings"].clone())
}

/// A command's stages, each call's, in the order they happen.
#[derive(Default)]
struct Stages {
    rows: Vec<(&'static str, Vec<Duration>)>,
    warm: usize,
    calls: usize,
}

impl Stages {
    fn add(&mut self, whole: Duration, t: &serde_json::Value) -> anyhow::Result<()> {
        let get = |key: &str| {
            t[key].as_u64().map(Duration::from_micros).with_context(|| format!("no {key} in ccctl's timings"))
        };
        let (before, call, supervisor) = (get("before_call_micros")?, get("call_micros")?, get("supervisor_micros")?);
        let (gate, prepare) = (get("gate_micros")?, get("sandboxd_prepare_micros")?);
        let (command, exit_report) = (get("command_micros")?, get("sandboxd_report_micros")?);
        let stages = [
            ("ccctl's process: exec, load, exit", whole.saturating_sub(before + call)),
            ("ccctl: arguments, runtime, connect", before),
            ("the call's transport, both ways", call.saturating_sub(supervisor)),
            ("the gate", gate),
            // The launch's answer travels back while the command already runs, so the
            // round trip is what the supervisor's whole leaves once sandboxd's own stages
            // (one after another) and the gate are taken out.
            (
                "supervisor <-> sandboxd, its own work",
                supervisor.saturating_sub(gate + prepare + command + exit_report),
            ),
            ("sandboxd: the envelope checked, handed its command", prepare),
            ("the command in the envelope (init, true, exit)", command),
            ("sandboxd: the exit reported", exit_report),
        ];
        if self.rows.is_empty() {
            self.rows = stages.iter().map(|(name, _)| (*name, Vec::new())).collect();
        }
        for ((_, times), (_, took)) in self.rows.iter_mut().zip(stages) {
            times.push(took);
        }
        self.calls += 1;
        self.warm += usize::from(t["warm_envelope"].as_bool() == Some(true));
        Ok(())
    }

    fn print(&self) {
        println!(
            "where a command's time goes (medians of {} calls, {} in an envelope made ahead):",
            self.calls, self.warm
        );
        for (name, times) in &self.rows {
            let median = if times.is_empty() { Duration::ZERO } else { stats(times.clone()).median };
            println!("  {name:<52} {:>8.3} ms", median.as_secs_f64() * 1e3);
        }
    }
}

pub(crate) fn ccctl(data: &Path, args: &[&str]) -> anyhow::Result<String> {
    Ok(String::from_utf8_lossy(&ccctl_output(data, args)?.stdout).into_owned())
}

/// `ccctl` on `data`, its output whole; an error, with its stderr, when it failed.
fn ccctl_output(data: &Path, args: &[&str]) -> anyhow::Result<Output> {
    let out: Output = Command::new(sibling("ccctl")?).arg("--data-dir").arg(data).args(args).output()?;
    if !out.status.success() {
        bail!("ccctl {args:?}: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(out)
}

fn vm_rss_kib(pid: u32) -> anyhow::Result<u64> {
    crate::vm_rss_kib(Path::new(&format!("/proc/{pid}"))).context("the runner is gone, or has no VmRSS")
}
