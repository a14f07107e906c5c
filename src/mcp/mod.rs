//! MCP: the only module that imports rmcp's server and client machinery.

pub mod server;
