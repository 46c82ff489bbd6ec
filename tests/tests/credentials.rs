//! Issue 20: a run's credentials are leases in the broker, listed without their
//! secrets, revoked when the run ends, and revoked after a crash once the broker is
//! told the live runs. The `static` provider here; the GitHub App flow against a
//! stand-in GitHub API is `broker/tests/github_app.rs`.

use std::time::Duration;

use cc_tests::runs::{fixture, text};
use cc_tests::{Options, Supervisor, eventually, wait_with_limit};
use nix::sys::signal::Signal;

const TOKEN: &str = "dev-secret-token-8f3a";

fn config() -> String {
    format!(
        "[credentials]\nprovider = \"static\"\n[[credentials.static]]\ntoken = \"{TOKEN}\"\n\
         repositories = [\"octo/project\"]\npermissions = {{ contents = \"read\", pull_requests = \"write\" }}\n"
    )
}

fn leases(sup: &Supervisor, run: &str) -> Vec<serde_json::Value> {
    sup.ccctl_json(&["run", "credentials", run]).as_array().cloned().unwrap_or_default()
}

#[test]
fn a_run_holds_a_leased_credential_until_it_ends_and_no_secret_is_shown() {
    let f = fixture(Some(&config()));
    assert!(f.sup.ccctl(&["workspace", "link-repo", "default", "Octo/Project"]).status.success());
    let run = f.start_run("chat");

    let live = leases(&f.sup, &run);
    assert_eq!(live.len(), 1, "{live:?}");
    assert_eq!(live[0]["provider"], "static");
    assert_eq!(live[0]["kind"], "read");
    assert_eq!(live[0]["repositories"], serde_json::json!(["octo/project"]));
    assert_eq!(live[0]["permissions"], serde_json::json!(["contents:read", "pull_requests:write"]));
    assert!(live[0]["revoked"].is_null());
    let plain = text(&f.sup.ccctl(&["run", "credentials", &run])).0;
    assert!(plain.contains("static read [octo/project]") && plain.contains(": live"), "{plain}");

    assert!(f.sup.ccctl(&["run", "stop", &run]).status.success());
    let ended = leases(&f.sup, &run);
    assert!(!ended[0]["revoked"].is_null(), "{ended:?}");
    assert!(ended[0]["revoke_note"].as_str().unwrap().contains("cannot revoke"), "{ended:?}");

    // The secret is nowhere a person or a client can read it.
    let events = text(&f.sup.ccctl(&["--json", "events"])).0;
    assert!(events.contains("credentials_issued") && events.contains("credentials_revoked"), "{events}");
    for shown in [events, plain, serde_json::Value::Array(ended).to_string()] {
        assert!(!shown.contains(TOKEN), "a token leaked: {shown}");
    }
}

#[test]
fn a_run_without_a_github_repository_gets_no_credential_and_says_why() {
    let f = fixture(Some(&config()));
    let run = f.start_run("chat");
    assert!(leases(&f.sup, &run).is_empty());
    let events = text(&f.sup.ccctl(&["--json", "events"])).0;
    assert!(events.contains("the run names no GitHub repository"), "{events}");
}

#[test]
fn credentials_of_a_run_are_revoked_after_its_broker_is_killed() {
    let f = fixture(Some(&config()));
    assert!(f.sup.ccctl(&["workspace", "link-repo", "default", "octo/project"]).status.success());
    let run = f.start_run("chat");
    let broker = f.sup.helper_pids().into_iter().find(|(n, _)| n == "broker").unwrap().1;
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(broker as i32), Signal::SIGKILL).unwrap();
    // Stopped while its broker is down: the run's leases are revoked once it is back.
    assert!(f.sup.ccctl(&["run", "stop", &run]).status.success());
    eventually(Duration::from_secs(10), "the run's lease is revoked", || {
        let out = f.sup.ccctl(&["--json", "run", "credentials", &run]);
        out.status.success()
            && serde_json::from_slice::<serde_json::Value>(&out.stdout)
                .ok()
                .and_then(|v| v.as_array().cloned())
                .is_some_and(|l| !l.is_empty() && l.iter().all(|x| !x["revoked"].is_null()))
    });
}

#[test]
fn a_crashed_supervisor_leaves_no_live_credential() {
    cc_tests::become_subreaper();
    let mut f = fixture(Some(&config()));
    assert!(f.sup.ccctl(&["workspace", "link-repo", "default", "octo/project"]).status.success());
    let run = f.start_run("chat");
    assert!(leases(&f.sup, &run)[0]["revoked"].is_null());
    f.sup.signal(Signal::SIGKILL);
    wait_with_limit(&mut f.sup.child, Duration::from_secs(5));
    // The next supervisor tells its broker the live runs (none): the old run's lease goes.
    let options = Options { config: Some(config()), ..Default::default() };
    let next = Supervisor::start_on(&f.sup.data_dir, options);
    eventually(Duration::from_secs(10), "the crashed run's lease is revoked", || {
        leases(&next, &run).iter().all(|l| !l["revoked"].is_null())
    });
    let events = text(&next.ccctl(&["--json", "events"])).0;
    assert!(events.contains("credentials_synced"), "{events}");
}

/// The GitHub App flow end to end: the supervisor's broker signs its JWT with the App's
/// key, the stand-in GitHub API issues the run's token for the run's repositories, and
/// the token is refused upstream once the run ends.
#[test]
fn a_github_app_token_is_scoped_to_the_run_and_refused_upstream_after_it() {
    let keys = tempfile::tempdir().unwrap();
    let (private, public) = cc_tests::github_api::key_pair(keys.path());
    let api = cc_tests::github_api::GitHubApi::start(public);
    let config = format!(
        "[credentials]\nprovider = \"github-app\"\n[credentials.github_app]\napp_id = \"{}\"\ninstallation_id = {}\n\
         private_key = \"{}\"\napi_base = \"{}\"\n",
        cc_tests::github_api::APP_ID,
        cc_tests::github_api::INSTALLATION,
        private.display(),
        api.base()
    );
    let f = fixture(Some(&config));
    assert!(f.sup.ccctl(&["workspace", "link-repo", "default", "octo/project"]).status.success());
    let run = f.start_run("chat");
    let live = leases(&f.sup, &run);
    assert_eq!((live.len(), live[0]["provider"].as_str()), (1, Some("github-app")), "{live:?}");
    assert!(!live[0]["expires"].is_null(), "GitHub's expiry is recorded");
    let tokens = api.live_tokens();
    assert_eq!(tokens.len(), 1);
    assert_eq!(tokens[0].repositories, ["project"]);
    assert_eq!(tokens[0].permissions["contents"], "read");
    assert_eq!(tokens[0].permissions["pull_requests"], "write");

    assert!(f.sup.ccctl(&["run", "stop", &run]).status.success());
    assert!(api.live_tokens().is_empty(), "every token of the run is refused upstream after it ends");
    assert_eq!(api.issued(), 1);
    assert!(!leases(&f.sup, &run)[0]["revoked"].is_null());
}

/// DESIGN §7: the agent holds no credential of any kind. With a live lease, nothing
/// the run's bash can read (its environment, every process's environment it can see,
/// its home, the work dir, /tmp, /run, /etc) holds the token.
#[test]
fn no_credential_is_reachable_inside_the_runs_envelope() {
    let f = fixture(Some(&config()));
    assert!(f.sup.ccctl(&["workspace", "link-repo", "default", "octo/project"]).status.success());
    let run = f.start_run("chat");
    assert!(leases(&f.sup, &run)[0]["revoked"].is_null(), "the run holds a live lease");
    // The token is spelled in two halves, so the script itself does not contain it.
    let (head, tail) = TOKEN.split_at(8);
    let script = format!(
        "t='{head}''{tail}'; env; for e in /proc/[0-9]*/environ; do tr '\\0' '\\n' < \"$e\"; done 2>/dev/null; \
         grep -rIl -e \"$t\" \"$HOME\" . /tmp /run /etc 2>/dev/null | sed 's/^/FOUND:/'; echo searched"
    );
    let out = f.tool(&run, &["bash", "--", &script]);
    let (stdout, stderr) = text(&out);
    assert!(stdout.contains("searched"), "{stderr}");
    assert!(stdout.contains("PATH="), "the environment was listed: {stdout}");
    assert!(!stdout.contains("FOUND:"), "a file inside the envelope holds the token: {stdout}");
    assert!(!stdout.contains(TOKEN) && !stderr.contains(TOKEN), "the token is inside the envelope: {stdout}");
}
