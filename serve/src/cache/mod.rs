//! Results of unchanged time slices, kept in memory (bounded by bytes,
//! least recently used first out), so a dashboard reads again only the
//! slices a flush changed since: the open edge of its window.
//!
//! A read's window is cut into the change marks' slices
//! (`zigzag_model::changes`). The slices no entry answers are read in one
//! span, strongly consistent, between two reads of their marks, and kept.
//! An entry is *settled* when it holds the slice as some set of done
//! flushes left it:
//!
//! - its marks were the same before and after the items (no flush began
//!   or ended on it meanwhile);
//! - every item read in it carries only marks of flushes the slice says
//!   are done (`SliceMarks::covers`: a writer from before change marks
//!   leaves items the slice does not account for, and is never trusted).
//!
//! A settled entry answers its slice (same read: table, projection, rollup,
//! step, filters, grouping; its part of the window) for as long as it holds
//! every flush the slice's marks say is done. While a flush is changing
//! the slice, that is the slice as it was before the flush began: a whole
//! state, where a read of the table would show the flush half written
//! (the answer says so in its infos, and shows the flush once it is done).
//! A slice read while a flush is begun on it but has written none of its
//! items there is settled too: it is the slice as before that flush. An
//! entry that saw some of a flush's items is not settled; it answers for
//! `recheck` after its read began, the staleness the shared small reads
//! already allow, and then, while a flush is still writing the slice and
//! none has finished there since it was read, for up to `unsettled_for`
//! (the answer's infos say how old: the flush's newest items show once it
//! is done, or once that time passed). A flush marks a slice done as soon
//! as its bin's items are written (`ingest`'s flush), so a long flush (a
//! catch-up backlog) keeps each slice unsettled only while its own items
//! are being written, and a dashboard reads a busy slice once per
//! `unsettled_for` instead of at every refresh.
//!
//! One read fills a slice at a time: a read that finds a slice missing
//! waits for the fill under way, then takes what it kept. After a flush,
//! a hundred viewers read the slice it changed once.
//!
//! The marks checked before a read come through [`Recent`]: at most its
//! `recheck` old and, with a recheck above 0, read eventually consistent
//! (half the units; DynamoDB shows a write to them within about a
//! second), so an answer may miss a flush done within that time (a fresh
//! read started at the same moment could miss it too). The marks after a
//! fill, which decide what is kept, are read strongly consistent.
//! Compaction (`gather compact`) keeps every answer equal, so it needs no
//! mark.

mod entry;
mod read;

use crate::recent::Recent;
use entry::{group_bytes, Ages, Answers, Entry};
use lru::LruCache;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};
use zigzag_gather::execute::{Actual, ExecOptions};
use zigzag_gather::merge::{bucket_of, Aggregation, GroupKey};
use zigzag_gather::{GatherError, Gathered, Planned};
use zigzag_model::changes::{self, SliceMarks};
use zigzag_model::{MeasureValues, Rollup};

/// Fill turns kept before the ones no read holds are dropped.
const TURNS_KEPT: usize = 1024;

/// (what was read: table, projection, rollup, step, filters, grouping; slice start)
type Key = (Arc<str>, i64);

/// Parts of one slice kept at once: a part read is kept beside other parts
/// of the slice (the pieces of one mixed plan between its ranges' ends,
/// the hours before and after an owed one, each have theirs), unless one
/// it covers. An instant query makes at most three in a slice; a range
/// query with far-apart steps, one per step's ends.
const PARTS_KEPT: usize = 16;

struct State {
    /// Per slice, the parts read, newest last.
    entries: LruCache<Key, Vec<Arc<Entry>>>,
    bytes: usize,
    /// Whole reads served from memory, assembled (by identity and window).
    assembled: LruCache<String, Assembled>,
    assembled_bytes: usize,
}

/// A read assembled from cached slices: its groups, kept while the slices
/// served are the same entries (a query asked again merges nothing).
struct Assembled {
    from: Vec<Arc<Entry>>,
    aggregation: Arc<Aggregation>,
    bytes: usize,
}

/// A read's result: its plan, what reading cost, its groups (the same
/// `Arc` for as long as the slices it was assembled from are unchanged),
/// and what the cache gave to it.
pub struct CachedRead {
    pub plan: zigzag_gather::plan::Plan,
    pub actual: Actual,
    pub aggregation: Arc<Aggregation>,
    pub used: Use,
}

/// Whose turn it is to fill a slice: one read at a time.
type Turn = Arc<tokio::sync::Mutex<()>>;

struct Turns {
    turns: HashMap<Key, Weak<tokio::sync::Mutex<()>>>,
    /// Past this many, the turns no read holds are dropped.
    prune_at: usize,
}

/// What a read took from the cache.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Use {
    /// Slices of the window served from the cache, and read.
    pub hits: usize,
    pub read: usize,
    /// Of the hits, slices served as they were before a flush in progress.
    pub before_flush: usize,
    /// Of the hits, slices served as read part way through a flush still
    /// in progress, and the oldest such read's age.
    pub while_flushing: usize,
    pub oldest_while_flushing: Duration,
    /// Slices read and kept.
    pub kept: usize,
}

impl Use {
    fn add(&mut self, other: &Use) {
        self.hits += other.hits;
        self.read += other.read;
        self.before_flush += other.before_flush;
        self.while_flushing += other.while_flushing;
        self.oldest_while_flushing = self.oldest_while_flushing.max(other.oldest_while_flushing);
        self.kept += other.kept;
    }
}

pub struct SliceCache {
    capacity: usize,
    /// How long a slice read part way through a flush answers while that
    /// flush is still in progress.
    unsettled_for: Duration,
    state: Mutex<State>,
    turns: Mutex<Turns>,
    pub hits: AtomicU64,
    pub misses: AtomicU64,
    /// Slices read but not settled: changed while read, being changed, or
    /// written by a writer without change marks.
    pub unsettled: AtomicU64,
    /// Of the hits, slices served as before a flush in progress.
    pub before_flush: AtomicU64,
    /// Of the hits, slices served as read part way through a flush.
    pub while_flushing: AtomicU64,
    /// Reads served whole as assembled before (nothing merged).
    pub reassembled: AtomicU64,
}

impl SliceCache {
    /// Its bound, bytes.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// How long a slice read part way through a flush answers.
    pub fn unsettled_for(&self) -> Duration {
        self.unsettled_for
    }

    /// A cache of at most `capacity` bytes (0: none; every read reads),
    /// whose slices read part way through a flush answer for
    /// `unsettled_for` while it is in progress (0: only for `recheck`).
    pub fn new(capacity: usize, unsettled_for: Duration) -> SliceCache {
        SliceCache {
            capacity,
            unsettled_for,
            state: Mutex::new(State {
                entries: LruCache::unbounded(),
                bytes: 0,
                assembled: LruCache::unbounded(),
                assembled_bytes: 0,
            }),
            turns: Mutex::new(Turns { turns: HashMap::new(), prune_at: TURNS_KEPT }),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            unsettled: AtomicU64::new(0),
            before_flush: AtomicU64::new(0),
            while_flushing: AtomicU64::new(0),
            reassembled: AtomicU64::new(0),
        }
    }

    /// Bytes held now.
    pub fn bytes(&self) -> usize {
        self.lock().bytes
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The parts of a slice kept.
    fn get(&self, key: &Key) -> Vec<Arc<Entry>> {
        self.lock().entries.get(key).cloned().unwrap_or_default()
    }

    /// The read `key` assembled before from exactly the entries `served`.
    fn assembled(&self, key: &str, served: &[(Arc<Entry>, Answers)]) -> Option<Arc<Aggregation>> {
        let mut served: Vec<&Arc<Entry>> = served.iter().map(|(e, _)| e).collect();
        served.sort_by_key(|e| e.from);
        let mut s = self.lock();
        let a = s.assembled.get(key)?;
        let same = a.from.len() == served.len() && a.from.iter().zip(served).all(|(x, y)| Arc::ptr_eq(x, y));
        same.then(|| a.aggregation.clone())
    }

    /// Keeps an assembled read (in an eighth of the capacity).
    fn keep_assembled(&self, key: String, assembled: Assembled) {
        let budget = self.capacity / 8;
        if assembled.bytes > budget / 4 {
            return;
        }
        let mut s = self.lock();
        s.assembled_bytes += assembled.bytes;
        if let Some(old) = s.assembled.put(key, assembled) {
            s.assembled_bytes -= old.bytes;
        }
        while s.assembled_bytes > budget {
            match s.assembled.pop_lru() {
                Some((_, a)) => s.assembled_bytes -= a.bytes,
                None => break,
            }
        }
    }

    /// The turn to fill `key`, shared by every read asking for it now.
    fn turn(&self, key: &Key) -> Turn {
        let mut t = self.turns.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(turn) = t.turns.get(key).and_then(Weak::upgrade) {
            return turn;
        }
        if t.turns.len() >= t.prune_at {
            t.turns.retain(|_, w| w.strong_count() > 0);
            t.prune_at = (2 * t.turns.len()).max(TURNS_KEPT);
        }
        let turn = Turn::default();
        t.turns.insert(key.clone(), Arc::downgrade(&turn));
        turn
    }

    /// Sorts `slices` into those an entry answers (`served`) and those to read.
    #[allow(clippy::too_many_arguments)]
    fn sort(
        &self,
        identity: &Arc<str>,
        slices: Vec<i64>,
        marks: &BTreeMap<i64, SliceMarks>,
        part: impl Fn(i64) -> (i64, i64),
        ages: Ages,
        served: &mut Vec<(Arc<Entry>, Answers)>,
        missing: &mut Vec<i64>,
    ) {
        let at = Instant::now();
        let unmarked = SliceMarks::default();
        for s in slices {
            let (a, b) = part(s);
            let now = marks.get(&s).unwrap_or(&unmarked);
            let answered = self
                .get(&(identity.clone(), s))
                .into_iter()
                .rev()
                .map(|e| {
                    let answers = e.answers(a, b, now, at, ages);
                    (e, answers)
                })
                .find(|(_, answers)| *answers != Answers::No);
            match answered {
                None => missing.push(s),
                Some(found) => served.push(found),
            }
        }
    }

    /// Keeps `entry` (None: too large to).
    fn put(&self, key: Key, entry: Entry) -> Option<Arc<Entry>> {
        if entry.bytes > self.capacity / 4 {
            return None; // one entry never takes most of the cache
        }
        let entry = Arc::new(entry);
        let mut s = self.lock();
        let mut parts = s.entries.pop(&key).unwrap_or_default();
        let before: usize = parts.iter().map(|e| e.bytes).sum();
        // The parts it covers are older than it: dropped; and the oldest
        // beyond the bound.
        parts.retain(|e| !(entry.from <= e.from && e.to <= entry.to));
        if parts.len() >= PARTS_KEPT {
            parts.drain(..=parts.len() - PARTS_KEPT);
        }
        parts.push(entry.clone());
        let after: usize = parts.iter().map(|e| e.bytes).sum();
        s.bytes = s.bytes + after - before;
        s.entries.put(key, parts);
        while s.bytes > self.capacity {
            match s.entries.pop_lru() {
                Some((_, parts)) => s.bytes -= parts.iter().map(|e| e.bytes).sum::<usize>(),
                None => break,
            }
        }
        metrics::gauge!("zigzag_serve_cache_bytes").set(s.bytes as f64);
        Some(entry)
    }
}
