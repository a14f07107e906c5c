//! Small named values kept across restarts (the tracker's head a first start began at).

use crate::{State, StateError, now_ms};

impl State {
    pub async fn get_value(&self, name: &str) -> Result<Option<String>, StateError> {
        on_store!(self, get_value(name))
    }

    pub async fn set_value(&self, name: &str, value: &str) -> Result<(), StateError> {
        on_store!(self, set_value(name, value, now_ms()))
    }

    /// Sets the value unless `name` has one already; returns the value it has now. Replicas
    /// starting at once on one database all get the one that landed first.
    pub async fn value_or_insert(&self, name: &str, value: &str) -> Result<String, StateError> {
        on_store!(self, value_or_insert(name, value, now_ms()))
    }
}
