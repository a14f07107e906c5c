//! The names that reach git and the file system from outside: a task's key (from the tracker),
//! the branch made from it, a repository's name and URL (from the operator). Each is checked
//! before use, so a hostile one is refused, never run: no name starts with `-` (git would read
//! an option), none holds `..` or a path separator where a folder is made from it.

/// The prefix of every branch picogent makes and pushes. Nothing else is ever pushed.
pub const BRANCH_PREFIX: &str = "picogent/";

/// A task key fit to name a branch and a folder: `TE-12`. Letters, digits, `-`, `_` and `.`,
/// starting with a letter or digit, no `..`, at most 64 characters.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TaskKey(String);

/// Why a task key cannot name a workspace.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the task key {0:?} cannot name a branch or a folder: expected letters, digits, '-', '_' or '.', \
     starting with a letter or digit, without '..'"
)]
pub struct BadTaskKey(pub String);

impl TaskKey {
    pub fn new(key: &str) -> Result<TaskKey, BadTaskKey> {
        let ok = !key.is_empty()
            && key.len() <= 64
            && key.chars().next().is_some_and(|c| c.is_ascii_alphanumeric())
            && key.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
            && !key.contains("..")
            && !key.ends_with('.')
            && !key.ends_with(".lock");
        if ok { Ok(TaskKey(key.to_string())) } else { Err(BadTaskKey(key.to_string())) }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The branch its work goes on: `picogent/TE-12`.
    pub fn branch(&self) -> String {
        format!("{BRANCH_PREFIX}{}", self.0)
    }
}

impl std::fmt::Display for TaskKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A repository's or coding agent's name in `agent.json`: it names a folder.
pub fn repository_name_ok(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name.chars().next().is_some_and(|c| c.is_ascii_alphanumeric())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_'))
}

/// Checks a branch name as git's `check-ref-format` would, and more strictly: it may not start
/// with `-` or `/`, hold `..`, `@{`, a space, a control character or one of `~^:?*[\`, or end
/// with `/`, `.` or `.lock`.
/// A branch name git would misread.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a branch name git accepts safely (no leading '-', no '..', spaces or ~^:?*[\\)")]
pub struct BadRefName(pub String);

pub fn check_ref_name(name: &str) -> Result<(), BadRefName> {
    let bad = name.is_empty()
        || name.starts_with('-')
        || name.starts_with('/')
        || name.ends_with('/')
        || name.ends_with('.')
        || name.ends_with(".lock")
        || name.contains("..")
        || name.contains("@{")
        || name.contains("//")
        || name.chars().any(|c| c.is_control() || c == ' ' || "~^:?*[\\".contains(c));
    if bad { Err(BadRefName(name.to_string())) } else { Ok(()) }
}

/// `user@host:path`, git's scp-like URL.
pub fn scp_like(url: &str) -> bool {
    match url.split_once(':') {
        Some((host, _)) => !host.is_empty() && !host.contains('/') && host.contains('@'),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_keys_that_could_escape_or_act_as_options_are_refused() {
        for good in ["TE-12", "ab_3", "X.1"] {
            assert_eq!(TaskKey::new(good).unwrap().as_str(), good);
        }
        assert_eq!(TaskKey::new("TE-12").unwrap().branch(), "picogent/TE-12");
        for bad in ["", "-f", "../x", "a/b", "a..b", "a;rm -rf", "$(id)", "a b", "x.lock", "x.", ".x", "a\nb"] {
            assert!(TaskKey::new(bad).is_err(), "{bad:?}");
        }
        assert!(TaskKey::new(&"a".repeat(65)).is_err());
    }

    #[test]
    fn branch_names_git_would_misread_are_refused() {
        for good in ["main", "release/1.2", "picogent/TE-1"] {
            assert!(check_ref_name(good).is_ok(), "{good}");
        }
        for bad in ["", "-f", "--force", "../main", "a..b", "a b", "x@{1}", "a:b", "x/", "/x", "x.lock", "a\\b"] {
            assert!(check_ref_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn names_of_folders_hold_no_separator() {
        assert!(repository_name_ok("billing-api_2"));
        for bad in ["", "a/b", "..", "-x", "a b"] {
            assert!(!repository_name_ok(bad), "{bad:?}");
        }
        assert!(scp_like("git@example.com:team/billing.git"));
        assert!(!scp_like("/srv/git/billing.git"));
        assert!(!scp_like("C:/x"));
    }
}
