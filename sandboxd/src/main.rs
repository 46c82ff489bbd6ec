#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    cc_proto::helper::run(cc_sandboxd::SPEC, cc_sandboxd::service)
}
