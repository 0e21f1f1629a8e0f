//! Log lines on stderr, as text for a person or JSON for a log service.

use std::io::IsTerminal;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// The logging options of a binary that logs.
#[derive(Debug, Clone, clap::Args)]
pub struct LogArgs {
    /// Log lines on stderr: text (coloured on a terminal) or json (one
    /// object per line, for a log service; the run summary too)
    #[arg(long, value_enum, default_value = "text", global = true)]
    pub log_format: LogFormat,
    /// Which lines are logged, in RUST_LOG's syntax: a level (warn), or
    /// per module (info,zigzag_lease=debug) [default: RUST_LOG, else info]
    #[arg(long, value_name = "DIRECTIVES", global = true, value_parser = filter)]
    pub log_filter: Option<String>,
}

fn filter(text: &str) -> Result<String, String> {
    tracing_subscriber::EnvFilter::try_new(text).map(|_| text.to_string()).map_err(|e| e.to_string())
}

/// Installs the global subscriber, filtered by `--log-filter`, else
/// RUST_LOG, else at info.
pub fn init(args: &LogArgs) {
    let filter = match &args.log_filter {
        Some(directives) => tracing_subscriber::EnvFilter::new(directives),
        None => tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
    };
    let format = args.log_format;
    let logs = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
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

/// An error as a user reads it: `Error: ` and the message, then its
/// causes, as anyhow prints them, but never a backtrace (anyhow adds one
/// when RUST_BACKTRACE is set; a bad window is not a crash).
pub fn error_text(error: &anyhow::Error) -> String {
    let mut text = format!("Error: {error}");
    match new_causes(error).as_slice() {
        [] => {}
        [one] => text.push_str(&format!("\n\nCaused by:\n    {one}")),
        many => {
            text.push_str("\n\nCaused by:");
            for (i, c) in many.iter().enumerate() {
                text.push_str(&format!("\n    {i}: {c}"));
            }
        }
    }
    text
}

/// The causes of `error` that say something new: each cause once. An
/// error that shows its source in its own message (`source: {0}`) would
/// otherwise say it twice.
fn new_causes(error: &anyhow::Error) -> Vec<String> {
    let mut said = error.to_string();
    let mut causes = Vec::new();
    for cause in error.chain().skip(1).map(ToString::to_string) {
        if !said.contains(&cause) {
            said.push_str(&cause);
            causes.push(cause);
        }
    }
    causes
}

/// A binary's exit for what its run returned: 0, or the error printed
/// ([`error_text`]) and 1. (A bad command line is clap's: exit 2.)
pub fn exit(result: anyhow::Result<()>) -> std::process::ExitCode {
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{}", error_text(&e));
            std::process::ExitCode::FAILURE
        }
    }
}

/// A fatal error, the run's last line: as `main` returning it prints it in
/// text mode; in JSON mode one event (level ERROR, the whole chain of
/// causes in `error`), so a log service sees why the process stopped.
pub fn fatal(format: LogFormat, error: &anyhow::Error) {
    match format {
        LogFormat::Text => eprintln!("{}", error_text(error)),
        LogFormat::Json => {
            let mut text = error.to_string();
            for cause in new_causes(error) {
                text = format!("{text}: {cause}");
            }
            tracing::error!(target: "zigzag", error = text, "stopped by an error")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("source unavailable: connection refused")]
    struct Unavailable;

    #[derive(Debug, thiserror::Error)]
    #[error("source: {0}")]
    struct Wrapping(#[from] Unavailable);

    #[test]
    fn a_cause_already_in_the_message_is_not_said_again_but_a_new_one_is() {
        let shown = anyhow::Error::from(Wrapping(Unavailable));
        assert_eq!(error_text(&shown), "Error: source: source unavailable: connection refused");
        let added = anyhow::Error::from(Wrapping(Unavailable)).context("opening the stream s");
        assert_eq!(
            error_text(&added),
            "Error: opening the stream s\n\nCaused by:\n    source: source unavailable: connection refused"
        );
        let new = anyhow::Error::from(Unavailable).context("opening the stream s");
        assert_eq!(
            error_text(&new),
            "Error: opening the stream s\n\nCaused by:\n    source unavailable: connection refused"
        );
    }
}
