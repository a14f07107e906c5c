pub mod choice;
pub mod private_files;
pub mod retry;
pub mod secret;
pub mod sqlite;
