//! Issue 16, item 3 (ATTACKS.md 46): git vectors an agent makes during a launch, for
//! the person who later looks at the copy. `ccctl conversation diff` and `fetch` run
//! none of them, and the agent's commits still arrive; a plain `git status` in the
//! copy, the control, runs them.

use std::path::Path;
use std::process::Command;

use cc_tests::fs::git;
use cc_tests::runs::{fixture, text};

/// Everything the canaries made.
fn ran(outside: &Path) -> Vec<String> {
    let mut found: Vec<String> = std::fs::read_dir(outside)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("ran-"))
        .collect();
    found.sort();
    found
}

#[test]
fn diff_and_fetch_run_nothing_the_agent_wrote_and_the_commits_arrive() {
    let f = fixture(None);
    let outside = f.outside(&[]);
    let run = f.start_run("chat");
    let o = outside.display();
    // The agent, inside its envelope: a nested repository recorded as a gitlink and a
    // new submodule repository under .git/modules, each with core.fsmonitor pointing at
    // a script of its own; a rebase todo list ending in `exec`; and a commit.
    let script = format!(
        "set -e\n\
         printf '#!/bin/sh\\ntouch {o}/ran-$1\\n' > canary.sh && chmod +x canary.sh\n\
         printf '#!/bin/sh\\nexec \"$(dirname \"$0\")/canary.sh\" nested\\n' > nested.sh && chmod +x nested.sh\n\
         printf '#!/bin/sh\\nexec \"$(dirname \"$0\")/canary.sh\" module\\n' > module.sh && chmod +x module.sh\n\
         git init -q sub && git -C sub -c user.name=a -c user.email=a@x commit -q --allow-empty -m sub\n\
         git -C sub config core.fsmonitor \"$PWD/nested.sh\"\n\
         mkdir -p .git/modules && git init -q --separate-git-dir=.git/modules/newmod newmod\n\
         git -C newmod -c user.name=a -c user.email=a@x commit -q --allow-empty -m mod\n\
         git -C newmod config core.fsmonitor \"$PWD/module.sh\"\n\
         git update-index --add --cacheinfo 160000,$(git -C sub rev-parse HEAD),sub\n\
         git update-index --add --cacheinfo 160000,$(git -C newmod rev-parse HEAD),newmod\n\
         echo 'the agent was here' > agent.txt && git add agent.txt canary.sh\n\
         git -c user.name=agent -c user.email=agent@x commit -q -m 'agent work'\n\
         echo 'not committed' >> README.md && echo 'new and untracked' > untracked.txt\n\
         mkdir -p .git/rebase-merge && printf 'exec {o}/../never-run\\n' > .git/rebase-merge/git-rebase-todo\n\
         echo planted"
    );
    let out = f.tool(&run, &["bash", "--", &script]);
    assert!(text(&out).0.contains("planted"), "{}\n{}", text(&out).0, text(&out).1);
    assert!(f.sup.ccctl(&["run", "stop", &run]).status.success());
    assert_eq!(ran(&outside), Vec::<String>::new(), "nothing ran inside the envelope's reach");

    let out = f.sup.ccctl(&["conversation", "diff", &f.conversation]);
    let (diff, err) = text(&out);
    assert!(out.status.success(), "{err}");
    for shown in ["agent.txt", "the agent was here", "not committed", "untracked.txt", "new and untracked"] {
        assert!(diff.contains(shown), "{shown} missing from the diff:\n{diff}");
    }
    assert_eq!(ran(&outside), Vec::<String>::new(), "conversation diff ran the agent's config");

    let checkout = f.checkout.to_str().unwrap();
    let out = f.sup.ccctl(&["conversation", "fetch", &f.conversation, "--into", checkout]);
    assert!(out.status.success(), "{}", text(&out).1);
    assert_eq!(ran(&outside), Vec::<String>::new(), "conversation fetch ran the agent's config");
    let branch = format!("cc/{}", f.conversation);
    assert_eq!(git(&f.checkout, &["log", "-1", "--format=%s", &branch]).trim(), "agent work");
    // The checkout's own branch and files are as they were.
    assert!(!f.checkout.join("agent.txt").exists());
    // Fetching again moves nothing and refuses nothing; a bad branch name is refused.
    assert!(f.sup.ccctl(&["conversation", "fetch", &f.conversation, "--into", checkout]).status.success());
    let bad = f.sup.ccctl(&["conversation", "fetch", &f.conversation, "--into", checkout, "--branch", "-x..y"]);
    assert!(!bad.status.success() && text(&bad).1.starts_with("ccctl: "), "{}", text(&bad).1);

    // The control: the person's plain `git status` in the copy runs the agent's program.
    let copy = f.copy();
    let status = Command::new("git")
        .args(["-c", "safe.directory=*", "-C"])
        .arg(&copy)
        .args(["status", "--short"])
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .unwrap();
    assert!(status.status.success(), "{}", String::from_utf8_lossy(&status.stderr));
    assert!(!ran(&outside).is_empty(), "the control ran nothing: the canaries are not live");
}

/// Issue 16, item 3: the git-worktree backend. Its envelopes show the registered
/// repository's git directory, which its worktree needs (git did not work at all
/// before), read-only but for objects, refs, logs and the worktree's own git dir; the
/// worktree's `.git` file, the shared config and hooks, and the worktree git dir's
/// `commondir` cannot be written; the checkout's files stay out of sight.
#[test]
fn a_git_worktree_envelope_has_its_shared_git_dir_with_config_hooks_and_git_file_read_only() {
    if !cc_tests::privileged("runs as the service user") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let checkout = cc_tests::fs::make_checkout(&tmp.path().join("checkout"));
    let sup = cc_tests::Supervisor::start_on(&tmp.path().join("data"), cc_tests::Options::default());
    assert!(sup.ccctl(&["repo", "add", checkout.to_str().unwrap(), "--name", "demo"]).status.success());
    let out = sup.ccctl(&["conversation", "new", "--repo", "demo", "--worktree-backend", "git-worktree"]);
    assert!(out.status.success(), "{}", text(&out).1);
    let conversation = text(&out).0.trim().to_owned();
    // What the agent writes in the person's repository belongs to the service user, as
    // it would to the person under their own supervisor.
    let common = checkout.join(".git");
    for dir in ["objects", "refs", "logs"] {
        let chown = Command::new("chown").args(["-R", "65534:65534"]).arg(common.join(dir)).status().unwrap();
        assert!(chown.success());
    }
    let config_before = std::fs::read(common.join("config")).unwrap();
    let out = sup.ccctl(&["run", "start", "--conversation", &conversation]);
    assert!(out.status.success(), "{}", text(&out).1);
    let run = text(&out).0.trim().to_owned();
    let admin = common.join(format!("worktrees/cc-{conversation}-demo"));
    let script = format!(
        "git status --short >/dev/null && echo STATUS-OK\n\
         echo x > agent.txt && git add agent.txt && git -c user.name=a -c user.email=a@x commit -qm 'in the worktree' && echo COMMITTED\n\
         (echo '[core] fsmonitor = evil' >> {c}/config) 2>/dev/null && echo WROTE-config\n\
         (touch {c}/hooks/pre-commit) 2>/dev/null && echo WROTE-hook\n\
         (echo x > {c}/commondir) 2>/dev/null && echo WROTE-commondir\n\
         (echo 'gitdir: /tmp/evil' > .git) 2>/dev/null && echo WROTE-gitfile\n\
         (echo /tmp/evil > {a}/commondir) 2>/dev/null && echo WROTE-admin-commondir\n\
         cat {k}/README.md 2>/dev/null && echo READ-checkout\n\
         echo done",
        c = common.display(),
        a = admin.display(),
        k = checkout.display()
    );
    let out = sup.ccctl(&["tool", &run, "bash", "--", &script]);
    let (stdout, stderr) = text(&out);
    assert!(stdout.contains("done"), "{stdout}\n{stderr}");
    assert!(stdout.contains("STATUS-OK") && stdout.contains("COMMITTED"), "git does not work:\n{stdout}\n{stderr}");
    assert!(!stdout.contains("WROTE") && !stdout.contains("READ-"), "{stdout}");
    assert_eq!(std::fs::read(common.join("config")).unwrap(), config_before);
    assert!(!common.join("commondir").exists() && !common.join("hooks/pre-commit").exists());
    assert_eq!(git(&checkout, &["log", "-1", "--format=%s", &format!("cc/{conversation}")]).trim(), "in the worktree");
}
