#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    cc_proto::helper::run(cc_gateway::SPEC, cc_gateway::service)
}
