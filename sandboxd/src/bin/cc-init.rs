//! Our init inside every native envelope, as a binary of its own: small, so that
//! exec'ing it costs little and an idle envelope holds little memory.
#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    cc_sandboxd::init::main(&args)
}
