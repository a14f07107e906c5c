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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_and_display_hide_the_value() {
        let secret = Secret::new("tok-very-secret");
        assert_eq!(format!("{secret:?}"), "Secret(***)");
        assert_eq!(format!("{secret}"), "***");
        assert_eq!(secret.expose(), "tok-very-secret");
    }
}
