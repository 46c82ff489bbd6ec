#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    cc_proto::helper::run(cc_broker::SPEC, cc_broker::service)
}
