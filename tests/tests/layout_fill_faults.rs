//! The fill's crash matrix (`gather layout fill`, `relayout::fill`), on
//! SQLite: a fill killed at any call of every kind it makes (a query of
//! the marks, the statistics, the source or the progress; a batch of
//! target items; an update of the marks, statistics or progress), where
//! the call that dies may have reached the store first, then run again,
//! writes exactly the items an unbroken fill writes, and one more run finds
//! every day current.

mod layout_support;

use async_trait::async_trait;
use layout_support::*;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use zigzag_core::table::{
    DeleteOutcome, DeleteRequest, ItemResult, QueryPage, QueryRequest, SortedTable, TableError, UpdateOutcome,
    UpdateRequest,
};
use zigzag_gather::relayout::apply::{cut, version_changes};
use zigzag_model::versions;
use zigzag_sqlite::SqliteTable;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Call {
    Query,
    PutBatch,
    Update,
}

const CALLS: [Call; 3] = [Call::Query, Call::PutBatch, Call::Update];

/// A table whose process dies at the `n`th call of `kind`: that call fails
/// (after applying, for a write, when `applied`), and so does every later
/// call of any kind. `n = 0` never dies (it counts).
struct Dying {
    inner: SqliteTable,
    kind: Call,
    n: usize,
    applied: bool,
    seen: [AtomicUsize; 3],
    dead: AtomicBool,
}

impl Dying {
    fn new(db: &Path, kind: Call, n: usize, applied: bool) -> Dying {
        let seen = [AtomicUsize::new(0), AtomicUsize::new(0), AtomicUsize::new(0)];
        Dying { inner: SqliteTable::open(db).unwrap(), kind, n, applied, seen, dead: AtomicBool::new(false) }
    }

    fn count(&self, kind: Call) -> usize {
        self.seen[CALLS.iter().position(|c| *c == kind).unwrap()].load(Ordering::SeqCst)
    }

    /// Before a call: Err when dead; Ok(true) when this call is the one
    /// that dies (a write applies first when `applied`).
    fn before(&self, kind: Call) -> Result<bool, TableError> {
        if self.dead.load(Ordering::SeqCst) {
            return self.killed();
        }
        let i = CALLS.iter().position(|c| *c == kind).unwrap();
        let nth = self.seen[i].fetch_add(1, Ordering::SeqCst) + 1;
        let dies = kind == self.kind && nth == self.n;
        if dies {
            self.dead.store(true, Ordering::SeqCst);
        }
        Ok(dies)
    }

    /// What every call returns once the process is dead: an error no
    /// caller retries (a process killed makes no more calls; a retryable
    /// one would have the fill's retries wait out their whole policy).
    fn killed<T>(&self) -> Result<T, TableError> {
        Err(TableError::Store(Box::new(std::io::Error::other("the fill was killed"))))
    }
}

#[async_trait]
impl SortedTable for Dying {
    async fn put(&self, item: zigzag_core::table::Item) -> Result<(), TableError> {
        self.put_batch(vec![item]).await
    }
    async fn put_batch(&self, items: Vec<zigzag_core::table::Item>) -> Result<(), TableError> {
        if self.before(Call::PutBatch)? {
            if self.applied {
                self.inner.put_batch(items).await?;
            }
            return self.killed();
        }
        self.inner.put_batch(items).await
    }
    async fn query(&self, req: &QueryRequest) -> Result<QueryPage, TableError> {
        if self.before(Call::Query)? {
            return self.killed();
        }
        self.inner.query(req).await
    }
    async fn update(&self, req: &UpdateRequest) -> Result<UpdateOutcome, TableError> {
        if self.before(Call::Update)? {
            if self.applied {
                self.inner.update(req).await?;
            }
            return self.killed();
        }
        self.inner.update(req).await
    }
    async fn update_batch(&self, reqs: &[UpdateRequest]) -> Result<Vec<ItemResult>, TableError> {
        let mut out = Vec::with_capacity(reqs.len());
        for r in reqs {
            out.push(self.update(r).await);
        }
        Ok(out)
    }
    async fn delete(&self, req: &DeleteRequest) -> Result<DeleteOutcome, TableError> {
        self.inner.delete(req).await
    }
}

fn copy_db(from: &Path, to: &Path) {
    for suffix in ["", "-wal", "-shm"] {
        let (f, t) = (format!("{}{suffix}", from.display()), format!("{}{suffix}", to.display()));
        if Path::new(&f).exists() {
            std::fs::copy(&f, &t).unwrap();
        }
    }
}

async fn targets(table: &dyn SortedTable) -> Vec<Items> {
    let mut out = Vec::new();
    for (projection, rollup) in TARGETS {
        out.push(items(table, projection, rollup, T0 - DAY, T0 + 3 * DAY).await);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fill_killed_at_any_call_and_run_again_writes_what_an_unbroken_fill_writes() {
    let dir = tempfile::tempdir().unwrap();
    let pristine = dir.path().join("pristine.db");
    // Eight hours across midnight: two day units per target.
    ingest(&v1(), &generator(5, T0 + 20 * HOUR, 8 * HOUR, 0.05), &pristine, "s").await;
    {
        let table = SqliteTable::open(&pristine).unwrap();
        let Diffed { priced, old: old_ps, new: new_ps, layout } = diffed(&table, &v1(), &v2()).await;
        let changes = version_changes(&priced, &old_ps, &new_ps).expect("applicable");
        let written_to = zigzag_gather::written_to(&table, &old_ps).await.unwrap();
        let cut_ms = cut(&changes, &new_ps, T0, written_to);
        versions::record(&table, 1, &layout, cut_ms, changes, T0, true).await.unwrap();
    }
    let version = {
        let table = SqliteTable::open(&pristine).unwrap();
        versions::load(&table).await.unwrap().unwrap().newest
    };

    // The unbroken fill, counting its calls.
    let clean = dir.path().join("clean.db");
    copy_db(&pristine, &clean);
    let counting = Dying::new(&clean, Call::Query, 0, false);
    let totals = run_fill(&counting, &version).await.unwrap();
    assert!(totals.derived >= 2 && totals.pending == 0, "{totals:?}");
    let reference = targets(&SqliteTable::open(&clean).unwrap()).await;
    assert!(reference.iter().all(|t| !t.is_empty()), "every target written");
    let counts = CALLS.map(|c| counting.count(c));
    assert!(counts.iter().all(|n| *n > 0), "the fill makes every kind of call: {counts:?}");

    let mut cases = 0;
    for (kind, total) in CALLS.into_iter().zip(counts) {
        let mut points = vec![1, 2, total / 2, total - 1, total];
        points.retain(|n| *n >= 1);
        points.dedup();
        for n in points {
            for applied in [false, true] {
                if applied && kind == Call::Query {
                    continue;
                }
                let db = dir.path().join(format!("{kind:?}-{n}-{applied}.db"));
                copy_db(&pristine, &db);
                let dying = Dying::new(&db, kind, n, applied);
                let context = format!("killed at {kind:?} call {n} of {total} (applied: {applied})");
                assert!(run_fill(&dying, &version).await.is_err(), "{context}: the kill");
                let table = SqliteTable::open(&db).unwrap();
                let again = run_fill(&table, &version).await.unwrap();
                assert_eq!(again.pending, 0, "{context}: {again:?}");
                for (i, (mine, theirs)) in targets(&table).await.iter().zip(&reference).enumerate() {
                    let differ = differing(mine, theirs);
                    assert!(differ.is_empty(), "{context}: {:?}: {differ:#?}", TARGETS[i]);
                }
                let third = run_fill(&table, &version).await.unwrap();
                assert_eq!(third.derived, 0, "{context}: every day current after the rerun: {third:?}");
                cases += 1;
            }
        }
    }
    eprintln!("{cases} kills, each run again to the unbroken fill's items (calls: {counts:?})");
}
