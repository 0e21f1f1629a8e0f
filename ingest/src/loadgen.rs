//! The `loadgen` binary. Synthetic traffic with a ground truth arrives with
//! the embedded-pipeline issue; until then this binary says so.

use clap::Parser;

#[derive(Parser)]
#[command(name = "loadgen", version, about = "Generate synthetic click/impression traffic with a ground truth")]
struct Cli {}

fn main() -> std::process::ExitCode {
    let _ = Cli::parse();
    eprintln!("loadgen: traffic generation is not built yet (embedded pipeline issue); nothing was generated");
    std::process::ExitCode::from(2)
}
