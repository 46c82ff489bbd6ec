//! `ccctl audit`: the audit trail, read from the data directory (no supervisor needed,
//! so that a trail can be checked after the fact, or on a copy).

use std::path::Path;

use anyhow::{Context, bail};
use cc_audit::read::{Filter, export, files, last_complete};
use cc_audit::verify::verify;
use clap::Subcommand;
use serde_json::json;

#[derive(Subcommand)]
pub enum AuditAction {
    /// Walk the whole trail; name the first record changed, removed, reordered or inserted
    Verify {
        /// A head you kept (`ccctl audit head`): it must still be in the trail
        #[arg(long)]
        head: Option<String>,
    },
    /// The last record's number and hash: keep it elsewhere, to check the trail against later
    Head,
    /// The records as written, one JSON line each (for a SIEM)
    Export {
        /// Only records at or after this time (RFC 3339, or an age: 1h, 30m)
        #[arg(long)]
        since: Option<String>,
        /// Only records about this run
        #[arg(long)]
        run: Option<String>,
    },
}

pub fn audit(dir: &Path, action: AuditAction, json: bool) -> anyhow::Result<()> {
    if !dir.is_dir() {
        bail!("no audit trail in {} (is [audit] enabled = false?)", dir.display());
    }
    match action {
        AuditAction::Verify { head } => verify_trail(dir, head.as_deref(), json),
        AuditAction::Head => {
            let last = files(dir)?.into_iter().rev().find_map(|(_, path)| last_complete(&path).ok().flatten());
            let Some((record, hash)) = last else { bail!("the audit trail in {} is empty", dir.display()) };
            if json {
                println!("{}", json!({ "seq": record.seq, "hash": hash, "time": record.time }));
            } else {
                println!("{} {hash}", record.seq);
            }
            Ok(())
        }
        AuditAction::Export { since, run } => {
            let since = since.map(|s| since_time(&s)).transpose()?;
            let mut out = std::io::stdout().lock();
            export(dir, &Filter { since, run }, &mut out).context("cannot read the audit trail")?;
            Ok(())
        }
    }
}

fn verify_trail(dir: &Path, kept: Option<&str>, json: bool) -> anyhow::Result<()> {
    let mut contents = Vec::new();
    for (_, path) in files(dir)? {
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        contents.push((name, std::fs::read(&path).with_context(|| format!("cannot read {}", path.display()))?));
    }
    let report = verify(contents.iter().map(|(n, b)| (n.clone(), b.as_slice())), kept);
    let cut: Vec<String> = report.cut_short.iter().map(ToString::to_string).collect();
    if json {
        let head = report.head.as_ref().map(|(seq, hash)| json!({ "seq": seq, "hash": hash }));
        let problem = report.problem.as_ref().map(ToString::to_string);
        println!(
            "{}",
            json!({ "records": report.records, "files": report.files, "head": head, "cut_short": cut, "problem": problem })
        );
    } else {
        for at in &cut {
            println!("{at}: cut short by a crash while it was written; that one record is lost");
        }
    }
    if let Some(problem) = report.problem {
        bail!("the audit trail is not intact: {problem}");
    }
    if !json {
        let head = report.head.map_or_else(|| "none".to_owned(), |(seq, hash)| format!("{seq} {hash}"));
        println!("verified {} records in {} files; head {head}", report.records, report.files);
    }
    Ok(())
}

/// An RFC 3339 time as given, or an age (`1h`) before now, in the trail's spelling.
fn since_time(given: &str) -> anyhow::Result<String> {
    if let Ok(age) = humantime::parse_duration(given) {
        let at = std::time::SystemTime::now().checked_sub(age).context("--since reaches before 1970")?;
        return Ok(humantime::format_rfc3339_millis(at).to_string());
    }
    let at = humantime::parse_rfc3339_weak(given)
        .with_context(|| format!("--since {given:?}: give an RFC 3339 time or an age (1h)"))?;
    Ok(humantime::format_rfc3339_millis(at).to_string())
}
