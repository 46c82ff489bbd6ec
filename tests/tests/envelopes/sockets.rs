//! The run's own sockets in its envelope: reachable only as loopback ports through
//! their bridges, which nothing inside can take over, and no other AF_UNIX door.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_runs_own_sockets_are_reachable_only_as_loopback_ports() {
    let w = world();
    // A service of the run's own (a stand-in for its gateway) on a unix socket.
    let (socket, listener) = run_socket(&w, "proxy.sock");
    let serve = |listener: std::os::unix::net::UnixListener, answer: &'static [u8]| {
        std::thread::spawn(move || {
            use std::io::{Read, Write};
            for mut conn in listener.incoming().flatten() {
                let mut buf = [0u8; 5];
                if conn.read_exact(&mut buf).is_ok() && &buf == b"ping\n" {
                    let _ = conn.write_all(answer);
                    let _ = conn.write_all(b"\n");
                }
            }
        })
    };
    serve(listener, b"pong");
    if !cc_tests::privileged("building envelopes with bubblewrap as root") {
        return;
    }
    let sbx = Sandboxd::start(&w.data, BTreeMap::from([("sandbox".to_owned(), "native".to_owned())]), &[]);
    let mut client = sbx.client().await;
    let mut p = policy(&w);
    p.bridges = vec![pb::Bridge { port: 41001, socket: bytes(&socket) }];
    client.register_run(cc_tests::sandbox::registration(p)).await.unwrap();
    // The command waits on a FIFO between its two pings; meanwhile the service is
    // made again at the same path, as a restarted helper makes its socket.
    let fifo = w.repo.join("go.fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o666)).unwrap();
    std::fs::set_permissions(&fifo, std::os::unix::fs::PermissionsExt::from_mode(0o666)).unwrap();
    let script = "bash -c 'exec 3<>/dev/tcp/127.0.0.1/41001; echo ping >&3; head -n1 <&3'\n\
                  python3 -c 'import socket\ntry:\n  socket.socket(socket.AF_UNIX).connect(\"/run/cc/bridges/41001/proxy.sock\"); print(\"DIRECT unix socket\")\nexcept OSError as e: print(\"unix errno\", e.errno)'\n\
                  bash -c 'echo > /dev/tcp/127.0.0.1/41002' 2>/dev/null && echo 'OTHER port'\n\
                  read line < go.fifo\n\
                  bash -c 'exec 3<>/dev/tcp/127.0.0.1/41001; echo ping >&3; head -n1 <&3'";
    let remade = {
        let socket = socket.clone();
        std::thread::spawn(move || {
            // The FIFO opens for writing once the command reads it: the first ping is done.
            let mut go = std::fs::OpenOptions::new().write(true).open(&fifo).unwrap();
            std::fs::remove_file(&socket).unwrap();
            let listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
            std::fs::set_permissions(&socket, std::os::unix::fs::PermissionsExt::from_mode(0o666)).unwrap();
            serve(listener, b"pong2");
            let _ = std::io::Write::write_all(&mut go, b"go\n");
        })
    };
    let out = run(&mut client, "r1", BASH, script).await;
    remade.join().unwrap();
    assert!(out.stdout.starts_with("pong\n"), "{}\n{}", out.stdout, out.stderr);
    assert!(out.stdout.ends_with("pong2\n"), "the socket made again was not reached:\n{}\n{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("unix errno 1"), "the workload opened an AF_UNIX socket:\n{}", out.stdout);
    assert!(!out.stdout.contains("DIRECT") && !out.stdout.contains("OTHER"), "{}", out.stdout);

    // A bridge whose socket has no directory of its own is refused at registration.
    let mut bad = policy(&w);
    bad.bridges = vec![pb::Bridge { port: 41001, socket: bytes(&w.data.join("nowhere/x.sock")) }];
    let err = client.register_run(cc_tests::sandbox::registration(bad)).await.unwrap_err();
    assert!(err.message().contains("is not in an existing directory"), "{}", err.message());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bridges_cannot_be_taken_over() {
    let w = world();
    let (socket, _listener) = run_socket(&w, "proxy2.sock");
    let Some((_sbx, mut client)) = native(&w, &[]).await else { return };
    let mut p = policy(&w);
    p.bridges = vec![pb::Bridge { port: 41003, socket: bytes(&socket) }];
    client.register_run(cc_tests::sandbox::registration(p)).await.unwrap();
    // The bridges are threads of our init (PID 1): no other process of ours is in the
    // envelope, and the init's memory and environment are out of the workload's reach.
    let script = "for d in /proc/[0-9]*; do tr '\\0' ' ' < $d/cmdline 2>/dev/null | grep -q '^/run/cc/init' && echo \"init at $d\"; done; \
                  ls /proc/1/task | wc -l | sed 's/^/threads /'; \
                  (echo x > /proc/1/mem) 2>/dev/null && echo 'WROTE mem'; cat /proc/1/mem >/dev/null 2>&1 && echo 'READ mem'; \
                  cat /proc/1/environ >/dev/null 2>&1 && echo 'READ environ'; \
                  grep -E '^(Seccomp|NoNewPrivs):' /proc/1/status; echo checked";
    let out = run(&mut client, "r1", BASH, script).await;
    assert!(out.stdout.contains("checked"), "the script did not run: {}", out.stderr);
    assert_eq!(out.stdout.matches("init at").count(), 1, "only our init, at PID 1: {}", out.stdout);
    assert!(out.stdout.contains("init at /proc/1\n"), "{}", out.stdout);
    let threads: usize = out.stdout.lines().find_map(|l| l.strip_prefix("threads ")).unwrap().trim().parse().unwrap();
    assert!(threads >= 2, "the bridge runs as a thread of the init: {}", out.stdout);
    assert!(!out.stdout.contains("WROTE") && !out.stdout.contains("READ"), "{}", out.stdout);
    // The init itself runs filtered (the layer that keeps AF_UNIX), never unfiltered.
    assert!(out.stdout.contains("Seccomp:\t2") && out.stdout.contains("NoNewPrivs:\t1"), "{}", out.stdout);
}

/// Issue 16, item 4 (ATTACKS.md 47): AF_UNIX by another door. A host process binds a
/// datagram socket inside the worktree; a datagram or seqpacket `socketpair` inside the
/// envelope, which could `sendto` it by path, is refused, and nothing arrives. Stream
/// pairs, which cannot address anyone, still work (libuv uses them for child stdio).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn socketpair_datagrams_are_refused_and_stream_pairs_kept() {
    let w = world();
    let Some((_sbx, mut client)) = native(&w, &[]).await else { return };
    let host_socket = w.repo.join("host-dgram.sock");
    let listener = std::os::unix::net::UnixDatagram::bind(&host_socket).unwrap();
    listener.set_nonblocking(true).unwrap();
    std::os::unix::fs::chown(&host_socket, Some(65534), Some(65534)).unwrap();
    let script = format!(
        "import socket\n\
         for kind, name in ((socket.SOCK_DGRAM, 'dgram'), (socket.SOCK_SEQPACKET, 'seqpacket')):\n\
         \x20   try:\n\
         \x20       a, b = socket.socketpair(socket.AF_UNIX, kind)\n\
         \x20       a.sendto(b'escaped', {path:?})\n\
         \x20       print(name, 'SENT')\n\
         \x20   except OSError as e:\n\
         \x20       print(name, 'errno', e.errno)\n\
         a, b = socket.socketpair()\n\
         a.sendall(b'ping'); print('stream', b.recv(4).decode())\n",
        path = host_socket.to_str().unwrap()
    );
    let out = cc_tests::sandbox::run_argv(
        &mut client,
        "r1",
        BASH,
        vec![b"python3".to_vec(), b"-c".to_vec(), script.into_bytes()],
    )
    .await;
    assert_eq!(out.code(), Some(0), "{}\n{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("dgram errno 1") && out.stdout.contains("seqpacket errno 1"), "{}", out.stdout);
    assert!(out.stdout.contains("stream ping"), "{}", out.stdout);
    let mut buf = [0u8; 16];
    assert!(listener.recv(&mut buf).is_err(), "a datagram reached the host socket");
}
