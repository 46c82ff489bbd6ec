//! The runner's `search` over a 50,000-file tree, side by side with ripgrep on the same
//! tree (target: within 1.5x of rg).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::scale::rounds;
use cc_runner::confine::Roots;

const FILES: usize = 50_000;

pub fn run() -> anyhow::Result<()> {
    let tmp = tempfile::Builder::new().prefix("cc-bench-search-").tempdir()?;
    let root = tmp.path().join("tree");
    for i in 0..rounds(FILES) {
        let dir = root.join(format!("d{:03}/e{:02}", i % 500, (i / 500) % 10));
        if i < 5000 {
            std::fs::create_dir_all(&dir)?;
        }
        let body = if i % 97 == 0 { "fn f() {}\n// NEEDLE here\n" } else { "fn f() {}\nlet x = 1;\n" };
        std::fs::write(dir.join(format!("f{i}.rs")), body)?;
    }
    let roots = Roots::open(vec![(root.clone(), false)])?;
    let ours = || -> anyhow::Result<(Duration, usize)> {
        let t = Instant::now();
        let hits = cc_runner::search::search(&roots, Path::new("."), "NEEDLE", usize::MAX)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        Ok((t.elapsed(), hits.items.len()))
    };
    let rg = || -> anyhow::Result<(Duration, usize)> {
        let t = Instant::now();
        let out = Command::new("rg")
            .args(["-n", "--no-messages", "NEEDLE", "."])
            .current_dir(&root)
            .output()
            .context("rg (ripgrep), the anchor, cannot be run: install it (apt-get install ripgrep)")?;
        Ok((t.elapsed(), String::from_utf8_lossy(&out.stdout).lines().count()))
    };
    let rg_one_thread = || -> anyhow::Result<(Duration, usize)> {
        let t = Instant::now();
        let out = Command::new("rg").args(["-j1", "-n", "--no-messages", "NEEDLE", "."]).current_dir(&root).output()?;
        Ok((t.elapsed(), String::from_utf8_lossy(&out.stdout).lines().count()))
    };
    // Warm the page cache, then take the median of seven runs of each.
    ours()?;
    rg()?;
    let median = |f: &dyn Fn() -> anyhow::Result<(Duration, usize)>| -> anyhow::Result<(Duration, usize)> {
        let mut runs = (0..7).map(|_| f()).collect::<anyhow::Result<Vec<_>>>()?;
        runs.sort();
        Ok(runs[3])
    };
    let (o, oh) = median(&ours)?;
    let (r, rh) = median(&rg)?;
    let (r1, _) = median(&rg_one_thread)?;
    println!(
        "search over {} files: ours {:.1} ms ({oh} hits), rg {:.1} ms ({rh} hits), rg -j1 {:.1} ms; ours/rg {:.2} (target <= 1.5), ours/rg -j1 {:.2}",
        rounds(FILES),
        o.as_secs_f64() * 1e3,
        r.as_secs_f64() * 1e3,
        r1.as_secs_f64() * 1e3,
        o.as_secs_f64() / r.as_secs_f64(),
        o.as_secs_f64() / r1.as_secs_f64()
    );
    let ratio = o.as_secs_f64() / r.as_secs_f64();
    crate::summary::row(
        "search",
        &format!("a search over {} files", rounds(FILES)),
        &format!("`rg` {}; `rg -j1` {}", crate::summary::time(r), crate::summary::time(r1)),
        "≤ 1.5× rg",
        crate::summary::times(ratio),
        Some(ratio <= 1.5),
    );
    Ok(())
}
