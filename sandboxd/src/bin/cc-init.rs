//! Our init inside every native envelope, as a binary of its own: small, so that
//! exec'ing it costs little and an idle envelope holds little memory.
#![forbid(unsafe_code)]

#[cfg(target_os = "linux")]
fn main() -> std::process::ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    cc_sandboxd::init::main(&args)
}

/// Linux envelopes only: macOS launches run under sandbox-exec with no init of ours.
#[cfg(not(target_os = "linux"))]
fn main() -> std::process::ExitCode {
    eprintln!("cc-init: only Linux envelopes have an init of ours");
    std::process::ExitCode::from(125)
}
