//! What the package ships besides the binaries works: the man pages render with man(1),
//! and the completions load in bash and complete.

use std::process::Command;

use cc_tests::bin;

#[test]
fn the_man_pages_render() {
    let dir = tempfile::tempdir().expect("tempdir");
    let status = Command::new(bin("cc-package")).arg("man").arg(dir.path()).status().expect("cc-package");
    assert!(status.success());
    let mut pages = Vec::new();
    for section in ["man1", "man5", "man8"] {
        for entry in std::fs::read_dir(dir.path().join(section)).expect("section") {
            pages.push(entry.expect("page").path());
        }
    }
    for expected in ["man1/ccctl.1", "man1/ccctl-run-start.1", "man5/control-center.toml.5", "man8/cc-supervisor.8"] {
        assert!(dir.path().join(expected).is_file(), "{expected} was not made");
    }
    for page in &pages {
        let output = Command::new("man")
            .arg("-l")
            .arg(page)
            .env("MANWIDTH", "100")
            .env("MAN_KEEP_FORMATTING", "0")
            .env("MANPAGER", "cat")
            .env("PAGER", "cat")
            // groff's warnings (bad requests, unknown escapes) go to stderr.
            .env("MANROFFOPT", "-ww")
            .output()
            .expect("man");
        let text = plain(&output.stdout);
        let warnings = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "man -l {}: {warnings}", page.display());
        assert!(text.contains("NAME"), "{} rendered without a NAME section:\n{text}", page.display());
        assert!(warnings.trim().is_empty(), "man -l {} warned: {warnings}", page.display());
    }
    let config = Command::new("man")
        .arg("-l")
        .arg(dir.path().join("man5/control-center.toml.5"))
        .env("MANPAGER", "cat")
        .output()
        .expect("man");
    let config = plain(&config.stdout);
    for key in ["restart.budget", "runs.limits.pids_max", "egress.allow"] {
        assert!(config.contains(key), "control-center.toml(5) does not mention {key}");
    }
}

/// man's output to a pipe, without grotty's overstrikes (`N\bN` for a bold N).
fn plain(bytes: &[u8]) -> String {
    let mut out = String::new();
    for c in String::from_utf8_lossy(bytes).chars() {
        if c == '\u{8}' {
            out.pop();
        } else {
            out.push(c);
        }
    }
    out
}

#[test]
fn the_bash_completions_load_and_complete() {
    let output = Command::new(bin("ccctl")).args(["completions", "bash"]).output().expect("ccctl");
    assert!(output.status.success());
    let dir = tempfile::tempdir().expect("tempdir");
    let script = dir.path().join("ccctl.bash");
    std::fs::write(&script, &output.stdout).expect("script");
    // As bash-completion calls it: COMP_WORDS and COMP_CWORD set, the function named by
    // `complete -p`, then COMPREPLY read.
    let probe = r#"
        set -e
        source "$1"
        complete -p ccctl
        COMP_WORDS=(ccctl ru); COMP_CWORD=1; COMP_LINE="ccctl ru"; COMP_POINT=${#COMP_LINE}
        _ccctl ccctl ru ccctl
        printf 'reply:%s\n' "${COMPREPLY[@]}"
        COMP_WORDS=(ccctl run st); COMP_CWORD=2; COMP_LINE="ccctl run st"; COMP_POINT=${#COMP_LINE}
        _ccctl ccctl st run
        printf 'reply:%s\n' "${COMPREPLY[@]}"
    "#;
    let output = Command::new("bash").arg("-c").arg(probe).arg("probe").arg(&script).output().expect("bash");
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "the completion script does not load: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(text.lines().any(|l| l.starts_with("complete ") && l.ends_with(" -F _ccctl ccctl")), "{text}");
    assert!(text.lines().any(|l| l == "reply:run"), "`ccctl ru<TAB>` does not offer run: {text}");
    for word in ["reply:start", "reply:stop"] {
        assert!(text.lines().any(|l| l == word), "`ccctl run st<TAB>` does not offer {word}: {text}");
    }
}

#[test]
fn completions_exist_for_zsh_and_fish_and_a_bad_shell_is_one_line() {
    for (shell, marker) in [("zsh", "#compdef ccctl"), ("fish", "complete -c ccctl")] {
        let output = Command::new(bin("ccctl")).args(["completions", shell]).output().expect("ccctl");
        assert!(output.status.success(), "{shell}");
        assert!(String::from_utf8_lossy(&output.stdout).contains(marker), "{shell} completions lack {marker}");
    }
    let output = Command::new(bin("ccctl")).args(["completions", "tcsh"]).output().expect("ccctl");
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.starts_with("ccctl: "), "{stderr}");
}

#[test]
fn a_reader_that_goes_away_ends_ccctl_quietly() {
    // `ccctl completions bash | head -1`: the script is far longer than a pipe holds.
    let mut child = Command::new(bin("ccctl"))
        .args(["completions", "bash"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("ccctl");
    let mut stdout = child.stdout.take().expect("stdout");
    let mut first = [0u8; 16];
    std::io::Read::read_exact(&mut stdout, &mut first).expect("some output");
    drop(stdout);
    let output = child.wait_with_output().expect("wait");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(141), "{stderr}");
    assert!(stderr.is_empty(), "a closed pipe made ccctl say: {stderr}");
}
