//! `cc-bench all [--quick] [--srt PATH] [--srt-proxy COMMAND] [--summary FILE]`: every
//! benchmark in turn, each in a process of its own (so that one that fails, or leaves
//! something behind, does not take the next with it), its figures printed as they
//! come. It ends with the summary table ([`crate::summary`]), written to FILE too, and
//! one line per benchmark, and fails when any benchmark did: a benchmark that cannot
//! run any more is found by the next run of this, not by the next person who needs its
//! figures.

use std::process::Command;
use std::time::Instant;

use anyhow::{Context, bail};

use crate::summary;

/// Every benchmark, in the order a full run takes them: the quick ones first.
pub const BENCHMARKS: &[&str] = &[
    "supervisor",
    "gate",
    "paths",
    "search",
    "sandbox",
    "runs",
    "limits",
    "load",
    "git",
    "egress",
    "adapters",
    "models",
    "hostile",
    "terminals",
    "microvm",
];

/// What `all` was asked.
#[derive(Debug, Default, PartialEq)]
struct Options {
    /// srt's binary, for the `sandbox` and `runs` comparisons.
    srt: Option<String>,
    /// The command that serves srt's proxy, for `egress`.
    srt_proxy: Option<String>,
    /// Where the summary table goes, besides the output.
    summary: Option<std::path::PathBuf>,
}

fn options(args: &[String]) -> anyhow::Result<Options> {
    let mut options = Options::default();
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        let mut value = || args.next().cloned().with_context(|| format!("{arg} needs a value"));
        match arg.as_str() {
            "--srt" => options.srt = Some(value()?),
            "--srt-proxy" => options.srt_proxy = Some(value()?),
            "--summary" => options.summary = Some(value()?.into()),
            other => bail!(
                "cc-bench all: unknown argument {other:?} (known: --quick, --srt PATH, --srt-proxy COMMAND, --summary FILE)"
            ),
        }
    }
    Ok(options)
}

/// Why a benchmark cannot run as this user, if it cannot: `git` runs git in envelopes
/// as the service user, `limits` makes cgroups of its own.
fn cannot_run(benchmark: &str, root: bool) -> Option<&'static str> {
    match benchmark {
        "git" | "limits" if !root => Some("skipped: it needs root"),
        _ => None,
    }
}

/// The argument a benchmark takes from `all`'s options, if any.
fn argument_of(benchmark: &str, options: &Options) -> Option<String> {
    match benchmark {
        "sandbox" | "runs" => options.srt.clone(),
        "egress" => options.srt_proxy.clone(),
        _ => None,
    }
}

pub fn run(args: &[String]) -> anyhow::Result<()> {
    let options = options(args)?;
    let me = std::env::current_exe().context("cc-bench's own path")?;
    let root = nix::unistd::geteuid().is_root();
    let rows = tempfile::Builder::new().prefix("cc-bench-rows-").tempdir()?;
    let rows_file = rows.path().join("rows.jsonl");
    let mut outcomes = Vec::new();
    for benchmark in BENCHMARKS {
        println!("\n== cc-bench {benchmark}{}", if crate::scale::quick() { " --quick" } else { "" });
        if let Some(why) = cannot_run(benchmark, root) {
            println!("{why}");
            outcomes.push((benchmark, why.to_owned(), std::time::Duration::ZERO));
            continue;
        }
        let started = Instant::now();
        let mut command = Command::new(&me);
        if crate::scale::quick() {
            command.arg("--quick");
        }
        command.arg(benchmark).args(argument_of(benchmark, &options)).env(summary::ENV, &rows_file);
        let outcome = match command.status() {
            Ok(status) if status.success() => "ok".to_owned(),
            Ok(status) => format!("FAILED ({status})"),
            Err(e) => format!("FAILED (cannot start it: {e})"),
        };
        outcomes.push((benchmark, outcome, started.elapsed()));
    }
    let recorded = std::fs::read_to_string(&rows_file).unwrap_or_default();
    let mut table_rows = summary::read_rows(&recorded)?;
    let heading = if crate::scale::quick() {
        for row in &mut table_rows {
            row.met = None;
        }
        "A quick run (`--quick`): a few rounds each, so no figure here is judged.".to_owned()
    } else {
        summary::heading()
    };
    let table = summary::render(&heading, &table_rows);
    println!("\n{table}");
    if let Some(path) = &options.summary {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).with_context(|| format!("cannot make {}", dir.display()))?;
        }
        std::fs::write(path, &table).with_context(|| format!("cannot write the summary to {}", path.display()))?;
        println!("the summary is in {} (fold it into docs/performance.md with cc-bench fold-summary)", path.display());
    }
    println!("\n== cc-bench all{}", if crate::scale::quick() { " --quick (figures not judged)" } else { "" });
    for (benchmark, outcome, took) in &outcomes {
        println!("{benchmark:<12} {outcome:<40} {:>7.1} s", took.as_secs_f64());
    }
    let failed: Vec<&str> = outcomes.iter().filter(|(_, o, _)| o.starts_with("FAILED")).map(|(b, _, _)| **b).collect();
    if !failed.is_empty() {
        bail!("{} of {} benchmarks failed: {}", failed.len(), outcomes.len(), failed.join(", "));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn srt_and_its_proxy_go_to_the_benchmarks_that_compare_with_them() {
        let o = options(&args(&["--srt", "/x/srt", "--srt-proxy", "node p.mjs"])).unwrap();
        assert_eq!(argument_of("sandbox", &o).as_deref(), Some("/x/srt"));
        assert_eq!(argument_of("runs", &o).as_deref(), Some("/x/srt"));
        assert_eq!(argument_of("egress", &o).as_deref(), Some("node p.mjs"));
        assert_eq!(argument_of("gate", &o), None);
        assert_eq!(options(&[]).unwrap(), Options::default());
    }

    #[test]
    fn only_git_and_limits_need_root() {
        let needing: Vec<&str> = BENCHMARKS.iter().copied().filter(|b| cannot_run(b, false).is_some()).collect();
        assert_eq!(needing, ["limits", "git"]);
        assert!(BENCHMARKS.iter().all(|b| cannot_run(b, true).is_none()));
    }

    #[test]
    fn a_bad_argument_is_one_line_naming_what_is_known() {
        let e = options(&args(&["--srt"])).unwrap_err().to_string();
        assert_eq!(e, "--srt needs a value");
        let e = options(&args(&["--fast"])).unwrap_err().to_string();
        assert!(e.contains("unknown argument \"--fast\"") && e.contains("--srt PATH"), "{e}");
        assert!(!e.contains('\n'));
    }
}
