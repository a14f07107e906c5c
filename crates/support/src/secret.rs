//! A secret string (a bearer token, an API key) that never prints itself.
//!
//! Secrets come from the environment only; `Debug` and `Display` show `***`, so a secret that ends
//! up inside a logged struct or an error message does not leak.

use std::fmt;

#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    /// Reads a secret from the environment variable `name`. An empty value counts as missing.
    pub fn from_env(name: &str) -> Result<Secret, SecretError> {
        match std::env::var(name) {
            Ok(value) if !value.trim().is_empty() => Ok(Secret(value.trim().to_string())),
            Ok(_) => Err(SecretError::Empty { name: name.to_string() }),
            Err(std::env::VarError::NotPresent) => Err(SecretError::Missing { name: name.to_string() }),
            Err(std::env::VarError::NotUnicode(_)) => Err(SecretError::NotUnicode { name: name.to_string() }),
        }
    }

    /// The value itself, for the one place that puts it on the wire.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Whether `given` (a token a client sent) is this secret, compared without stopping at the
    /// first difference, so timing does not reveal the secret. Every door that takes a token
    /// checks it with this.
    pub fn matches(&self, given: &str) -> bool {
        let (given, expected) = (given.as_bytes(), self.0.as_bytes());
        given.len() == expected.len() && given.iter().zip(expected).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SecretError {
    #[error("environment variable {name} is not set: export it with the secret (secrets are never read from files)")]
    Missing { name: String },
    #[error("environment variable {name} is empty: export it with the secret")]
    Empty { name: String },
    #[error("environment variable {name} is not valid unicode")]
    NotUnicode { name: String },
}

/// `url` as it may be shown anywhere (pages, `check`, logs, errors, `/readyz`): without user info
/// (`name:password@`), query or fragment. The one function every path that shows a configured
/// URL goes through; a text that is not a URL is not shown at all.
pub fn shown_url(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(mut parsed) => {
            let _ = parsed.set_username("");
            let _ = parsed.set_password(None);
            parsed.set_query(None);
            parsed.set_fragment(None);
            parsed.to_string()
        }
        Err(_) => "(an invalid URL)".to_string(),
    }
}

/// Whether `url` carries a credential where it would show: user info (`name@`, `name:password@`)
/// or a `password` in its query. The check of `llm.base_url`, `mcp_servers.*.url`, `tracker.url`
/// and (a password only; a PostgreSQL user name is no secret) `state.url`.
pub fn url_credential(url: &str) -> Option<UrlCredential> {
    let parsed = reqwest::Url::parse(url).ok()?;
    if parsed.password().is_some() || parsed.query_pairs().any(|(key, _)| key == "password") {
        Some(UrlCredential::Password)
    } else if !parsed.username().is_empty() {
        Some(UrlCredential::UserName)
    } else {
        None
    }
}

/// What is wrong with `url` as a setting that must be an http:// or https:// URL, or `None`
/// when it is one. The words show the URL only as [`shown_url`] does: they are printed and logged.
/// The one check of every configured URL (the config's own, `mcp_servers.*.url`).
pub fn not_an_http_url(url: &str) -> Option<String> {
    if (url.starts_with("http://") || url.starts_with("https://")) && url.len() >= 8 {
        return None;
    }
    let shown = if reqwest::Url::parse(url).is_ok() { shown_url(url) } else { "something else".into() };
    Some(format!("expected an http:// or https:// URL, got {shown:?}"))
}

/// Why a configured `url` may not carry a credential (user info `name:password@` or a password
/// in its query), or `None` when it carries none: secrets never go in the config file, and a URL
/// is shown (pages, `check`, logs). `instead` says where the secret goes. The secret itself is
/// not in the words.
pub fn credential_in_setting(url: &str, instead: &str) -> Option<String> {
    url_credential(url)?;
    Some(format!(
        "holds a credential (user info `name:password@` or a password in the query), and secrets never go in the config file: remove it from the URL ({}) and {instead}",
        shown_url(url)
    ))
}

/// What [`url_credential`] found in a URL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UrlCredential {
    /// A password (user info `name:password@`, or `?password=`).
    Password,
    /// A user name alone (`name@`).
    UserName,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_compares_the_whole_token() {
        let token = Secret::new("tok-1");
        assert!(token.matches("tok-1"));
        assert!(!token.matches("tok-2"));
        assert!(!token.matches("tok"));
        assert!(!token.matches(""));
        assert!(!Secret::new("tok").matches("tok-1"));
    }

    #[test]
    fn a_shown_url_has_no_user_info_query_or_fragment() {
        let shown = shown_url("http://someone:s3cret@127.0.0.1:8080/v1/?key=k#x");
        assert_eq!(shown, "http://127.0.0.1:8080/v1/");
        assert_eq!(shown_url("https://only-name@example.com/mcp"), "https://example.com/mcp");
        assert_eq!(shown_url("not a url"), "(an invalid URL)");
    }

    #[test]
    fn credentials_in_urls_are_found() {
        assert_eq!(url_credential("http://a:b@host/v1"), Some(UrlCredential::Password));
        assert_eq!(url_credential("http://host/v1?password=x"), Some(UrlCredential::Password));
        assert_eq!(url_credential("http://a@host/v1"), Some(UrlCredential::UserName));
        assert_eq!(url_credential("http://host:8080/v1"), None);
        assert_eq!(url_credential("not a url"), None);
    }

    #[test]
    fn debug_and_display_hide_the_value() {
        let secret = Secret::new("tok-very-secret");
        assert_eq!(format!("{secret:?}"), "Secret(***)");
        assert_eq!(format!("{secret}"), "***");
        assert_eq!(secret.expose(), "tok-very-secret");
    }
}
