//! A file source: each file is one shard, each line one record, the line
//! number (from 1) its sequence number. The end of a file is the end of its
//! shard, unless `follow` is set: then the reader waits for more lines, like
//! `tail -f`, and the shard never ends.

use super::{RecordBatch, ShardInfo, ShardReader, Source, SourceError, StartAt};
use async_trait::async_trait;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::time::Duration;
use zigzag_model::Position;

pub struct JsonlSource {
    files: Vec<(String, PathBuf)>,
    follow: bool,
    max_record: usize,
}

/// The longest line delivered whole (as Kinesis' record limit): a longer
/// one is delivered cut to `MAX_RECORD + 1` bytes, so the decoder
/// dead-letters it as too large, and it is never held whole in memory.
pub const MAX_RECORD: usize = 1 << 20;

impl JsonlSource {
    /// Shard ids are the file stems (`shard-0.jsonl` → `shard-0`); they must be distinct.
    pub fn new(paths: Vec<PathBuf>, follow: bool) -> Result<Self, SourceError> {
        let mut files = Vec::new();
        for p in paths {
            let id = p.file_stem().and_then(|s| s.to_str()).unwrap_or_default().to_string();
            if id.is_empty() || files.iter().any(|(other, _)| *other == id) {
                return Err(SourceError::Shard {
                    shard: id,
                    message: format!("{}: each input file needs a distinct name (it is the shard id)", p.display()),
                });
            }
            files.push((id, p));
        }
        Ok(JsonlSource { files, follow, max_record: MAX_RECORD })
    }

    /// Lines longer than `bytes` are cut (see `MAX_RECORD`).
    pub fn with_max_record(mut self, bytes: usize) -> Self {
        self.max_record = bytes.max(1);
        self
    }
}

#[async_trait]
impl Source for JsonlSource {
    async fn shards(&self) -> Result<Vec<ShardInfo>, SourceError> {
        Ok(self.files.iter().map(|(id, _)| ShardInfo::root(id.clone())).collect())
    }

    fn bounded(&self) -> bool {
        !self.follow
    }

    async fn open(&self, shard: &str, start: StartAt) -> Result<Box<dyn ShardReader>, SourceError> {
        let after = start.position();
        let err = |message: String| SourceError::Shard { shard: shard.to_string(), message };
        let (_, path) = self.files.iter().find(|(id, _)| id == shard).ok_or_else(|| err("no such shard".into()))?;
        let file = std::fs::File::open(path).map_err(|e| err(format!("{}: {e}", path.display())))?;
        let reader = BufReader::with_capacity(1 << 16, file);
        let skip = match after {
            None => 0,
            Some(p) => p.seq.as_u64().ok_or_else(|| err(format!("position {p} is not a line number")))?,
        };
        let mut r = JsonlReader {
            reader,
            next_line: 1,
            follow: self.follow,
            partial: Vec::new(),
            cut: false,
            limit: self.max_record,
        };
        while r.next_line <= skip {
            if !r.read_line()?.1 {
                return Err(err(format!(
                    "{}: checkpoint at line {skip} but the file has {} lines",
                    path.display(),
                    r.next_line - 1
                )));
            }
            r.partial.clear();
            r.cut = false;
            r.next_line += 1;
        }
        Ok(Box::new(r))
    }
}

struct JsonlReader {
    reader: BufReader<std::fs::File>,
    next_line: u64,
    follow: bool,
    /// A line read without its newline yet (the writer is mid-line), at
    /// most `limit + 2` bytes of it (a line of `limit` bytes and "\r\n").
    partial: Vec<u8>,
    /// The current line had more bytes than `partial` keeps.
    cut: bool,
    limit: usize,
}

impl JsonlReader {
    /// Reads on to the end of the current line, keeping at most `limit + 2`
    /// bytes of it in `partial` (the rest of a longer line is read and
    /// dropped, `cut` set). Returns the bytes read and whether the newline
    /// was found.
    fn read_line(&mut self) -> std::io::Result<(usize, bool)> {
        let mut read = 0;
        loop {
            let buf = self.reader.fill_buf()?;
            if buf.is_empty() {
                return Ok((read, false));
            }
            let (n, found) = match buf.iter().position(|b| *b == b'\n') {
                Some(i) => (i + 1, true),
                None => (buf.len(), false),
            };
            let room = (self.limit + 2).saturating_sub(self.partial.len());
            self.cut |= n > room;
            self.partial.extend_from_slice(&buf[..n.min(room)]);
            self.reader.consume(n);
            read += n;
            if found {
                return Ok((read, true));
            }
        }
    }
}

#[async_trait]
impl ShardReader for JsonlReader {
    async fn next_batch(&mut self, max: usize) -> Result<RecordBatch, SourceError> {
        let mut batch = RecordBatch::default();
        // File reads are local and short; a blocking read in a task is fine.
        while batch.records.len() < max {
            let (n, complete) = self.read_line()?;
            if n == 0 || (!complete && self.follow) {
                if self.follow {
                    if batch.records.is_empty() {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    return Ok(batch);
                }
                if self.partial.is_empty() {
                    batch.end_of_shard = true;
                    return Ok(batch);
                }
            }
            let mut line: &[u8] = &self.partial;
            if self.cut {
                // Too long: its first bytes stand for it (the decoder
                // dead-letters a record over the limit).
                line = &line[..self.limit + 1];
            } else {
                if line.last() == Some(&b'\n') {
                    line = &line[..line.len() - 1];
                }
                if line.last() == Some(&b'\r') {
                    line = &line[..line.len() - 1];
                }
            }
            batch.push(Position::at(self.next_line), line);
            self.next_line += 1;
            self.partial.clear();
            self.cut = false;
        }
        Ok(batch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_line_over_the_limit_is_cut_and_the_next_lines_are_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.jsonl");
        let long = "x".repeat(100_000);
        std::fs::write(&path, format!("{}\r\n{long}\nafter\n", "y".repeat(10))).unwrap();
        let src = JsonlSource::new(vec![path], false).unwrap().with_max_record(10);
        let mut r = src.open("s", StartAt::Configured).await.unwrap();
        let b = r.next_batch(10).await.unwrap();
        let got: Vec<(String, usize)> = b.iter().map(|(p, d)| (p.to_string(), d.len())).collect();
        assert_eq!(got, vec![("1".into(), 10), ("2".into(), 11), ("3".into(), 5)], "exactly 10 bytes is whole");
        let mut r = src.open("s", StartAt::After(Position::at(2))).await.unwrap();
        let b = r.next_batch(10).await.unwrap();
        assert_eq!(b.iter().next().map(|(p, d)| (p, d.to_vec())), Some((Position::at(3), b"after".to_vec())));
        let cut = vec![b'x'; 11];
        let limits = crate::decode::DecodeLimits { max_bytes: 10, ..Default::default() };
        let decoder = crate::decode::Decoder::new(&zigzag_model::Config::default(), limits).unwrap();
        let rejected = decoder.decode(&cut);
        assert!(matches!(rejected, Err(crate::decode::DecodeError::Oversize { .. })), "a cut line is dead-lettered");
    }

    #[tokio::test]
    async fn lines_are_records_and_reopening_resumes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("shard-a.jsonl");
        std::fs::write(&path, b"one\ntwo\r\n\xff\xfe\nlast-without-newline").unwrap();
        let src = JsonlSource::new(vec![path], false).unwrap();
        assert_eq!(src.shards().await.unwrap(), vec![ShardInfo::root("shard-a")]);
        let mut r = src.open("shard-a", StartAt::Configured).await.unwrap();
        let b = r.next_batch(2).await.unwrap();
        let got: Vec<_> = b.iter().map(|(p, d)| (p.to_string(), d.to_vec())).collect();
        assert_eq!(got, vec![("1".into(), b"one".to_vec()), ("2".into(), b"two".to_vec())]);
        assert!(!b.end_of_shard);
        let b = r.next_batch(10).await.unwrap();
        assert_eq!(b.records.len(), 2);
        assert!(b.end_of_shard);
        let mut r = src.open("shard-a", StartAt::After(Position::at(3))).await.unwrap();
        let b = r.next_batch(10).await.unwrap();
        assert_eq!(b.iter().next().unwrap(), (Position::at(4), &b"last-without-newline"[..]));
        assert!(src.open("shard-a", StartAt::After(Position::at(9))).await.is_err(), "checkpoint past the end");
    }
}
