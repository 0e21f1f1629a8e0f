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
}

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
        Ok(JsonlSource { files, follow })
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
        let mut reader = BufReader::with_capacity(1 << 16, file);
        let skip = match after {
            None => 0,
            Some(p) => p.seq.as_u64().ok_or_else(|| err(format!("position {p} is not a line number")))?,
        };
        let mut line = Vec::new();
        for n in 0..skip {
            line.clear();
            if reader.read_until(b'\n', &mut line)? == 0 {
                return Err(err(format!("{}: checkpoint at line {skip} but the file has {n} lines", path.display())));
            }
        }
        Ok(Box::new(JsonlReader { reader, next_line: skip + 1, follow: self.follow, partial: Vec::new() }))
    }
}

struct JsonlReader {
    reader: BufReader<std::fs::File>,
    next_line: u64,
    follow: bool,
    /// A line read without its newline yet (the writer is mid-line).
    partial: Vec<u8>,
}

#[async_trait]
impl ShardReader for JsonlReader {
    async fn next_batch(&mut self, max: usize) -> Result<RecordBatch, SourceError> {
        let mut batch = RecordBatch::default();
        // File reads are local and short; a blocking read in a task is fine.
        while batch.records.len() < max {
            let n = self.reader.read_until(b'\n', &mut self.partial)?;
            let complete = self.partial.last() == Some(&b'\n');
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
            if line.last() == Some(&b'\n') {
                line = &line[..line.len() - 1];
            }
            if line.last() == Some(&b'\r') {
                line = &line[..line.len() - 1];
            }
            batch.push(Position::at(self.next_line), line);
            self.next_line += 1;
            self.partial.clear();
        }
        Ok(batch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
