//! Why sandboxd refuses a registration, a launch or an explanation: typed here, turned
//! into a `tonic::Status` (with a `google.rpc.ErrorInfo` reason where a caller must tell
//! it apart) only at the service's edge.

use std::path::PathBuf;

use cc_proto::reasons;
use tonic::{Code, Status};

use crate::policy::PolicyError;
use crate::short;

#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error("no run {:?}", short(.0))]
    RunNotFound(String),
    #[error("run {:?} ended while launching", short(.0))]
    RunEnded(String),
    #[error("{0}")]
    BadRequest(String),
    #[error("{0}")]
    BadPolicy(#[from] PolicyError),
    /// The run's roots are not what was registered (a root replaced or made a link).
    #[error("{0}")]
    RootChanged(PolicyError),
    /// A link where privileged code would have had to follow it inside a run's roots.
    #[error("refusing to launch: {message}")]
    LinkInRoot { message: String, path: PathBuf },
    #[error("refusing to launch: {0}")]
    Refused(String),
    #[error("cannot start the launch: {0}")]
    CannotStart(#[source] std::io::Error),
    /// The microVM backend is unavailable here (the probe's reason).
    #[error("the microVM backend is not available on this host: {0}")]
    Unavailable(String),
    #[error("no microVM {0:?}")]
    VmNotFound(String),
    #[error("{0}")]
    Internal(String),
}

impl From<LaunchError> for Status {
    fn from(e: LaunchError) -> Status {
        let message = e.to_string();
        match e {
            LaunchError::RunNotFound(run_id) => {
                reasons::refusal(Code::NotFound, message, reasons::RUN_NOT_FOUND, &[("run_id", short(&run_id))])
            }
            LaunchError::RunEnded(run_id) => {
                reasons::refusal(Code::NotFound, message, reasons::RUN_ENDED, &[("run_id", short(&run_id))])
            }
            LaunchError::BadRequest(_) | LaunchError::BadPolicy(_) => Status::invalid_argument(message),
            LaunchError::LinkInRoot { path, .. } => reasons::refusal(
                Code::FailedPrecondition,
                message,
                reasons::LINK_IN_ROOT,
                &[("path", path.to_string_lossy().into_owned())],
            ),
            LaunchError::RootChanged(_) | LaunchError::Refused(_) | LaunchError::CannotStart(_) => {
                Status::failed_precondition(message)
            }
            LaunchError::Unavailable(_) => reasons::refusal(
                Code::FailedPrecondition,
                message,
                reasons::BACKEND_UNAVAILABLE,
                &[("backend", "microvm".to_owned())],
            ),
            LaunchError::VmNotFound(_) => Status::not_found(message),
            LaunchError::Internal(_) => Status::internal(message),
        }
    }
}
