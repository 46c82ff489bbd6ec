//! Launch latency through sandboxd vs raw bubblewrap vs srt vs no sandbox, in one run,
//! and the memory of an idle envelope. The bench is sandboxd's supervisor: it holds the
//! peer secret and drives the real gRPC API.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use cc_proto::bootstrap::Bootstrap;
use cc_proto::client::PresentSecret;
use cc_proto::sandboxd::v1 as pb;
use cc_proto::sandboxd::v1::sandboxd_client::SandboxdClient;
use cc_proto::secret::PeerSecret;
use tokio_stream::StreamExt;
use tonic::service::interceptor::InterceptedService;

use crate::{report, sibling, stats};

const LAUNCHES: usize = 40;

pub fn run(srt: Option<String>) -> anyhow::Result<()> {
    let tmp = tempfile::Builder::new().prefix("cc-bench-sbx-").tempdir()?;
    let work = std::fs::canonicalize(tmp.path())?.join("conversations/c/repos/demo");
    std::fs::create_dir_all(&work)?;
    let socket = tmp.path().join("sock/sandboxd.sock");
    let secret = PeerSecret::generate()?;
    let mut child = Command::new(sibling("cc-sandboxd")?)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("CC_LOG", "warn")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()?;
    let mut stdout = BufReader::new(child.stdout.take().context("stdout")?);
    let mut line = String::new();
    stdout.read_line(&mut line)?;
    let bootstrap = Bootstrap {
        name: "sandboxd".into(),
        socket: socket.clone(),
        data_dir: tmp.path().to_owned(),
        log_format: cc_proto::logging::LogFormat::Text,
        peers: [("supervisor".to_owned(), secret.clone())].into(),
        supervisor_pid: std::process::id(),
        options: [("sandbox".to_owned(), "native".to_owned())].into(),
    };
    child.stdin.take().context("stdin")?.write_all(&bootstrap.to_json_line())?;
    line.clear();
    stdout.read_line(&mut line)?;
    if line.trim() != "READY" {
        bail!("sandboxd did not start: {line:?}");
    }

    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let (ours, idle) = runtime.block_on(async {
        let channel = cc_proto::client::connect(&socket).await?;
        let mut client =
            SandboxdClient::new(InterceptedService::new(channel, PresentSecret::new("supervisor", &secret)));
        let probe = client.get_probe(pb::GetProbeRequest {}).await?.into_inner();
        if probe.backend != pb::Backend::Native as i32 {
            bail!("no native backend: {}", probe.detail);
        }
        let policy = pb::RunPolicy {
            run_id: "bench".into(),
            work_dir: work.as_os_str().as_bytes().to_vec(),
            ..Default::default()
        };
        client.register_run(policy).await?;
        let launch = |argv: &[&str]| pb::LaunchRequest {
            run_id: "bench".into(),
            kind: pb::DispatchKind::HarnessBash as i32,
            argv: argv.iter().map(|a| a.as_bytes().to_vec()).collect(),
            timeout_seconds: 30,
        };
        let mut samples = Vec::new();
        for i in 0..LAUNCHES + 5 {
            let t = Instant::now();
            let mut stream = client.launch(launch(&["/bin/true"])).await?.into_inner();
            let mut code = None;
            while let Some(event) = stream.next().await {
                if let Some(pb::launch_event::Event::Exit(e)) = event?.event {
                    code = e.code;
                }
            }
            if code != Some(0) {
                bail!("true exited with {code:?} in the envelope");
            }
            if i >= 5 {
                samples.push(t.elapsed());
            }
        }
        // An idle envelope: our init waiting on a sleeping command.
        let mut stream = client.launch(launch(&["/bin/sleep", "30"])).await?.into_inner();
        let _first = stream.next().await;
        // The envelope is being built; give it up to two seconds to reach our init.
        let mut idle = idle_memory();
        for _ in 0..200 {
            if idle.is_ok() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
            idle = idle_memory();
        }
        let idle = idle?;
        drop(stream);
        anyhow::Ok((samples, idle))
    })?;
    let _ = child.kill();
    let _ = child.wait();

    let ours = stats(ours);
    let raw = stats(time_command(&["bwrap", "--unshare-all", "--ro-bind", "/", "/", "true"])?);
    let bare = stats(time_command(&["/bin/true"])?);
    report("`true` through sandboxd's Launch (native envelope)", &ours, Duration::from_millis(5));
    report("`true` under raw bwrap --unshare-all --ro-bind / /", &raw, Duration::from_millis(5));
    report("`true` with no sandbox", &bare, Duration::from_millis(5));
    println!(
        "ratio ours / raw bwrap: {:.2} (target at most 1.50)",
        ours.median.as_secs_f64() / raw.median.as_secs_f64()
    );
    match srt.filter(|s| Path::new(s).exists()) {
        Some(srt) => {
            let theirs = stats(time_command_n(&[&srt, "true"], 10)?);
            report("`true` under srt (sandbox-runtime)", &theirs, Duration::from_millis(5));
            println!(
                "ratio srt / ours: {:.1} (target at least 20)",
                theirs.median.as_secs_f64() / ours.median.as_secs_f64()
            );
        }
        None => println!("srt: not installed (bench/run.sh installs it with npm); no comparison"),
    }
    println!(
        "idle envelope: our init {:.2} MiB RSS, bubblewrap {:.2} MiB RSS (target: init under 4 MiB)",
        idle.0 as f64 / 1024.0,
        idle.1 as f64 / 1024.0
    );
    Ok(())
}

fn time_command(argv: &[&str]) -> anyhow::Result<Vec<Duration>> {
    time_command_n(argv, LAUNCHES)
}

pub(crate) fn time_command_n(argv: &[&str], n: usize) -> anyhow::Result<Vec<Duration>> {
    let mut samples = Vec::new();
    for i in 0..n + 2 {
        let t = Instant::now();
        let status = Command::new(argv[0]).args(&argv[1..]).stdout(Stdio::null()).stderr(Stdio::null()).status()?;
        if !status.success() {
            bail!("{argv:?} failed: {status}");
        }
        if i >= 2 {
            samples.push(t.elapsed());
        }
    }
    Ok(samples)
}

/// VmRSS in KiB of our init and of the bubblewrap processes of the idle envelope.
fn idle_memory() -> anyhow::Result<(u64, u64)> {
    let (mut init, mut bwrap) = (0, 0);
    for entry in std::fs::read_dir("/proc")?.flatten() {
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        let rss = || crate::vm_rss_kib(&entry.path()).unwrap_or(0);
        if cmdline.starts_with("/run/cc/init -- /bin/sleep 30") {
            init += rss();
        } else if cmdline.starts_with("/usr/bin/bwrap") && cmdline.contains("/bin/sleep 30") {
            bwrap += rss();
        }
    }
    if init == 0 {
        bail!("could not find the idle envelope's init");
    }
    Ok((init, bwrap))
}
