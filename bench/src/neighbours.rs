//! A run at its limits, and its neighbours (issue 18's target: another run's read and
//! `GetStatus` stay under 50 ms): the latency of a second run's 4 KiB read and of the
//! supervisor's status while the first run sits at `pids.max`, and while it allocates
//! past `memory.max` again and again, beside the same calls with no hog at all.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;
use cc_proto::supervisor::v1 as pb;

use crate::runs::{ccctl, demo_repo, path_str, read_four_kib};
use crate::scale::rounds;
use crate::summary;
use crate::{report, sibling, start, stats};

const CALLS: usize = 300;
const CONFIG: &str = "[runs.limits]\npids_max = 64\nmemory_max_mb = 160\n";

/// Forks to the limit, then holds its children until the FIFO `release` is closed.
const FORKER: &str = "import os, signal\nkids = []\nfor _ in range(5000):\n    try:\n        pid = os.fork()\n    except OSError:\n        break\n    if pid == 0:\n        signal.pause()\n        os._exit(0)\n    kids.append(pid)\nopen('release').read()\nfor pid in kids:\n    os.kill(pid, 9)\n    os.waitpid(pid, 0)\n";

/// Allocates 512 MiB against a 160 MiB limit, forty times over: each is OOM-killed.
const ALLOCATOR: &str =
    "for i in $(seq 40); do python3 -c 'x = [b\"m\" * (16 << 20) for _ in range(32)]' 2>/dev/null; done; true";

pub fn run() -> anyhow::Result<()> {
    let tmp = tempfile::Builder::new().prefix("cc-bench-neighbours-").tempdir()?;
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755))?;
    let repo = demo_repo(&tmp.path().join("repo"))?;
    let data = tmp.path().join("d0");
    std::fs::create_dir(&data)?;
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o700))?;
    std::fs::write(data.join("config.toml"), CONFIG)?;
    let (_supervisor, _) = start(tmp.path(), 0)?;
    ccctl(&data, &["repo", "add", path_str(&repo)?, "--name", "demo"])?;
    let conversation = ccctl(&data, &["conversation", "new", "--repo", "demo", "--worktree-backend", "copy"])?;
    let start_run =
        || anyhow::Ok(ccctl(&data, &["run", "start", "--conversation", conversation.trim()])?.trim().to_owned());
    let (hog, other) = (start_run()?, start_run()?);
    let shown: serde_json::Value = serde_json::from_str(&ccctl(&data, &["--json", "run", "show", &hog])?)?;
    let work_dir = Path::new(shown["work_dir"].as_str().context("work_dir")?).to_owned();
    let socket = data.join("sock/api.sock");
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let measure = || runtime.block_on(calls(&socket, &other));

    let (quiet_read, quiet_status) = measure()?;

    // At pids.max: the FIFO opens once the forker has been refused a process.
    let release = work_dir.join("release");
    nix::unistd::mkfifo(&release, nix::sys::stat::Mode::from_bits_truncate(0o666))?;
    let forker = bash(&data, &hog, &format!("python3 -c \"{FORKER}\""))?;
    let holder = std::fs::OpenOptions::new().write(true).open(&release)?;
    let (pids_read, pids_status) = measure()?;
    drop(holder);
    forker.wait_with_output()?;

    // Past memory.max, over and over, for as long as the calls take.
    let mut allocator = bash(&data, &hog, ALLOCATOR)?;
    let (memory_read, memory_status) = measure()?;
    let still_allocating = allocator.try_wait()?.is_none();
    allocator.wait()?;

    let target = Duration::from_millis(50);
    let worst = stats(pids_read.clone()).median.max(stats(memory_read.clone()).median);
    summary::row(
        "limits",
        "another run's read while one hogs (pids.max, OOM)",
        &format!("no hog {}", summary::time(stats(quiet_read.clone()).median)),
        "< 50 ms",
        summary::time(worst),
        Some(worst < target),
    );
    report("other run's read, no hog", &stats(quiet_read), target);
    report("other run's read, a run at pids.max", &stats(pids_read), target);
    report("other run's read, a run OOM-killed again and again", &stats(memory_read), target);
    report("GetStatus, no hog", &stats(quiet_status), target);
    report("GetStatus, a run at pids.max", &stats(pids_status), target);
    report("GetStatus, a run OOM-killed again and again", &stats(memory_status), target);
    if !still_allocating {
        println!("(the allocating run finished before the calls did: the last figures are partly without it)");
    }
    Ok(())
}

/// rounds(CALLS) reads by `run` and as many GetStatus calls, timed one by one.
async fn calls(socket: &Path, run: &str) -> anyhow::Result<(Vec<Duration>, Vec<Duration>)> {
    let mut client = cc_client::connect(socket).await?;
    let (mut reads, mut statuses) = (Vec::with_capacity(rounds(CALLS)), Vec::with_capacity(rounds(CALLS)));
    for _ in 0..rounds(CALLS) {
        let t = Instant::now();
        read_four_kib(&mut client.runs, run).await?;
        reads.push(t.elapsed());
        let t = Instant::now();
        client.system.get_status(pb::GetStatusRequest {}).await?;
        statuses.push(t.elapsed());
    }
    Ok((reads, statuses))
}

fn bash(data: &Path, run: &str, command: &str) -> anyhow::Result<std::process::Child> {
    Ok(Command::new(sibling("ccctl")?)
        .arg("--data-dir")
        .arg(data)
        .args(["tool", run, "bash", "--", command])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?)
}
