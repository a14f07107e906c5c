//! The tracker's event stream.
