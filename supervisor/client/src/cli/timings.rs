//! `ccctl tool RUN bash --timings`: where one command's time went, from ccctl's start
//! to its exit, with the supervisor's and sandboxd's stages as they measured them.
//! Each stage is one line's worth of what a slow command can be asked about.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use cc_proto::supervisor::v1 as pb;
use cc_proto::time::micros;
use serde_json::json;

static STARTED: OnceLock<Instant> = OnceLock::new();

/// Marks ccctl's start: called first thing in `main`.
pub fn started() {
    STARTED.get_or_init(Instant::now);
}

/// What ccctl itself measured.
pub struct Client {
    /// `main` to the call's request: arguments, connecting, the runtime.
    pub before_call: Duration,
    /// The request sent to the exit received.
    pub call: Duration,
}

impl Client {
    /// `called`: when the request was made; the exit has just been received.
    pub fn measured(called: Instant) -> Client {
        let started = *STARTED.get().unwrap_or(&called);
        Client { before_call: called.saturating_duration_since(started), call: called.elapsed() }
    }
}

fn ms(micros: u64) -> String {
    format!("{:.2} ms", micros as f64 / 1000.0)
}

/// One line on stderr: a sentence, or with `--json` an object.
pub fn print(client: &Client, server: &pb::BashTimings, json: bool) {
    if json {
        let line = json!({ "timings": {
            "before_call_micros": micros(client.before_call),
            "call_micros": micros(client.call),
            "supervisor_micros": server.total_micros,
            "gate_micros": server.gate_micros,
            "launch_micros": server.launch_micros,
            "sandboxd_prepare_micros": server.sandboxd_prepare_micros,
            "command_micros": server.command_micros,
            "sandboxd_report_micros": server.sandboxd_report_micros,
            "warm_envelope": server.warm_envelope,
        }});
        eprintln!("{line}");
        return;
    }
    let envelope = if server.warm_envelope { "an envelope made ahead" } else { "an envelope made for it" };
    eprintln!(
        "ccctl: timings: {} before the call, then {} for it: the supervisor {} (gate {}; sandboxd's launch {}, \
         of which preparing {}; the command {} in {envelope}; its exit reported after {})",
        ms(micros(client.before_call)),
        ms(micros(client.call)),
        ms(server.total_micros),
        ms(server.gate_micros),
        ms(server.launch_micros),
        ms(server.sandboxd_prepare_micros),
        ms(server.command_micros),
        ms(server.sandboxd_report_micros),
    );
}
