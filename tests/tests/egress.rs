//! Issue 21, first part: `--network on` through the run's own proxies. Real curl in a
//! real run's envelope, real servers of the test's own on loopback; names resolve
//! through `[egress.resolve]`, so allowed and denied names are tested without the
//! internet.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::time::Duration;

use cc_tests::Options;
use cc_tests::eventually;
use cc_tests::runs::{Fixture, fixture_with, text};
use nix::sys::signal::Signal;

/// An HTTP server on loopback that answers every request with `body`.
fn server(body: &'static str) -> u16 {
    typed_server(body, None)
}

/// [`server`], saying the body's Content-Type when given.
fn typed_server(body: &'static str, content_type: Option<&'static str>) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut conn in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                let mut head = Vec::new();
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match conn.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let typed = content_type.map(|t| format!("Content-Type: {t}\r\n")).unwrap_or_default();
                let answer = format!(
                    "HTTP/1.1 200 OK\r\n{typed}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = conn.write_all(answer.as_bytes());
            });
        }
    });
    port
}

/// The proxies' handshake deadline in these tests: short, so that a slow client's
/// end is seen without waiting ten seconds.
const HANDSHAKE_MS: u64 = 1500;

struct World {
    f: Fixture,
    port: u16,
    other_port: u16,
    /// An allowed server that answers HTML.
    html_port: u16,
}

fn world() -> World {
    world_with(&[])
}

/// A world whose supervisor has these arguments.
fn world_with(args: &[&str]) -> World {
    let port = server("hello from upstream");
    let other_port = server("the other service");
    let html_port = typed_server("<html><body><h1>Docs</h1><p>Use <b>this</b>.</p></body></html>", Some("text/html"));
    let rules = tempfile::NamedTempFile::new().unwrap();
    let (_, rules_path) = rules.keep().unwrap();
    std::fs::write(&rules_path, "[[rule]]\neffect = \"access_network\"\ndecision = \"allow\"\n").unwrap();
    std::fs::set_permissions(&rules_path, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    let config = format!(
        "[gate]\nrules = \"{}\"\n\n[egress]\nallow = [\"allowed.example.test\", \"*.wild.example.test\", \"rebind.example.test\", \
         \"127.0.0.1:{port}\", \"127.0.0.1:{html_port}\", \"telemetry.example.test\"]\ntelemetry = [\"telemetry.example.test\"]\n\
         handshake_timeout_ms = {HANDSHAKE_MS}\n\
         [egress.resolve]\n\"allowed.example.test\" = [\"127.0.0.1\"]\n\"a.wild.example.test\" = [\"127.0.0.1\"]\n\
         \"rebind.example.test\" = [\"127.0.0.1\"]\n\"example.test\" = [\"127.0.0.1\"]\n\"other.example.test\" = [\"127.0.0.1\"]\n\
         \"ws.example.test\" = [\"127.0.0.1\"]\n",
        rules_path.display()
    );
    let options =
        Options { config: Some(config), args: args.iter().map(|a| (*a).to_owned()).collect(), ..Default::default() };
    World { f: fixture_with(options), port, other_port, html_port }
}

impl World {
    fn run(&self, network: &str) -> String {
        let f = &self.f;
        let out = f.sup.ccctl(&["run", "start", "--conversation", &f.conversation, "--network", network]);
        assert!(out.status.success(), "{}", text(&out).1);
        text(&out).0.trim().to_owned()
    }

    fn bash(&self, run: &str, script: &str) -> (String, String) {
        let out = self.f.tool(run, &["bash", "--", script]);
        text(&out)
    }
}

#[test]
fn an_allowed_name_works_on_every_proxy_path_and_the_rest_is_refused() {
    let w = world();
    let run = w.run("on");
    let (port, other) = (w.port, w.other_port);

    // Through the environment's proxy (absolute-form), CONNECT and SOCKS5 with names.
    let script = format!(
        "curl -sS -m 10 http://allowed.example.test:{port}/; echo\n\
         curl -sS -m 10 --proxytunnel http://allowed.example.test:{port}/; echo\n\
         curl -sS -m 10 -x socks5h://127.0.0.1:41081 http://allowed.example.test:{port}/; echo\n\
         curl -sS -m 10 http://a.wild.example.test:{port}/; echo"
    );
    let (stdout, stderr) = w.bash(&run, &script);
    assert_eq!(stdout.matches("hello from upstream").count(), 4, "{stdout}\n{stderr}");

    // Off the list, each path: 403 with the reason header, or SOCKS reply 2.
    // Through the proxy even for loopback literals (NO_PROXY exempts the envelope's own
    // loopback, where the bridges are).
    let code = |url: &str| {
        format!(
            "curl -s -o /dev/null -D - -m 10 --noproxy '' -x http://127.0.0.1:41080 {url} | tr -d '\\r' \
             | grep -i -e '^HTTP/' -e '^x-cc-egress-denied'"
        )
    };
    let (stdout, _) = w.bash(&run, &format!("{}\necho ---", code(&format!("http://other.example.test:{port}/"))));
    assert!(stdout.contains("403") && stdout.contains("not_on_allowlist"), "{stdout}");
    for host in ["example.test", "badexample.test", "example.test.evil.test"] {
        let (stdout, _) = w.bash(&run, &code(&format!("http://{host}:{port}/")));
        assert!(stdout.contains("403"), "{host}: {stdout}");
    }
    let (stdout, _) = w.bash(
        &run,
        &format!("curl -sS -m 10 -x socks5h://127.0.0.1:41081 http://other.example.test:{port}/; echo exit=$?"),
    );
    assert!(stdout.contains("exit=97"), "SOCKS refusal: {stdout}");
    let (stdout, _) =
        w.bash(&run, &format!("curl -sS -m 10 --proxytunnel http://other.example.test:{port}/; echo exit=$?"));
    assert!(stdout.contains("exit=56"), "CONNECT refusal: {stdout}");

    // Metadata and loopback in their spellings; a host on both lists; an allowed name
    // that resolves inward on a port nobody allowed (rebinding).
    for url in [
        "http://169.254.169.254/".to_owned(),
        "http://2852039166/".to_owned(),
        "http://0xa9.0xfe.0xa9.0xfe/".to_owned(),
        "http://[::ffff:169.254.169.254]/".to_owned(),
        "http://metadata.google.internal/".to_owned(),
        "http://telemetry.example.test/".to_owned(),
        format!("http://127.0.0.1:{other}/"),
        format!("http://0x7f.1:{other}/"),
        format!("http://rebind.example.test:{other}/"),
    ] {
        let (stdout, _) = w.bash(&run, &code(&url));
        assert!(stdout.contains("403"), "{url}: {stdout}");
        assert!(
            ["always_denied", "internal_address", "not_on_allowlist"].iter().any(|c| stdout.contains(c)),
            "{url}: {stdout}"
        );
    }

    // Without the proxy there is no network at all.
    let (stdout, _) = w.bash(
        &run,
        &format!(
            "env -i /usr/bin/curl -sS -m 5 http://127.0.0.1:{port}/; echo curl=$?\n\
             bash -c 'echo > /dev/tcp/127.0.0.1/{port}' 2>/dev/null; echo tcp=$?\n\
             python3 -c \"import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.sendto(b'x', ('8.8.8.8', 53))\" 2>/dev/null; echo udp=$?"
        ),
    );
    assert!(!stdout.contains("hello from upstream"), "{stdout}");
    assert!(stdout.contains("tcp=1") && !stdout.contains("curl=0"), "{stdout}");
    assert!(!stdout.contains("udp=0"), "a UDP datagram left the envelope: {stdout}");
}

#[test]
fn a_run_with_its_network_off_is_refused_by_its_proxies() {
    let w = world();
    let run = w.run("off");
    let (stdout, _) = w.bash(
        &run,
        &format!(
            "curl -s -D - -o /dev/null -m 10 http://allowed.example.test:{}/ | tr -d '\\r' | grep -i x-cc-egress",
            w.port
        ),
    );
    assert!(stdout.contains("network_off"), "{stdout}");
}

#[test]
fn a_killed_gateway_comes_back_with_the_runs_allowlist() {
    let w = world();
    let run = w.run("on");
    let gateway = w.f.sup.helper_pids().into_iter().find(|(n, _)| n == "gateway").unwrap().1;
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(gateway as i32), Signal::SIGKILL).unwrap();
    eventually(Duration::from_secs(10), "a new gateway serves the run", || {
        w.f.sup.helper_pids().into_iter().any(|(n, pid)| n == "gateway" && pid != gateway)
            && text(&w.f.sup.ccctl(&["--json", "events"])).0.contains("git_gateway_synced")
    });
    let (stdout, stderr) = w.bash(&run, &format!("curl -sS -m 10 http://allowed.example.test:{}/", w.port));
    assert!(stdout.contains("hello from upstream"), "{stdout}\n{stderr}");
    let (stdout, _) =
        w.bash(&run, &format!("curl -s -o /dev/null -w '%{{http_code}}' -m 10 http://other.example.test:{}/", w.port));
    assert_eq!(stdout.trim(), "403");
    // The runner's web_fetch finds the new gateway's socket in the same directory.
    let out = w.f.tool(&run, &["web-fetch", &format!("http://allowed.example.test:{}/", w.port)]);
    assert_eq!(text(&out).0, "hello from upstream\n", "{}", text(&out).1);
}

/// The runner's web_fetch: through the run's own proxy, decided like any connection,
/// HTML as Markdown or as it came, cut at a byte limit, and absent with the network off.
#[test]
fn web_fetch_goes_through_the_runs_proxy() {
    let w = world();
    let html = w.html_port;
    let run = w.run("on");
    let fetch = |run: &str, args: &[&str]| text(&w.f.tool(run, &[&["web-fetch"], args].concat()));
    let (markdown, stderr) = fetch(&run, &[&format!("http://allowed.example.test:{html}/docs")]);
    assert!(markdown.contains("# Docs") && markdown.contains("**this**"), "{markdown}\n{stderr}");
    assert!(stderr.contains("200 text/html"), "{stderr}");
    let (raw, _) = fetch(&run, &["--text", &format!("http://allowed.example.test:{html}/docs")]);
    assert!(raw.starts_with("<html>"), "{raw}");
    let (cut, stderr) = fetch(&run, &["--max-bytes", "5", &format!("http://allowed.example.test:{}/", w.port)]);
    assert_eq!(cut, "hello\n");
    assert!(stderr.contains("past --max-bytes"), "{stderr}");

    // Refused by the proxy, with its reason; a URL that is not http(s); each one line.
    let out = w.f.tool(&run, &["web-fetch", &format!("http://other.example.test:{}/", w.port)]);
    let (_, stderr) = text(&out);
    assert!(!out.status.success() && stderr.contains("not_on_allowlist"), "{stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    for bad in ["file:///etc/passwd", "http://user:pw@allowed.example.test/"] {
        let out = w.f.tool(&run, &["web-fetch", bad]);
        assert!(!out.status.success() && text(&out).1.trim_end().lines().count() == 1, "{bad}: {}", text(&out).1);
    }
    let denied = w.f.sup.await_event(Duration::from_secs(10), |e| {
        e.kind == "egress_denied" && cc_tests::payload(e)["host"] == "other.example.test"
    });
    assert_eq!(denied.subject, format!("run:{run}"));

    // A run whose network is off has no web_fetch.
    let off = w.run("off");
    let out = w.f.tool(&off, &["web-fetch", &format!("http://allowed.example.test:{}/", w.port)]);
    let (_, stderr) = text(&out);
    assert!(!out.status.success() && stderr.contains("egress"), "{stderr}");
    assert!(!text(&w.f.tool(&off, &["list"])).0.contains("web_fetch"));
}

/// A workspace's own entries: added and removed with one-line refusals, shown with their
/// source by `ccctl policy show`, and read by runs when they start (not after).
#[test]
fn a_workspace_allowlist_is_read_by_runs_that_start_after_it() {
    let w = world();
    let refused = |out: std::process::Output, entry: &str| {
        let (_, stderr) = text(&out);
        assert!(!out.status.success() && stderr.starts_with("ccctl: ") && stderr.contains(entry), "{stderr}");
        assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    };
    let before = w.run("on");
    let sup = &w.f.sup;
    let out = sup.ccctl(&["workspace", "egress", "default", "add", "WS.Example.Test."]);
    assert!(out.status.success(), "{}", text(&out).1);
    assert_eq!(text(&sup.ccctl(&["workspace", "egress", "default", "list"])).0, "ws.example.test\n");
    refused(sup.ccctl(&["workspace", "egress", "default", "add", "ws.example.test"]), "ws.example.test");
    refused(sup.ccctl(&["workspace", "egress", "default", "rm", "nope.example.test"]), "nope.example.test");
    for bad in ["*", "*.com", "*.co.uk", "exa mple.test"] {
        let out = sup.ccctl(&["workspace", "egress", "default", "add", bad]);
        assert!(!out.status.success() && text(&out).1.trim_end().lines().count() == 1, "{bad}: {}", text(&out).1);
    }
    let shown = text(&sup.ccctl(&["policy", "show", "--workspace", "default"])).0;
    for (entry, source) in [
        ("api.anthropic.com", "base:llm"),
        ("github.com", "github"),
        ("allowed.example.test", "config ([egress] allow)"),
        ("ws.example.test", "workspace:default"),
        ("169.254.169.254", "cloud metadata (built in)"),
        ("telemetry.example.test", "config ([egress] telemetry)"),
    ] {
        assert!(shown.lines().any(|l| l.contains(entry) && l.contains(source)), "{entry} ({source}):\n{shown}");
    }

    let after = w.run("on");
    let fetch = format!("curl -s -o /dev/null -w '%{{http_code}}' -m 10 http://ws.example.test:{}/", w.port);
    assert_eq!(w.bash(&after, &fetch).0.trim(), "200");
    assert_eq!(w.bash(&before, &fetch).0.trim(), "403", "a run reads its allowlist once, at its start");
    assert!(sup.ccctl(&["workspace", "egress", "default", "rm", "ws.example.test"]).status.success());
    assert!(text(&sup.ccctl(&["workspace", "egress", "default", "list"])).0.is_empty());
}

/// Every refusal is an `egress_denied` event naming host, port and rule; what was
/// allowed is counted per destination in `ccctl run show`.
#[test]
fn denials_become_events_and_traffic_is_counted_per_destination() {
    let w = world();
    let sup = &w.f.sup;
    let run = w.run("on");
    let port = w.port;
    let (stdout, _) = w.bash(
        &run,
        &format!(
            "curl -sS -m 10 http://allowed.example.test:{port}/; echo\n\
             curl -sS -m 10 -x socks5h://127.0.0.1:41081 http://allowed.example.test:{port}/; echo\n\
             curl -s -o /dev/null -m 10 http://other.example.test:{port}/\n\
             curl -s -o /dev/null -m 10 http://other.example.test:{port}/"
        ),
    );
    assert_eq!(stdout.matches("hello from upstream").count(), 2, "{stdout}");
    let denied = sup.await_event(Duration::from_secs(10), |e| {
        e.kind == "egress_denied" && cc_tests::payload(e)["host"] == "other.example.test"
    });
    let p = cc_tests::payload(&denied);
    assert_eq!((p["port"].as_u64(), p["rule"].as_str()), (Some(port.into()), Some("not_on_allowlist")), "{p}");
    assert_eq!(denied.subject, format!("run:{run}"));

    // Both connections and their bytes, once both tunnels have closed and been reported.
    let mut shown = serde_json::Value::Null;
    eventually(Duration::from_secs(10), "the run's traffic is counted", || {
        shown = sup.ccctl_json(&["run", "show", &run]);
        let traffic = shown["egress_traffic"].as_array().cloned().unwrap_or_default();
        let of = |host: &str| traffic.iter().find(|t| t["host"] == host).cloned().unwrap_or_default();
        let (allowed, other) = (of("allowed.example.test"), of("other.example.test"));
        allowed["connections"] == 2
            && allowed["bytes_received"].as_u64().unwrap_or(0) > 2 * "hello from upstream".len() as u64
            && allowed["bytes_sent"].as_u64().unwrap_or(0) > 0
            && other["denied"] == 2
            && other["connections"] == 0
    });
    let human = text(&sup.ccctl(&["run", "show", &run])).0;
    assert!(
        human.lines().any(|l| l.contains(&format!("allowed.example.test:{port}")) && l.contains("2 connections")),
        "{human}"
    );

    // A run whose network is off is refused and recorded all the same.
    let off = w.run("off");
    w.bash(&off, &format!("curl -s -o /dev/null -m 10 http://allowed.example.test:{port}/"));
    let refused =
        sup.await_event(Duration::from_secs(10), |e| e.kind == "egress_denied" && e.subject == format!("run:{off}"));
    assert_eq!(cc_tests::payload(&refused)["rule"], "network_off");
}

/// A hostile run's requests: control bytes and over-long names in CONNECT targets and
/// SOCKS names are refused; a run holding more tunnels than its cap gets 503 past it,
/// and another run is served all the while.
#[test]
fn hostile_requests_are_refused_and_one_run_cannot_starve_another() {
    let w = world();
    let (greedy, other) = (w.run("on"), w.run("on"));
    let port = w.port;
    let long = "a".repeat(300);
    let script = format!(
        r#"
import socket
def ask(raw, proxy=41080):
    s = socket.create_connection(("127.0.0.1", proxy), timeout=10)
    s.sendall(raw)
    data = b""
    try:
        while b"\r\n\r\n" not in data and len(data) < 4096:
            chunk = s.recv(4096)
            if not chunk: break
            data += chunk
    except OSError:
        pass
    s.close()
    return data
def http(target):
    data = ask(b"CONNECT " + target + b" HTTP/1.1\r\nHost: x\r\n\r\n")
    line = data.split(b"\r\n")[0].decode(errors="replace")
    reason = [l for l in data.split(b"\r\n") if l.lower().startswith(b"x-cc-egress-denied")]
    print("http", line.split(" ")[1] if " " in line else "closed", reason[0].decode() if reason else "-")
def socks(name):
    data = ask(b"\x05\x01\x00" + b"\x05\x01\x00\x03" + bytes([len(name)]) + name + ({port}).to_bytes(2, "big"), 41081)
    print("socks", data[3] if len(data) > 3 else "closed")
http(b"allowed.example.test\r\nX: y:{port}")
http(b"allowed.example.test\x00.evil.test:{port}")
http(b"allowed.example.test%25eth0:{port}")
http(b"{long}.test:{port}")
socks(b"allowed.example.test\r\n")
socks(b"allowed\x00.example.test")
socks(b"{long_socks}")
http(b"allowed.example.test:{port}")
"#,
        long_socks = "a".repeat(255),
    );
    let (stdout, stderr) = w.bash(&greedy, &format!("python3 - <<'PY'\n{script}\nPY"));
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 8, "{stdout}\n{stderr}");
    for line in &lines[..4] {
        assert!(line.starts_with("http 400") || line.starts_with("http 403"), "{stdout}");
    }
    for line in &lines[4..7] {
        assert!(line.starts_with("socks ") && *line != "socks 0" && *line != "socks closed", "{stdout}");
    }
    assert!(lines[7].starts_with("http 200"), "the same run is still served: {stdout}");

    // 500 tunnels at once from the greedy run (held by the test, on the run's own
    // socket): the cap's worth are established, every one past it is a 503.
    let socket = w.f.sup.data_dir.join("gateway/runs").join(&greedy).join("http.sock");
    // The test holds 500 sockets and its server 256 more: past a 1024 soft limit.
    let (_, hard) = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE).unwrap();
    nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE, hard, hard).unwrap();
    let mut held = Vec::new();
    for _ in 0..500 {
        let mut s = std::os::unix::net::UnixStream::connect(&socket).unwrap();
        s.write_all(format!("CONNECT allowed.example.test:{port} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes()).unwrap();
        held.push(s);
    }
    let mut answers = std::collections::BTreeMap::<String, usize>::new();
    for s in &mut held {
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut buf = [0u8; 512];
        let n = s.read(&mut buf).unwrap_or(0);
        let head = String::from_utf8_lossy(&buf[..n]);
        *answers.entry(head.split(' ').nth(1).unwrap_or("closed").to_owned()).or_default() += 1;
    }
    assert_eq!(answers.get("200"), Some(&256), "{answers:?}");
    assert_eq!(answers.get("503"), Some(&244), "{answers:?}");

    // Meanwhile the other run is served, and the greedy one is refused at its cap.
    let fetch = format!("curl -s -o /dev/null -w '%{{http_code}}' -m 10 http://allowed.example.test:{port}/");
    assert_eq!(w.bash(&other, &fetch).0.trim(), "200");
    assert_eq!(w.bash(&greedy, &fetch).0.trim(), "503");
    let refused = w.f.sup.await_event(Duration::from_secs(10), |e| {
        e.kind == "egress_denied" && cc_tests::payload(e)["rule"] == "too_many_connections"
    });
    assert_eq!(refused.subject, format!("run:{greedy}"));
    drop(held);
    eventually(Duration::from_secs(10), "the greedy run's tunnels are given back", || {
        w.bash(&greedy, &fetch).0.trim() == "200"
    });
}

/// Without an envelope (backend none) the run's proxies listen on host loopback ports,
/// and a process without the run's credential is refused there; the run's own
/// environment carries the credential. A killed gateway binds the same ports again.
#[test]
fn without_an_envelope_the_proxies_need_the_runs_credential() {
    let w = world_with(&["--sandbox", "off"]);
    let run = w.run("on");
    let port = w.port;
    let (proxy, _) = w.bash(&run, "printf %s \"$HTTPS_PROXY\"");
    let rest = proxy.strip_prefix("http://cc-run:").unwrap_or_else(|| panic!("HTTPS_PROXY is {proxy:?}"));
    let (password, address) = rest.split_once('@').unwrap();
    assert!(address.starts_with("127.0.0.1:"), "{proxy}");
    let (socks, _) = w.bash(&run, "printf %s \"$ALL_PROXY\"");
    let socks_address = socks.rsplit_once('@').unwrap().1.to_owned();

    // The run, through its environment: allowed names work, others are refused.
    let (stdout, stderr) = w.bash(
        &run,
        &format!(
            "curl -sS -m 10 -p http://allowed.example.test:{port}/; echo\n\
             curl -sS -m 10 -x \"$ALL_PROXY\" http://allowed.example.test:{port}/; echo\n\
             curl -s -o /dev/null -w '%{{http_code}}' -m 10 http://other.example.test:{port}/"
        ),
    );
    assert_eq!(stdout.matches("hello from upstream").count(), 2, "{stdout}\n{stderr}");
    assert!(stdout.trim_end().ends_with("403"), "{stdout}");

    // Another process of the host: no credential, a wrong one, then the right one.
    let curl = |args: &[&str]| {
        let out = std::process::Command::new("curl").args(["-s", "-m", "10"]).args(args).output().unwrap();
        (String::from_utf8_lossy(&out.stdout).into_owned(), out.status.code())
    };
    let url = format!("http://allowed.example.test:{port}/");
    let code = |proxy: &str| curl(&["-o", "/dev/null", "-w", "%{http_code}", "-x", proxy, &url]).0;
    assert_eq!(code(&format!("http://{address}")), "407");
    assert_eq!(code(&format!("http://cc-run:{}@{address}", "0".repeat(64))), "407");
    assert_eq!(code(&format!("http://someone:{password}@{address}")), "407");
    let (_, exit) = curl(&["-x", &format!("socks5h://{socks_address}"), &url]);
    assert_eq!(exit, Some(97), "SOCKS without the credential: curl cannot authenticate");
    assert_eq!(code(&format!("http://cc-run:{password}@{address}")), "200", "the credential is what admits");
    let out = w.f.tool(&run, &["web-fetch", &format!("http://allowed.example.test:{port}/")]);
    assert_eq!(text(&out).0, "hello from upstream\n", "web_fetch of an unwrapped run: {}", text(&out).1);
    let refused = w.f.sup.await_event(Duration::from_secs(10), |e| {
        e.kind == "egress_denied" && cc_tests::payload(e)["rule"] == "proxy_auth_required"
    });
    assert_eq!(refused.subject, format!("run:{run}"));
    // Whoever asked without the credential may not be the run: the host it named is
    // not written into the run's record.
    assert_eq!(cc_tests::payload(&refused)["host"], "(unauthenticated)");

    // Kill -9 the gateway: the next one listens on the same ports with the same credential.
    let gateway = w.f.sup.helper_pids().into_iter().find(|(n, _)| n == "gateway").unwrap().1;
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(gateway as i32), Signal::SIGKILL).unwrap();
    eventually(Duration::from_secs(10), "the run's loopback proxy serves again", || {
        w.f.sup.helper_pids().into_iter().any(|(n, pid)| n == "gateway" && pid != gateway)
            && code(&format!("http://cc-run:{password}@{address}")) == "200"
    });
    assert_eq!(code(&format!("http://{address}")), "407");
}

/// A run without an envelope whose loopback proxy port another process takes while
/// the gateway restarts is stopped: its proxy variables would point at that process.
#[test]
fn a_taken_loopback_port_stops_the_run() {
    let w = world_with(&["--sandbox", "off"]);
    let run = w.run("on");
    let (proxy, _) = w.bash(&run, "printf %s \"$HTTPS_PROXY\"");
    let port: u16 = proxy.rsplit_once(':').and_then(|(_, p)| p.parse().ok()).unwrap_or_else(|| panic!("{proxy}"));
    let gateway = w.f.sup.helper_pids().into_iter().find(|(n, _)| n == "gateway").unwrap().1;
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(gateway as i32), Signal::SIGKILL).unwrap();
    // Taken before the supervisor's restart backoff (100 ms) has passed.
    let squatter = eventually_bound(port);
    let ended =
        w.f.sup.await_event(Duration::from_secs(20), |e| e.kind == "run_ended" && e.subject == format!("run:{run}"));
    let reason = cc_tests::payload(&ended)["reason"].as_str().unwrap_or_default().to_owned();
    assert!(reason.contains("loopback proxy port"), "{reason}");
    drop(squatter);
}

/// Binds `127.0.0.1:port` as soon as the dead gateway's listener is gone.
fn eventually_bound(port: u16) -> TcpListener {
    let mut bound = None;
    eventually(Duration::from_secs(5), "the dead gateway's port is free", || {
        bound = TcpListener::bind(("127.0.0.1", port)).ok();
        bound.is_some()
    });
    bound.unwrap()
}

/// Slow clients: one that sends half a request and waits, one that trickles a byte at
/// a time, and a SOCKS client that stops after its greeting are each cut at the
/// handshake deadline (the whole request's, not each read's), recorded, and another
/// run is served meanwhile.
#[test]
fn slow_clients_are_cut_at_the_handshake_deadline() {
    let w = world();
    let (slow, other) = (w.run("on"), w.run("on"));
    let script = r#"
import socket, threading, time
def client(name, first, trickle=b"", proxy=41080):
    s = socket.create_connection(("127.0.0.1", proxy), timeout=30)
    s.sendall(first)
    start = time.monotonic()
    def drip():
        for b in trickle:
            try:
                s.sendall(bytes([b])); time.sleep(0.1)
            except OSError:
                return
    threading.Thread(target=drip, daemon=True).start()
    data = b""
    while True:
        try:
            chunk = s.recv(4096)
        except OSError:
            break
        if not chunk: break
        data += chunk
    elapsed = time.monotonic() - start
    print(name, data.split(b"\r\n")[0].decode(errors="replace") or "closed", round(elapsed, 1))
threads = [
    threading.Thread(target=client, args=("half", b"CONNECT allowed.example.test:80 HTTP/1.1\r\n")),
    threading.Thread(target=client, args=("trickle", b"C", b"ONNECT allowed.example.test:80 HTTP/1.1\r\nHost: x" * 3)),
    threading.Thread(target=client, args=("socks", b"\x05\x01\x00", b"", 41081)),
]
for t in threads: t.start()
for t in threads: t.join()
"#;
    let fetch = format!("curl -s -o /dev/null -w '%{{http_code}}' -m 10 http://allowed.example.test:{}/", w.port);
    let (out, served) = std::thread::scope(|scope| {
        let slow_clients = scope.spawn(|| w.bash(&slow, &format!("python3 - <<'PY'\n{script}\nPY")));
        let served = w.bash(&other, &fetch).0;
        (slow_clients.join().unwrap(), served)
    });
    assert_eq!(served.trim(), "200", "another run is served while these wait");
    let (stdout, stderr) = out;
    let limit = HANDSHAKE_MS as f64 / 1000.0;
    for name in ["half", "trickle", "socks"] {
        let line = stdout.lines().find(|l| l.starts_with(name)).unwrap_or_else(|| panic!("{name}: {stdout}\n{stderr}"));
        let elapsed: f64 = line.rsplit(' ').next().unwrap().parse().unwrap();
        assert!(elapsed >= limit - 0.2 && elapsed < limit + 5.0, "{line}");
        if name != "socks" {
            assert!(line.contains("408"), "{line}");
        }
    }
    let timed_out = w.f.sup.await_event(Duration::from_secs(10), |e| {
        e.kind == "egress_denied" && cc_tests::payload(e)["rule"] == "handshake_timeout"
    });
    assert_eq!(timed_out.subject, format!("run:{slow}"));
}
