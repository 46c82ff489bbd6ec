//! Names that become path components (workspaces, repositories, agents): a short,
//! boring alphabet, so that no name can climb out of its directory or hide in a listing.

/// Why a name is refused, in one line that shows it escaped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    #[error("{kind} name {shown:?} must be 1 to 64 characters")]
    Length { kind: &'static str, shown: String },
    #[error("{kind} name {shown:?} may not start with '.' or '-'")]
    Start { kind: &'static str, shown: String },
    #[error("{kind} name {shown:?} may contain only letters, digits, '.', '_' and '-'")]
    Alphabet { kind: &'static str, shown: String },
    #[error(
        "GitHub repository {shown:?} must be OWNER/NAME: an owner of letters, digits and '-' (1 to 39), a name of letters, digits, '.', '_' and '-' (1 to 100)"
    )]
    GitHubRepository { shown: String },
}

/// `OWNER/NAME` as GitHub allows them, lower-cased (GitHub compares them without
/// regard to case).
pub fn github_repository(text: &str) -> Result<String, NameError> {
    let shown: String = text.chars().take(160).flat_map(char::escape_default).collect();
    let refuse = || NameError::GitHubRepository { shown: shown.clone() };
    let (owner, name) = text.split_once('/').ok_or_else(refuse)?;
    let owner_ok = (1..=39).contains(&owner.len())
        && !owner.starts_with('-')
        && owner.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
    let name_ok = (1..=100).contains(&name.len())
        && name != "."
        && name != ".."
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if owner_ok && name_ok { Ok(text.to_ascii_lowercase()) } else { Err(refuse()) }
}

/// `[A-Za-z0-9._-]{1,64}`, not starting with `.` or `-`.
pub fn check(kind: &'static str, name: &str) -> Result<(), NameError> {
    let shown: String = name.chars().take(64).flat_map(char::escape_default).collect();
    if name.is_empty() || name.len() > 64 {
        return Err(NameError::Length { kind, shown });
    }
    if name.starts_with('.') || name.starts_with('-') {
        return Err(NameError::Start { kind, shown });
    }
    if !name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-')) {
        return Err(NameError::Alphabet { kind, shown });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{check, github_repository};

    #[test]
    fn github_repositories_are_owner_slash_name() {
        assert_eq!(github_repository("Octo-Org/Hello.World_2").unwrap(), "octo-org/hello.world_2");
        for bad in ["o", "o/", "/r", "o/r/x", "-o/r", "o/..", "o_x/r", "o/r s", &format!("{}/r", "o".repeat(40))] {
            let err = github_repository(bad).unwrap_err().to_string();
            assert!(err.contains("must be OWNER/NAME") && !err.contains('\n'), "{bad}: {err}");
        }
    }

    #[test]
    fn accepts_ordinary_names() {
        for ok in ["default", "my-repo", "repo_2", "a.b", "A", &"x".repeat(64)] {
            assert!(check("repo", ok).is_ok(), "{ok}");
        }
    }

    #[test]
    fn refuses_anything_path_like() {
        for bad in ["", ".", "..", ".git", "-rf", "a/b", "a\\b", "a b", "a\0b", "ü", "a\nb", &"x".repeat(65), "~", "*"]
        {
            let err = check("repo", bad).unwrap_err().to_string();
            assert!(!err.contains('\n') && !err.contains('\0'), "{err:?}");
        }
    }
}
