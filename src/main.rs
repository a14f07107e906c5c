//! The `picogent` command line: parses arguments and calls into the library.

use std::process::ExitCode;

use clap::Parser;

/// mimalloc instead of glibc's malloc: the o200k tables the token counts need are ~600,000
/// allocations of a few bytes each, which glibc rounds up to 32-byte chunks and mimalloc packs
/// into 8- and 16-byte size classes; and it hands freed pages back to the system instead of
/// keeping them in per-thread arenas. See docs/performance.md, "Memory".
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = picogent::cli::Cli::parse();
    picogent::cli::main(cli)
}
