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
    // A checkout, as a conversation's working directory is: its .git vectors are part
    // of every real envelope (six more mounts).
    let status = Command::new("git").args(["init", "-q"]).arg(&work).status().context("git init")?;
    if !status.success() {
        bail!("git init failed in {}", work.display());
    }
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
        // The same envelope, run directly as the user sandboxd launches as: what the
        // API adds on top of bubblewrap and our init.
        let explained = client
            .explain(pb::ExplainRequest {
                run_id: "bench".into(),
                kind: pb::DispatchKind::HarnessBash as i32,
                argv: vec![b"/bin/true".to_vec()],
            })
            .await?
            .into_inner();
        let direct: Vec<std::ffi::OsString> =
            explained.argv.iter().map(|a| std::ffi::OsStr::from_bytes(a).to_owned()).collect();
        let as_user = launch_user(&work);
        let raw = ["bwrap", "--unshare-all", "--ro-bind", "/", "/", "true"].map(std::ffi::OsString::from);
        // Interleaved, one of each per round, so that a noisy neighbour slows all three.
        let mut samples = Samples::default();
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
            let ours = t.elapsed();
            let direct = time_once(&direct, as_user)?;
            let raw_as_user = time_once(&raw, as_user)?;
            let raw = time_once(&raw, None)?;
            let bare = time_once(&[std::ffi::OsString::from("/bin/true")], None)?;
            if i >= 5 {
                samples.ours.push(ours);
                samples.direct.push(direct);
                samples.raw.push(raw);
                samples.raw_as_user.push(raw_as_user);
                samples.bare.push(bare);
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

    let as_user = launch_user(&work).map_or("ourselves".to_owned(), |(uid, _)| format!("uid {uid}"));
    let raw_as_user = stats(ours.raw_as_user);
    let (ours, direct, raw, bare) = (stats(ours.ours), stats(ours.direct), stats(ours.raw), stats(ours.bare));
    report("`true` through sandboxd's Launch (native envelope)", &ours, Duration::from_millis(5));
    report("the same envelope's argv, run directly", &direct, Duration::from_millis(5));
    report("`true` under raw bwrap --unshare-all --ro-bind / /", &raw, Duration::from_millis(5));
    report(&format!("the same raw bwrap, as the launch user ({as_user})"), &raw_as_user, Duration::from_millis(5));
    report("`true` with no sandbox", &bare, Duration::from_millis(5));
    let ratio = |a: &crate::Stats, b: &crate::Stats| a.median.as_secs_f64() / b.median.as_secs_f64();
    println!(
        "ratio ours / raw bwrap: {:.2} (target at most 1.50); ours / raw bwrap as the launch user: {:.2}; the envelope alone / raw bwrap: {:.2}",
        ratio(&ours, &raw),
        ratio(&ours, &raw_as_user),
        ratio(&direct, &raw)
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

#[derive(Default)]
struct Samples {
    ours: Vec<Duration>,
    direct: Vec<Duration>,
    raw: Vec<Duration>,
    raw_as_user: Vec<Duration>,
    bare: Vec<Duration>,
}

/// Who sandboxd launches as, for running its envelope by hand the same way: as root,
/// the owner of the working directory (or nobody); otherwise ourselves.
fn launch_user(work: &Path) -> Option<(u32, u32)> {
    use std::os::unix::fs::MetadataExt;
    if !nix::unistd::geteuid().is_root() {
        return None;
    }
    match std::fs::metadata(work) {
        Ok(m) if m.uid() != 0 => Some((m.uid(), m.gid())),
        _ => Some((65534, 65534)),
    }
}

fn time_once(argv: &[std::ffi::OsString], user: Option<(u32, u32)>) -> anyhow::Result<Duration> {
    use std::os::unix::process::CommandExt;
    let t = Instant::now();
    let mut command = Command::new(&argv[0]);
    command.args(&argv[1..]).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
    if let Some((uid, gid)) = user {
        command.uid(uid).gid(gid);
    }
    let status = command.status()?;
    if !status.success() {
        bail!("{argv:?} failed: {status}");
    }
    Ok(t.elapsed())
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
