//! Interactive launches (sandboxd's LaunchInteractive): an ACP agent's stdio, a
//! terminal, a run's runner. The caller feeds the process's stdin through sandboxd,
//! in the envelope, and everything of it goes when the caller does.

use super::*;

/// The first message of an interactive launch of `script` in the harness bash kind.
fn interactive(script: &str) -> pb::LaunchInteractiveRequest {
    let argv = vec![b"sh".to_vec(), b"-c".to_vec(), script.as_bytes().to_vec()];
    let launch = pb::LaunchRequest {
        run_id: "r1".into(),
        kind: BASH as i32,
        argv,
        timeout_seconds: 30,
        host: None,
        ..Default::default()
    };
    pb::LaunchInteractiveRequest { input: Some(pb::launch_interactive_request::Input::Launch(launch)) }
}

fn stdin(bytes: &[u8]) -> pb::LaunchInteractiveRequest {
    pb::LaunchInteractiveRequest { input: Some(pb::launch_interactive_request::Input::Stdin(bytes.to_vec())) }
}

/// An ACP agent's stdio or a terminal: the caller feeds the process's stdin through
/// sandboxd, in the envelope, and everything of it goes when the caller does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interactive_launch_reads_the_callers_input_and_dies_with_the_caller() {
    use pb::launch_response::Event;
    use tokio_stream::StreamExt;
    let w = world();
    let Some((sbx, mut client)) = native(&w, &[]).await else { return };
    // Twice: the second finds an envelope made ahead after the first, which reads its
    // command on stdin and so must not serve an interactive launch.
    for round in 0..2 {
        let (tx, rx) = tokio::sync::mpsc::channel(8);
        tx.send(interactive("while read line; do echo got:$line; done; echo eof; tr '\\0' ' ' < /proc/1/cmdline"))
            .await
            .unwrap();
        tx.send(stdin(b"one\ntw")).await.unwrap();
        tx.send(stdin(b"o\n")).await.unwrap();
        let close = pb::launch_interactive_request::Input::CloseStdin(true);
        tx.send(pb::LaunchInteractiveRequest { input: Some(close) }).await.unwrap();
        let mut events =
            client.launch_interactive(tokio_stream::wrappers::ReceiverStream::new(rx)).await.unwrap().into_inner();
        let (mut out, mut exit, mut envelope) = (String::new(), None, None);
        while let Some(e) = events.next().await {
            match e.unwrap().event.and_then(|e| e.event) {
                Some(Event::Stdout(b)) => out.push_str(&String::from_utf8_lossy(&b)),
                Some(Event::Exit(e)) => exit = Some(e),
                Some(Event::Envelope(b)) => envelope = Some(b),
                _ => {}
            }
        }
        assert_eq!(envelope, Some(cc_proto::common::v1::SandboxBackend::Native as i32), "round {round}");
        assert!(out.starts_with("got:one\ngot:two\neof\n/run/cc/init"), "round {round}: {out:?}");
        assert_eq!(exit.unwrap().code, Some(0), "round {round}");
    }

    // A caller that goes away, its input still open: the process is killed.
    let (tx, rx) = tokio::sync::mpsc::channel(8);
    tx.send(interactive("echo started; exec sleep 1051")).await.unwrap();
    let mut events =
        client.launch_interactive(tokio_stream::wrappers::ReceiverStream::new(rx)).await.unwrap().into_inner();
    until_started(&mut events).await;
    // "started" comes before the shell's exec: the sleep shows up a moment later.
    cc_tests::sandbox::eventually("the launch's command runs", || host_has_process("sleep 1051"));
    drop(events);
    drop(tx);
    cc_tests::sandbox::eventually("the abandoned process is killed", || !host_has_process("sleep 1051"));

    // kill -9 of sandboxd under a live interactive launch: the caller's stream ends
    // in an error, and the process goes with it (the envelope dies with its parent).
    let (tx, rx) = tokio::sync::mpsc::channel(8);
    tx.send(interactive("echo started; exec sleep 1052")).await.unwrap();
    let mut events =
        client.launch_interactive(tokio_stream::wrappers::ReceiverStream::new(rx)).await.unwrap().into_inner();
    until_started(&mut events).await;
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(sbx.pid() as i32), nix::sys::signal::Signal::SIGKILL).unwrap();
    let ended = tokio::time::timeout(std::time::Duration::from_secs(10), async {
        let mut failed = false;
        while let Some(e) = events.next().await {
            failed |= e.is_err();
        }
        failed
    })
    .await
    .expect("the stream ends once sandboxd is gone");
    assert!(ended, "an error, never a clean end, when sandboxd dies");
    cc_tests::sandbox::eventually("the launch dies with sandboxd", || !host_has_process("sleep 1052"));
    drop(tx);
}

/// Reads an interactive launch's events until its command has said `started`.
async fn until_started(events: &mut tonic::Streaming<pb::LaunchInteractiveResponse>) {
    use pb::launch_response::Event;
    use tokio_stream::StreamExt;
    while let Some(e) = events.next().await {
        if matches!(e.unwrap().event.and_then(|e| e.event), Some(Event::Stdout(ref b)) if b.starts_with(b"started")) {
            return;
        }
    }
}

/// An interactive launch that does not start with its launch is refused in one line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interactive_launch_must_begin_with_the_launch() {
    let w = world();
    let Some((_sbx, mut client)) = native(&w, &[]).await else { return };
    let (tx, rx) = tokio::sync::mpsc::channel(8);
    tx.send(stdin(b"rm -rf /\n")).await.unwrap();
    let refused = client.launch_interactive(tokio_stream::wrappers::ReceiverStream::new(rx)).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::InvalidArgument, "{refused:?}");
    assert_eq!(refused.message(), "an interactive launch starts with the launch itself");
}
