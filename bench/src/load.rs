//! Twenty live runs at once (issue 18): the latency of read, write and bash while
//! every run makes them, and how long after a kill -9 of sandboxd every run's bash
//! works again (target: under 1 s).

use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use cc_proto::supervisor::v1 as pb;
use cc_proto::supervisor::v1::call_tool_request::Tool;
use cc_proto::supervisor::v1::call_tool_response::Event;
use cc_proto::tools::v1 as rn;
use tokio_stream::StreamExt;

use crate::runs::{ccctl, demo_repo, path_str, read_four_kib};
use crate::scale::rounds;
use crate::summary;
use crate::{report, start, stats};

const RUNS: usize = 20;
const ROUNDS: usize = 40;
const KILLS: usize = 5;

pub fn run() -> anyhow::Result<()> {
    let tmp = tempfile::Builder::new().prefix("cc-bench-load-").tempdir()?;
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755))?;
    let repo = demo_repo(&tmp.path().join("repo"))?;
    let (supervisor, data, runs) = twenty_runs(tmp.path(), &repo, 0)?;
    let socket = data.join("sock/api.sock");
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;

    // Every run at once: read, write, bash, round after round.
    let (reads, writes, bashes, wall) = runtime.block_on(async {
        let started = Instant::now();
        let mut tasks = Vec::new();
        for run in runs.clone() {
            let socket = socket.clone();
            tasks.push(tokio::spawn(async move {
                let mut client = cc_client::connect_runs(&socket).await?;
                let mut samples: [Vec<Duration>; 3] = Default::default();
                for round in 0..rounds(ROUNDS) {
                    let t = Instant::now();
                    read_four_kib(&mut client, &run).await?;
                    samples[0].push(t.elapsed());
                    let t = Instant::now();
                    let write = rn::WriteArgs { path: b"out.txt".to_vec(), content: format!("{round}\n").into_bytes() };
                    call(&mut client, &run, Tool::Write(write)).await?;
                    samples[1].push(t.elapsed());
                    let t = Instant::now();
                    bash(&mut client, &run, "echo ok").await?;
                    samples[2].push(t.elapsed());
                }
                anyhow::Ok(samples)
            }));
        }
        let mut all: [Vec<Duration>; 3] = Default::default();
        for task in tasks {
            for (into, from) in all.iter_mut().zip(task.await??) {
                into.extend(from);
            }
        }
        let [reads, writes, bashes] = all;
        anyhow::Ok((reads, writes, bashes, started.elapsed()))
    })?;
    let calls = reads.len() + writes.len() + bashes.len();
    report("read 4 KiB, 20 runs at once", &stats(reads), Duration::from_millis(10));
    report("write, 20 runs at once", &stats(writes), Duration::from_millis(10));
    report("bash `echo ok`, 20 runs at once", &stats(bashes), Duration::from_millis(100));
    println!(
        "{calls} calls in {:.2} s: {:.0} calls/s over 20 runs",
        wall.as_secs_f64(),
        calls as f64 / wall.as_secs_f64()
    );

    drop(supervisor);

    // kill -9 of sandboxd, once per supervisor (a sandboxd killed again within a minute
    // waits out a doubled backoff, by design): until every run's bash works again,
    // each run retrying.
    let mut recoveries = Vec::new();
    for n in 1..=rounds(KILLS) {
        let (_supervisor, data, runs) = twenty_runs(tmp.path(), &repo, n)?;
        let socket = data.join("sock/api.sock");
        runtime.block_on(async {
            let mut client = cc_client::connect_runs(&socket).await?;
            for run in &runs {
                bash(&mut client, run, "true").await?;
            }
            anyhow::Ok(())
        })?;
        let pid = sandboxd_pid(&data)?;
        let killed = Instant::now();
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::Signal::SIGKILL)?;
        runtime.block_on(async {
            let mut tasks = Vec::new();
            for run in runs.clone() {
                let socket = socket.clone();
                tasks.push(tokio::spawn(async move {
                    let mut client = cc_client::connect_runs(&socket).await?;
                    for _ in 0..200 {
                        if bash(&mut client, &run, "echo ok").await.is_ok() {
                            return anyhow::Ok(());
                        }
                    }
                    bail!("run {run}'s bash never worked again")
                }));
            }
            for task in tasks {
                task.await??;
            }
            anyhow::Ok(())
        })?;
        recoveries.push(killed.elapsed());
    }
    let recoveries = stats(recoveries);
    report("kill -9 sandboxd → every run's bash works", &recoveries, Duration::from_secs(1));
    summary::row_under(
        "load",
        "kill -9 of sandboxd until every live run's bash works",
        "",
        Duration::from_secs(1),
        recoveries.median,
    );
    Ok(())
}

/// A supervisor (the `n`th on `root`) with `repo` and twenty live runs of one conversation.
fn twenty_runs(
    root: &std::path::Path,
    repo: &std::path::Path,
    n: usize,
) -> anyhow::Result<(crate::Running, std::path::PathBuf, Vec<String>)> {
    let (supervisor, _) = start(root, n)?;
    let data = root.join(format!("d{n}"));
    ccctl(&data, &["repo", "add", path_str(repo)?, "--name", "demo"])?;
    let conversation = ccctl(&data, &["conversation", "new", "--repo", "demo", "--worktree-backend", "copy"])?;
    let runs = (0..rounds(RUNS))
        .map(|_| Ok(ccctl(&data, &["run", "start", "--conversation", conversation.trim()])?.trim().to_owned()))
        .collect::<anyhow::Result<_>>()?;
    Ok((supervisor, data, runs))
}

async fn call(client: &mut cc_client::Runs, run_id: &str, tool: Tool) -> anyhow::Result<()> {
    let request = pb::CallToolRequest { run_id: run_id.to_owned(), tool: Some(tool) };
    let mut stream = client.call_tool(request).await?.into_inner();
    while let Some(event) = stream.next().await {
        event?;
    }
    Ok(())
}

async fn bash(client: &mut cc_client::Runs, run_id: &str, command: &str) -> anyhow::Result<()> {
    let request = pb::CallToolRequest {
        run_id: run_id.to_owned(),
        tool: Some(Tool::Bash(pb::BashArgs { command: command.into(), timeout_seconds: 30 })),
    };
    let mut stream = client.call_tool(request).await?.into_inner();
    let mut code = None;
    while let Some(event) = stream.next().await {
        if let Some(Event::Exit(exit)) = event?.event {
            code = exit.code;
        }
    }
    if code != Some(0) {
        bail!("bash exited with {code:?}");
    }
    Ok(())
}

fn sandboxd_pid(data: &std::path::Path) -> anyhow::Result<u32> {
    let status: serde_json::Value = serde_json::from_str(&ccctl(data, &["--json", "status"])?)?;
    status["helpers"]
        .as_array()
        .and_then(|h| h.iter().find(|h| h["name"] == "sandboxd"))
        .and_then(|h| h["pid"].as_u64())
        .map(|pid| pid as u32)
        .context("no sandboxd pid in ccctl status")
}
