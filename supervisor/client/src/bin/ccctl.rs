#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    cc_client::cli::main()
}
