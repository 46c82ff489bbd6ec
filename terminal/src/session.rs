//! A terminal's session, whatever hosts its command: the scrollback a new attach
//! replays, the clients attached now, and the one task that moves output from the
//! command to all of them.
//!
//! Flow control: output is read from the command only as fast as the slowest
//! attached client takes it (each client's queue is short), so a command printing
//! gigabytes blocks on its terminal instead of growing our memory. With no client
//! attached, output only rolls through the bounded scrollback. A client that takes
//! nothing for `stalled_after` is detached, so that one stuck client cannot hold the
//! others and the command for ever.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot, watch};

/// Output chunks queued for one client; with chunks of at most 16 KiB, at most
/// 256 KiB per client.
const CLIENT_QUEUE: usize = 16;
/// Clients attached to one terminal at once.
pub const MAX_CLIENTS: usize = 16;

/// A terminal's size in character cells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Size {
    pub columns: u16,
    pub rows: u16,
}

impl Default for Size {
    fn default() -> Self {
        Size { columns: 80, rows: 24 }
    }
}

/// What a client asks of the command's terminal besides typing. Never queued behind
/// typed bytes: a command that reads nothing must still be resizable, signalled and
/// ended.
#[derive(Debug)]
pub enum Control {
    Resize(Size),
    /// For the terminal's foreground process group (checked by the backend).
    Signal(i32),
}

/// Controls queued for a backend at most; past it a resize or a signal is dropped
/// (a client that sends them faster than a terminal takes them loses nothing it
/// needs: the latest size is remembered, and a flood of signals is not a request).
const CONTROL_QUEUE: usize = 64;
/// Typed chunks queued for a backend; past it the typing client waits.
const INPUT_QUEUE: usize = 16;

/// How a terminal's command ended.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Exit {
    pub code: Option<i32>,
    pub signal: Option<i32>,
    /// Why, when not of itself.
    pub reason: String,
}

/// What a backend hands the session once the command runs.
pub struct Hosted {
    /// The command's output, in chunks of at most 16 KiB; it ends when the terminal
    /// closes.
    pub output: mpsc::Receiver<Bytes>,
    /// Its exit, once the output has ended.
    pub exited: oneshot::Receiver<Exit>,
    /// The command's process (host); 0 when it is not ours (native).
    pub pid: u32,
}

/// What the session hands a backend: the clients' typing, their controls, and the
/// request to end the command (SIGHUP, then SIGKILL if it lingers) with its reason.
pub struct Inputs {
    pub typed: mpsc::Receiver<Vec<u8>>,
    pub controls: mpsc::Receiver<Control>,
    pub hangup: watch::Receiver<Option<String>>,
}

/// The session's ends of [`Inputs`].
pub struct InputSenders {
    typed: mpsc::Sender<Vec<u8>>,
    controls: mpsc::Sender<Control>,
    hangup: watch::Sender<Option<String>>,
}

/// One thing for a remote backend to pass on.
pub enum Forward {
    Typed(Vec<u8>),
    Control(Control),
}

/// How [`forward`] ended.
pub enum Forwarded {
    /// The session asked for the command's end, for this reason.
    HungUp(String),
    /// The command ended, or its host stopped taking input.
    Ended,
}

/// Passes a backend's [`Inputs`] on with `send` (false once its host takes no more)
/// until a hangup or `ended`: a hangup is seen even while `send` waits on a command
/// that reads nothing.
pub async fn forward<F, Fut>(inputs: Inputs, mut ended: watch::Receiver<bool>, send: F) -> Forwarded
where
    F: Fn(Forward) -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let Inputs { mut typed, mut controls, mut hangup } = inputs;
    let why = |hangup: &watch::Receiver<Option<String>>| {
        Forwarded::HungUp(hangup.borrow().clone().unwrap_or_else(|| "its session ended".to_owned()))
    };
    loop {
        let next = tokio::select! {
            Some(bytes) = typed.recv() => Forward::Typed(bytes),
            Some(control) = controls.recv() => Forward::Control(control),
            _ = hangup.changed() => return why(&hangup),
            _ = async { ended.wait_for(|e| *e).await.map(|_| ()) } => return Forwarded::Ended,
        };
        tokio::select! {
            sent = send(next) => if !sent { return Forwarded::Ended },
            _ = hangup.changed() => return why(&hangup),
            _ = async { ended.wait_for(|e| *e).await.map(|_| ()) } => return Forwarded::Ended,
        }
    }
}

/// A pair: the backend takes [`Inputs`], the session the senders.
pub fn inputs() -> (InputSenders, Inputs) {
    let (typed_tx, typed) = mpsc::channel(INPUT_QUEUE);
    let (controls_tx, controls) = mpsc::channel(CONTROL_QUEUE);
    let (hangup_tx, hangup) = watch::channel(None);
    (InputSenders { typed: typed_tx, controls: controls_tx, hangup: hangup_tx }, Inputs { typed, controls, hangup })
}

/// What a client receives after its replay.
#[derive(Debug, Clone)]
pub enum Out {
    Data(Bytes),
    Exit(Exit),
}

/// The last `capacity` bytes of output.
#[derive(Debug)]
pub struct Scrollback {
    bytes: VecDeque<u8>,
    capacity: usize,
}

impl Scrollback {
    pub fn new(capacity: usize) -> Self {
        Scrollback { bytes: VecDeque::new(), capacity }
    }

    pub fn push(&mut self, chunk: &[u8]) {
        let chunk = &chunk[chunk.len().saturating_sub(self.capacity)..];
        let overflow = (self.bytes.len() + chunk.len()).saturating_sub(self.capacity);
        self.bytes.drain(..overflow);
        self.bytes.extend(chunk);
    }

    pub fn snapshot(&self) -> Vec<u8> {
        self.bytes.iter().copied().collect()
    }

    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }
}

struct Client {
    id: u64,
    queue: mpsc::Sender<Out>,
    stalled: Arc<AtomicBool>,
}

struct Inner {
    scrollback: Scrollback,
    clients: Vec<Client>,
    exit: Option<Exit>,
    size: Size,
}

pub struct Session {
    inner: Mutex<Inner>,
    inputs: InputSenders,
    /// Clients attached now (the idle timer watches it).
    attached: watch::Sender<usize>,
    /// The exit, once the command has exited.
    exit: watch::Sender<Option<Exit>>,
    stalled_after: Duration,
    next_client: AtomicU64,
    pub pid: u32,
}

/// One client's view of a session: what it replays first, then its live queue. It
/// detaches when dropped.
pub struct Attachment {
    session: Arc<Session>,
    id: u64,
    pub replay: Vec<u8>,
    /// `None` when the command had exited already: the replay is all there is.
    pub live: Option<mpsc::Receiver<Out>>,
    /// Set when the session detached this client for taking no output.
    pub stalled: Arc<AtomicBool>,
    /// The exit, when the command had exited before the attach.
    pub exited: Option<Exit>,
}

impl Drop for Attachment {
    fn drop(&mut self) {
        self.session.detach(self.id);
    }
}

impl Attachment {
    pub fn session(&self) -> &Arc<Session> {
        &self.session
    }
}

impl Session {
    /// A session of `hosted`, its output moved from now on; `inputs` are the senders
    /// whose receivers the backend took.
    pub fn start(
        hosted: Hosted,
        inputs: InputSenders,
        size: Size,
        scrollback: usize,
        stalled_after: Duration,
    ) -> Arc<Session> {
        let session = Arc::new(Session {
            inner: Mutex::new(Inner { scrollback: Scrollback::new(scrollback), clients: vec![], exit: None, size }),
            inputs,
            attached: watch::Sender::new(0),
            exit: watch::Sender::new(None),
            stalled_after,
            next_client: AtomicU64::new(0),
            pid: hosted.pid,
        });
        tokio::spawn(session.clone().carry(hosted.output, hosted.exited));
        session
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Moves output to the scrollback and every attached client, then the exit.
    async fn carry(self: Arc<Self>, mut output: mpsc::Receiver<Bytes>, exited: oneshot::Receiver<Exit>) {
        while let Some(chunk) = output.recv().await {
            let clients: Vec<(u64, mpsc::Sender<Out>, Arc<AtomicBool>)> = {
                let mut inner = self.lock();
                inner.scrollback.push(&chunk);
                inner.clients.iter().map(|c| (c.id, c.queue.clone(), c.stalled.clone())).collect()
            };
            let this = &self;
            let sends = clients.into_iter().map(|(id, queue, stalled)| {
                let chunk = chunk.clone();
                async move {
                    match tokio::time::timeout(this.stalled_after, queue.send(Out::Data(chunk))).await {
                        Ok(Ok(())) => {}
                        // Gone: its attachment detaches it too.
                        Ok(Err(_)) => this.detach(id),
                        Err(_) => {
                            stalled.store(true, Ordering::SeqCst);
                            this.detach(id);
                        }
                    }
                }
            });
            futures::future::join_all(sends).await;
        }
        let exit = exited.await.unwrap_or_else(|_| Exit {
            reason: "its host ended without telling how the command exited".into(),
            ..Exit::default()
        });
        // Published before any client's queue closes: a client whose queue was full
        // reads the exit from here once it has read its output.
        self.exit.send_replace(Some(exit.clone()));
        let clients = {
            let mut inner = self.lock();
            inner.exit = Some(exit.clone());
            std::mem::take(&mut inner.clients)
        };
        self.attached.send_replace(0);
        for client in clients {
            let _ = client.queue.try_send(Out::Exit(exit.clone()));
        }
    }

    /// Attaches a client: the scrollback to replay and, while the command runs, a
    /// queue that takes every chunk from the replay's end on (none is lost or repeated:
    /// both are taken under one lock). `None` when [`MAX_CLIENTS`] are attached.
    pub fn attach(self: &Arc<Self>) -> Option<Attachment> {
        let (queue, live) = mpsc::channel(CLIENT_QUEUE);
        let stalled = Arc::new(AtomicBool::new(false));
        let id = self.next_client.fetch_add(1, Ordering::Relaxed);
        let mut inner = self.lock();
        if inner.clients.len() >= MAX_CLIENTS {
            return None;
        }
        let replay = inner.scrollback.snapshot();
        let exited = inner.exit.clone();
        let live = if exited.is_none() {
            inner.clients.push(Client { id, queue, stalled: stalled.clone() });
            self.attached.send_replace(inner.clients.len());
            Some(live)
        } else {
            None
        };
        drop(inner);
        Some(Attachment { session: self.clone(), id, replay, live, stalled, exited })
    }

    fn detach(&self, id: u64) {
        let mut inner = self.lock();
        inner.clients.retain(|c| c.id != id);
        let count = inner.clients.len();
        if inner.exit.is_none() {
            self.attached.send_replace(count);
        }
    }

    /// Passes a client's typing on, waiting while the command reads nothing; false once
    /// the command's host takes no more.
    pub async fn type_bytes(&self, bytes: Vec<u8>) -> bool {
        self.inputs.typed.send(bytes).await.is_ok()
    }

    /// Passes a resize or a signal on at once (dropped when the backend is flooded);
    /// false once the command's host takes no more.
    pub fn control(&self, control: Control) -> bool {
        if let Control::Resize(size) = control {
            self.lock().size = size;
        }
        !matches!(self.inputs.controls.try_send(control), Err(mpsc::error::TrySendError::Closed(_)))
    }

    /// Asks the backend to end the command, for `why`; at once, whatever else is
    /// queued (the first reason asked for is the one given).
    pub fn hang_up(&self, why: &str) {
        self.inputs.hangup.send_if_modified(|current| {
            if current.is_none() {
                *current = Some(why.to_owned());
                true
            } else {
                false
            }
        });
    }

    pub fn size(&self) -> Size {
        self.lock().size
    }

    pub fn attached(&self) -> usize {
        *self.attached.borrow()
    }

    pub fn watch_attached(&self) -> watch::Receiver<usize> {
        self.attached.subscribe()
    }

    pub fn exit(&self) -> Option<Exit> {
        self.exit.borrow().clone()
    }

    pub fn watch_exit(&self) -> watch::Receiver<Option<Exit>> {
        self.exit.subscribe()
    }

    pub fn scrollback_len(&self) -> usize {
        self.lock().scrollback.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scrollback_keeps_the_last_bytes() {
        let mut s = Scrollback::new(8);
        s.push(b"abc");
        s.push(b"defgh");
        assert_eq!(s.snapshot(), b"abcdefgh");
        s.push(b"ij");
        assert_eq!(s.snapshot(), b"cdefghij");
        s.push(b"0123456789");
        assert_eq!(s.snapshot(), b"23456789");
        s.push(b"");
        assert_eq!(s.len(), 8);
        let mut none = Scrollback::new(0);
        none.push(b"abc");
        assert!(none.is_empty());
    }

    struct Fake {
        output: mpsc::Sender<Bytes>,
        exited: oneshot::Sender<Exit>,
        inputs: Inputs,
    }

    fn fake(scrollback: usize, stalled_after: Duration) -> (Arc<Session>, Fake) {
        let (output, output_rx) = mpsc::channel(4);
        let (exited, exited_rx) = oneshot::channel();
        let (senders, inputs) = super::inputs();
        let hosted = Hosted { output: output_rx, exited: exited_rx, pid: 1 };
        (Session::start(hosted, senders, Size::default(), scrollback, stalled_after), Fake { output, exited, inputs })
    }

    async fn next_data(live: &mut mpsc::Receiver<Out>) -> Vec<u8> {
        match live.recv().await {
            Some(Out::Data(d)) => d.to_vec(),
            other => panic!("expected data, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn two_clients_see_the_same_output_and_a_late_one_the_scrollback() {
        let (session, fake) = fake(1024, Duration::from_secs(30));
        let mut first = session.attach().unwrap();
        let mut second = session.attach().unwrap();
        assert_eq!(session.attached(), 2);
        fake.output.send(Bytes::from_static(b"hello ")).await.unwrap();
        for a in [&mut first, &mut second] {
            assert_eq!(next_data(a.live.as_mut().unwrap()).await, b"hello ");
        }
        fake.output.send(Bytes::from_static(b"world")).await.unwrap();
        assert_eq!(next_data(first.live.as_mut().unwrap()).await, b"world");
        let late = session.attach().unwrap();
        assert_eq!(late.replay, b"hello world");
        drop(second);
        drop(late);
        assert_eq!(session.attached(), 1);
        drop(fake.output);
        fake.exited.send(Exit { code: Some(3), ..Exit::default() }).unwrap();
        let live = first.live.as_mut().unwrap();
        let exit = loop {
            match live.recv().await {
                Some(Out::Exit(e)) => break e,
                Some(Out::Data(d)) => assert_eq!(&d[..], b"world"),
                None => panic!("no exit"),
            }
        };
        assert_eq!(exit.code, Some(3));
        // After the exit: the replay and the exit, no queue.
        let after = session.attach().unwrap();
        assert!(after.live.is_none());
        assert_eq!(after.exited.as_ref().unwrap().code, Some(3));
        assert_eq!(after.replay, b"hello world");
    }

    /// A client that reads nothing holds the output back (the command's host is not
    /// read), and is detached after `stalled_after`; the others then go on.
    #[tokio::test(start_paused = true)]
    async fn a_stalled_client_holds_output_back_then_is_detached() {
        let (session, fake) = fake(64, Duration::from_secs(10));
        let stuck = session.attach().unwrap();
        let mut reader = session.attach().unwrap();
        let chunks = CLIENT_QUEUE + 8;
        let writer = {
            let output = fake.output.clone();
            tokio::spawn(async move {
                for i in 0..chunks {
                    output.send(Bytes::from(vec![b'a' + (i % 26) as u8; 4])).await.unwrap();
                }
            })
        };
        let mut got = 0;
        while got < chunks {
            next_data(reader.live.as_mut().unwrap()).await;
            got += 1;
        }
        writer.await.unwrap();
        assert!(stuck.stalled.load(Ordering::SeqCst), "the stuck client is detached");
        assert_eq!(session.attached(), 1);
        assert!(session.scrollback_len() <= 64);
        drop(fake.inputs);
    }

    #[tokio::test]
    async fn typing_controls_and_hangup_reach_the_host_and_controls_never_wait_for_typing() {
        let (session, mut fake) = fake(64, Duration::from_secs(30));
        assert!(session.type_bytes(b"ls\r".to_vec()).await);
        // The host takes no typing: the typed queue fills, yet controls and the hangup
        // still pass.
        for _ in 0..INPUT_QUEUE - 1 {
            assert!(session.type_bytes(b"x".to_vec()).await);
        }
        assert!(session.control(Control::Resize(Size { columns: 120, rows: 40 })));
        assert!(session.control(Control::Signal(2)));
        session.hang_up("deleted");
        session.hang_up("later");
        assert!(matches!(fake.inputs.controls.recv().await, Some(Control::Resize(Size { columns: 120, rows: 40 }))));
        assert!(matches!(fake.inputs.controls.recv().await, Some(Control::Signal(2))));
        assert_eq!(fake.inputs.hangup.borrow().as_deref(), Some("deleted"));
        assert_eq!(fake.inputs.typed.recv().await.as_deref(), Some(&b"ls\r"[..]));
        assert_eq!(session.size(), Size { columns: 120, rows: 40 });
        drop(fake.inputs);
        assert!(!session.control(Control::Signal(2)));
        assert!(!session.type_bytes(b"y".to_vec()).await);
    }

    #[tokio::test]
    async fn attaches_are_bounded() {
        let (session, _fake) = fake(64, Duration::from_secs(30));
        let held: Vec<Attachment> = (0..MAX_CLIENTS).map(|_| session.attach().unwrap()).collect();
        assert!(session.attach().is_none());
        drop(held);
        assert!(session.attach().is_some());
    }
}
