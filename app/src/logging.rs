//! Log lines on stderr, as text for a person or JSON for a log service.

use std::io::IsTerminal;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// Installs the global subscriber: RUST_LOG filters (default: info).
pub fn init(format: LogFormat) {
    let logs = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .with_writer(std::io::stderr);
    match format {
        // Colour only for a person: logs sent to a file, a journal or a log
        // service keep their fields greppable.
        LogFormat::Text => logs.with_ansi(std::io::stderr().is_terminal()).init(),
        LogFormat::Json => logs.json().init(),
    }
}

/// A line of the run's own output (a listener's address, the summary): as
/// it is in text mode, as a log event in JSON mode (a log service reads one
/// format).
pub fn say(format: LogFormat, line: &str) {
    match format {
        LogFormat::Text => eprintln!("{line}"),
        LogFormat::Json => tracing::info!(target: "zigzag", "{line}"),
    }
}
