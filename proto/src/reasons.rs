//! Refusals a client must tell apart carry a `google.rpc.ErrorInfo` with one of these
//! reasons (AIP-193): clients match the reason, never the message.

use std::collections::HashMap;

use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt};

/// The domain every reason of ours is scoped to.
pub const DOMAIN: &str = "cc.dev";

// The reasons, each with where it is raised and its metadata. The README lists them
// for client authors; a test per reason triggers it from a client.

/// sandboxd refused a launch because a link sits where privileged code would have
/// had to follow it inside a run's roots (metadata `path`): a sandbox violation.
pub const LINK_IN_ROOT: &str = "LINK_IN_ROOT";
/// A tool call named a path outside the run's roots, or one its tools must not write
/// (the runner's confinement): nothing was touched.
pub const CONFINEMENT_REFUSED: &str = "CONFINEMENT_REFUSED";
/// The gate denied a tool call (metadata `effect`; `source`: the rule's `file:line`,
/// "default", "command policy" or "mode"; `decided_by`: "policy" or the approver who
/// refused); nothing was done.
pub const GATE_DENIED: &str = "GATE_DENIED";
/// The gate would have asked a person, but no approver was connected, or none answered
/// in time: denied, nothing was done.
pub const NO_APPROVER: &str = "NO_APPROVER";
/// No run has this id (metadata `run_id`).
pub const RUN_NOT_FOUND: &str = "RUN_NOT_FOUND";
/// The run exists but is over, or ended while the call was made (metadata `run_id`, and
/// `state` when the supervisor answers): start a new one.
pub const RUN_ENDED: &str = "RUN_ENDED";
/// No conversation has this id (metadata `conversation_id`).
pub const CONVERSATION_NOT_FOUND: &str = "CONVERSATION_NOT_FOUND";
/// No repository of that name is registered in the workspace (metadata `name`).
pub const REPOSITORY_NOT_FOUND: &str = "REPOSITORY_NOT_FOUND";
/// No workspace has this name (metadata `workspace_id`).
pub const WORKSPACE_NOT_FOUND: &str = "WORKSPACE_NOT_FOUND";
/// The name is taken by another workspace or repository (metadata `name`).
pub const NAME_TAKEN: &str = "NAME_TAKEN";
/// This checkout is registered in the workspace already (metadata `name`: under which).
pub const ALREADY_REGISTERED: &str = "ALREADY_REGISTERED";
/// This GitHub repository is linked to the workspace already (metadata `github_repository`).
pub const ALREADY_LINKED: &str = "ALREADY_LINKED";
/// This GitHub repository is not linked to the workspace (metadata `github_repository`).
pub const LINK_NOT_FOUND: &str = "LINK_NOT_FOUND";
/// The filesystem of the data directory cannot reflink, so a reflink conversation
/// cannot be made (metadata `path`); choose `copy`, or put the data directory on btrfs or xfs.
pub const REFLINK_UNSUPPORTED: &str = "REFLINK_UNSUPPORTED";
/// What was asked for needs something this host or build does not have (metadata
/// `backend`).
pub const BACKEND_UNAVAILABLE: &str = "BACKEND_UNAVAILABLE";
/// No helper has this name (metadata `name`).
pub const HELPER_NOT_FOUND: &str = "HELPER_NOT_FOUND";
/// A helper the call needs is not serving, or has lost the run (metadata `helper`:
/// `sandboxd`, `broker`, `gateway` or `runner`): it is being restarted, or failed;
/// retry, or see `ccctl status`.
pub const HELPER_UNAVAILABLE: &str = "HELPER_UNAVAILABLE";

/// A helper the call needs is restarting (metadata `helper`): it died or was
/// restarted under the call. A call that had not started was retried once; a command
/// that was running was killed with the old process. Run it again.
pub const HELPER_RESTARTING: &str = "HELPER_RESTARTING";

/// A helper did not answer within its deadline (metadata `helper`, and
/// `deadline_ms`): it is overloaded or stopped. What the call asked may or may not have
/// been done; the supervisor restarts a helper that keeps missing its health checks.
pub const HELPER_TIMEOUT: &str = "HELPER_TIMEOUT";

/// The run holds no live credential (metadata `run_id`): no provider is configured, it
/// names no GitHub repository, or its credentials were revoked. The gateway then
/// fetches anonymously and refuses pushes.
pub const NO_CREDENTIAL: &str = "NO_CREDENTIAL";

/// This entry is on the workspace's network allowlist already (metadata `entry`).
pub const ALREADY_LISTED: &str = "ALREADY_LISTED";
/// This entry is not on the workspace's network allowlist (metadata `entry`).
pub const NOT_LISTED: &str = "NOT_LISTED";

/// A run without an envelope cannot have its proxies on their loopback port: another
/// process holds it (metadata `port`). The run's proxy variables would point at that
/// process, so the run is stopped.
pub const PORT_TAKEN: &str = "PORT_TAKEN";

/// The run's agent is already working on a prompt; wait for its answer (metadata
/// `run_id`).
pub const AGENT_BUSY: &str = "AGENT_BUSY";
/// The run has no agent to prompt: its adapter (harness) is driven tool by tool
/// (metadata `adapter`).
pub const NO_AGENT: &str = "NO_AGENT";
/// The run's agent (adapter acp) ended or broke its protocol during the prompt; the
/// next prompt starts it again, in a new session.
pub const AGENT_FAILED: &str = "AGENT_FAILED";

/// No hosted terminal has this name (metadata `name`); it was deleted, or the
/// supervisor restarted since (terminals live in its memory).
pub const TERMINAL_NOT_FOUND: &str = "TERMINAL_NOT_FOUND";

/// No rig has this name (metadata `name`): it was stopped and forgotten, or the
/// supervisor restarted since.
pub const RIG_NOT_FOUND: &str = "RIG_NOT_FOUND";
/// The rig's VM has ended (metadata `name`, `why`): start a new rig.
pub const RIG_ENDED: &str = "RIG_ENDED";

/// A configuration reload was refused (metadata `file`): the file does not read or
/// parse, and the configuration in force stays.
pub const CONFIG_INVALID: &str = "CONFIG_INVALID";

/// Every reason, for the README's list and its test.
pub const ALL: &[&str] = &[
    LINK_IN_ROOT,
    CONFINEMENT_REFUSED,
    GATE_DENIED,
    NO_APPROVER,
    RUN_NOT_FOUND,
    RUN_ENDED,
    CONVERSATION_NOT_FOUND,
    REPOSITORY_NOT_FOUND,
    WORKSPACE_NOT_FOUND,
    NAME_TAKEN,
    ALREADY_REGISTERED,
    ALREADY_LINKED,
    LINK_NOT_FOUND,
    REFLINK_UNSUPPORTED,
    BACKEND_UNAVAILABLE,
    HELPER_NOT_FOUND,
    HELPER_UNAVAILABLE,
    HELPER_RESTARTING,
    HELPER_TIMEOUT,
    NO_CREDENTIAL,
    ALREADY_LISTED,
    NOT_LISTED,
    PORT_TAKEN,
    AGENT_BUSY,
    NO_AGENT,
    AGENT_FAILED,
    TERMINAL_NOT_FOUND,
    RIG_NOT_FOUND,
    RIG_ENDED,
    CONFIG_INVALID,
];

/// A refusal with `reason` and its metadata.
pub fn refusal(code: Code, message: impl Into<String>, reason: &str, metadata: &[(&str, String)]) -> Status {
    let metadata: HashMap<String, String> = metadata.iter().map(|(k, v)| ((*k).to_owned(), v.clone())).collect();
    Status::with_error_details(code, message, ErrorDetails::with_error_info(reason, DOMAIN, metadata))
}

/// `HELPER_UNAVAILABLE` for `helper`: the one refusal every caller of a helper shares.
pub fn helper_unavailable(message: impl Into<String>, helper: &str) -> Status {
    refusal(Code::Unavailable, message, HELPER_UNAVAILABLE, &[("helper", helper.to_owned())])
}

/// `HELPER_RESTARTING` for `helper`.
pub fn helper_restarting(message: impl Into<String>, helper: &str) -> Status {
    refusal(Code::Unavailable, message, HELPER_RESTARTING, &[("helper", helper.to_owned())])
}

/// `HELPER_TIMEOUT` for `helper`, which did not answer `what` within `deadline`.
pub fn helper_timeout(helper: &str, what: &str, deadline: std::time::Duration) -> Status {
    let ms = deadline.as_millis().to_string();
    let message = format!(
        "{helper} did not answer {what} within {ms} ms; it is restarted if it keeps missing its health checks (see ccctl helpers)"
    );
    refusal(Code::DeadlineExceeded, message, HELPER_TIMEOUT, &[("helper", helper.to_owned()), ("deadline_ms", ms)])
}

/// The reason of a refusal of ours, with its metadata.
pub fn reason_of(status: &Status) -> Option<(String, HashMap<String, String>)> {
    let info = status.get_details_error_info()?;
    (info.domain == DOMAIN).then_some((info.reason, info.metadata))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reason_survives_the_wire_form() {
        let status = refusal(Code::FailedPrecondition, "no", LINK_IN_ROOT, &[("path", "/d/x".to_owned())]);
        // What a client receives: the status rebuilt from its code, message and details.
        let received = Status::with_details(status.code(), status.message(), status.details().to_vec().into());
        let (reason, metadata) = reason_of(&received).unwrap();
        assert_eq!((reason.as_str(), metadata["path"].as_str()), (LINK_IN_ROOT, "/d/x"));
        assert!(reason_of(&Status::failed_precondition("plain")).is_none());
    }
}
