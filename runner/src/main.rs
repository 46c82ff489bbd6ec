#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    cc_proto::helper::run(cc_runner::SPEC, cc_runner::service)
}
