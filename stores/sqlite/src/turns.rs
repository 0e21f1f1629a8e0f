//! Whose turn it is to write a database file, within this process.
//!
//! SQLite lets one connection write at a time; a connection that finds the
//! file locked polls (`busy_timeout`), sleeping between tries. A flush commits
//! transaction after transaction with no gap a sleeper reliably hits, so a
//! lease heartbeat on another connection to the same file (the lease table
//! lives beside the aggregates) could wait out a whole flush — and be
//! presumed dead. Every table of a file opened in this process takes its
//! writes in turn from one first-come, first-served queue instead, so a
//! heartbeat waits for at most the transactions queued before it. Writers in
//! other processes still meet at SQLite's lock.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, Weak};

/// The queue of one database file's writers (tokio's mutex is FIFO-fair).
pub(crate) type Turns = tokio::sync::Mutex<()>;

/// The queue of the file at `path`, shared with every table opened on it in
/// this process (the same file under another name included).
pub(crate) fn of_file(path: &Path) -> Arc<Turns> {
    static FILES: OnceLock<Mutex<HashMap<PathBuf, Weak<Turns>>>> = OnceLock::new();
    let key = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let mut files = FILES.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner());
    files.retain(|_, turns| turns.strong_count() > 0);
    if let Some(turns) = files.get(&key).and_then(Weak::upgrade) {
        return turns;
    }
    let turns = Arc::new(Turns::new(()));
    files.insert(key, Arc::downgrade(&turns));
    turns
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_queue_per_file_whatever_the_name() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a.db"), dir.path().join("b.db"));
        std::fs::write(&a, b"").unwrap();
        std::fs::write(&b, b"").unwrap();
        let first = of_file(&a);
        let same = of_file(&dir.path().join(".").join("a.db"));
        assert!(Arc::ptr_eq(&first, &same), "one file, one queue");
        assert!(!Arc::ptr_eq(&first, &of_file(&b)), "another file, another queue");
        // A queue lives while a table of its file is open, no longer.
        let weak = Arc::downgrade(&first);
        drop((first, same));
        assert!(weak.upgrade().is_none());
    }
}
