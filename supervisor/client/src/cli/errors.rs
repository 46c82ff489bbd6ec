//! What ccctl says when it fails: one line on stderr (`ccctl: …`), or with `--json` one
//! JSON object, and the exit status that goes with it (docs/reference/cli.md).

use std::process::ExitCode;

use anyhow::anyhow;

use super::render;

pub(super) fn fail(error: anyhow::Error, json: bool) -> ExitCode {
    if let Some(exit) = error.downcast_ref::<ExitWith>() {
        if let Some(message) = &exit.message {
            say_error(&render::one_line(message), exit.reason.as_deref(), exit.code, json);
        }
        return ExitCode::from(exit.code);
    }
    let reason = error.downcast_ref::<Refused>().and_then(|r| r.reason.clone());
    // `{:#}` keeps the context chain on one line.
    say_error(&render::one_line(&format!("{error:#}")), reason.as_deref(), 1, json);
    ExitCode::FAILURE
}

/// An error on stderr: `ccctl: MESSAGE`, or with `--json` one JSON object,
/// `{"error": MESSAGE, "reason": REASON or null, "exit_code": N}`.
pub(super) fn say_error(message: &str, reason: Option<&str>, code: u8, json: bool) {
    if json {
        eprintln!("{}", serde_json::json!({ "error": message, "reason": reason, "exit_code": code }));
    } else {
        eprintln!("ccctl: {message}");
    }
}

/// A refusal from the supervisor, with its `google.rpc.ErrorInfo` reason when it has one.
#[derive(Debug)]
pub(crate) struct Refused {
    message: String,
    reason: Option<String>,
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Refused {}

/// An ending with a status of its own (a denial, a command's exit status), and the
/// line to say, if any.
#[derive(Debug)]
pub(crate) struct ExitWith {
    code: u8,
    message: Option<String>,
    /// The supervisor's reason, when the ending is its refusal.
    reason: Option<String>,
}

impl ExitWith {
    pub(crate) fn error(code: u8, message: &str) -> anyhow::Error {
        anyhow::Error::new(ExitWith { code, message: Some(message.to_owned()), reason: None })
    }

    /// A refusal the supervisor gave with `reason`, ending ccctl with `code`.
    pub(crate) fn refusal(code: u8, message: &str, reason: String) -> anyhow::Error {
        anyhow::Error::new(ExitWith { code, message: Some(message.to_owned()), reason: Some(reason) })
    }

    pub(crate) fn silent(code: u8) -> anyhow::Error {
        anyhow::Error::new(ExitWith { code, message: None, reason: None })
    }
}

impl std::fmt::Display for ExitWith {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.message.as_deref().unwrap_or("exit"))
    }
}

impl std::error::Error for ExitWith {}

/// A status from the supervisor, as one line.
pub(crate) fn rpc_error(status: tonic::Status) -> anyhow::Error {
    // A refusal of ours says what it is; only a bare transport failure is the connection.
    if let Some(reason) = crate::refusal::reason(&status) {
        return anyhow::Error::new(Refused { message: status.message().to_owned(), reason: Some(reason.to_owned()) });
    }
    match status.code() {
        tonic::Code::Unavailable if status.message().contains("transport") || status.message().is_empty() => {
            anyhow!("the supervisor closed the connection ({})", status.message())
        }
        _ => anyhow!("{}", status.message()),
    }
}
