//! The guides in docs/guides/ cannot rot: every shell block in them is run here, as the
//! reader would run it, against the real binaries and a real supervisor
//! (tests/docs/prelude.sh), or is marked as shown-only with its reason; what a guide
//! shows a block printing is what it printed (`cc_package::shown`).

use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use cc_package::guides;
use cc_package::shown::{self, Paths};
use cc_tests::{bin, privileged, wait_with_limit};

/// A guide is a few minutes of a person's time; far less of a machine's.
const GUIDE_LIMIT: Duration = Duration::from_secs(300);

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the workspace").to_owned()
}

fn guides_dir() -> PathBuf {
    repository().join("docs/guides")
}

fn guide_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(guides_dir())
        .expect("docs/guides")
        .map(|entry| entry.expect("entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == "md"))
        .collect();
    files.sort();
    files
}

#[test]
fn every_guide_in_the_index_exists_and_every_guide_is_in_the_index() {
    let index = std::fs::read_to_string(repository().join("docs/README.md")).expect("docs/README.md");
    let files = guide_files();
    assert!(files.len() >= 9, "the issue asks for nine guides, found {files:?}");
    for file in &files {
        let name = file.file_name().and_then(|n| n.to_str()).expect("name");
        assert!(index.contains(&format!("(guides/{name})")), "docs/README.md does not link guides/{name}");
    }
    for link in index.split("(guides/").skip(1) {
        let name = link.split(')').next().expect("link");
        assert!(guides_dir().join(name).is_file(), "docs/README.md links guides/{name}, which does not exist");
    }
}

#[test]
fn every_shell_block_in_the_guides_is_marked_and_most_run() {
    let (mut runnable, mut shown) = (0, 0);
    for file in guide_files() {
        let text = std::fs::read_to_string(&file).expect("guide");
        let name = file.file_name().and_then(|n| n.to_str()).expect("name");
        let guide = guides::script(name, &text).unwrap_or_else(|e| panic!("docs/guides/{name}: {e}"));
        runnable += guide.runnable;
        shown += guide.shown_only;
    }
    // Shown-only is for what a CI machine cannot do (systemd as PID 1, a model key).
    assert!(runnable > 2 * shown, "{runnable} runnable blocks against {shown} shown-only ones");
}

#[test]
fn the_guides_run() {
    if !privileged("running the guides (their supervisor builds envelopes as root)") {
        return;
    }
    let prelude = repository().join("tests/docs/prelude.sh");
    let bins = bin("ccctl").parent().expect("bin dir").to_owned();
    let work = tempfile::tempdir().expect("tempdir");
    let mut failures = Vec::new();
    for file in guide_files() {
        let name = file.file_name().and_then(|n| n.to_str()).expect("name").to_owned();
        // CC_DOCS_GUIDE=NAME.md runs that guide alone, while writing it.
        if std::env::var("CC_DOCS_GUIDE").is_ok_and(|only| only != name) {
            continue;
        }
        let text = std::fs::read_to_string(&file).expect("guide");
        let guide = guides::script(&name, &text).unwrap_or_else(|e| panic!("docs/guides/{name}: {e}"));
        if guide.runnable == 0 {
            continue;
        }
        let tmp = work.path().join(format!("{name}.tmp"));
        let script = work.path().join(format!("{name}.sh"));
        std::fs::write(&script, &guide.script).expect("script");
        let log = work.path().join(format!("{name}.log"));
        let output = std::fs::File::create(&log).expect("log");
        let mut command = Command::new("bash");
        command
            .arg("-c")
            .arg(r#"source "$1"; source "$2""#)
            .arg("guide")
            .arg(&prelude)
            .arg(&script)
            .env("CC_DOCS_BIN", &bins)
            .env("CC_DOCS_TMP", &tmp)
            .env_remove("CC_DATA_DIR")
            .env_remove("CC_SOCKET")
            .stdin(Stdio::null())
            .stdout(output.try_clone().expect("log"))
            .stderr(output)
            // Its own group: on a timeout, everything the guide started goes with it.
            .process_group(0);
        if guide.no_supervisor {
            command.env("CC_DOCS_NO_SUPERVISOR", "1");
        }
        if guide.unprivileged {
            // As a person who is not root: `nobody`, in a directory of its own.
            let nobody = nix::unistd::User::from_name("nobody").expect("users").expect("a user nobody");
            std::fs::set_permissions(work.path(), std::fs::Permissions::from_mode(0o711)).expect("chmod");
            std::fs::create_dir(&tmp).expect("the guide's directory");
            nix::unistd::chown(&tmp, Some(nobody.uid), Some(nobody.gid)).expect("chown");
            command.uid(nobody.uid.as_raw()).gid(nobody.gid.as_raw());
        }
        let mut child = command.spawn().expect("bash");
        let status = wait_with_limit(&mut child, GUIDE_LIMIT);
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        failures.extend(shown_but_not_printed(&guide, &text, &tmp, &bins));
        if !status.success() {
            let tail: Vec<&str> = text.lines().rev().take(40).collect::<Vec<_>>().into_iter().rev().collect();
            failures.push(format!("docs/guides/{name} failed ({status}); the last lines:\n{}", tail.join("\n")));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// Each block whose `text` block is not what it printed, as `docs/guides/NAME:LINE: …`.
fn shown_but_not_printed(guide: &guides::GuideScript, log: &str, tmp: &Path, bins: &Path) -> Vec<String> {
    let path = |p: &str| tmp.join(p).display().to_string();
    // The binaries where the install guide's "from source" puts them.
    let paths = Paths::default()
        .with(&bins.display().to_string(), "/opt/control-center")
        .with(&path("home"), "/home/me")
        .with(&path("data"), "/var/lib/control-center")
        .with(&tmp.display().to_string(), "/tmp");
    let at: Vec<String> = guide.blocks.iter().map(|b| b.at.clone()).collect();
    let printed: HashMap<String, String> = shown::split(log, &at).into_iter().collect();
    let mut failures = Vec::new();
    for block in &guide.blocks {
        let Some(shown) = &block.shown else { continue };
        let Some(output) = printed.get(&block.at) else { continue };
        if let Err(mismatch) = shown::compare(shown, output, &paths) {
            failures.push(format!("docs/guides/{}: {mismatch}; it printed:\n{output}", block.at));
        }
    }
    failures
}

#[test]
fn every_relative_link_in_the_docs_and_the_readme_leads_somewhere() {
    let mut pages = vec![repository().join("README.md")];
    let mut dirs = vec![repository().join("docs")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("docs dir") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                pages.push(path);
            }
        }
    }
    let mut broken = Vec::new();
    for page in &pages {
        let text = std::fs::read_to_string(page).expect("page");
        for (index, line) in text.lines().enumerate() {
            for link in line.split("](").skip(1) {
                let Some(target) = link.split(')').next() else { continue };
                let target = target.split('#').next().unwrap_or("").trim();
                if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
                    continue;
                }
                if !page.parent().expect("dir").join(target).exists() {
                    let shown = page.strip_prefix(repository()).unwrap_or(page).display().to_string();
                    broken.push(format!("{shown}:{}: {target}", index + 1));
                }
            }
        }
    }
    assert!(broken.is_empty(), "links to nothing:\n{}", broken.join("\n"));
}
