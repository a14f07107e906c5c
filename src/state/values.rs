//! Small named values kept across restarts (the tracker's head a first start began at).

use super::{State, StateError, now_ms};

impl State {
    pub async fn get_value(&self, name: &str) -> Result<Option<String>, StateError> {
        Ok(sqlx::query_scalar("SELECT value FROM named_values WHERE name = ?")
            .bind(name)
            .fetch_optional(&self.pool)
            .await?)
    }

    pub async fn set_value(&self, name: &str, value: &str) -> Result<(), StateError> {
        sqlx::query(
            "INSERT INTO named_values (name, value, updated_at_ms) VALUES (?, ?, ?) \
             ON CONFLICT (name) DO UPDATE SET value = excluded.value, updated_at_ms = excluded.updated_at_ms",
        )
        .bind(name)
        .bind(value)
        .bind(now_ms())
        .execute(&self.pool)
        .await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #[tokio::test]
    async fn values_round_trip_and_persist() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        let state = super::State::open(&path).await.unwrap();
        assert_eq!(state.get_value("cursor").await.unwrap(), None);
        state.set_value("cursor", "m1").await.unwrap();
        state.set_value("cursor", "m2").await.unwrap();
        state.close().await;
        let state = super::State::open(&path).await.unwrap();
        assert_eq!(state.get_value("cursor").await.unwrap().as_deref(), Some("m2"));
    }
}
