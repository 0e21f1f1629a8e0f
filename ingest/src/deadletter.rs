//! The dead-letter sink: every record that did not decode, as one JSON line
//! with the shard, position, reason label, message and the record itself
//! (as text when it is UTF-8, else base64). Synced to disk before the
//! checkpoint that passes the record is committed, so a bad record is never
//! lost; a crash in between may write it twice (same shard + position).

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
    out: BufWriter<File>,
    written: u64,
}

impl DeadLetters {
    /// Appends to `path` (created if needed).
    pub fn open(path: &Path) -> std::io::Result<Self> {
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(DeadLetters { path: path.to_path_buf(), out: BufWriter::new(file), written: 0 })
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
        serde_json::to_writer(&mut self.out, &line)?;
        self.out.write_all(b"\n")?;
        self.written += 1;
        Ok(())
    }

    /// Makes everything written so far durable.
    pub fn sync(&mut self) -> std::io::Result<()> {
        self.out.flush()?;
        self.out.get_ref().sync_data()
    }
}
