//! cc-mcp: the product's MCP server over stdio (see `cc_runner::mcp`).
//! `cc-mcp [--agent http://127.0.0.1:PORT | --agent unix:PATH]`
#![forbid(unsafe_code)]

use std::process::ExitCode;

use cc_runner::hook::Address;
use cc_runner::mcp::ProductTools;
use rmcp::ServiceExt;

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let mut agent: Address = "http://127.0.0.1:41419".parse().expect("the default address parses");
    while let Some(arg) = args.next() {
        match (arg.as_str(), args.next()) {
            ("--agent", Some(value)) => match value.parse() {
                Ok(a) => agent = a,
                Err(e) => {
                    eprintln!("cc-mcp: --agent: {e}");
                    return ExitCode::from(2);
                }
            },
            _ => {
                eprintln!("cc-mcp: usage: cc-mcp [--agent http://127.0.0.1:PORT | --agent unix:PATH]");
                return ExitCode::from(2);
            }
        }
    }
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("cc-mcp: cannot start: {e}");
            return ExitCode::FAILURE;
        }
    };
    let served = runtime.block_on(async {
        let service = ProductTools::new(agent).serve(rmcp::transport::stdio()).await?;
        service.waiting().await?;
        anyhow::Ok(())
    });
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cc-mcp: {e}");
            ExitCode::FAILURE
        }
    }
}
