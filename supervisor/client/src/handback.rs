//! Work comes back from a conversation's copy without running anything the agent wrote
//! (DESIGN.md §4, issue 16 item 3).
//!
//! The copy is agent-controlled: its `.git/config`, nested repositories, submodule git
//! directories and `.gitattributes` may name programs that git runs (`core.fsmonitor`
//! on `git status`, a clean filter on `git diff`, hooks, …). So `ccctl conversation
//! diff` and `fetch` run git with a configuration of our own on top of everything the
//! copy says: every key that runs a program (cc-vectors' list, and every filter and
//! diff driver the copy defines) set to nothing, hooks pointed at an empty place, only
//! the file protocol allowed, no submodule recursion, no system or global config, and
//! a deadline. The overrides travel in `GIT_CONFIG_COUNT`/`KEY_n`/`VALUE_n`, git's
//! command-line scope, which beats the repository's own config, and cannot be split
//! by a crafted key the way a `-c key=value` argument could.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

/// What `--keep` and `conversation list` tell the person about a copy.
pub const AGENT_CONTROLLED: &str = "a conversation's copy is agent-controlled: git run inside it runs config, hooks and \
     filters the agent may have written; look with `ccctl conversation diff ID`, take its commits with \
     `ccctl conversation fetch ID --into CHECKOUT`";

/// How long one git command may take: a copy's config can include `/dev/zero`.
const GIT_DEADLINE: Duration = Duration::from_secs(120);
/// At most this much of one git command's output is kept.
const MAX_OUTPUT: usize = 256 << 20;

#[derive(Debug, thiserror::Error)]
pub enum HandbackError {
    #[error("cannot run git: {0}")]
    Spawn(std::io::Error),
    #[error("git {what} did not finish within {GIT_DEADLINE:?}: killed")]
    Deadline { what: String },
    #[error("git {what} failed: {stderr}")]
    Git { what: String, stderr: String },
    #[error("{0}")]
    Refused(String),
}

/// The value each program-running key is given: nothing runs, or `false` does.
fn neutral_value(key: &str) -> &'static str {
    match key {
        "core.pager" => "cat",
        "core.fsmonitor" => "false",
        "core.hookspath" => "/dev/null",
        "core.gitproxy" => "none",
        "credential.helper" | "diff.external" | "uploadpack.packobjectshook" | "merge.tool" | "diff.tool" => "",
        _ => "false",
    }
}

/// Keys the copy defines whose value is a program: filter and diff drivers, merge
/// drivers, from `git config --list -z` output (`key\nvalue\0` entries).
fn driver_keys(listing: &[u8]) -> Vec<String> {
    let mut keys: Vec<String> = listing
        .split(|b| *b == 0)
        .filter_map(|entry| {
            let key = entry.split(|b| *b == b'\n').next()?;
            let key = String::from_utf8_lossy(key).into_owned();
            let lower = key.to_ascii_lowercase();
            let driver = (lower.starts_with("filter.")
                && [".clean", ".smudge", ".process"].iter().any(|s| lower.ends_with(s)))
                || (lower.starts_with("diff.") && [".command", ".textconv"].iter().any(|s| lower.ends_with(s)))
                || (lower.starts_with("merge.") && lower.ends_with(".driver"));
            driver.then_some(key)
        })
        .collect();
    keys.sort();
    keys.dedup();
    keys
}

/// Runs git in the copy (or, for a fetch, in the person's checkout) under our config.
struct NeutralGit {
    /// HOME for git, holding a global config of ours: `safe.directory` for the copy
    /// (as root, it belongs to the service user), so that git agrees to look at it.
    home: tempfile::TempDir,
    global: PathBuf,
    overrides: Vec<(String, String)>,
}

impl NeutralGit {
    fn new(copy: &Path) -> Result<Self, HandbackError> {
        let home = tempfile::tempdir().map_err(HandbackError::Spawn)?;
        let global = home.path().join("gitconfig");
        let mut safe = format!("[safe]\n\tdirectory = {}\n", quote_config(&copy.to_string_lossy()));
        let git_dir = copy.join(".git");
        safe.push_str(&format!("\tdirectory = {}\n", quote_config(&git_dir.to_string_lossy())));
        std::fs::write(&global, safe).map_err(HandbackError::Spawn)?;
        let mut overrides: Vec<(String, String)> =
            cc_vectors::GIT_PROGRAM_KEYS.iter().map(|k| ((*k).to_owned(), neutral_value(k).to_owned())).collect();
        for (key, value) in [
            ("protocol.allow", "never"),
            ("protocol.file.allow", "always"),
            ("fetch.recursesubmodules", "false"),
            ("submodule.recurse", "false"),
            ("diff.ignoresubmodules", "all"),
            ("status.submodulesummary", "false"),
            ("core.alternaterefscommand", ""),
            ("gc.auto", "0"),
            ("maintenance.auto", "false"),
        ] {
            overrides.push((key.to_owned(), value.to_owned()));
        }
        let mut git = Self { home, global, overrides };
        // The copy's own filter and diff drivers, as git itself reads them (includes
        // and includeIf resolved), each set to nothing.
        let listing = git.run(copy, &["config", "--list", "-z"], "config --list")?;
        for key in driver_keys(&listing.stdout) {
            git.overrides.push((key, String::new()));
        }
        Ok(git)
    }

    fn command(&self, dir: &Path, args: &[&str]) -> Command {
        let mut c = Command::new("git");
        c.arg("-C").arg(dir).arg("--no-pager").args(args);
        c.env_clear()
            .env("PATH", cc_host::SYSTEM_PATH)
            .env("HOME", self.home.path())
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", &self.global)
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_CONFIG_COUNT", self.overrides.len().to_string());
        for (i, (key, value)) in self.overrides.iter().enumerate() {
            c.env(format!("GIT_CONFIG_KEY_{i}"), key).env(format!("GIT_CONFIG_VALUE_{i}"), value);
        }
        c.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
        c
    }

    /// Runs git to completion within the deadline; a non-zero exit is an error.
    fn run(&self, dir: &Path, args: &[&str], what: &str) -> Result<Output, HandbackError> {
        let out = self.run_status(dir, args, what)?;
        if !out.status.success() {
            return Err(HandbackError::Git { what: what.to_owned(), stderr: last_line(&out.stderr) });
        }
        Ok(out)
    }

    fn run_status(&self, dir: &Path, args: &[&str], what: &str) -> Result<Output, HandbackError> {
        let mut child = self.command(dir, args).spawn().map_err(HandbackError::Spawn)?;
        let (stdout, stderr) = (child.stdout.take(), child.stderr.take());
        let read = |pipe: Option<Box<dyn std::io::Read + Send>>| {
            std::thread::spawn(move || {
                let mut buf = Vec::new();
                if let Some(p) = pipe {
                    use std::io::Read;
                    let _ = p.take(MAX_OUTPUT as u64).read_to_end(&mut buf);
                }
                buf
            })
        };
        let out_reader = read(stdout.map(|p| Box::new(p) as Box<dyn std::io::Read + Send>));
        let err_reader = read(stderr.map(|p| Box::new(p) as Box<dyn std::io::Read + Send>));
        // The wait happens on a thread of its own, so that the deadline is a timed
        // receive rather than a poll.
        let pid = nix::unistd::Pid::from_raw(child.id() as i32);
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = done.send(child.wait());
        });
        let status = match finished.recv_timeout(GIT_DEADLINE) {
            Ok(status) => status.map_err(HandbackError::Spawn)?,
            Err(_) => {
                // Not reaped yet (its waiter has not returned), so the pid is still its.
                let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
                return Err(HandbackError::Deadline { what: what.to_owned() });
            }
        };
        Ok(Output {
            status,
            stdout: out_reader.join().unwrap_or_default(),
            stderr: err_reader.join().unwrap_or_default(),
        })
    }
}

/// A config value in double quotes, as git reads it.
fn quote_config(value: &str) -> String {
    format!("\"{}\"", value.replace('\\', "\\\\").replace('"', "\\\""))
}

fn last_line(stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr);
    let line = text.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("no message");
    line.chars().filter(|c| !c.is_control()).take(300).collect()
}

/// The copy's changes against `base` (default: where the copy and the registered
/// checkout's HEAD part, so the agent's commits and its uncommitted work both show),
/// then every untracked file as new. No external diff, no textconv, no filter runs.
pub fn diff(copy: &Path, checkout: &Path, base: Option<&str>) -> Result<Vec<u8>, HandbackError> {
    if let Some(b) = base.filter(|b| b.is_empty() || b.starts_with('-')) {
        return Err(HandbackError::Refused(format!("{b:?} is not a revision")));
    }
    let git = NeutralGit::new(copy)?;
    let base = match base {
        Some(b) => b.to_owned(),
        None => {
            let head = git.run(checkout, &["rev-parse", "--verify", "HEAD^{commit}"], "rev-parse in the checkout")?;
            let head = String::from_utf8_lossy(&head.stdout).trim().to_owned();
            let merge_base = git.run_status(copy, &["merge-base", "HEAD", &head], "merge-base")?;
            if merge_base.status.success() {
                String::from_utf8_lossy(&merge_base.stdout).trim().to_owned()
            } else {
                "HEAD".to_owned()
            }
        }
    };
    // Submodules are not looked into: a nested repository's config is the agent's too,
    // and its drivers were not listed above.
    let flags = ["--no-ext-diff", "--no-textconv", "--ignore-submodules=all", "--binary", "--no-color"];
    let mut args = vec!["diff"];
    args.extend(flags);
    args.extend([base.as_str(), "--"]);
    let mut out = git.run(copy, &args, "diff")?.stdout;
    let untracked = git.run(copy, &["ls-files", "-z", "--others", "--exclude-standard"], "ls-files")?;
    for file in untracked.stdout.split(|b| *b == 0).filter(|f| !f.is_empty()) {
        let file = String::from_utf8_lossy(file).into_owned();
        let mut args = vec!["diff", "--no-index"];
        args.extend(flags);
        args.extend(["--", "/dev/null", file.as_str()]);
        // --no-index exits 1 when the files differ, which is the point.
        let new = git.run_status(copy, &args, "diff --no-index")?;
        if new.status.code().is_some_and(|c| c > 1) {
            return Err(HandbackError::Git { what: "diff --no-index".into(), stderr: last_line(&new.stderr) });
        }
        out.extend_from_slice(&new.stdout);
    }
    Ok(out)
}

/// What a fetch did.
#[derive(Debug)]
pub struct Fetched {
    pub branch: String,
    pub commit: String,
}

/// Fetches the copy's HEAD into `checkout` as `refs/heads/<branch>`: created, or moved
/// forward; never forced, and never the branch checked out there.
pub fn fetch(copy: &Path, checkout: &Path, branch: &str) -> Result<Fetched, HandbackError> {
    let git = NeutralGit::new(copy)?;
    let valid = git.run_status(checkout, &["check-ref-format", "--branch", branch], "check-ref-format")?;
    if !valid.status.success() || branch.starts_with('-') {
        return Err(HandbackError::Refused(format!("{branch:?} is not a valid branch name")));
    }
    let head = git.run(copy, &["rev-parse", "--verify", "HEAD^{commit}"], "rev-parse in the copy")?;
    let commit = String::from_utf8_lossy(&head.stdout).trim().to_owned();
    let refspec = format!("HEAD:refs/heads/{branch}");
    let source = copy.to_str().ok_or_else(|| HandbackError::Refused("the copy's path is not UTF-8".into()))?;
    git.run(
        checkout,
        &["fetch", "--no-tags", "--no-recurse-submodules", "--no-write-fetch-head", "--", source, &refspec],
        "fetch",
    )?;
    Ok(Fetched { branch: branch.to_owned(), commit })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn driver_keys_are_found_whatever_their_names() {
        let listing = b"core.bare\nfalse\0filter.lfs.clean\ngit-lfs clean\0filter.Evil = Name.process\nsh -c x\0diff.x.textconv\ncat\0merge.m.driver\nm\0diff.renames\ntrue\0";
        assert_eq!(
            driver_keys(listing),
            ["diff.x.textconv", "filter.Evil = Name.process", "filter.lfs.clean", "merge.m.driver"]
        );
    }

    #[test]
    fn every_program_key_is_neutral() {
        for key in cc_vectors::GIT_PROGRAM_KEYS {
            let value = neutral_value(key);
            assert!(["", "false", "cat", "none", "/dev/null"].contains(&value), "{key} = {value}");
        }
    }
}
