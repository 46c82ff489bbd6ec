//! Issue 20: a run's git reaches GitHub only through the gateway, which adds every
//! credential on the way out and asks the gate about each pushed ref. Real git inside
//! a real run's envelope, a real `git http-backend` upstream authorizing each request
//! against tokens of the stand-in GitHub API (`tests/src/gateway_world.rs`).

use std::time::Duration;

use cc_tests::eventually;
use cc_tests::gateway_world::GatewayWorld;
use cc_tests::runs::text;
use nix::sys::signal::Signal;

fn must(out: &std::process::Output, what: &str) -> String {
    let (stdout, stderr) = text(out);
    assert!(out.status.success(), "{what}: exit {:?}\n{stdout}\n{stderr}", out.status.code());
    stdout
}

#[test]
fn every_pushed_ref_is_decided_by_the_gate_and_only_allowed_refs_land() {
    let w = GatewayWorld::new();
    let run = w.start_run();
    let show = text(&w.sup.ccctl(&["run", "show", &run])).0;
    assert!(show.contains("git gateway: bridged as 127.0.0.1:41418"), "{show}");

    // Fetch, then a branch of the agent's: it lands upstream.
    must(&w.bash(&run, "git fetch origin && git rev-parse origin/main"), "fetch");
    let out = w.bash(&run, "git switch -qc feature && echo x > f && git add f && git commit -qm f && git push origin feature 2>&1 && git rev-parse HEAD");
    let stdout = must(&out, "push feature");
    let pushed = stdout.lines().last().unwrap().to_owned();
    assert_eq!(w.upstream_ref("feature").as_deref(), Some(pushed.as_str()));

    // main is refused with git's own words and the gate's reason, in every spelling of
    // the remote; upstream main does not move.
    for remote in ["origin", "git@github.com:octo/project.git", "ssh://git@github.com/octo/project.git"] {
        let out = w.bash(&run, &format!("git push {remote} feature:main"));
        let (_, stderr) = text(&out);
        assert!(!out.status.success(), "{remote}: {stderr}");
        assert!(
            stderr.contains(
                "! [remote rejected] feature -> main (Control Center policy: pushes to main go through a pull request)"
            ),
            "{remote}: {stderr}"
        );
        assert_eq!(w.upstream_ref("main").as_deref(), Some(w.main.as_str()), "{remote}");
    }

    // --atomic with one refused ref lands nothing; without it, the allowed ref lands.
    let out = w.bash(&run, "git branch -q feature2 && git push --atomic origin feature2 feature:main");
    assert!(!out.status.success());
    assert_eq!(w.upstream_ref("feature2"), None, "an atomic push with a refused ref landed: {}", text(&out).1);
    let out = w.bash(&run, "git push origin feature2 feature:main");
    assert!(!out.status.success());
    assert!(w.upstream_ref("feature2").is_some(), "a mixed push's allowed ref did not land: {}", text(&out).1);

    // A force push, a tag, and deleting main follow their rules; deleting a branch of
    // the agent's is allowed.
    let out = w.bash(&run, "git push -f origin HEAD~1:feature");
    assert!(text(&out).1.contains("Control Center policy: history is not rewritten"), "{}", text(&out).1);
    assert_eq!(w.upstream_ref("feature").as_deref(), Some(pushed.as_str()));
    let out = w.bash(&run, "git tag v1 && git push origin v1");
    assert!(text(&out).1.contains("Control Center policy: tags are made by the release job"), "{}", text(&out).1);
    assert_eq!(w.upstream_ref("refs/tags/v1"), None);
    let out = w.bash(&run, "git push origin :main");
    assert!(!out.status.success() && w.upstream_ref("main").is_some(), "{}", text(&out).1);
    must(&w.bash(&run, "git push origin :feature2"), "delete a branch of the agent's");
    assert_eq!(w.upstream_ref("feature2"), None);

    // A repository that is neither the origin nor linked is refused, fetch and push.
    let out = w.bash(&run, "git push https://github.com/octo/other.git feature");
    let (_, stderr) = text(&out);
    assert!(!out.status.success() && stderr.contains("octo/other is neither the origin"), "{stderr}");
    assert!(cc_tests::gateway_world::upstream_ref(&w.tmp.path().join("upstream/octo/other.git"), "feature").is_none());

    // An upstream pre-receive hook that declines: its words reach the agent unchanged.
    let hook = w.upstream.join("hooks/pre-receive");
    std::fs::write(&hook, "#!/bin/sh\necho 'upstream policy: commits must be signed'\nexit 1\n").unwrap();
    std::fs::set_permissions(&hook, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let out = w.bash(&run, "git push origin feature:feature3");
    let (_, stderr) = text(&out);
    assert!(stderr.contains("remote: upstream policy: commits must be signed"), "{stderr}");
    assert!(stderr.contains("pre-receive hook declined"), "{stderr}");
    std::fs::remove_file(&hook).unwrap();

    // Every write token was revoked once its push was done; the read token is the one
    // live token, and it goes with the run.
    let live = w.api.live_tokens();
    assert_eq!(live.len(), 1, "{live:?}");
    assert_eq!(live[0].permissions["contents"], "read");
    assert!(w.api.issued() > 5, "each push had its own write token");
    // Each ref the gateway asked about is a gate decision on record, the refusals too.
    let events = text(&w.sup.ccctl(&["--json", "events"])).0;
    assert!(events.contains("git push: update refs/heads/main on octo/project"), "{events}");
    assert!(events.contains("git push: force-update refs/heads/feature on octo/project"), "{events}");
    assert!(w.sup.ccctl(&["run", "stop", &run]).status.success());
    assert!(w.api.live_tokens().is_empty(), "a token outlived the run");

    // The main job, `ccctl exec`, goes through the same door.
    let checkout = w.tmp.path().join("checkout");
    let exec = |refspec: &str| {
        let script = format!(
            "git -c user.name=a -c user.email=a@example.invalid commit -q --allow-empty -m x && git push origin {refspec}"
        );
        let repo = checkout.to_str().unwrap();
        w.sup.ccctl(&["exec", "--repo", repo, "--worktree-backend", "copy", "--", "sh", "-c", &script])
    };
    let out = exec("HEAD:main");
    let (_, stderr) = text(&out);
    let refused = "[remote rejected] HEAD -> main (Control Center policy: pushes to main go through a pull request)";
    assert!(!out.status.success() && stderr.contains(refused), "{stderr}");
    assert_eq!(w.upstream_ref("main").as_deref(), Some(w.main.as_str()));
    must(&exec("HEAD:from-exec"), "exec's push of a branch");
    assert!(w.upstream_ref("from-exec").is_some());
    assert!(w.api.live_tokens().is_empty(), "a token outlived the exec's run");
}

/// The agent tries to get round the gateway. The envelope has no network of its own
/// and the agent no credential, so nothing it finds can fetch or push upstream.
#[test]
fn the_agent_cannot_get_round_the_gateway() {
    let w = GatewayWorld::new();
    let run = w.start_run();
    let upstream_url = format!("{}/octo/project.git", w.host.base());
    must(&w.bash(&run, "git switch -qc feature && echo x > f && git add f && git commit -qm f"), "commit");
    let refused_before = w.host.refused();

    // A pushurl straight to the upstream, a longer insteadOf, and curl: no route out.
    let out = w.bash(&run, &format!("git config remote.origin.pushurl {upstream_url} && git push origin feature:main"));
    assert!(!out.status.success(), "{}", text(&out).1);
    let out = w.bash(
        &run,
        &format!("git config --unset remote.origin.pushurl; git -c url.{}/.insteadOf=https://github.com/ push origin feature:main", w.host.base()),
    );
    assert!(!out.status.success(), "{}", text(&out).1);
    let out = w.bash(&run, &format!("curl -sS -m 5 {upstream_url}/info/refs?service=git-receive-pack"));
    assert!(!out.status.success(), "curl reached upstream: {}", text(&out).0);
    assert_eq!(w.upstream_ref("main").as_deref(), Some(w.main.as_str()));

    // git credential fill has nothing to give, and no token is anywhere it can read.
    let out = w.bash(&run, "printf 'protocol=https\\nhost=github.com\\n\\n' | git credential fill; echo status=$?");
    assert!(!text(&out).0.contains("password="), "{}", text(&out).0);
    let out = w.bash(
        &run,
        "env; for e in /proc/[0-9]*/environ; do tr '\\0' '\\n' < \"$e\"; done 2>/dev/null; \
         grep -rIl -e 'ghs_' \"$HOME\" . /tmp /run /etc 2>/dev/null | sed 's/^/FOUND:/'; echo searched",
    );
    let (stdout, _) = text(&out);
    assert!(stdout.contains("searched") && !stdout.contains("ghs_") && !stdout.contains("FOUND:"), "{stdout}");

    // The bridge itself only ever answers what the gate allows: a hand-made push of
    // main to the gateway is refused like git's.
    let out = w.bash(&run, "git push http://127.0.0.1:41418/octo/project.git feature:main");
    assert!(text(&out).1.contains("Control Center policy: pushes to main"), "{}", text(&out).1);
    assert_eq!(w.upstream_ref("main").as_deref(), Some(w.main.as_str()));
    assert_eq!(w.host.refused(), refused_before, "nothing reached upstream without a token");
}

/// A run without a credential fetches anonymously; the upstream's refusal reaches
/// git as one line, never as a password prompt, and a push is refused for want of a
/// write token.
#[test]
fn a_run_without_a_credential_is_told_why_and_never_prompted() {
    let w = GatewayWorld::with_credentials(false);
    let run = w.start_run();
    let out = w.bash(&run, "git fetch origin");
    let (_, stderr) = text(&out);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("remote: cc-gateway: upstream answered HTTP 401: Authentication required"), "{stderr}");
    let out = w.bash(&run, "git switch -qc feature && git commit -q --allow-empty -m x && git push origin feature");
    let (_, stderr) = text(&out);
    assert!(!out.status.success() && stderr.contains("no write credential for octo/project"), "{stderr}");
    assert!(stderr.contains("holds no live credential"), "{stderr}");
    assert_eq!(w.upstream_ref("feature"), None);
}

/// Kill -9 the gateway mid-run: it is started again, told the run again, and the
/// run's next push works through the same bridge.
#[test]
fn a_killed_gateway_comes_back_and_the_runs_next_push_works() {
    let w = GatewayWorld::new();
    let run = w.start_run();
    must(&w.bash(&run, "git switch -qc feature && echo x > f && git add f && git commit -qm f"), "commit");
    let gateway = w.sup.helper_pids().into_iter().find(|(n, _)| n == "gateway").unwrap().1;
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(gateway as i32), Signal::SIGKILL).unwrap();
    eventually(Duration::from_secs(10), "a new gateway serves the run", || {
        w.sup.helper_pids().into_iter().any(|(n, pid)| n == "gateway" && pid != gateway)
            && text(&w.sup.ccctl(&["--json", "events"])).0.contains("git_gateway_synced")
    });
    must(&w.bash(&run, "git push origin feature"), "push after the gateway's restart");
    assert!(w.upstream_ref("feature").is_some());
    assert!(w.sup.ccctl(&["run", "stop", &run]).status.success());
    assert!(w.api.live_tokens().is_empty());
}

/// One raw HTTP/1.1 request on the run's gateway socket (as the tests' uid, which the
/// gateway lets in like its own); `send_all`: false stops after `body`'s bytes although
/// `Content-Length` promised `declared`. Returns the status line and the body.
fn raw(socket: &std::path::Path, path: &str, body: &[u8], declared: usize) -> (String, String) {
    use std::io::{Read, Write};
    let mut stream = std::os::unix::net::UnixStream::connect(socket).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: gateway\r\nContent-Type: application/x-git-receive-pack-request\r\n\
         Content-Length: {declared}\r\nConnection: close\r\n\r\n"
    );
    // A refused connection may be answered and closed before the request is written.
    let _ = stream.write_all(head.as_bytes());
    let _ = stream.write_all(body);
    if body.len() < declared {
        let _ = stream.shutdown(std::net::Shutdown::Write);
    }
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let (status, rest) = answer.split_once("\r\n").unwrap_or((&answer, ""));
    let body = rest.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    (status.to_owned(), body.to_owned())
}

fn pkt(line: &str) -> Vec<u8> {
    format!("{:04x}{line}", line.len() + 4).into_bytes()
}

/// Bad input on the wire, straight to the run's socket: each gets one line or git's
/// own report, nothing lands upstream, no write token outlives it, and the gateway
/// keeps serving.
#[test]
fn bad_pushes_on_the_wire_are_refused_and_nothing_lands() {
    let w = GatewayWorld::new();
    let run = w.start_run();
    let socket = w.sup.data_dir.join(format!("gateway/runs/{run}/git.sock"));
    let push = "/octo/project.git/git-receive-pack";
    let zero = "0".repeat(40);
    let command = |name: &str| pkt(&format!("{zero} {} {name}\0report-status side-band-64k\n", w.main));

    for (body, words) in [
        (b"zzzz".to_vec(), "a malformed push"),
        (b"ffff".to_vec(), "a malformed push"),
        (b"0003".to_vec(), "a malformed push"),
        (pkt("not a command\n"), "a malformed push"),
        (pkt(&format!("{zero} {} refs/heads/a..b\0report-status\n", w.main)), "a malformed push"),
        (pkt("push-cert\0report-status\n"), "signed"),
        (command("refs/heads/half")[..20].to_vec(), "ended before its commands were complete"),
    ] {
        let (status, text) = raw(&socket, push, &body, body.len());
        assert!(status.contains(" 400 "), "{body:?}: {status} {text}");
        assert!(
            text.starts_with("cc-gateway: ") && text.contains(words) && text.trim_end().lines().count() == 1,
            "{body:?}: {text}"
        );
    }
    // Ten thousand and one commands.
    let mut many = command("refs/heads/b0");
    many.extend((1..=10_001).flat_map(|i| pkt(&format!("{zero} {} refs/heads/b{i}\n", w.main))));
    let (status, text) = raw(&socket, push, &many, many.len());
    assert!(status.contains(" 400 ") && text.contains("more than 10000 refs"), "{status} {text}");

    // A truncated pack: upstream cannot unpack it, git's report says so, nothing lands.
    let mut truncated = command("refs/heads/truncated");
    truncated.extend_from_slice(b"0000PACK\0\0\0\x02\0\0\0\x03garbage");
    let (status, text) = raw(&socket, push, &truncated, truncated.len());
    assert!(status.contains(" 200 ") && text.contains("unpack") && !text.contains("unpack ok"), "{status} {text:?}");
    // A client that stops mid-pack (its Content-Length promised more).
    let mut stopped = command("refs/heads/stopped");
    stopped.extend_from_slice(b"0000PACK\0\0\0\x02\0\0\0\x03");
    let _ = raw(&socket, push, &stopped, 10 << 20);
    // Paths that are not git's smart protocol.
    for path in ["/octo/project.git/HEAD", "/octo/project.git/objects/info/packs", "/../../etc/passwd/git-receive-pack"]
    {
        let (status, text) = raw(&socket, path, b"", 0);
        assert!(status.contains(" 404 ") && text.starts_with("cc-gateway: "), "{path}: {status} {text}");
    }

    // A run that holds too many connections has the next one closed at once.
    let held: Vec<_> = (0..32).map(|_| std::os::unix::net::UnixStream::connect(&socket).unwrap()).collect();
    let (status, text) = raw(&socket, push, b"0000", 4);
    assert!(status.contains(" 503 ") && text.contains("too many connections"), "a 33rd connection: {status} {text}");
    drop(held);

    assert_eq!(w.upstream_ref("truncated"), None);
    assert_eq!(w.upstream_ref("stopped"), None);
    eventually(Duration::from_secs(10), "every write token is revoked", || w.api.live_tokens().len() == 1);
    // And the door still works.
    must(
        &w.bash(&run, "git switch -qc after && git commit -q --allow-empty -m a && git push origin after"),
        "push after",
    );
    assert!(w.upstream_ref("after").is_some());
}

/// A 200 MB push streams through: the gateway's peak memory stays far below the pack.
#[test]
fn a_200_mb_push_streams_through_the_gateway_in_bounded_memory() {
    let w = GatewayWorld::new();
    let run = w.start_run();
    let out = w.bash(
        &run,
        "git switch -qc big && head -c 200000000 /dev/urandom > big.bin && git add big.bin && git commit -qm big \
         && git push -q origin big && git rev-parse HEAD",
    );
    let pushed = must(&out, "the 200 MB push").lines().last().unwrap().to_owned();
    assert_eq!(w.upstream_ref("big").as_deref(), Some(pushed.as_str()));
    let gateway = w.sup.helper_pids().into_iter().find(|(n, _)| n == "gateway").unwrap().1;
    let status = std::fs::read_to_string(format!("/proc/{gateway}/status")).unwrap();
    let peak_kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
        .unwrap();
    assert!(peak_kib < 64 * 1024, "the gateway's peak RSS was {peak_kib} KiB during a 200 MB push");
    eprintln!("gateway peak RSS during a 200 MB push: {peak_kib} KiB");
}
