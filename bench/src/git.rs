//! The git gateway's cost (issue 20's targets), side by side in one run against one
//! upstream (real `git http-backend` behind the tests' stand-in GitHub):
//!
//! * a 100 MB push from a run's envelope through the gateway vs the same push from the
//!   host straight to the upstream with a token: at most 1.1×; the gateway's peak RSS
//!   under 32 MiB;
//! * a fetch of one such 100 MB branch both ways: at most 1.1×;
//! * a push with nothing to send (the ref advertisement only): under 20 ms added.
//!
//! The same script runs on both sides; only the git config differs (the run's own,
//! or `insteadOf` straight to the upstream with the token in the URL). Rounds alternate.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, bail};
use cc_tests::git_host::GitHost;
use cc_tests::github_api::{self, GitHubApi};

use crate::runs::{ccctl, path_str};
use crate::scale::{bytes, rounds};
use crate::summary;
use crate::{report, stats};

const PUSH_ROUNDS: usize = 3;
const NOOP_ROUNDS: usize = 30;
const BIG_BYTES: u64 = 100_000_000;

/// Commits a new 100 MB file (not timed), then times pushing it to a new branch.
fn push_script(branch: &str) -> String {
    let big = bytes(BIG_BYTES);
    format!(
        "head -c {big} /dev/urandom > big.bin && git add big.bin && git commit -qm big && \
         s=$(date +%s%N) && git push -q origin HEAD:refs/heads/{branch} && e=$(date +%s%N) && echo ns=$((e-s))"
    )
}

/// Times a fetch of `branch` into a new repository in `dir` (tmpfs on both sides).
fn fetch_script(dir: &str, branch: &str) -> String {
    format!(
        "rm -rf {dir} && git init -q {dir} && cd {dir} && s=$(date +%s%N) && \
         git fetch -q https://github.com/octo/project.git {branch} && e=$(date +%s%N) && echo ns=$((e-s))"
    )
}

/// Times `rounds` pushes to `branch` that send nothing, one line each.
fn noop_script(branch: &str, rounds: usize) -> String {
    format!(
        "git push -q origin HEAD:refs/heads/{branch} && for i in $(seq {rounds}); do s=$(date +%s%N); \
         git push -q origin HEAD:refs/heads/{branch}; e=$(date +%s%N); echo ns=$((e-s)); done"
    )
}

fn durations(output: &str) -> Vec<Duration> {
    output.lines().filter_map(|l| l.strip_prefix("ns=")?.trim().parse().ok()).map(Duration::from_nanos).collect()
}

const IDENTITY: &str = "export GIT_AUTHOR_NAME=b GIT_AUTHOR_EMAIL=b@localhost GIT_COMMITTER_NAME=b \
                        GIT_COMMITTER_EMAIL=b@localhost GIT_TERMINAL_PROMPT=0\n";

struct Sides<'a> {
    data: &'a Path,
    run: String,
    host_clone: &'a Path,
    direct_config: &'a Path,
}

impl Sides<'_> {
    fn gateway(&self, script: &str) -> anyhow::Result<Vec<Duration>> {
        let out =
            ccctl(self.data, &["tool", &self.run, "bash", "--timeout", "600", "--", &format!("{IDENTITY}{script}")])?;
        let found = durations(&out);
        if found.is_empty() {
            bail!("the run's script printed no timing: {out}");
        }
        Ok(found)
    }

    fn direct(&self, script: &str) -> anyhow::Result<Vec<Duration>> {
        let out = Command::new("bash")
            .args(["-c", &format!("{IDENTITY}{script}")])
            .current_dir(self.host_clone)
            .env("GIT_CONFIG_GLOBAL", self.direct_config)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .output()?;
        if !out.status.success() {
            bail!("the direct script failed: {}", String::from_utf8_lossy(&out.stderr));
        }
        Ok(durations(&String::from_utf8_lossy(&out.stdout)))
    }
}

pub fn run() -> anyhow::Result<()> {
    if !nix::unistd::geteuid().is_root() {
        println!("git gateway: skipped, it runs git in envelopes as the service user and needs root");
        return Ok(());
    }
    let tmp = tempfile::Builder::new().prefix("cc-bench-git-").tempdir()?;
    let root = std::fs::canonicalize(tmp.path())?;
    let (private, public) = github_api::key_pair(&root);
    let api = GitHubApi::start(public);
    let host = GitHost::start(&root.join("upstream"), api.git_access());
    let (upstream, _) = host.create("octo/project", &root.join("seed"));
    let token = api.grant(&["project"], "write");

    // The person's checkout, whose origin names GitHub; the host's clone for the
    // direct side, whose config goes straight to the upstream with the token.
    let checkout = root.join("checkout");
    let host_clone = root.join("host-clone");
    for dir in [&checkout, &host_clone] {
        git(&root, &["clone", "-q", path_str(&upstream)?, path_str(dir)?])?;
        git(dir, &["remote", "set-url", "origin", "https://github.com/octo/project.git"])?;
    }
    let direct_config = root.join("direct.gitconfig");
    let upstream_host = host.base().trim_start_matches("http://").to_owned();
    std::fs::write(
        &direct_config,
        format!("[url \"http://x-access-token:{token}@{upstream_host}/\"]\n\tinsteadOf = https://github.com/\n"),
    )?;

    // A supervisor whose broker uses the App and whose gateway forwards to the upstream.
    let data = root.join("d0");
    std::fs::create_dir_all(&data)?;
    std::fs::write(
        data.join("config.toml"),
        format!(
            "[credentials]\nprovider = \"github-app\"\n[credentials.github_app]\napp_id = \"{}\"\ninstallation_id = {}\n\
             private_key = \"{}\"\napi_base = \"{}\"\n\n[gateway]\ngithub_url = \"{}\"\n",
            github_api::APP_ID,
            github_api::INSTALLATION,
            private.display(),
            api.base(),
            host.base()
        ),
    )?;
    let (_supervisor, _) = crate::start(&root, 0)?;
    ccctl(&data, &["repo", "add", path_str(&checkout)?, "--name", "project"])?;
    let conversation = ccctl(&data, &["conversation", "new", "--repo", "project", "--worktree-backend", "copy"])?;
    let run = ccctl(&data, &["run", "start", "--conversation", conversation.trim()])?.trim().to_owned();
    let sides = Sides { data: &data, run, host_clone: &host_clone, direct_config: &direct_config };

    let (mut through, mut direct) = (Vec::new(), Vec::new());
    for round in 0..rounds(PUSH_ROUNDS) {
        through.extend(sides.gateway(&push_script(&format!("gw-{round}")))?);
        direct.extend(sides.direct(&push_script(&format!("direct-{round}")))?);
    }
    let gateway_pid = gateway_pid(&data)?;
    let peak = peak_rss_kib(gateway_pid)?;
    compare("100 MB push", through, direct, 1.1);
    println!("gateway peak RSS over the pushes: {:.1} MiB (target < 32 MiB)", peak as f64 / 1024.0);
    let peak_mib = peak as f64 / 1024.0;
    summary::row(
        "git",
        "the gateway's peak memory over the pushes",
        "",
        "< 32 MiB",
        format!("{peak_mib:.1} MiB"),
        Some(peak_mib < 32.0),
    );

    let (mut through, mut direct) = (Vec::new(), Vec::new());
    for round in 0..rounds(PUSH_ROUNDS) {
        through.extend(sides.gateway(&fetch_script("/tmp/fetched", &format!("gw-{round}")))?);
        direct.extend(sides.direct(&fetch_script("/dev/shm/cc-bench-fetched", &format!("direct-{round}")))?);
    }
    let _ = std::fs::remove_dir_all("/dev/shm/cc-bench-fetched");
    compare("100 MB fetch", through, direct, 1.1);

    let through = sides.gateway(&noop_script("noop-gw", rounds(NOOP_ROUNDS)))?;
    let direct = sides.direct(&noop_script("noop-direct", rounds(NOOP_ROUNDS)))?;
    let (t, d) = (stats(through), stats(direct));
    report("no-op push through the gateway", &t, d.median + Duration::from_millis(20));
    report("no-op push straight to upstream", &d, d.median);
    let added = t.median.saturating_sub(d.median);
    println!("no-op push: added latency {:.1} ms (median), target < 20 ms", added.as_secs_f64() * 1000.0);
    summary::row(
        "git",
        "a push with nothing to send",
        &format!("straight {}", summary::time(d.median)),
        "< 20 ms added",
        format!("{} added", summary::time(added)),
        Some(added < Duration::from_millis(20)),
    );
    Ok(())
}

fn git(dir: &Path, args: &[&str]) -> anyhow::Result<()> {
    let status = Command::new("git").arg("-C").arg(dir).args(args).status()?;
    if !status.success() {
        bail!("git {args:?} failed in {}", dir.display());
    }
    Ok(())
}

fn compare(what: &str, through: Vec<Duration>, direct: Vec<Duration>, target: f64) {
    let (t, d) = (stats(through), stats(direct));
    let ratio = t.median.as_secs_f64() / d.median.as_secs_f64();
    println!(
        "{what:<14} through the gateway {:>8.1} ms  straight {:>8.1} ms  ratio {ratio:.3} (target ≤ {target})",
        t.median.as_secs_f64() * 1000.0,
        d.median.as_secs_f64() * 1000.0
    );
    summary::row(
        "git",
        what,
        &format!("straight to the same upstream {}", summary::time(d.median)),
        &format!("≤ {target}×"),
        summary::times(ratio),
        Some(ratio <= target),
    );
}

fn gateway_pid(data: &Path) -> anyhow::Result<u32> {
    let status: serde_json::Value = serde_json::from_str(&ccctl(data, &["--json", "status"])?)?;
    status["helpers"]
        .as_array()
        .and_then(|h| h.iter().find(|h| h["name"] == "gateway"))
        .and_then(|h| h["pid"].as_u64())
        .map(|pid| pid as u32)
        .context("no gateway in the supervisor's status")
}

/// VmHWM: the process's peak resident set.
fn peak_rss_kib(pid: u32) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .context("no VmHWM")
}
