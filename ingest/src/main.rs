//! The `ingest` binary. The pipeline (source -> decode -> aggregate ->
//! flush -> store) arrives with the embedded-pipeline issue; until then this
//! binary says so instead of pretending to run.

use clap::Parser;

#[derive(Parser)]
#[command(name = "ingest", version, about = "Consume click/impression events into Z-indexed aggregates")]
struct Cli {}

fn main() -> std::process::ExitCode {
    let _ = Cli::parse();
    eprintln!("ingest: the ingestion pipeline is not built yet (embedded pipeline issue); nothing was consumed");
    std::process::ExitCode::from(2)
}
