//! A stand-in for GitHub's git host: real `git http-backend` (CGI) serving bare
//! repositories `ROOT/OWNER/NAME.git` over smart HTTP on a loopback port, behind a
//! small HTTP server of ours that authorizes each request as GitHub does: Basic auth
//! whose password is an installation token, `contents: read` to fetch, `contents:
//! write` for a push (its ref advertisement included). The decision is a closure, so
//! the stand-in GitHub API's live tokens decide (`GitHubApi::git_access`).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use base64::Engine;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Bytes, Frame, Incoming};
use hyper::{Request, Response, StatusCode};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

/// What a request needs of its token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    Read,
    Write,
}

/// (token, `owner/name`, access) → allowed.
pub type Authorize = Arc<dyn Fn(&str, &str, Access) -> bool + Send + Sync>;

type Body = BoxBody<Bytes, std::io::Error>;

pub struct GitHost {
    addr: SocketAddr,
    root: PathBuf,
    refused: Arc<AtomicUsize>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl Drop for GitHost {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl GitHost {
    /// Serves the bare repositories under `root` on a loopback port.
    pub fn start(root: &Path, authorize: Authorize) -> GitHost {
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        let refused = Arc::new(AtomicUsize::new(0));
        let addr = runtime.block_on(serve(root.to_owned(), authorize, refused.clone()));
        GitHost { addr, root: root.to_owned(), refused, runtime: Some(runtime) }
    }

    /// The base URL, as `[gateway] github_url`.
    pub fn base(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// `ROOT/OWNER/NAME.git`: a new bare repository with `main` at one commit (made
    /// in `seed`, a scratch directory), returned with that commit.
    pub fn create(&self, repository: &str, seed: &Path) -> (PathBuf, String) {
        let bare = self.root.join(format!("{repository}.git"));
        std::fs::create_dir_all(bare.parent().unwrap()).unwrap();
        crate::fs::git(&self.root, &["init", "-q", "--bare", "-b", "main", bare.to_str().unwrap()]);
        crate::fs::git(&self.root, &["init", "-q", "-b", "main", seed.to_str().unwrap()]);
        std::fs::write(seed.join("README"), format!("{repository}\n")).unwrap();
        crate::fs::git(seed, &["add", "README"]);
        crate::fs::git(seed, &["commit", "-qm", "one"]);
        crate::fs::git(seed, &["push", "-q", bare.to_str().unwrap(), "main"]);
        let head = crate::fs::git(&bare, &["rev-parse", "main"]).trim().to_owned();
        (bare, head)
    }

    /// Requests refused for want of a token that allows them.
    pub fn refused(&self) -> usize {
        self.refused.load(Ordering::Relaxed)
    }
}

fn text(status: StatusCode, message: &str) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from(format!("{message}\n"))).map_err(|n| match n {}).boxed());
    *response.status_mut() = status;
    response.headers_mut().insert("content-type", "text/plain".parse().unwrap());
    response
}

fn token_of(request: &Request<Incoming>) -> Option<String> {
    let value = request.headers().get("authorization")?.to_str().ok()?;
    let decoded = base64::engine::general_purpose::STANDARD.decode(value.strip_prefix("Basic ")?).ok()?;
    let decoded = String::from_utf8(decoded).ok()?;
    decoded.split_once(':').map(|(_, password)| password.to_owned())
}

async fn handle(
    request: Request<Incoming>,
    root: Arc<PathBuf>,
    authorize: Authorize,
    refused: Arc<AtomicUsize>,
) -> Result<Response<Body>, std::convert::Infallible> {
    let path = request.uri().path().to_owned();
    let query = request.uri().query().unwrap_or("").to_owned();
    let repository = path
        .trim_start_matches('/')
        .split(".git/")
        .next()
        .filter(|r| r.split('/').count() == 2 && !r.contains(".."))
        .map(str::to_owned);
    let Some(repository) = repository else { return Ok(text(StatusCode::NOT_FOUND, "Not Found")) };
    let access = if path.ends_with("/git-receive-pack") || query.contains("service=git-receive-pack") {
        Access::Write
    } else {
        Access::Read
    };
    let Some(token) = token_of(&request) else {
        refused.fetch_add(1, Ordering::Relaxed);
        let mut r = text(StatusCode::UNAUTHORIZED, "Authentication required");
        r.headers_mut().insert("www-authenticate", "Basic realm=\"GitHub\"".parse().unwrap());
        return Ok(r);
    };
    if !authorize(&token, &repository, access) {
        refused.fetch_add(1, Ordering::Relaxed);
        let message = match access {
            Access::Write => format!("Write access to repository not granted: {repository}"),
            Access::Read => format!("Repository not found: {repository}"),
        };
        return Ok(text(StatusCode::FORBIDDEN, &message));
    }
    Ok(cgi(request, &root, &path, &query).await)
}

/// Runs `git http-backend` for one request: the body streams to its stdin, its
/// output streams back after its CGI headers.
async fn cgi(request: Request<Incoming>, root: &Path, path: &str, query: &str) -> Response<Body> {
    let header = |name: &str| request.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let mut command = tokio::process::Command::new("git");
    command
        .arg("http-backend")
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("GIT_PROJECT_ROOT", root)
        .env("GIT_HTTP_EXPORT_ALL", "1")
        .env("REQUEST_METHOD", request.method().as_str())
        .env("PATH_INFO", path)
        .env("QUERY_STRING", query)
        .env("REMOTE_USER", "x-access-token")
        .env("REMOTE_ADDR", "127.0.0.1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true);
    for (header_name, variable) in [
        ("content-type", "CONTENT_TYPE"),
        ("content-length", "CONTENT_LENGTH"),
        ("content-encoding", "HTTP_CONTENT_ENCODING"),
        ("git-protocol", "HTTP_GIT_PROTOCOL"),
    ] {
        if let Some(value) = header(header_name) {
            command.env(variable, value);
        }
    }
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) => return text(StatusCode::INTERNAL_SERVER_ERROR, &format!("git http-backend: {e}")),
    };
    let mut stdin = child.stdin.take().unwrap();
    let mut body = request.into_body();
    tokio::spawn(async move {
        while let Some(Ok(frame)) = body.frame().await {
            if let Ok(data) = frame.into_data()
                && stdin.write_all(&data).await.is_err()
            {
                return;
            }
        }
    });
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut status = StatusCode::OK;
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        if stdout.read_line(&mut line).await.unwrap_or(0) == 0 {
            break;
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(": ") {
            if name.eq_ignore_ascii_case("status") {
                status = value.split(' ').next().and_then(|c| c.parse().ok()).unwrap_or(StatusCode::OK);
            } else {
                headers.push((name.to_owned(), value.to_owned()));
            }
        }
    }
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, std::io::Error>>(4);
    tokio::spawn(async move {
        let mut buf = vec![0u8; 64 << 10];
        loop {
            match stdout.read(&mut buf).await {
                Ok(0) => break,
                Ok(n) => {
                    if tx.send(Ok(Frame::data(Bytes::copy_from_slice(&buf[..n])))).await.is_err() {
                        break;
                    }
                }
                Err(e) => {
                    let _ = tx.send(Err(e)).await;
                    break;
                }
            }
        }
        let _ = child.wait().await;
    });
    let mut response = Response::new(StreamBody::new(tokio_stream::wrappers::ReceiverStream::new(rx)).boxed());
    *response.status_mut() = status;
    for (name, value) in headers {
        if let (Ok(name), Ok(value)) =
            (hyper::header::HeaderName::try_from(name), hyper::header::HeaderValue::try_from(value))
        {
            response.headers_mut().insert(name, value);
        }
    }
    response
}

async fn serve(root: PathBuf, authorize: Authorize, refused: Arc<AtomicUsize>) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let root = Arc::new(root);
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { return };
            let (root, authorize, refused) = (root.clone(), authorize.clone(), refused.clone());
            tokio::spawn(async move {
                let service =
                    hyper::service::service_fn(move |r| handle(r, root.clone(), authorize.clone(), refused.clone()));
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    addr
}
