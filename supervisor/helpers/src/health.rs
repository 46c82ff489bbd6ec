//! Health checks: each helper is asked for its status at an interval, within a
//! deadline. One that misses several in a row (stopped with SIGSTOP, deadlocked, lost
//! in a loop) is killed and restarted like one that exited, so that a helper which
//! cannot answer never holds every call that needs it until its deadline, for good.

use std::sync::Arc;

use serde_json::json;

use crate::channels::HelperChannels;
use crate::events::EventLog;
use crate::helpers::Helper;
use cc_config::Deadlines;
use cc_proto::supervisor::v1::HelperState;

/// Starts one checking task per helper; they end with the runtime.
pub fn watch(channels: Arc<HelperChannels>, deadlines: Deadlines, events: Arc<EventLog>) {
    for helper in channels.helpers().helpers().iter().cloned() {
        tokio::spawn(check_forever(channels.clone(), helper, deadlines.clone(), events.clone()));
    }
}

async fn check_forever(
    channels: Arc<HelperChannels>,
    helper: Arc<Helper>,
    deadlines: Deadlines,
    events: Arc<EventLog>,
) {
    let mut interval = tokio::time::interval(deadlines.health_interval());
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Misses in a row, of the process `pid`.
    let mut misses: (u32, u32) = (0, 0);
    loop {
        interval.tick().await;
        let now = helper.snapshot();
        let Some(pid) = now.pid.filter(|_| now.state == HelperState::Running) else {
            misses = (0, 0);
            continue;
        };
        let answered = tokio::time::timeout(deadlines.health_timeout(), channels.status_of(&helper, pid)).await;
        if let Ok(Ok(status)) = &answered {
            helper.remember_answer(pid, status.clone());
            misses = (pid, 0);
            continue;
        }
        misses = if misses.0 == pid { (pid, misses.1 + 1) } else { (pid, 1) };
        if misses.1 < deadlines.health_misses {
            continue;
        }
        let why = match answered {
            Ok(Err(status)) => status.message().to_owned(),
            _ => format!("no answer within {} ms", deadlines.health_timeout_ms),
        };
        tracing::warn!(helper = helper.name(), pid, misses = misses.1, %why, "killing an unresponsive helper");
        events.record(
            "helper_unresponsive",
            &format!("helper:{}", helper.name()),
            json!({ "pid": pid, "missed": misses.1, "last_error": why }),
        );
        channels.helpers().kill_unresponsive(helper.kind(), pid).await;
        misses = (0, 0);
    }
}
