//! The `picogent` command line: parses arguments and calls into the library.

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = picogent::cli::Cli::parse();
    picogent::cli::main(cli)
}
