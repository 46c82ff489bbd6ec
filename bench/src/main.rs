//! Benchmarks that run the real binaries. `bench/run.sh` builds them in release mode and
//! runs every benchmark; each prints its figures and the ratio to its target.
//!
//! * `supervisor`: cold start to `READY=1`, and the client API round trip.
//! * `sandbox`: launch latency of `true` through sandboxd's API vs raw bubblewrap vs
//!   srt vs no sandbox, and the memory of an idle envelope.
//! * `gate`: command classification throughput on the policy corpus, and the gate's
//!   round trip over the socket.
//! * `search`: the runner's search over 50,000 files vs ripgrep on the same tree.
//! * `runs`: a `read` tool call's round trip and calls per second, the runner's idle
//!   memory, and `ccctl exec -- true` vs raw bubblewrap vs srt.
//! * `limits`: a launch with the run's cgroup vs without, and another run's read and
//!   the status call while one run sits at its process or memory limit.
//! * `load`: read, write and bash under 20 live runs' load, and the time from a kill
//!   -9 of sandboxd until every run's bash works again.
//! * `git`: a 100 MB push and fetch through the git gateway vs straight to the same
//!   upstream, the gateway's peak memory, and the latency a push that sends nothing adds.
//! * `egress`: 1 GiB through a run's CONNECT tunnel vs straight over loopback (and
//!   through srt's proxy), and the connect latency the proxy adds.
//! * `adapters`: the claude-code hook's decision latency.
//! * `models`: the model door's latency to first byte and its streaming throughput vs
//!   straight to the same provider.
//! * `hostile`: the supervisor's memory and status latency, and a quiet run's read,
//!   while a Claude Code stand-in attacks its adapter; its idle memory with 20 runs.
//! * `microvm`: a microVM's boot to its agent, `exec true` through the agent, and
//!   QEMU's memory.
//! * `terminals`: a hosted terminal's keystroke echo and `cat` throughput against a
//!   local pty.
//! * `paths`: opening beneath a root by cc-host's component walk (where `openat2` is
//!   filtered) vs `openat2` vs a plain `openat`.
#![forbid(unsafe_code)]

use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::scale::rounds;
use anyhow::{Context, bail};
use cc_proto::supervisor::v1 as pb;

mod adapters;
mod all;
mod corpus;
mod egress;
mod gate;
mod git;
mod hostile;
mod limits;
mod load;
mod microvm;
mod models;
mod neighbours;
mod paths;
mod runs;
mod sandbox;
mod scale;
mod search;
mod summary;
mod terminals;

fn main() -> anyhow::Result<()> {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    scale::take_quick_flag(&mut args);
    let which = args.first().map_or("supervisor", String::as_str);
    if which == "all" {
        return all::run(&args[1..]);
    }
    if which == "fold-summary" {
        let [_, summary, page] = &args[..] else {
            bail!("usage: cc-bench fold-summary SUMMARY PAGE (SUMMARY: what `cc-bench all --summary` wrote)")
        };
        return summary::fold_files(summary.as_ref(), page.as_ref());
    }
    let argument = args.get(1).cloned();
    match which {
        "supervisor" => supervisor(),
        "sandbox" => sandbox::run(argument),
        "gate" => gate::run(),
        "search" => search::run(),
        "runs" => runs::run(argument),
        "limits" => limits::run().and_then(|()| neighbours::run()),
        "load" => load::run(),
        "git" => git::run(),
        "egress" => egress::run(argument),
        "adapters" => adapters::run(),
        "models" => models::run(),
        "hostile" => hostile::run(),
        "terminals" => terminals::run(),
        "microvm" => microvm::run(),
        "paths" => paths::run(),
        other => bail!("unknown benchmark {other:?} (known: all, {})", all::BENCHMARKS.join(", ")),
    }
}

pub(crate) fn sibling(name: &str) -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let path = exe.with_file_name(name);
    if !path.is_file() {
        bail!("{} is missing: build with `cargo build --release --workspace --bins`", path.display());
    }
    Ok(path)
}

/// A supervisor started for measuring; stopped on drop.
pub(crate) struct Running {
    child: std::process::Child,
}

impl Running {
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let _ = self.child.wait();
    }
}

/// Starts a supervisor on a fresh data dir; returns it and the time to `READY=1`.
pub(crate) fn start(root: &Path, n: usize) -> anyhow::Result<(Running, Duration)> {
    let data = root.join(format!("d{n}"));
    let notify_path = root.join(format!("n{n}.sock"));
    let notify = UnixDatagram::bind(&notify_path)?;
    notify.set_read_timeout(Some(Duration::from_secs(10)))?;
    let started = Instant::now();
    let child = Command::new(sibling("cc-supervisor")?)
        .arg("--data-dir")
        .arg(&data)
        .env("NOTIFY_SOCKET", &notify_path)
        .env("CC_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()?;
    let running = Running { child };
    let mut buf = [0u8; 64];
    let len = notify.recv(&mut buf).context("no READY=1 within 10 s")?;
    let elapsed = started.elapsed();
    if &buf[..len] != b"READY=1" {
        bail!("unexpected notification {:?}", String::from_utf8_lossy(&buf[..len]));
    }
    Ok((running, elapsed))
}

pub(crate) struct Stats {
    pub(crate) median: Duration,
    pub(crate) p90: Duration,
    pub(crate) p99: Duration,
    min: Duration,
}

pub(crate) fn stats(mut samples: Vec<Duration>) -> Stats {
    samples.sort();
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
    Stats { median: at(0.5), p90: at(0.9), p99: at(0.99), min: samples[0] }
}

pub(crate) fn report(name: &str, s: &Stats, target: Duration) {
    println!(
        "{name:<44} median {:>9.3} ms  p90 {:>9.3} ms  p99 {:>9.3} ms  min {:>9.3} ms  target {:>7.3} ms  median/target {:.3}",
        ms(s.median),
        ms(s.p90),
        ms(s.p99),
        ms(s.min),
        ms(target),
        s.median.as_secs_f64() / target.as_secs_f64()
    );
}

/// VmRSS in KiB of the process whose /proc directory is `proc_dir`.
pub(crate) fn vm_rss_kib(proc_dir: &Path) -> Option<u64> {
    let status = std::fs::read_to_string(proc_dir.join("status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

pub(crate) fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn supervisor() -> anyhow::Result<()> {
    let tmp = tempfile::Builder::new().prefix("cc-bench-").tempdir()?;
    const COLD_STARTS: usize = 20;
    let mut cold = Vec::with_capacity(COLD_STARTS);
    for n in 0..rounds(COLD_STARTS) {
        let (running, elapsed) = start(tmp.path(), n)?;
        cold.push(elapsed);
        drop(running);
    }
    let cold = stats(cold);
    let ready_target = Duration::from_millis(20);
    report("supervisor cold start to READY=1", &cold, ready_target);
    summary::row(
        "supervisor",
        "cold start to `READY=1`",
        "",
        "≤ 20 ms",
        summary::time(cold.median),
        Some(cold.median <= ready_target),
    );

    let (_running, _) = start(tmp.path(), COLD_STARTS)?;
    let socket = tmp.path().join(format!("d{COLD_STARTS}/sock/api.sock"));
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let (status, list) = runtime.block_on(async {
        let mut client = cc_client::connect(&socket).await?;
        let mut status = Vec::new();
        let mut list = Vec::new();
        for i in 0..rounds(200) + rounds(2_000) {
            let t = Instant::now();
            client.system.get_status(pb::GetStatusRequest {}).await?;
            if i >= rounds(200) {
                status.push(t.elapsed());
            }
        }
        for i in 0..rounds(200) + rounds(2_000) {
            let t = Instant::now();
            client.system.list_helpers(pb::ListHelpersRequest {}).await?;
            if i >= rounds(200) {
                list.push(t.elapsed());
            }
        }
        anyhow::Ok((status, list))
    })?;
    let (status, list) = (stats(status), stats(list));
    report("GetStatus round trip (3 helpers' last health answers)", &status, Duration::from_millis(2));
    report("ListHelpers round trip", &list, Duration::from_millis(2));
    summary::row_under(
        "supervisor",
        "`GetStatus` round trip",
        &format!("`ListHelpers` {}", summary::time(list.median)),
        Duration::from_millis(2),
        status.median,
    );

    // The floor any command-line client pays: fork and exec of a binary that does nothing.
    let mut floor = Vec::new();
    for _ in 0..rounds(50) {
        let t = Instant::now();
        Command::new("/bin/true").status()?;
        floor.push(t.elapsed());
    }
    let floor = stats(floor);
    report("exec of /bin/true (the floor for any CLI)", &floor, Duration::from_millis(2));

    let ccctl = sibling("ccctl")?;
    let mut process = Vec::new();
    for _ in 0..rounds(50) {
        let t = Instant::now();
        let out = Command::new(&ccctl).arg("--socket").arg(&socket).arg("status").output()?;
        if !out.status.success() {
            bail!("ccctl status failed: {}", String::from_utf8_lossy(&out.stderr));
        }
        process.push(t.elapsed());
    }
    let process = stats(process);
    report("`ccctl status` whole process (exec + connect)", &process, Duration::from_millis(2));
    summary::row(
        "supervisor",
        "a whole `ccctl status` process",
        &format!("exec of `/bin/true` {}", summary::time(floor.median)),
        "≤ 2 ms",
        summary::time(process.median),
        Some(process.median <= Duration::from_millis(2)),
    );
    Ok(())
}
