#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    // Inside an envelope this binary is our init; everywhere else it is the helper.
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if args.get(1).is_some_and(|a| a == "init") {
        return cc_sandboxd::init::main(&args[2..]);
    }
    cc_proto::helper::run(cc_sandboxd::SPEC, cc_sandboxd::service)
}
