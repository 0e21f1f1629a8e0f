//! The dead-letter sink: every record that did not decode, as one JSON line
//! with the shard, position, reason label, message and the record itself
//! (as text when it is UTF-8, else base64). Synced to disk before the
//! checkpoint that passes the record is committed, so a bad record is never
//! lost; a crash in between may write it twice (same shard + position).
//! The path `-` is standard output (flushed at the same points): in a
//! container whose files do not outlive it, the log driver keeps them.

use crate::aggregate::Rejected;
use base64::Engine;
use serde::Serialize;
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

#[derive(Serialize)]
struct Line<'a> {
    shard: &'a str,
    seq: String,
    sub: u32,
    reason: &'static str,
    error: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    record: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    record_base64: Option<String>,
}

pub struct DeadLetters {
    path: PathBuf,
    out: BufWriter<Sink>,
    written: u64,
}

/// Where the lines go.
enum Sink {
    File(File),
    Stdout(std::io::Stdout),
}

impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Sink::File(f) => f.write(buf),
            // All of it under one lock: another writer of standard output
            // (the metrics in CloudWatch's format) waits for the lines.
            Sink::Stdout(s) => s.lock().write_all(buf).map(|()| buf.len()),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Sink::File(f) => f.flush(),
            Sink::Stdout(s) => s.flush(),
        }
    }
}

/// The path that means standard output.
pub const STDOUT: &str = "-";

impl DeadLetters {
    /// Appends to `path` (created if needed), or writes to standard output
    /// when `path` is [`STDOUT`].
    pub fn open(path: &Path) -> std::io::Result<Self> {
        let sink = if path.as_os_str() == STDOUT {
            Sink::Stdout(std::io::stdout())
        } else {
            Sink::File(OpenOptions::new().create(true).append(true).open(path)?)
        };
        Ok(DeadLetters { path: path.to_path_buf(), out: BufWriter::new(sink), written: 0 })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn written(&self) -> u64 {
        self.written
    }

    pub fn write(&mut self, shard: &str, r: &Rejected) -> std::io::Result<()> {
        let text = std::str::from_utf8(&r.record).ok();
        let line = Line {
            shard,
            seq: r.pos.seq.to_string(),
            sub: r.pos.sub,
            reason: r.error.reason(),
            error: r.error.to_string(),
            record: text,
            record_base64: match text {
                Some(_) => None,
                None => Some(base64::engine::general_purpose::STANDARD.encode(&r.record)),
            },
        };
        // Whole lines into the buffer, so every write it passes on is whole
        // lines: on standard output nothing else's lines land inside one.
        let mut bytes = serde_json::to_vec(&line)?;
        bytes.push(b'\n');
        self.out.write_all(&bytes)?;
        self.written += 1;
        Ok(())
    }

    /// Makes everything written so far durable (a file's data on disk;
    /// standard output handed to whatever reads it).
    pub fn sync(&mut self) -> std::io::Result<()> {
        self.out.flush()?;
        match self.out.get_ref() {
            Sink::File(f) => f.sync_data(),
            Sink::Stdout(_) => Ok(()),
        }
    }
}
