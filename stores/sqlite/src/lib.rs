//! The embedded store: Zigzag's sorted table in one SQLite file.
//!
//! One `items` table keyed by (pk, sk) `WITHOUT ROWID`, so rows are stored in
//! key order and a Query is one index range scan. SQLite compares BLOBs with
//! `memcmp`, which is DynamoDB's unsigned byte order for binary sort keys.
//! Page semantics (Limit, 1 MB, filter, RCU) come from
//! `zigzag_core::table::evaluate_page`, shared with every client-side store,
//! so this crate only turns key conditions into SQL. WAL mode lets another
//! process read while one writes.
//!
//! Expiry (`expiry.rs`): an item's `expires` is also an indexed column,
//! which [`SortedTable::purge_expired`] deletes by; files from before the
//! column get it when opened.
//!
//! Writes run on tokio's blocking pool: a flush's transaction of 4,096 items
//! takes tens of milliseconds (hundreds in a debug build), and run on a
//! runtime thread it would stall the timers of every task there, lease
//! heartbeats included. Writes to one file take turns first come, first
//! served (`turns.rs`). A read runs in place unless a write holds the
//! connection. Calls on one table share its
//! connection under a mutex; a concurrent `gather` will want a connection
//! per worker (later).

mod codec;
mod expiry;
mod turns;

use async_trait::async_trait;
use rusqlite::{params_from_iter, Connection, OpenFlags};
use std::path::Path;
use std::sync::{Arc, Mutex};
use zigzag_core::table::{
    apply_update, check_delete, evaluate_page, DeleteOutcome, DeleteRequest, Item, ItemResult, QueryPage, QueryRequest,
    SortKeyCondition, SortedTable, TableError, UpdateOutcome, UpdateRequest,
};

pub use codec::CorruptAttributes;

/// Default database file of the embedded pipeline.
pub const DEFAULT_PATH: &str = "zigzag.db";

/// Default table of aggregates; checkpoints live in another table of the same file.
pub const DEFAULT_TABLE: &str = "items";

/// One table of a database file. Clones share the connection.
#[derive(Clone)]
pub struct SqliteTable {
    conn: Arc<Mutex<Connection>>,
    /// SQL table name (validated: lowercase letters, digits, underscores).
    table: Arc<str>,
    /// The file's writers, in turn.
    turns: Arc<turns::Turns>,
}

fn store_err(e: impl std::error::Error + Send + Sync + 'static) -> TableError {
    TableError::Store(Box::new(e))
}

fn sqlite_err(e: rusqlite::Error) -> TableError {
    match e.sqlite_error_code() {
        // Another process held the lock past busy_timeout: retry later.
        Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked) => {
            TableError::Throttled(e.to_string())
        }
        _ => store_err(e),
    }
}

impl SqliteTable {
    /// Opens (creating if needed) the database file's default table.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, TableError> {
        Self::open_table(path, DEFAULT_TABLE)
    }

    /// Opens (creating if needed) one named table of the database file.
    pub fn open_table(path: impl AsRef<Path>, table: &str) -> Result<Self, TableError> {
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags(path.as_ref(), flags).map_err(sqlite_err)?;
        Self::init(conn, table, Some(path.as_ref()))
    }

    /// A private in-memory database (tests).
    pub fn in_memory() -> Result<Self, TableError> {
        Self::init(Connection::open_in_memory().map_err(sqlite_err)?, DEFAULT_TABLE, None)
    }

    /// `file`: where the database lives (None: in memory, private).
    fn init(conn: Connection, table: &str, file: Option<&Path>) -> Result<Self, TableError> {
        let valid = !table.is_empty()
            && table.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
            && !table.as_bytes()[0].is_ascii_digit();
        if !valid {
            return Err(TableError::InvalidRequest(format!(
                "table name {table:?}: use lowercase letters, digits and underscores"
            )));
        }
        conn.busy_timeout(std::time::Duration::from_secs(5)).map_err(sqlite_err)?;
        if file.is_some() {
            conn.pragma_update(None, "journal_mode", "WAL").map_err(sqlite_err)?;
            // WAL + NORMAL: a commit survives a process crash (kill -9);
            // only an OS crash can lose the last transactions.
            conn.pragma_update(None, "synchronous", "NORMAL").map_err(sqlite_err)?;
            // Flushes write in key order, 4,096 items per transaction, so a
            // modest cache holds the pages a transaction touches: 32 MB (an
            // upper bound, allocated as used) beat both the 2 MB default and
            // 256 MB on the 1 M-record demo (15.7 s vs 17.7 s at 256 MB).
            conn.pragma_update(None, "cache_size", -32_768).map_err(sqlite_err)?;
        }
        conn.execute_batch(&format!(
            "CREATE TABLE IF NOT EXISTS {table} (
                 pk TEXT NOT NULL,
                 sk BLOB NOT NULL,
                 attrs BLOB NOT NULL,
                 expires INTEGER,
                 PRIMARY KEY (pk, sk)
             ) WITHOUT ROWID;"
        ))
        .map_err(sqlite_err)?;
        expiry::add_expires_column(&conn, table)?;
        let turns = file.map_or_else(|| Arc::new(turns::Turns::new(())), turns::of_file);
        Ok(SqliteTable { conn: Arc::new(Mutex::new(conn)), table: table.into(), turns })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Connection> {
        // A panic mid-call leaves SQLite consistent (transactions roll back).
        self.conn.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Synchronous query (the async trait method delegates here).
    pub fn query_sync(&self, req: &QueryRequest) -> Result<QueryPage, TableError> {
        self.query_on(&self.lock(), req)
    }

    fn query_on(&self, conn: &Connection, req: &QueryRequest) -> Result<QueryPage, TableError> {
        req.validate()?;
        let (sql, args) = range_sql(&self.table, req);
        let mut stmt = conn.prepare_cached(&sql).map_err(sqlite_err)?;
        let mut rows = stmt.query(params_from_iter(args.iter())).map_err(sqlite_err)?;
        let mut failure: Option<TableError> = None;
        let items = std::iter::from_fn(|| {
            let row = match rows.next() {
                Ok(Some(row)) => row,
                Ok(None) => return None,
                Err(e) => {
                    failure = Some(sqlite_err(e));
                    return None;
                }
            };
            let decoded = (|| -> Result<Item, TableError> {
                let sk: Vec<u8> = row.get(0).map_err(sqlite_err)?;
                let blob: Vec<u8> = row.get(1).map_err(sqlite_err)?;
                let attrs = codec::decode(&blob).map_err(store_err)?;
                Ok(Item { pk: req.pk.clone(), sk, attrs })
            })();
            match decoded {
                Ok(item) => Some(item),
                Err(e) => {
                    failure = Some(e);
                    None
                }
            }
        });
        let page = evaluate_page(req, items.filter(|i| req.sk.matches(&i.sk)));
        match failure {
            Some(e) => Err(e),
            None => Ok(page),
        }
    }

    fn put_batch_sync(&self, items: &[Item]) -> Result<(), TableError> {
        for item in items {
            item.validate_keys()?;
        }
        let mut conn = self.lock();
        let tx = conn.transaction().map_err(sqlite_err)?;
        {
            let mut stmt = tx
                .prepare_cached(&format!(
                    "INSERT OR REPLACE INTO {} (pk, sk, attrs, expires) VALUES (?1, ?2, ?3, ?4)",
                    self.table
                ))
                .map_err(sqlite_err)?;
            for item in items {
                stmt.execute(rusqlite::params![item.pk, item.sk, codec::encode(&item.attrs), expiry::expires_of(item)])
                    .map_err(sqlite_err)?;
            }
        }
        tx.commit().map_err(sqlite_err)
    }

    /// Read, evaluate and write in one IMMEDIATE transaction: the write lock
    /// is taken before the read, so no other process can interleave.
    pub fn update_sync(&self, req: &UpdateRequest) -> Result<UpdateOutcome, TableError> {
        let mut out = self.update_batch_sync(std::slice::from_ref(req))?;
        Ok(out.pop().expect("one outcome per request"))
    }

    /// Many updates in one transaction (one commit instead of one each);
    /// each is evaluated on its own, in order.
    pub fn update_batch_sync(&self, reqs: &[UpdateRequest]) -> Result<Vec<UpdateOutcome>, TableError> {
        for req in reqs {
            req.validate()?;
        }
        let mut conn = self.lock();
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate).map_err(sqlite_err)?;
        let mut outcomes = Vec::with_capacity(reqs.len());
        {
            let mut select = tx
                .prepare_cached(&format!("SELECT attrs FROM {} WHERE pk = ?1 AND sk = ?2", self.table))
                .map_err(sqlite_err)?;
            let mut upsert = tx
                .prepare_cached(&format!(
                    "INSERT OR REPLACE INTO {} (pk, sk, attrs, expires) VALUES (?1, ?2, ?3, ?4)",
                    self.table
                ))
                .map_err(sqlite_err)?;
            for req in reqs {
                let blob: Option<Vec<u8>> = {
                    let mut rows = select.query(rusqlite::params![req.pk, req.sk]).map_err(sqlite_err)?;
                    match rows.next().map_err(sqlite_err)? {
                        Some(row) => Some(row.get(0).map_err(sqlite_err)?),
                        None => None,
                    }
                };
                let current = match blob {
                    Some(b) => Some(Item {
                        pk: req.pk.clone(),
                        sk: req.sk.clone(),
                        attrs: codec::decode(&b).map_err(store_err)?,
                    }),
                    None => None,
                };
                let outcome = apply_update(current, req)?;
                if let UpdateOutcome::Applied(item) = &outcome {
                    upsert
                        .execute(rusqlite::params![
                            item.pk,
                            item.sk,
                            codec::encode(&item.attrs),
                            expiry::expires_of(item)
                        ])
                        .map_err(sqlite_err)?;
                }
                outcomes.push(outcome);
            }
        }
        tx.commit().map_err(sqlite_err)?;
        Ok(outcomes)
    }

    /// A conditional delete in one IMMEDIATE transaction.
    pub fn delete_sync(&self, req: &DeleteRequest) -> Result<DeleteOutcome, TableError> {
        req.validate()?;
        let mut conn = self.lock();
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate).map_err(sqlite_err)?;
        let outcome = {
            let mut select = tx
                .prepare_cached(&format!("SELECT attrs FROM {} WHERE pk = ?1 AND sk = ?2", self.table))
                .map_err(sqlite_err)?;
            let mut rows = select.query(rusqlite::params![req.pk, req.sk]).map_err(sqlite_err)?;
            let current = match rows.next().map_err(sqlite_err)? {
                Some(row) => {
                    let blob: Vec<u8> = row.get(0).map_err(sqlite_err)?;
                    let attrs = codec::decode(&blob).map_err(store_err)?;
                    Some(Item { pk: req.pk.clone(), sk: req.sk.clone(), attrs })
                }
                None => None,
            };
            check_delete(current, req)
        };
        if outcome.deleted() {
            tx.execute(
                &format!("DELETE FROM {} WHERE pk = ?1 AND sk = ?2", self.table),
                rusqlite::params![req.pk, req.sk],
            )
            .map_err(sqlite_err)?;
        }
        tx.commit().map_err(sqlite_err)?;
        Ok(outcome)
    }
}

/// The smallest key greater than every key with this prefix, if any.
fn prefix_successor(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut s = prefix.to_vec();
    while let Some(last) = s.pop() {
        if last != 0xff {
            s.push(last + 1);
            return Some(s);
        }
    }
    None
}

/// SQL for the key range a request can touch, in ascending key order. The
/// exact condition is re-applied to each row; SQL only narrows the scan.
fn range_sql(table: &str, req: &QueryRequest) -> (String, Vec<rusqlite::types::Value>) {
    use rusqlite::types::Value as V;
    let mut sql = format!("SELECT sk, attrs FROM {table} WHERE pk = ?1");
    let mut args = vec![V::Text(req.pk.clone())];
    let mut bound = |op: &str, key: &[u8], sql: &mut String| {
        args.push(V::Blob(key.to_vec()));
        sql.push_str(&format!(" AND sk {op} ?{}", args.len()));
    };
    // One lower bound only: SQLite seeks the index with one of several
    // lower bounds and filters by the others, so `sk >= lo AND sk > start`
    // would rescan from `lo` on every page. A valid start key lies inside
    // the condition, so it alone bounds a continued page from below.
    let resumed = req.exclusive_start.is_some();
    match &req.sk {
        SortKeyCondition::Any => {}
        SortKeyCondition::Eq(k) => bound("=", k, &mut sql),
        SortKeyCondition::Between(lo, hi) => {
            if !resumed {
                bound(">=", lo, &mut sql);
            }
            bound("<=", hi, &mut sql);
        }
        SortKeyCondition::Ge(k) if !resumed => bound(">=", k, &mut sql),
        SortKeyCondition::Gt(k) if !resumed => bound(">", k, &mut sql),
        SortKeyCondition::Ge(_) | SortKeyCondition::Gt(_) => {}
        SortKeyCondition::Le(k) => bound("<=", k, &mut sql),
        SortKeyCondition::Lt(k) => bound("<", k, &mut sql),
        SortKeyCondition::BeginsWith(p) => {
            if !resumed {
                bound(">=", p, &mut sql);
            }
            if let Some(end) = prefix_successor(p) {
                bound("<", &end, &mut sql);
            }
        }
    }
    if let Some(start) = &req.exclusive_start {
        bound(">", start, &mut sql);
    }
    sql.push_str(" ORDER BY sk");
    (sql, args)
}

impl SqliteTable {
    /// Runs `call` on the blocking pool (see the crate's doc).
    async fn blocking<T: Send + 'static>(
        &self,
        call: impl FnOnce(&SqliteTable) -> Result<T, TableError> + Send + 'static,
    ) -> Result<T, TableError> {
        let me = self.clone();
        match tokio::task::spawn_blocking(move || call(&me)).await {
            Ok(out) => out,
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(e) => Err(store_err(e)),
        }
    }

    /// Runs a write on the blocking pool in this file's turn. The turn is
    /// held until the write ends, even if the caller stops waiting for it.
    async fn write<T: Send + 'static>(
        &self,
        call: impl FnOnce(&SqliteTable) -> Result<T, TableError> + Send + 'static,
    ) -> Result<T, TableError> {
        let turn = self.turns.clone().lock_owned().await;
        self.blocking(move |me| {
            let _turn = turn;
            call(me)
        })
        .await
    }
}

#[async_trait]
impl SortedTable for SqliteTable {
    async fn put(&self, item: Item) -> Result<(), TableError> {
        self.write(move |me| me.put_batch_sync(std::slice::from_ref(&item))).await
    }

    async fn put_batch(&self, items: Vec<Item>) -> Result<(), TableError> {
        self.write(move |me| me.put_batch_sync(&items)).await
    }

    async fn query(&self, req: &QueryRequest) -> Result<QueryPage, TableError> {
        // A page is bounded (Limit, 1 MB) and a WAL reader does not wait for
        // writers: read here when the connection is free. A handoff to the
        // blocking pool costs more than most pages (gather's page jumps make
        // thousands of small reads: +10-15 % on a day's timeseries). Only
        // when a write holds the connection is the read handed off.
        let in_place = match self.conn.try_lock() {
            Ok(conn) => Some(self.query_on(&conn, req)),
            Err(std::sync::TryLockError::Poisoned(conn)) => Some(self.query_on(&conn.into_inner(), req)),
            Err(std::sync::TryLockError::WouldBlock) => None,
        };
        if let Some(page) = in_place {
            return page;
        }
        let req = req.clone();
        self.blocking(move |me| me.query_sync(&req)).await
    }

    async fn update(&self, req: &UpdateRequest) -> Result<UpdateOutcome, TableError> {
        let req = req.clone();
        self.write(move |me| me.update_sync(&req)).await
    }

    async fn update_batch(&self, reqs: &[UpdateRequest]) -> Result<Vec<ItemResult>, TableError> {
        // One transaction: every item applies or the call fails as a whole.
        let reqs = reqs.to_vec();
        let outcomes = self.write(move |me| me.update_batch_sync(&reqs)).await?;
        Ok(outcomes.into_iter().map(Ok).collect())
    }

    async fn delete(&self, req: &DeleteRequest) -> Result<DeleteOutcome, TableError> {
        let req = req.clone();
        self.write(move |me| me.delete_sync(&req)).await
    }

    async fn purge_expired(&self, now_s: i64) -> Result<u64, TableError> {
        self.write(move |me| me.purge_expired_sync(now_s)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_successors() {
        assert_eq!(prefix_successor(&[1, 2]), Some(vec![1, 3]));
        assert_eq!(prefix_successor(&[1, 0xff]), Some(vec![2]));
        assert_eq!(prefix_successor(&[0xff, 0xff]), None);
    }
}
