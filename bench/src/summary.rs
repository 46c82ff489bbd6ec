//! The summary table of `docs/performance.md`, made from a full run rather than by hand.
//!
//! Each benchmark records its headline figures as rows ([`row`]): what was measured,
//! what it stood beside in the same run, the target, the figure and whether it met the
//! target. `cc-bench all` gives each benchmark a file to append them to
//! (`CC_BENCH_SUMMARY`), and writes the table, headed by the machine, the date and the
//! commit, to `target/bench/summary.md`. `cc-bench fold-summary` puts that table into
//! the page between its two markers; nothing else of the page is touched.

use std::io::Write;
use std::path::Path;

use anyhow::{Context, bail};
use serde_json::{Value, json};

/// The variable naming the file a benchmark appends its rows to.
pub const ENV: &str = "CC_BENCH_SUMMARY";
pub const BEGIN: &str =
    "<!-- summary: begin (made by `cc-bench all` and `cc-bench fold-summary`; edit the benchmarks, not this table) -->";
pub const END: &str = "<!-- summary: end -->";

/// One row of the table.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub benchmark: String,
    pub what: String,
    /// What it was measured beside, in the same run (empty: nothing).
    pub anchor: String,
    pub target: String,
    pub measured: String,
    /// None: a figure without a target of its own.
    pub met: Option<bool>,
}

/// Records a row, when the run keeps a summary (a benchmark run alone prints only).
pub fn row(benchmark: &str, what: &str, anchor: &str, target: &str, measured: String, met: Option<bool>) {
    let Some(path) = std::env::var_os(ENV) else { return };
    let line = json!({
        "benchmark": benchmark, "what": what, "anchor": anchor, "target": target,
        "measured": measured, "met": met,
    });
    let appended =
        std::fs::OpenOptions::new().create(true).append(true).open(&path).and_then(|mut file| writeln!(file, "{line}"));
    if let Err(e) = appended {
        eprintln!("cc-bench: cannot record a summary row in {}: {e}", Path::new(&path).display());
    }
}

/// A row for a median that must stay under `limit`: the commonest shape, a time beside
/// an anchor measured in the same run (`anchor` says what and how long; empty for none).
pub fn row_under(benchmark: &str, what: &str, anchor: &str, limit: std::time::Duration, median: std::time::Duration) {
    row(benchmark, what, anchor, &format!("< {}", limit_text(limit)), time(median), Some(median < limit));
}

/// A limit as a person writes it: `1 s`, `5 ms`, `200 µs`.
fn limit_text(limit: std::time::Duration) -> String {
    match limit.as_micros() {
        us if us % 1_000_000 == 0 => format!("{} s", us / 1_000_000),
        us if us % 1_000 == 0 => format!("{} ms", us / 1_000),
        us => format!("{us} µs"),
    }
}

/// A duration as the table shows it: milliseconds, or microseconds under one.
pub fn time(d: std::time::Duration) -> String {
    let ms = d.as_secs_f64() * 1e3;
    if ms >= 100.0 {
        format!("{ms:.0} ms")
    } else if ms >= 1.0 {
        format!("{ms:.2} ms")
    } else {
        format!("{:.0} µs", ms * 1e3)
    }
}

/// A ratio as the table shows it.
pub fn times(ratio: f64) -> String {
    format!("{ratio:.2}×")
}

/// The rows in a file [`row`] appended to; a line that is not a row is an error.
pub fn read_rows(text: &str) -> anyhow::Result<Vec<Row>> {
    let field = |v: &Value, name: &str| v[name].as_str().unwrap_or_default().to_owned();
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .enumerate()
        .map(|(n, line)| {
            let v: Value = serde_json::from_str(line).with_context(|| format!("summary row {} is not JSON", n + 1))?;
            if v["benchmark"].as_str().is_none_or(str::is_empty) {
                bail!("summary row {} names no benchmark", n + 1);
            }
            Ok(Row {
                benchmark: field(&v, "benchmark"),
                what: field(&v, "what"),
                anchor: field(&v, "anchor"),
                target: field(&v, "target"),
                measured: field(&v, "measured"),
                met: v["met"].as_bool(),
            })
        })
        .collect()
}

/// The table, between its markers: `heading` (the machine, the date, the commit), the
/// rows, and a line counting the targets not met.
pub fn render(heading: &str, rows: &[Row]) -> String {
    let cell = |text: &str| text.replace('|', "\\|").replace('\n', " ");
    let mut out = format!("{BEGIN}\n\n{heading}\n\n");
    out.push_str("| benchmark | what | side by side with | target | measured | met |\n|---|---|---|---|---|---|\n");
    for r in rows {
        let met = match r.met {
            Some(true) => "yes",
            Some(false) => "**no**",
            None => "",
        };
        out.push_str(&format!(
            "| `{}` | {} | {} | {} | {} | {met} |\n",
            cell(&r.benchmark),
            cell(&r.what),
            cell(&r.anchor),
            cell(&r.target),
            cell(&r.measured)
        ));
    }
    let missed = rows.iter().filter(|r| r.met == Some(false)).count();
    let judged = rows.iter().filter(|r| r.met.is_some()).count();
    if judged > 0 {
        out.push_str(&format!("\n{} of {judged} targets met in this run.\n", judged - missed));
    }
    out.push_str(&format!("\n{END}\n"));
    out
}

/// `page` with the part between the markers replaced by `table` (which holds them).
pub fn fold(page: &str, table: &str) -> anyhow::Result<String> {
    let begin = page.find(BEGIN).context("the page has no summary begin marker")?;
    let end = page[begin..].find(END).context("the page's summary has no end marker")? + begin + END.len();
    if !table.starts_with(BEGIN) || !table.trim_end().ends_with(END) {
        bail!("the summary is not a table made by cc-bench all");
    }
    Ok(format!("{}{}{}", &page[..begin], table.trim_end(), &page[end..]))
}

/// `cc-bench fold-summary SUMMARY PAGE`.
pub fn fold_files(summary: &Path, page: &Path) -> anyhow::Result<()> {
    let table = std::fs::read_to_string(summary).with_context(|| format!("cannot read {}", summary.display()))?;
    let text = std::fs::read_to_string(page).with_context(|| format!("cannot read {}", page.display()))?;
    let folded =
        fold(&text, &table).with_context(|| format!("cannot fold {} into {}", summary.display(), page.display()))?;
    std::fs::write(page, folded).with_context(|| format!("cannot write {}", page.display()))
}

/// The machine, the date and the commit a run measured, in one line.
pub fn heading() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu =
        cpuinfo.lines().find_map(|l| l.strip_prefix("model name")).map(|l| l.trim_start_matches([' ', '\t', ':']));
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let memory_gib = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kib| kib / (1 << 20) as f64);
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let cgroup = if Path::new("/sys/fs/cgroup/cgroup.controllers").exists() { "v2" } else { "v1" };
    let output = |program: &str, args: &[&str]| {
        std::process::Command::new(program)
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
            .unwrap_or_default()
    };
    let date = output("date", &["-u", "+%Y-%m-%d"]);
    let mut commit = output("git", &["rev-parse", "--short=12", "HEAD"]);
    if !output("git", &["status", "--porcelain", "--untracked-files=no"]).is_empty() {
        commit.push_str(" with uncommitted changes");
    }
    format!(
        "Measured {date} at commit {commit}, on {} ({cores} cores, {memory_gib:.0} GiB), Linux {}, cgroup {cgroup}.",
        cpu.unwrap_or("an unknown CPU"),
        kernel.trim()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_limit_reads_as_a_person_writes_it() {
        use std::time::Duration;
        assert_eq!(limit_text(Duration::from_secs(1)), "1 s");
        assert_eq!(limit_text(Duration::from_millis(5)), "5 ms");
        assert_eq!(limit_text(Duration::from_micros(200)), "200 µs");
        assert_eq!(limit_text(Duration::from_micros(1500)), "1500 µs");
    }

    fn sample() -> Vec<Row> {
        vec![
            Row {
                benchmark: "egress".into(),
                what: "1 GiB through a CONNECT tunnel".into(),
                anchor: "a straight transfer".into(),
                target: "≥ 0.9×".into(),
                measured: "0.95×".into(),
                met: Some(true),
            },
            Row {
                benchmark: "models".into(),
                what: "a | in a cell".into(),
                anchor: String::new(),
                target: "< 1 ms".into(),
                measured: "2 ms".into(),
                met: Some(false),
            },
            Row {
                benchmark: "runs".into(),
                what: "idle memory".into(),
                anchor: String::new(),
                target: String::new(),
                measured: "6 MiB".into(),
                met: None,
            },
        ]
    }

    #[test]
    fn times_and_ratios_read_as_a_person_writes_them() {
        use std::time::Duration;
        assert_eq!(time(Duration::from_micros(180)), "180 µs");
        assert_eq!(time(Duration::from_micros(2_504)), "2.50 ms");
        assert_eq!(time(Duration::from_millis(280)), "280 ms");
        assert_eq!(times(0.9512), "0.95×");
    }

    #[test]
    fn rows_read_back_as_they_were_recorded_and_a_bad_line_is_named() {
        let text: String = sample()
            .iter()
            .map(|r| {
                json!({ "benchmark": r.benchmark, "what": r.what, "anchor": r.anchor, "target": r.target,
                    "measured": r.measured, "met": r.met })
                .to_string()
                    + "\n"
            })
            .collect();
        assert_eq!(read_rows(&text).unwrap(), sample());
        let e = read_rows(&format!("{text}not json\n")).unwrap_err().to_string();
        assert_eq!(e, "summary row 4 is not JSON");
        assert_eq!(read_rows("{\"what\":\"x\"}").unwrap_err().to_string(), "summary row 1 names no benchmark");
    }

    #[test]
    fn the_table_counts_what_was_met_and_escapes_its_cells() {
        let table = render("Measured today.", &sample());
        assert!(table.starts_with(BEGIN) && table.trim_end().ends_with(END), "{table}");
        assert!(
            table
                .contains("| `egress` | 1 GiB through a CONNECT tunnel | a straight transfer | ≥ 0.9× | 0.95× | yes |")
        );
        assert!(table.contains("| `models` | a \\| in a cell |  | < 1 ms | 2 ms | **no** |"), "{table}");
        assert!(table.contains("| `runs` | idle memory |  |  | 6 MiB |  |"), "{table}");
        assert!(table.contains("1 of 2 targets met in this run."), "{table}");
        let unjudged: Vec<Row> = sample().into_iter().map(|r| Row { met: None, ..r }).collect();
        assert!(!render("A quick run.", &unjudged).contains("targets met"));
    }

    #[test]
    fn folding_replaces_only_what_is_between_the_markers_and_again_the_same() {
        let page = format!("# Performance\n\n## Summary\n\n{BEGIN}\nold table\n{END}\n\n## paths\n\nkept\n");
        let table = render("Measured today.", &sample());
        let once = fold(&page, &table).unwrap();
        assert!(
            once.starts_with("# Performance\n\n## Summary\n\n")
                && once.ends_with(&format!("{END}\n\n## paths\n\nkept\n"))
        );
        assert!(!once.contains("old table") && once.contains("0.95×"));
        assert_eq!(fold(&once, &table).unwrap(), once, "folding is idempotent");
        assert!(fold("no markers", &table).unwrap_err().to_string().contains("no summary begin marker"));
        assert!(fold(&page, "hand-written").unwrap_err().to_string().contains("not a table made by cc-bench all"));
    }
}
