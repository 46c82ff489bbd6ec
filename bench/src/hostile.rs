//! A hostile agent beside quiet runs (issue 36's targets): while a Claude Code stand-in
//! (`claude-standin`, built with the tests) writes a gigabyte with no newline, twenty
//! 10 MiB lines or 100,000 steps, and while an ACP stand-in (`acp-standin`) sends
//! 100,000 permission requests, twenty 10 MiB updates or a gigabyte with no newline,
//! the supervisor's resident memory stays under 40 MiB, its `GetStatus` p99 under
//! 5 ms, and a quiet run's 4 KiB read keeps its latency (the ratio is to the same read
//! with no attack, in the same run). Then the supervisor's idle memory with 20 live
//! claude-code runs, each past one prompt.
//!
//! The Claude Code runs are claude-code-nosandbox, so that the stand-in runs on the
//! host; its output takes the same road to the run's runner as an enveloped CLI's. The
//! ACP run is enveloped, as every ACP agent is.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use cc_proto::supervisor::v1 as pb;

use crate::runs::{ccctl, demo_repo, path_str, read_four_kib};
use crate::summary;
use crate::{ms, sibling, start, stats, vm_rss_kib};

const ATTACKS: [&str; 3] = ["no-newline 1024", "long-lines 20 10", "flood 100000"];
const ACP_ATTACKS: [&str; 3] = ["permissions 100000", "long-updates 20 10", "raw-no-newline 1024"];
/// The same attacks, smaller, for `--quick`: each still crosses the limits it tests
/// (a line past the 8 MiB a line may hold, more steps than a window of events).
const QUICK_ATTACKS: [&str; 3] = ["no-newline 16", "long-lines 2 10", "flood 2000"];
const QUICK_ACP_ATTACKS: [&str; 3] = ["permissions 2000", "long-updates 2 10", "raw-no-newline 16"];
const QUIET_CALLS: usize = 300;
const LIVE_RUNS: usize = 20;
const RSS_TARGET_MIB: f64 = 40.0;
const STATUS_P99_TARGET: Duration = Duration::from_millis(5);

pub fn run() -> anyhow::Result<()> {
    let tmp = tempfile::Builder::new().prefix("cc-bench-hostile-").tempdir()?;
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755))?;
    let repo = demo_repo(&tmp.path().join("repo"))?;
    let data = tmp.path().join("d0");
    std::fs::create_dir(&data)?;
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o700))?;
    let standin = sibling("claude-standin")?;
    std::fs::write(data.join("config.toml"), format!("[runs.claude_code]\nprogram = \"{}\"\n", standin.display()))?;
    let (supervisor, _) = start(tmp.path(), 0)?;
    let proc_dir = Path::new("/proc").join(supervisor.pid().to_string());
    ccctl(&data, &["repo", "add", path_str(&repo)?, "--name", "demo"])?;
    let conversation = ccctl(&data, &["conversation", "new", "--repo", "demo", "--worktree-backend", "copy"])?;
    let start_run = || {
        let args = ["run", "start", "--conversation", conversation.trim(), "--adapter", "claude-code-nosandbox"];
        anyhow::Ok(ccctl(&data, &args)?.trim().to_owned())
    };
    let attacker = start_run()?;
    let quiet: Vec<String> = (0..3).map(|_| start_run()).collect::<Result<_, _>>()?;
    for run in quiet.iter().chain([&attacker]) {
        ccctl(&data, &["run", "prompt", run, "flood 1"])?;
    }
    let socket = data.join("sock/api.sock");
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;

    let before = vm_rss_kib(&proc_dir).context("the supervisor's VmRSS")?;
    let quiet_calls = runtime.block_on(calls(&socket, &quiet[0], &proc_dir, None, true))?;
    println!("supervisor RSS before any attack: {:.1} MiB", before as f64 / 1024.0);
    print_calls("no attack", &quiet_calls, None);
    let acp = {
        let work = data.join(format!("conversations/{}/agents/default/work", conversation.trim()));
        std::fs::create_dir_all(&work)?;
        let agent = work.join("acp-standin");
        let command = format!("'{}' --quiet", path_str(&agent)?);
        let args =
            ["run", "start", "--conversation", conversation.trim(), "--adapter", "acp", "--agent-command", &command];
        let run = ccctl(&data, &args)?.trim().to_owned();
        std::fs::copy(sibling("acp-standin")?, &agent)?;
        std::fs::set_permissions(&agent, std::fs::Permissions::from_mode(0o755))?;
        ccctl(&data, &["run", "prompt", &run, "say up"])?;
        run
    };
    let (claude_attacks, acp_attacks) =
        if crate::scale::quick() { (QUICK_ATTACKS, QUICK_ACP_ATTACKS) } else { (ATTACKS, ACP_ATTACKS) };
    let attacks = claude_attacks
        .iter()
        .map(|a| (&attacker, *a, "claude-code"))
        .chain(acp_attacks.iter().map(|a| (&acp, *a, "acp")));
    let (mut worst_rss_kib, mut worst_p99) = (0, Duration::ZERO);
    for (run, attack, adapter) in attacks {
        let prompt = Command::new(sibling("ccctl")?)
            .arg("--data-dir")
            .arg(&data)
            .args(["run", "prompt", run, attack, "--timeout", "600"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        let t = Instant::now();
        // The ACP agent's gigabyte ends its prompt with a failure, as it should.
        let must_succeed = !attack.starts_with("raw-no-newline");
        let measured = runtime.block_on(calls(&socket, &quiet[0], &proc_dir, Some(prompt), must_succeed))?;
        println!("{adapter} attack `{attack}`: the prompt took {:.1} s", t.elapsed().as_secs_f64());
        print_calls(attack, &measured, Some(&quiet_calls));
        worst_rss_kib = worst_rss_kib.max(measured.peak_rss_kib);
        worst_p99 = worst_p99.max(stats(measured.statuses.clone()).p99);
    }
    let worst_rss_mib = worst_rss_kib as f64 / 1024.0;
    summary::row(
        "hostile",
        "the supervisor's peak memory while an agent attacks its adapter (6 attacks)",
        "",
        "< 40 MiB",
        format!("{worst_rss_mib:.1} MiB"),
        Some(worst_rss_mib < RSS_TARGET_MIB),
    );
    summary::row(
        "hostile",
        "`GetStatus` p99 while an agent attacks its adapter (the worst attack)",
        &format!("no attack {}", summary::time(stats(quiet_calls.statuses.clone()).p99)),
        "< 5 ms",
        summary::time(worst_p99),
        Some(worst_p99 < STATUS_P99_TARGET),
    );

    let live_runs = crate::scale::rounds(LIVE_RUNS).max(quiet.len() + 1);
    for _ in quiet.len() + 1..live_runs {
        let run = start_run()?;
        ccctl(&data, &["run", "prompt", &run, "flood 1"])?;
    }
    let idle = vm_rss_kib(&proc_dir).context("the supervisor's VmRSS")?;
    println!(
        "supervisor RSS idle with {live_runs} live claude-code runs: {:.1} MiB  target {RSS_TARGET_MIB} MiB  ratio {:.3}",
        idle as f64 / 1024.0,
        idle as f64 / 1024.0 / RSS_TARGET_MIB
    );
    Ok(())
}

/// What one window of calls saw.
struct Calls {
    reads: Vec<Duration>,
    statuses: Vec<Duration>,
    /// ListHelpers: the supervisor alone. GetStatus also reports each helper's answer
    /// to its own status RPC, from the health checks' last one when it is recent (and
    /// by a live call otherwise, which a sandboxd busy with the attacker slows).
    listings: Vec<Duration>,
    peak_rss_kib: u64,
}

/// A quiet run's reads and GetStatus calls, one by one, with the supervisor's memory
/// sampled between them: [`QUIET_CALLS`] of each, or while `attack` lasts (at least 50);
/// an attack that fails when it `must_succeed` is an error.
async fn calls(
    socket: &Path,
    run: &str,
    proc_dir: &Path,
    mut attack: Option<Child>,
    must_succeed: bool,
) -> anyhow::Result<Calls> {
    let mut client = cc_client::connect(socket).await?;
    let mut out = Calls { reads: Vec::new(), statuses: Vec::new(), listings: Vec::new(), peak_rss_kib: 0 };
    loop {
        let t = Instant::now();
        read_four_kib(&mut client.runs, run).await?;
        out.reads.push(t.elapsed());
        let t = Instant::now();
        client.system.get_status(pb::GetStatusRequest {}).await?;
        out.statuses.push(t.elapsed());
        let t = Instant::now();
        client.system.list_helpers(pb::ListHelpersRequest {}).await?;
        out.listings.push(t.elapsed());
        out.peak_rss_kib = out.peak_rss_kib.max(vm_rss_kib(proc_dir).unwrap_or(0));
        let done = match attack.as_mut() {
            None => out.reads.len() >= QUIET_CALLS,
            Some(prompt) => match prompt.try_wait()? {
                Some(status) if must_succeed && !status.success() => bail!("the attacking prompt failed: {status}"),
                Some(_) => out.reads.len() >= 50,
                None => false,
            },
        };
        if done {
            return Ok(out);
        }
    }
}

fn print_calls(what: &str, calls: &Calls, quiet: Option<&Calls>) {
    let (reads, statuses) = (stats(calls.reads.clone()), stats(calls.statuses.clone()));
    let listings = stats(calls.listings.clone());
    let rss = calls.peak_rss_kib as f64 / 1024.0;
    println!(
        "{what:<20} supervisor peak RSS {rss:>6.1} MiB (target {RSS_TARGET_MIB}, ratio {:.3})  GetStatus p99 {:>7.3} ms (target {:.0}, ratio {:.3})",
        rss / RSS_TARGET_MIB,
        ms(statuses.p99),
        ms(STATUS_P99_TARGET),
        statuses.p99.as_secs_f64() / STATUS_P99_TARGET.as_secs_f64()
    );
    println!("{:<20} ListHelpers p99 {:>7.3} ms (the supervisor alone, no helper asked)", "", ms(listings.p99));
    let against = quiet.map(|q| stats(q.reads.clone()));
    println!(
        "{:<20} a quiet run's read median {:>7.3} ms  p99 {:>7.3} ms{}",
        "",
        ms(reads.median),
        ms(reads.p99),
        against.map_or(String::new(), |q| format!(
            "  median/no-attack {:.3}  p99/no-attack {:.3}",
            reads.median.as_secs_f64() / q.median.as_secs_f64(),
            reads.p99.as_secs_f64() / q.p99.as_secs_f64()
        ))
    );
}
