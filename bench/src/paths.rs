//! What resolving beneath a root costs without `openat2` (issue 35): cc-host's
//! component walk, side by side with the kernel's `openat2(RESOLVE_BENEATH)` and, as the
//! anchor, a plain `openat` of the same path that checks nothing. Measured in the same
//! run, on the same six-component path, as batches of opens. Target: the walk within
//! 10x of the anchor (it makes one `openat` and one `fstat` a component), since every
//! tool call and bind pays it once per path.

use std::os::fd::AsFd;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::scale::rounds;
use crate::summary;
use cc_host::resolve::{Links, Resolver};
use nix::fcntl::{OFlag, openat};
use nix::sys::stat::Mode;

const BATCH: usize = 1_000;
const PATH: &str = "a/b/c/d/e/file.txt";

pub fn run() -> anyhow::Result<()> {
    let batches = rounds(200);
    let tmp = tempfile::Builder::new().prefix("cc-bench-paths-").tempdir()?;
    std::fs::create_dir_all(tmp.path().join("a/b/c/d/e"))?;
    std::fs::write(tmp.path().join(PATH), "x")?;
    let root = nix::fcntl::open(tmp.path(), OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC, Mode::empty())?;
    let flags = OFlag::O_RDONLY | OFlag::O_CLOEXEC;
    let root = root.as_fd();

    let time = |open: &dyn Fn() -> anyhow::Result<()>| -> anyhow::Result<Vec<Duration>> {
        let mut samples = Vec::with_capacity(batches);
        for _ in 0..batches {
            let started = Instant::now();
            for _ in 0..BATCH {
                open()?;
            }
            samples.push(started.elapsed() / BATCH as u32);
        }
        Ok(samples)
    };
    let anchor = time(&|| openat(root, PATH, flags, Mode::empty()).map(drop).map_err(Into::into))?;
    let beneath = |resolver: Resolver| {
        move || resolver.open(root, Path::new(PATH), flags, Links::StayInside).map(drop).map_err(Into::into)
    };
    let walk = time(&beneath(Resolver::Walk))?;
    let anchor = crate::stats(anchor);
    let walk = crate::stats(walk);
    println!(
        "paths: one open of a six-component path, median of {batches} batches of {BATCH} ({})",
        Resolver::describe()
    );
    crate::report("plain openat (anchor, checks nothing)", &anchor, anchor.median);
    if Resolver::current() == Resolver::Openat2 {
        let kernel = time(&beneath(Resolver::Openat2))?;
        let kernel = crate::stats(kernel);
        crate::report("openat2(RESOLVE_BENEATH)", &kernel, anchor.median * 10);
        println!("walk / openat2: {:.2}", walk.median.as_secs_f64() / kernel.median.as_secs_f64());
    } else {
        println!("openat2 is not available here: the walk is what every path pays");
    }
    crate::report("component walk (target 10x the anchor)", &walk, anchor.median * 10);
    let ratio = walk.median.as_secs_f64() / anchor.median.as_secs_f64();
    println!("walk / anchor: {ratio:.2}");
    summary::row(
        "paths",
        "an open beneath a root by the component walk (where `openat2` is filtered)",
        &format!("a plain `openat` {}", summary::time(anchor.median)),
        "≤ 10× the anchor",
        format!("{} ({ratio:.1}×)", summary::time(walk.median)),
        Some(ratio <= 10.0),
    );
    Ok(())
}
