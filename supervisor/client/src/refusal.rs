//! What ccctl decides on a refusal is decided by its `google.rpc.ErrorInfo` reason,
//! never by the text of its message: the message is for people.

use cc_proto::reasons;
use tonic::Status;

/// The reason a refusal of ours carries, if any.
pub fn reason(status: &Status) -> Option<String> {
    reasons::reason_of(status).map(|(reason, _)| reason)
}

/// Whether `status` is a refusal with `reason`.
pub fn is(status: &Status, reason: &str) -> bool {
    self::reason(status).as_deref() == Some(reason)
}
