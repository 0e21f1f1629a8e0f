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
//! Calls run synchronously under a mutex inside the async methods: a local
//! SQLite call is shorter than a task switch. A store used by a concurrent
//! `gather` will want a connection per worker (later).

mod codec;

use async_trait::async_trait;
use rusqlite::{params_from_iter, Connection, OpenFlags};
use std::path::Path;
use std::sync::Mutex;
use zigzag_core::table::{evaluate_page, Item, QueryPage, QueryRequest, SortKeyCondition, SortedTable, TableError};

pub use codec::CorruptAttributes;

/// Default database file of the embedded pipeline.
pub const DEFAULT_PATH: &str = "zigzag.db";

pub struct SqliteTable {
    conn: Mutex<Connection>,
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
    /// Opens (creating if needed) the database file.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, TableError> {
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags(path, flags).map_err(sqlite_err)?;
        Self::init(conn, true)
    }

    /// A private in-memory database (tests).
    pub fn in_memory() -> Result<Self, TableError> {
        Self::init(Connection::open_in_memory().map_err(sqlite_err)?, false)
    }

    fn init(conn: Connection, wal: bool) -> Result<Self, TableError> {
        conn.busy_timeout(std::time::Duration::from_secs(5)).map_err(sqlite_err)?;
        if wal {
            conn.pragma_update(None, "journal_mode", "WAL").map_err(sqlite_err)?;
            // WAL + NORMAL: a commit survives a process crash (kill -9);
            // only an OS crash can lose the last transactions.
            conn.pragma_update(None, "synchronous", "NORMAL").map_err(sqlite_err)?;
        }
        conn.execute_batch(
            "CREATE TABLE IF NOT EXISTS items (
                 pk TEXT NOT NULL,
                 sk BLOB NOT NULL,
                 attrs BLOB NOT NULL,
                 PRIMARY KEY (pk, sk)
             ) WITHOUT ROWID;",
        )
        .map_err(sqlite_err)?;
        Ok(SqliteTable { conn: Mutex::new(conn) })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Connection> {
        // A panic mid-call leaves SQLite consistent (transactions roll back).
        self.conn.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Synchronous query (the async trait method delegates here).
    pub fn query_sync(&self, req: &QueryRequest) -> Result<QueryPage, TableError> {
        req.validate()?;
        let (sql, args) = range_sql(req);
        let conn = self.lock();
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
                .prepare_cached("INSERT OR REPLACE INTO items (pk, sk, attrs) VALUES (?1, ?2, ?3)")
                .map_err(sqlite_err)?;
            for item in items {
                stmt.execute(rusqlite::params![item.pk, item.sk, codec::encode(&item.attrs)]).map_err(sqlite_err)?;
            }
        }
        tx.commit().map_err(sqlite_err)
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
fn range_sql(req: &QueryRequest) -> (String, Vec<rusqlite::types::Value>) {
    use rusqlite::types::Value as V;
    let mut sql = String::from("SELECT sk, attrs FROM items WHERE pk = ?1");
    let mut args = vec![V::Text(req.pk.clone())];
    let mut bound = |op: &str, key: &[u8], sql: &mut String| {
        args.push(V::Blob(key.to_vec()));
        sql.push_str(&format!(" AND sk {op} ?{}", args.len()));
    };
    match &req.sk {
        SortKeyCondition::Any => {}
        SortKeyCondition::Eq(k) => bound("=", k, &mut sql),
        SortKeyCondition::Between(lo, hi) => {
            bound(">=", lo, &mut sql);
            bound("<=", hi, &mut sql);
        }
        SortKeyCondition::Ge(k) => bound(">=", k, &mut sql),
        SortKeyCondition::Gt(k) => bound(">", k, &mut sql),
        SortKeyCondition::Le(k) => bound("<=", k, &mut sql),
        SortKeyCondition::Lt(k) => bound("<", k, &mut sql),
        SortKeyCondition::BeginsWith(p) => {
            bound(">=", p, &mut sql);
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

#[async_trait]
impl SortedTable for SqliteTable {
    async fn put(&self, item: Item) -> Result<(), TableError> {
        self.put_batch_sync(std::slice::from_ref(&item))
    }

    async fn put_batch(&self, items: Vec<Item>) -> Result<(), TableError> {
        self.put_batch_sync(&items)
    }

    async fn query(&self, req: &QueryRequest) -> Result<QueryPage, TableError> {
        self.query_sync(req)
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
