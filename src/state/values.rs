//! Small named values kept across restarts (the tracker's head a first start began at).

use super::{State, StateError, now_ms};

impl State {
    pub async fn get_value(&self, name: &str) -> Result<Option<String>, StateError> {
        on_store!(self, get_value(name))
    }

    pub async fn set_value(&self, name: &str, value: &str) -> Result<(), StateError> {
        on_store!(self, set_value(name, value, now_ms()))
    }
}
