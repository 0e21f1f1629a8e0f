//! The layout a reader last read from a table, kept on disk, so that the
//! next report plans with it while the table's layout is read again: the
//! layout's round trip overlaps the statistics' instead of preceding it.
//!
//! The cache is never trusted: a report reads its items only after the
//! table's layout read this time equals the one it planned with, and plans
//! again otherwise (a recreated table, another writer's layout). What a
//! stale entry costs is one plan's statistics reads, never an answer.
//!
//! One file per table under `$XDG_CACHE_HOME/zigzag/layouts` (else
//! `$HOME/.cache/...`), named by a hash of where the table is; the text is
//! the layout's canonical JSON. Failing to read or write it is not an
//! error: without it, the layout is read first, as before.

use std::path::PathBuf;
use zigzag_model::layout::Layout;

/// The cache entry of one table.
#[derive(Debug, Clone)]
pub struct LayoutCache {
    path: PathBuf,
}

impl LayoutCache {
    /// The entry of the table `key` names (anything that tells tables
    /// apart: store kind, endpoint, region, name), in the user's cache
    /// directory; None when there is none.
    pub fn for_table(key: &str) -> Option<LayoutCache> {
        let base = match std::env::var_os("XDG_CACHE_HOME").filter(|v| !v.is_empty()) {
            Some(dir) => PathBuf::from(dir),
            None => PathBuf::from(std::env::var_os("HOME").filter(|v| !v.is_empty())?).join(".cache"),
        };
        Some(Self::in_dir(base.join("zigzag").join("layouts"), key))
    }

    /// The entry of `key` in `dir`.
    pub fn in_dir(dir: PathBuf, key: &str) -> LayoutCache {
        let name = format!("{:016x}.json", xxhash_rust::xxh3::xxh3_64(key.as_bytes()));
        LayoutCache { path: dir.join(name) }
    }

    /// The layout last written, if any and readable.
    pub fn read(&self) -> Option<Layout> {
        let text = std::fs::read_to_string(&self.path).ok()?;
        match Layout::parse(&text) {
            Ok(layout) => Some(layout),
            Err(e) => {
                tracing::debug!(path = %self.path.display(), error = %e, "ignoring an unreadable layout cache entry");
                None
            }
        }
    }

    /// Records `layout` (None: the table has none; the entry is removed),
    /// unless the entry holds it already. Written to a temporary file and
    /// renamed, so that a reader running at the same time sees the old
    /// entry or the new one, whole. A new entry beyond [`MAX_ENTRIES`]
    /// removes the least recently written ones.
    pub fn write(&self, layout: Option<&Layout>) {
        let result = match layout {
            None => match std::fs::remove_file(&self.path) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                other => other,
            },
            Some(layout) => {
                let text = layout.canonical();
                match std::fs::read_to_string(&self.path) {
                    Ok(held) if held == text => Ok(()),
                    _ => self.replace(&text).and_then(|()| self.prune()),
                }
            }
        };
        if let Err(e) = result {
            tracing::debug!(path = %self.path.display(), error = %e, "could not update the layout cache");
        }
    }

    fn replace(&self, text: &str) -> std::io::Result<()> {
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let tmp = self.path.with_extension(format!("tmp{}", std::process::id()));
        std::fs::write(&tmp, text)?;
        std::fs::rename(&tmp, &self.path).inspect_err(|_| {
            let _ = std::fs::remove_file(&tmp);
        })
    }

    /// Keeps the [`MAX_ENTRIES`] most recently written entries of the
    /// directory (tables come and go: every test's temporary database is
    /// one).
    fn prune(&self) -> std::io::Result<()> {
        let Some(dir) = self.path.parent() else { return Ok(()) };
        let mut entries: Vec<(std::time::SystemTime, PathBuf)> = std::fs::read_dir(dir)?
            .filter_map(|e| e.ok())
            .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
            .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
            .collect();
        if entries.len() <= MAX_ENTRIES {
            return Ok(());
        }
        entries.sort();
        for (_, path) in &entries[..entries.len() - MAX_ENTRIES] {
            let _ = std::fs::remove_file(path);
        }
        Ok(())
    }
}

/// The most tables a cache directory keeps an entry for.
pub const MAX_ENTRIES: usize = 100;

#[cfg(test)]
mod tests {
    use super::*;
    use zigzag_model::Config;

    #[test]
    fn an_entry_reads_back_what_was_written_and_nothing_once_removed() {
        let dir = tempfile::tempdir().unwrap();
        let cache = LayoutCache::in_dir(dir.path().join("layouts"), "dynamodb http://127.0.0.1:8000 t");
        assert_eq!(cache.read(), None, "nothing written yet");
        let layout = Layout::of(&Config::default());
        cache.write(Some(&layout));
        assert_eq!(cache.read(), Some(layout));
        cache.write(None);
        assert_eq!(cache.read(), None);
    }

    #[test]
    fn tables_apart_have_entries_apart_and_garbage_reads_as_none() {
        let dir = tempfile::tempdir().unwrap();
        let a = LayoutCache::in_dir(dir.path().to_path_buf(), "dynamodb  us-east-1 a");
        let b = LayoutCache::in_dir(dir.path().to_path_buf(), "dynamodb  us-east-1 b");
        a.write(Some(&Layout::of(&Config::default())));
        assert_eq!(b.read(), None, "another table's entry");
        std::fs::write(&a.path, "{not a layout").unwrap();
        assert_eq!(a.read(), None, "a torn or foreign file is ignored");
    }

    #[test]
    fn the_directory_keeps_the_most_recently_written_entries() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::of(&Config::default());
        let entry = |i: usize| LayoutCache::in_dir(dir.path().to_path_buf(), &format!("table {i}"));
        let old = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
        for i in 0..MAX_ENTRIES {
            entry(i).write(Some(&layout));
            // Written long ago, the first more so than the rest.
            let at = if i == 0 { old - std::time::Duration::from_secs(60) } else { old };
            std::fs::File::options().write(true).open(&entry(i).path).unwrap().set_modified(at).unwrap();
        }
        assert!(entry(0).read().is_some(), "at the bound: nothing removed");
        entry(MAX_ENTRIES).write(Some(&layout));
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), MAX_ENTRIES);
        assert_eq!(entry(0).read(), None, "the least recently written is gone");
        assert!(entry(1).read().is_some() && entry(MAX_ENTRIES).read().is_some());
    }
}
