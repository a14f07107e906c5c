//! The seed file: the projects and members (with their bearer tokens) of a new board.
//!
//! The tokens in a seed file are development tokens for the reference board, which is a test
//! server; a member's client still reads its own token from the environment. The seed is
//! applied only to a database without members, so restarting with `--seed` changes nothing.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use sqlx::SqlitePool;

use crate::db;
use picogent_tracker::model::MemberKind;

/// `{"projects": [...], "members": [...]}`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Seed {
    #[serde(default)]
    pub projects: Vec<SeedProject>,
    #[serde(default)]
    pub members: Vec<SeedMember>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SeedProject {
    pub slug: String,
    /// The prefix of the project's task keys (`TE` gives `TE-1`).
    pub key: String,
    pub name: String,
}

#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SeedMember {
    pub slug: String,
    pub name: String,
    pub kind: MemberKind,
    /// The member's bearer token on this board.
    pub token: String,
}

impl std::fmt::Debug for SeedMember {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SeedMember")
            .field("slug", &self.slug)
            .field("name", &self.name)
            .field("kind", &self.kind)
            .field("token", &"***")
            .finish()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SeedError {
    #[error("cannot read the seed file {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("the seed file {path} is not valid: {source}")]
    Parse { path: PathBuf, source: serde_json::Error },
    #[error("the seed file {path} is not valid: {source}")]
    Invalid { path: PathBuf, source: SeedProblem },
}

/// What is wrong in a seed file that parses: a slug, a key or a token the board cannot take.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SeedProblem {
    /// A project slug that is not lowercase letters, digits, `-` and `_`.
    #[error("project slug {0:?} must be lowercase letters, digits, - or _")]
    ProjectSlug(String),
    /// A project key that is not uppercase letters and digits (task keys are made of it).
    #[error("project key {0:?} must be uppercase letters and digits")]
    ProjectKey(String),
    /// A member slug that is not lowercase letters, digits, `-` and `_`, or is `me`, which names the
    /// caller in the API's paths.
    #[error("member slug {0:?} must be lowercase letters, digits, - or _ (and not \"me\")")]
    MemberSlug(String),
    /// A member whose token is empty or blank, which no request could carry.
    #[error("member {0} has an empty token")]
    EmptyToken(String),
    /// Two members with one slug.
    #[error("member {0} appears twice")]
    DuplicateMember(String),
    /// A member with the token of an earlier one: a token names one member, so the two could not
    /// be told apart.
    #[error("member {0} shares its token with another member")]
    SharedToken(String),
}

fn is_slug(text: &str) -> bool {
    let mut chars = text.chars();
    chars.next().is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
}

impl Seed {
    /// Reads and checks a seed file.
    pub fn load(path: &Path) -> Result<Seed, SeedError> {
        let text = std::fs::read_to_string(path).map_err(|source| SeedError::Read { path: path.into(), source })?;
        let seed: Seed =
            serde_json::from_str(&text).map_err(|source| SeedError::Parse { path: path.into(), source })?;
        seed.check().map_err(|source| SeedError::Invalid { path: path.into(), source })?;
        Ok(seed)
    }

    /// The token of the member `slug`, for tests and the demo that act as seeded members.
    pub fn token_of(&self, slug: &str) -> Option<&str> {
        self.members.iter().find(|m| m.slug == slug).map(|m| m.token.as_str())
    }

    fn check(&self) -> Result<(), SeedProblem> {
        for project in &self.projects {
            if !is_slug(&project.slug) {
                return Err(SeedProblem::ProjectSlug(project.slug.clone()));
            }
            let key_ok = project.key.chars().next().is_some_and(|c| c.is_ascii_uppercase())
                && project.key.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit());
            if !key_ok {
                return Err(SeedProblem::ProjectKey(project.key.clone()));
            }
        }
        for (index, member) in self.members.iter().enumerate() {
            if !is_slug(&member.slug) || member.slug == "me" {
                return Err(SeedProblem::MemberSlug(member.slug.clone()));
            }
            if member.token.trim().is_empty() {
                return Err(SeedProblem::EmptyToken(member.slug.clone()));
            }
            let earlier = &self.members[..index];
            if earlier.iter().any(|m| m.slug == member.slug) {
                return Err(SeedProblem::DuplicateMember(member.slug.clone()));
            }
            if earlier.iter().any(|m| m.token == member.token) {
                return Err(SeedProblem::SharedToken(member.slug.clone()));
            }
        }
        Ok(())
    }
}

/// Applies the seed to a database that has no members yet. Returns whether it was applied.
pub(crate) async fn apply(pool: &SqlitePool, seed: &Seed) -> Result<bool, sqlx::Error> {
    let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
    let members: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM members").fetch_one(&mut *tx).await?;
    if members > 0 {
        return Ok(false);
    }
    for project in &seed.projects {
        sqlx::query("INSERT INTO projects (id, slug, key, name, chat_id) VALUES (?1, ?2, ?3, ?4, ?5)")
            .bind(db::new_id())
            .bind(&project.slug)
            .bind(&project.key)
            .bind(&project.name)
            .bind(db::new_id())
            .execute(&mut *tx)
            .await?;
    }
    for member in &seed.members {
        sqlx::query("INSERT INTO members (slug, name, kind, token) VALUES (?1, ?2, ?3, ?4)")
            .bind(&member.slug)
            .bind(&member.name)
            .bind(member.kind.as_str())
            .bind(&member.token)
            .execute(&mut *tx)
            .await?;
    }
    tx.commit().await?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fixture_seed_loads() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/board-seed.json");
        let seed = Seed::load(&path).unwrap();
        assert_eq!(seed.token_of("picogent"), Some("tok-picogent"));
        assert!(seed.token_of("otherbot").is_some());
        assert!(!format!("{seed:?}").contains("tok-alice"));
    }

    #[test]
    fn refuses_duplicate_tokens() {
        let seed: Seed = serde_json::from_str(
            r#"{"members": [{"slug": "a", "name": "A", "kind": "human", "token": "t"},
                            {"slug": "b", "name": "B", "kind": "agent", "token": "t"}]}"#,
        )
        .unwrap();
        assert_eq!(seed.check().unwrap_err(), SeedProblem::SharedToken("b".to_string()));
    }
}
