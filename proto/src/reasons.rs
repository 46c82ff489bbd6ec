//! Refusals a client must tell apart carry a `google.rpc.ErrorInfo` with one of these
//! reasons (AIP-193): clients match the reason, never the message.

use std::collections::HashMap;

use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt};

/// The domain every reason of ours is scoped to.
pub const DOMAIN: &str = "cc.dev";

/// sandboxd refused a launch because a link sits where privileged code would have
/// had to follow it inside a run's roots (metadata `path`): a sandbox violation.
pub const LINK_IN_ROOT: &str = "LINK_IN_ROOT";

/// A refusal with `reason` and its metadata.
pub fn refusal(code: Code, message: impl Into<String>, reason: &str, metadata: &[(&str, String)]) -> Status {
    let metadata: HashMap<String, String> = metadata.iter().map(|(k, v)| ((*k).to_owned(), v.clone())).collect();
    Status::with_error_details(code, message, ErrorDetails::with_error_info(reason, DOMAIN, metadata))
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
