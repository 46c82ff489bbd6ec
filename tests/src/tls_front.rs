//! A TLS front for a loopback server: a certificate authority of the test's own, made
//! with the `openssl` CLI, a server certificate it signed for `127.0.0.1`, and `socat`
//! terminating TLS with it in front of a plain port. Real TLS as a provider serves it,
//! with a CA no system trusts: what a self-hosted model behind a private CA looks like.

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::eventually;

pub struct TlsFront {
    /// The port TLS is served on, at 127.0.0.1.
    pub port: u16,
    /// The CA's certificate (PEM): what a client must trust.
    pub ca_pem: PathBuf,
    socat: Child,
    _dir: tempfile::TempDir,
}

impl TlsFront {
    /// TLS on a new loopback port, forwarded to `127.0.0.1:backend` in plain.
    pub fn start(backend: u16) -> TlsFront {
        let dir = tempfile::tempdir().unwrap();
        let at = |name: &str| dir.path().join(name);
        std::fs::write(
            at("server.ext"),
            "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature\n\
             extendedKeyUsage=serverAuth\n",
        )
        .unwrap();
        let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
        openssl(
            dir.path(),
            &["req", "-x509"],
            &ec,
            &["-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", "/CN=cc-test-ca"],
        );
        openssl(dir.path(), &["req"], &ec, &["-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=127.0.0.1"]);
        openssl(
            dir.path(),
            &["x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial"],
            &[],
            &["-out", "server.pem", "-days", "2", "-extfile", "server.ext"],
        );
        // socat takes a port, not a listener: one the kernel just handed out is taken
        // back at once, so a clash with another test is as unlikely as the kernel makes it.
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let listen = format!(
            "OPENSSL-LISTEN:{port},bind=127.0.0.1,reuseaddr,fork,verify=0,cert={},key={}",
            at("server.pem").display(),
            at("server.key").display()
        );
        let socat = Command::new("socat")
            .args([listen.as_str(), &format!("TCP:127.0.0.1:{backend}")])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .expect("socat (apt-get install socat)");
        eventually(Duration::from_secs(10), "socat listens", || TcpStream::connect(("127.0.0.1", port)).is_ok());
        TlsFront { port, ca_pem: at("ca.pem"), socat, _dir: dir }
    }
}

fn openssl(dir: &Path, command: &[&str], key: &[&str], rest: &[&str]) {
    let out = Command::new("openssl").args(command).args(key).args(rest).current_dir(dir).output().expect("openssl");
    assert!(out.status.success(), "openssl {command:?}: {}", String::from_utf8_lossy(&out.stderr));
}

impl Drop for TlsFront {
    fn drop(&mut self) {
        let _ = self.socat.kill();
        let _ = self.socat.wait();
    }
}
