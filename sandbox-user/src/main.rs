//! The `sandbox` binary: parse the command line, run, map the result to an exit status.

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    sandbox_user::diag::init();
    let cli = sandbox_user::cli::Cli::parse();
    match sandbox_user::cli::main(cli) {
        Ok(code) => ExitCode::from(u8::try_from(code.clamp(0, 255)).unwrap_or(255)),
        Err(e) => {
            eprintln!("sandbox: {e:#}");
            ExitCode::from(sandbox_user::cli::EXIT_SANDBOX_FAILED)
        }
    }
}
