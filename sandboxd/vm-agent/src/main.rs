//! cc-vm-agent: PID 1 of a microVM ([`init`]), and the server it starts for sandboxd
//! ([`serve`], `cc-vm-agent --serve`), which runs commands in the guest.
//!
//! The guest's kernel command line says what to serve and mount: `cc.port=N` (the vsock
//! port, default 1024) and `cc.share=TAG:PATH:rw|ro`, once per virtio-fs share. The
//! agent has no route to the host but its vsock port.
#![forbid(unsafe_code)]

mod exec;
mod init;
mod serve;

use std::process::ExitCode;

/// The vsock port when the command line names none.
pub const DEFAULT_PORT: u32 = 1024;

fn main() -> ExitCode {
    let serve = std::env::args().nth(1).as_deref() == Some("--serve");
    if std::process::id() == 1 && !serve {
        return init::run();
    }
    if !serve {
        eprintln!("cc-vm-agent: PID 1 of a microVM; `cc-vm-agent --serve` serves on vsock");
        return ExitCode::from(2);
    }
    serve::run()
}

/// What the kernel command line asks of the agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    pub port: u32,
    pub shares: Vec<Share>,
    /// Guest loopback ports bridged to the host's vsock ports of the same number.
    pub bridges: Vec<u16>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Share {
    pub tag: String,
    pub path: String,
    pub read_only: bool,
}

/// Reads `cc.port=` and `cc.share=` from a kernel command line; anything malformed is
/// an error that names it (the guest then serves nothing and says why on its console).
pub fn settings(cmdline: &str) -> Result<Settings, String> {
    let mut port = DEFAULT_PORT;
    let mut shares = Vec::new();
    let mut bridges = Vec::new();
    for word in cmdline.split_whitespace() {
        if let Some(value) = word.strip_prefix("cc.bridge=") {
            bridges.push(value.parse().map_err(|_| format!("cc.bridge={value} is not a port"))?);
            continue;
        }
        if let Some(value) = word.strip_prefix("cc.port=") {
            port = value.parse().map_err(|_| format!("cc.port={value} is not a port"))?;
        } else if let Some(value) = word.strip_prefix("cc.share=") {
            let mut parts = value.split(':');
            let (Some(tag), Some(path), Some(mode), None) = (parts.next(), parts.next(), parts.next(), parts.next())
            else {
                return Err(format!("cc.share={value} is not TAG:PATH:rw|ro"));
            };
            if tag.is_empty() || !path.starts_with('/') || !matches!(mode, "rw" | "ro") {
                return Err(format!("cc.share={value} is not TAG:/PATH:rw|ro"));
            }
            shares.push(Share { tag: tag.to_owned(), path: path.to_owned(), read_only: mode == "ro" });
        }
    }
    Ok(Settings { port, shares, bridges })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_names_the_port_and_the_shares() {
        let s =
            settings("console=ttyS0 quiet cc.port=2000 cc.share=work:/work:rw cc.share=att:/attachments:ro").unwrap();
        assert_eq!(s.port, 2000);
        assert_eq!(
            s.shares,
            vec![
                Share { tag: "work".into(), path: "/work".into(), read_only: false },
                Share { tag: "att".into(), path: "/attachments".into(), read_only: true },
            ]
        );
        assert_eq!(settings("quiet").unwrap(), Settings { port: DEFAULT_PORT, shares: vec![], bridges: vec![] });
        assert_eq!(settings("cc.bridge=41080 cc.bridge=41081").unwrap().bridges, vec![41080, 41081]);
        for bad in [
            "cc.bridge=x",
            "cc.bridge=70000",
            "cc.port=x",
            "cc.share=work",
            "cc.share=:/w:rw",
            "cc.share=w:rel:rw",
            "cc.share=w:/w:rx",
            "cc.share=a:/b:rw:x",
        ] {
            assert!(settings(bad).is_err(), "{bad}");
        }
    }
}
