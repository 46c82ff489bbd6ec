//! Issue 38, item 4: host services a run may reach. `ccctl run start --forward PORT`
//! (or `[runs.forwards]` for a workspace) bridges a host loopback port into the run's
//! envelopes at the same port. The servers are real: Python's `http.server` on the
//! host's loopback, queried with curl from inside the run's envelope.

use std::os::unix::fs::PermissionsExt;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use cc_tests::runs::{Fixture, fixture, text};
use cc_tests::{eventually, wait_with_limit};
use nix::sys::signal::Signal;

/// A real HTTP server on a free port of the host's 127.0.0.1, serving `body` as
/// `/hello.txt`; killed with the test.
struct Server {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = wait_with_limit(&mut self.child, Duration::from_secs(5));
    }
}

fn server(body: &str) -> Server {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("hello.txt"), body).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let child = Command::new("python3")
        .args(["-m", "http.server", &port.to_string(), "--bind", "127.0.0.1", "--directory"])
        .arg(dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("python3");
    eventually(Duration::from_secs(10), "the host's server listening", || {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
    Server { child, port, _dir: dir }
}

/// A supervisor with `rules` and `config`.
fn supervisor(rules: &str, config: &str) -> (Fixture, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = dir.path().join("rules.toml");
    std::fs::write(&path, rules).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    (fixture(Some(&format!("[gate]\nrules = \"{}\"\n\n{config}", path.display()))), dir)
}

fn allow(domain: &str) -> String {
    format!("[[rule]]\neffect = \"access_network\"\ndomain = \"{domain}\"\ndecision = \"allow\"\n")
}

fn start(f: &Fixture, args: &[&str]) -> std::process::Output {
    let mut all = vec!["run", "start", "--conversation", &f.conversation];
    all.extend_from_slice(args);
    f.sup.ccctl(&all)
}

fn bash(f: &Fixture, run: &str, line: &str) -> String {
    let out = f.sup.ccctl(&["tool", run, "bash", "--", line]);
    let (stdout, stderr) = text(&out);
    format!("{stdout}{stderr}")
}

#[test]
fn a_forward_reaches_its_port_and_nothing_else_of_the_host() {
    let (wanted, other) = (server("from the host's database\n"), server("another service\n"));
    // The forward's rule; and, a separate question, the commands' own: curl naming
    // 127.0.0.1 is asked of the gate as network access to that address.
    let rules = format!("{}{}", allow(&format!("localhost:{}", wanted.port)), allow("127.0.0.1"));
    let (f, _rules) = supervisor(&rules, "");
    let out = start(&f, &["--forward", &wanted.port.to_string()]);
    assert!(out.status.success(), "{}", text(&out).1);
    let run = text(&out).0.trim().to_owned();

    // Its port, from inside the envelope, at the same address: the host's server.
    let through = bash(&f, &run, &format!("curl -s -m 5 http://127.0.0.1:{}/hello.txt", wanted.port));
    assert_eq!(through, "from the host's database\n");
    // Any other port of the host's loopback is not there, nor the product's sockets.
    let other_port = bash(&f, &run, &format!("curl -s -m 5 http://127.0.0.1:{}/hello.txt; echo exit=$?", other.port));
    assert!(other_port.ends_with("exit=7\n") && !other_port.contains("another service"), "{other_port}");
    let api = f.sup.data_dir.join("sock/api.sock");
    let product =
        bash(&f, &run, &format!("curl -s -m 5 --unix-socket {} http://127.0.0.1/; echo exit=$?", api.display()));
    assert!(product.ends_with("exit=7\n"), "the supervisor's socket from inside: {product}");

    let show = text(&f.sup.ccctl(&["run", "show", &run])).0;
    let line = format!("forward: 127.0.0.1:{0} in its envelopes is 127.0.0.1:{0} on the host", wanted.port);
    assert!(show.contains(&line), "{show}");
    let diagnosed = text(&f.sup.ccctl(&["diagnose", &run])).0;
    assert!(
        diagnosed.contains("host forwards") && diagnosed.contains(&format!("127.0.0.1:{}", wanted.port)),
        "{diagnosed}"
    );
    // Its connections are recorded, and in the audit trail.
    eventually(Duration::from_secs(10), "the forward's connection recorded", || {
        let events = text(&f.sup.ccctl(&["--json", "run", "events", &run])).0;
        events.contains("\"forward_connection\"") && events.contains(&format!("\"port\":{}", wanted.port))
    });
    let audit = text(&f.sup.ccctl(&["audit", "export", "--run", &run])).0;
    assert!(audit.contains("forward_connection"), "{audit}");

    // kill -9 of the gateway: the new one is told the run's forwards again.
    let gateway = f.sup.helper_pids().into_iter().find(|(n, _)| n == "gateway").unwrap().1;
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(gateway as i32), Signal::SIGKILL).unwrap();
    eventually(Duration::from_secs(20), "the forward through a new gateway", || {
        f.sup.helper_pids().into_iter().any(|(n, pid)| n == "gateway" && pid != gateway)
            && bash(&f, &run, &format!("curl -s -m 5 http://127.0.0.1:{}/hello.txt", wanted.port))
                == "from the host's database\n"
    });
}

#[test]
fn a_forward_is_off_unless_a_rule_allows_it_and_never_for_a_denied_port() {
    let (wanted, denied) = (server("db\n"), server("docker\n"));
    // No rule: access_network asks, and a forward that would ask is refused.
    let (f, _rules) = supervisor("", "");
    let out = start(&f, &["--forward", &wanted.port.to_string()]);
    let err = text(&out).1;
    assert!(!out.status.success(), "{err}");
    assert!(err.contains(&format!("localhost:{} is not forwarded", wanted.port)), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    drop(f);

    // Every network access allowed, one port on the always-deny list, and the
    // workspace's own forward from the configuration.
    let config = format!(
        "[egress]\ntelemetry = [\"localhost:{}\"]\n\n[runs.forwards]\ndefault = [{}]\n",
        denied.port, wanted.port
    );
    let (f, _rules) = supervisor("[[rule]]\neffect = \"access_network\"\ndecision = \"allow\"\n", &config);
    let out = start(&f, &["--forward", &denied.port.to_string()]);
    let err = text(&out).1;
    assert!(!out.status.success() && err.contains("is never forwarded"), "{err}");
    let out = start(&f, &["--forward", "41419"]);
    assert!(!out.status.success() && text(&out).1.contains("one of the run's own bridges"), "{}", text(&out).1);
    let out = start(&f, &[]);
    assert!(out.status.success(), "{}", text(&out).1);
    let run = text(&out).0.trim().to_owned();
    assert_eq!(bash(&f, &run, &format!("curl -s -m 5 http://127.0.0.1:{}/hello.txt", wanted.port)), "db\n");
    let denied_inside =
        bash(&f, &run, &format!("curl -s -m 5 http://127.0.0.1:{}/hello.txt; echo exit=$?", denied.port));
    assert!(denied_inside.ends_with("exit=7\n"), "{denied_inside}");
}
