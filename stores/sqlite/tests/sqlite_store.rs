//! The SQLite store against the conformance suite, and against the
//! in-memory reference under every query strategy.

use std::sync::Arc;
use zigzag_core::query::{run_query, AdaptiveConfig, Strategy, ZQuery};
use zigzag_core::table::{conformance, Filter, Item, MemoryTable, SortedTable};
use zigzag_core::zorder::{Layout, ZBox};
use zigzag_sqlite::SqliteTable;

#[tokio::test]
async fn in_memory_database_passes_conformance() {
    let t = SqliteTable::in_memory().unwrap();
    conformance::run(&t, "sqlite-mem").await.unwrap_or_else(|f| panic!("{f}"));
}

#[tokio::test]
async fn wal_file_passes_conformance_and_is_shared_between_handles() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("zigzag.db");
    let writer = SqliteTable::open(&path).unwrap();
    conformance::run(&writer, "sqlite-file").await.unwrap_or_else(|f| panic!("{f}"));
    // A second handle (as a second process would open it) sees committed data.
    let reader = SqliteTable::open(&path).unwrap();
    writer.put(Item::new("shared", vec![1]).with("v", 7)).await.unwrap();
    let page = reader
        .query(&zigzag_core::table::QueryRequest::new("shared", zigzag_core::table::SortKeyCondition::Any))
        .await
        .unwrap();
    assert_eq!(page.count, 1);
    let mode: String = journal_mode_from_header(&path);
    assert_eq!(mode, "wal");
}

fn journal_mode_from_header(path: &std::path::Path) -> String {
    // Read the journal mode back from the file header (bytes 18/19 are 2 in WAL mode).
    let header = std::fs::read(path).unwrap();
    if header.len() > 19 && header[18] == 2 && header[19] == 2 {
        "wal".into()
    } else {
        format!("header bytes {:?}", &header[18..20.min(header.len())])
    }
}

/// Same data, same strategies: identical items and identical costs, page
/// for page, because both stores share DynamoDB's page semantics.
#[tokio::test]
async fn strategies_see_the_same_pages_as_the_memory_table() {
    let layout = Arc::new(Layout::new(&[10, 7, 5]).unwrap());
    let bits = layout.total_bits();
    let mut s = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move |m: u64| {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        (s % m) as u128
    };
    let mut items = Vec::new();
    for row in 0u32..3000 {
        let p = [next(1024), next(128), next(32)];
        let mut sk = layout.interleave(&p).to_bytes(bits);
        sk.extend_from_slice(&row.to_be_bytes());
        items.push(Item::new("p", sk).with("row", row as i64));
    }
    let mem = MemoryTable::new();
    let lite = SqliteTable::in_memory().unwrap();
    mem.put_batch(items.clone()).await.unwrap();
    lite.put_batch(items).await.unwrap();
    let zbox = ZBox::new(layout, vec![100, 20, 3], vec![400, 90, 9]).unwrap();
    let q = ZQuery {
        pk: "p".into(),
        zbox: &zbox,
        filter: Filter::none(),
        suffixed: true,
        consistent: false,
        expected: None,
    };
    for strategy in [
        Strategy::Naive,
        Strategy::Precise { budget: 32 },
        Strategy::PageJump { limit: 16 },
        Strategy::Adaptive(AdaptiveConfig::default()),
    ] {
        let a = run_query(&mem, &q, &strategy).await.unwrap();
        let b = run_query(&lite, &q, &strategy).await.unwrap();
        assert!(a.stats.returned > 100, "the box holds data");
        assert_eq!(a.stats, b.stats, "{}", strategy.name());
        assert_eq!(a.items, b.items, "{}", strategy.name());
    }
}

/// Conditional updates stay atomic across connections (as across processes):
/// two handles on one file race 200 increments each, guarded by a per-writer
/// mark that each write raises; every increment applies exactly once, and a
/// replay of an applied mark changes nothing.
#[test]
fn updates_are_atomic_across_connections() {
    use rust_decimal::Decimal;
    use zigzag_core::table::{CmpOp, UpdateRequest};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("zigzag.db");
    SqliteTable::open(&path).unwrap();
    let writers: Vec<_> = ["a", "b"]
        .into_iter()
        .map(|who| {
            let path = path.clone();
            std::thread::spawn(move || {
                let t = SqliteTable::open(&path).unwrap();
                let mark = format!("hwm_{who}");
                for k in 1..=200i64 {
                    let req = UpdateRequest::new("p", vec![1]).add("n", Decimal::ONE).set(&mark, k).guard(
                        &mark,
                        CmpOp::Lt,
                        k,
                        true,
                    );
                    assert!(t.update_sync(&req).unwrap().applied());
                    // A replay of the same mark (a retried timeout) is a no-op.
                    assert!(!t.update_sync(&req).unwrap().applied());
                }
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    let t = SqliteTable::open(&path).unwrap();
    let page =
        t.query_sync(&zigzag_core::table::QueryRequest::new("p", zigzag_core::table::SortKeyCondition::Any)).unwrap();
    assert_eq!(page.items[0].attrs["n"], zigzag_core::table::AttrValue::from(400));
}

#[tokio::test]
async fn named_tables_are_separate() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("zigzag.db");
    let items = SqliteTable::open(&path).unwrap();
    let checkpoints = SqliteTable::open_table(&path, "checkpoints").unwrap();
    items.put(Item::new("p", vec![1])).await.unwrap();
    assert!(checkpoints.get("p", &[1]).await.unwrap().is_none());
    assert!(items.get("p", &[1]).await.unwrap().is_some());
    assert!(SqliteTable::open_table(&path, "x; DROP TABLE items").is_err());
}
