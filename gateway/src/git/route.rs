//! Which smart-HTTP endpoint a request to the run's git socket names. The run's git
//! config rewrites `https://github.com/OWNER/NAME(.git)` to the bridge, so the path is
//! GitHub's: `/OWNER/NAME(.git)/info/refs?service=…`, `/…/git-upload-pack` or
//! `/…/git-receive-pack`. Nothing else is served: not the dumb protocol, not a path
//! that is not a repository.

/// git's two services.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Service {
    /// Fetch and clone.
    UploadPack,
    /// Push.
    ReceivePack,
}

impl Service {
    pub fn name(self) -> &'static str {
        match self {
            Service::UploadPack => "git-upload-pack",
            Service::ReceivePack => "git-receive-pack",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    /// `GET …/info/refs?service=…`: the ref advertisement.
    Advertise(Service),
    /// `POST …/git-upload-pack` or `…/git-receive-pack`.
    Rpc(Service),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// `owner/name`, lower case (GitHub's names are case-insensitive).
    pub repository: String,
    pub endpoint: Endpoint,
}

impl Route {
    /// The path upstream, in GitHub's canonical spelling.
    pub fn upstream_path(&self) -> String {
        match self.endpoint {
            Endpoint::Advertise(s) => format!("/{}.git/info/refs?service={}", self.repository, s.name()),
            Endpoint::Rpc(s) => format!("/{}.git/{}", self.repository, s.name()),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RouteError {
    #[error("{0:?} is not a GitHub repository path (OWNER/NAME)")]
    NotARepository(String),
    #[error("only git's smart HTTP protocol is served (info/refs needs ?service=git-upload-pack or git-receive-pack)")]
    DumbProtocol,
    #[error("{method} {what} is not a git endpoint")]
    NotAnEndpoint { method: String, what: String },
}

/// GitHub's rules: an owner is 1–39 letters, digits and inner hyphens; a repository
/// name is 1–100 letters, digits, `.`, `-` and `_`, and not `.` or `..`.
pub fn is_github_repository(owner: &str, name: &str) -> bool {
    let owner_ok = (1..=39).contains(&owner.len())
        && owner.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        && !owner.starts_with('-')
        && !owner.ends_with('-');
    let name_ok = (1..=100).contains(&name.len())
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
        && name != "."
        && name != "..";
    owner_ok && name_ok
}

/// The route of one request, from its method, path and query.
pub fn route(method: &str, path: &str, query: Option<&str>) -> Result<Route, RouteError> {
    let not_endpoint = || RouteError::NotAnEndpoint {
        method: method.chars().take(16).collect(),
        what: path.chars().take(200).collect(),
    };
    let (repo_path, endpoint) = if let Some(repo) = path.strip_suffix("/info/refs") {
        if method != "GET" {
            return Err(not_endpoint());
        }
        let service = query
            .into_iter()
            .flat_map(|q| q.split('&'))
            .find_map(|pair| pair.strip_prefix("service="))
            .ok_or(RouteError::DumbProtocol)?;
        let service = match service {
            "git-upload-pack" => Service::UploadPack,
            "git-receive-pack" => Service::ReceivePack,
            _ => return Err(RouteError::DumbProtocol),
        };
        (repo, Endpoint::Advertise(service))
    } else if let Some(repo) = path.strip_suffix("/git-upload-pack") {
        (repo, Endpoint::Rpc(Service::UploadPack))
    } else if let Some(repo) = path.strip_suffix("/git-receive-pack") {
        (repo, Endpoint::Rpc(Service::ReceivePack))
    } else {
        return Err(not_endpoint());
    };
    if matches!(endpoint, Endpoint::Rpc(_)) && method != "POST" {
        return Err(not_endpoint());
    }
    let bare = repo_path.strip_prefix('/').ok_or_else(|| RouteError::NotARepository(repo_path.into()))?;
    let bare = bare.strip_suffix(".git").unwrap_or(bare);
    let (owner, name) = bare.split_once('/').ok_or_else(|| RouteError::NotARepository(bare.into()))?;
    if !is_github_repository(owner, name) {
        return Err(RouteError::NotARepository(bare.chars().take(200).collect()));
    }
    Ok(Route { repository: format!("{owner}/{name}").to_ascii_lowercase(), endpoint })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn github_paths_in_every_spelling_route_to_the_same_repository() {
        for path in ["/Acme/Widgets.git/info/refs", "/acme/widgets/info/refs"] {
            let r = route("GET", path, Some("service=git-receive-pack")).unwrap();
            assert_eq!(r.repository, "acme/widgets");
            assert_eq!(r.endpoint, Endpoint::Advertise(Service::ReceivePack));
            assert_eq!(r.upstream_path(), "/acme/widgets.git/info/refs?service=git-receive-pack");
        }
        let r = route("POST", "/acme/widgets.git/git-upload-pack", None).unwrap();
        assert_eq!(r.endpoint, Endpoint::Rpc(Service::UploadPack));
        assert_eq!(r.upstream_path(), "/acme/widgets.git/git-upload-pack");
        let r = route("POST", "/acme/w.x-y_z/git-receive-pack", None).unwrap();
        assert_eq!(r.repository, "acme/w.x-y_z");
    }

    #[test]
    fn everything_else_is_refused_with_its_reason() {
        let cases: &[(&str, &str, Option<&str>)] = &[
            ("GET", "/acme/widgets.git/info/refs", None),
            ("GET", "/acme/widgets.git/info/refs", Some("service=git-upload-archive")),
            ("GET", "/acme/widgets.git/HEAD", None),
            ("GET", "/acme/widgets.git/objects/info/packs", None),
            ("GET", "/acme/widgets.git/git-receive-pack", None),
            ("POST", "/acme/widgets.git/info/refs", Some("service=git-upload-pack")),
            ("POST", "/acme/git-upload-pack", None),
            ("POST", "/../../etc/git-upload-pack", None),
            ("POST", "/acme/../git-upload-pack", None),
            ("POST", "/acme/a/b/git-upload-pack", None),
            ("POST", "acme/widgets/git-upload-pack", None),
            ("POST", "/-acme/widgets/git-upload-pack", None),
            ("POST", "/acme/wid gets/git-upload-pack", None),
            ("POST", "/acme/wid%2fgets/git-upload-pack", None),
            ("POST", "/acme/.git/git-upload-pack", None),
        ];
        for (method, path, query) in cases {
            let e = route(method, path, *query).unwrap_err();
            assert!(!e.to_string().contains('\n'), "{e}");
        }
        assert_eq!(route("GET", "/a/b/info/refs", None).unwrap_err(), RouteError::DumbProtocol);
    }

    #[test]
    fn repository_names_follow_github() {
        assert!(is_github_repository("a", "b"));
        assert!(is_github_repository(&"a".repeat(39), &"b".repeat(100)));
        assert!(!is_github_repository(&"a".repeat(40), "b"));
        assert!(!is_github_repository("a", &"b".repeat(101)));
        assert!(!is_github_repository("a_b", "c"));
        assert!(!is_github_repository("a", ".."));
        assert!(!is_github_repository("", "c"));
    }
}
