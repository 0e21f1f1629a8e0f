//! Expiry: an item's `expires` attribute (`TTL_ATTR`, epoch seconds) is
//! also a column of its own, indexed, so `purge_expired` deletes expired
//! items by one range of that index, as DynamoDB's TTL deletes them there.

use super::{sqlite_err, SqliteTable};
use rusqlite::Connection;
use zigzag_core::table::{AttrValue, Item, TableError, TTL_ATTR};

/// Gives a table from before expiry its `expires` column (none of its
/// items has the attribute: they were written without a retention), and
/// the partial index the purge reads. Two processes opening one old file
/// at once: the second finds the column there.
pub(crate) fn add_expires_column(conn: &Connection, table: &str) -> Result<(), TableError> {
    let has = |conn: &Connection| -> Result<bool, TableError> {
        conn.query_row(
            &format!("SELECT COUNT(*) FROM pragma_table_info('{table}') WHERE name = 'expires'"),
            [],
            |row| row.get::<_, i64>(0),
        )
        .map(|n| n > 0)
        .map_err(sqlite_err)
    };
    if !has(conn)? {
        if let Err(e) = conn.execute_batch(&format!("ALTER TABLE {table} ADD COLUMN expires INTEGER;")) {
            if !has(conn)? {
                return Err(sqlite_err(e));
            }
        }
    }
    conn.execute_batch(&format!(
        "CREATE INDEX IF NOT EXISTS {table}_expires ON {table} (expires) WHERE expires IS NOT NULL;"
    ))
    .map_err(sqlite_err)
}

/// An item's `expires` column: its [`TTL_ATTR`] as whole seconds.
pub(crate) fn expires_of(item: &Item) -> Option<i64> {
    match item.attrs.get(TTL_ATTR) {
        Some(AttrValue::N(n)) => n.trunc().to_string().parse().ok(),
        _ => None,
    }
}

impl SqliteTable {
    /// Deletes the items that expired before `now_s`, in one statement.
    pub fn purge_expired_sync(&self, now_s: i64) -> Result<u64, TableError> {
        let conn = self.lock();
        let deleted = conn
            .execute(&format!("DELETE FROM {} WHERE expires IS NOT NULL AND expires < ?1", self.table), [now_s])
            .map_err(sqlite_err)?;
        Ok(deleted as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zigzag_core::table::{QueryRequest, SortKeyCondition, SortedTable, UpdateRequest};

    #[tokio::test]
    async fn expired_items_are_purged_and_the_rest_kept() {
        let t = SqliteTable::in_memory().unwrap();
        let item = |sk: u8, expires: Option<i64>| {
            let i = Item::new("p", vec![sk]).with("n", 1);
            match expires {
                Some(e) => i.with(TTL_ATTR, e),
                None => i,
            }
        };
        t.put(item(1, Some(100))).await.unwrap();
        t.put_batch(vec![item(2, Some(200)), item(3, None)]).await.unwrap();
        // Written through an update, as flushes write: the column follows.
        let req = UpdateRequest::new("p", vec![4]).set_if_absent(TTL_ATTR, 150).add("n", rust_decimal::Decimal::ONE);
        assert!(t.update(&req).await.unwrap().applied());
        assert_eq!(t.purge_expired(100).await.unwrap(), 0, "expires 100 is not before 100");
        assert_eq!(t.purge_expired(151).await.unwrap(), 2, "100 and 150");
        let left: Vec<u8> = t
            .query(&QueryRequest::new("p", SortKeyCondition::Any))
            .await
            .unwrap()
            .items
            .iter()
            .map(|i| i.sk[0])
            .collect();
        assert_eq!(left, vec![2, 3], "the later one and the one kept forever");
        assert_eq!(t.purge_expired(i64::MAX).await.unwrap(), 1);
    }

    #[test]
    fn a_file_from_before_expiry_gets_the_column_when_opened() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("old.db");
        {
            let conn = Connection::open(&path).unwrap();
            conn.execute_batch(
                "CREATE TABLE items (pk TEXT NOT NULL, sk BLOB NOT NULL, attrs BLOB NOT NULL, PRIMARY KEY (pk, sk)) \
                 WITHOUT ROWID;",
            )
            .unwrap();
        }
        let t = SqliteTable::open(&path).unwrap();
        t.put_batch_sync(&[Item::new("p", vec![1]).with(TTL_ATTR, 5)]).unwrap();
        assert_eq!(t.purge_expired_sync(6).unwrap(), 1);
        SqliteTable::open(&path).expect("opened again: the column is there");
    }
}
