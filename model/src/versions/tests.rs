use super::*;
use crate::config::Config;
use zigzag_core::table::{DeleteOutcome, DeleteRequest, MemoryTable, QueryPage, TableError, UpdateOutcome};

fn layouts() -> (Layout, Layout) {
    let v1 = Layout::of(&Config::default());
    let with = Config::from_toml("[[projection]]\nname = \"by_campaign\"\ndimensions = [\"campaign\"]\n").unwrap();
    (v1, Layout::of(&with))
}

fn fills() -> Changes {
    let fill = FillTarget {
        projection: "by_campaign".into(),
        rollup: Rollup::Minute,
        source: "cc".into(),
        source_rollup: Rollup::Minute,
    };
    Changes { fills: vec![fill], ..Changes::default() }
}

#[tokio::test]
async fn a_recorded_version_is_what_writers_must_match_and_the_one_before_is_refused_naming_it() {
    let table = MemoryTable::new();
    let (v1, v2) = layouts();
    assert_eq!(ensure(&table, &v1).await.unwrap().number, 1);
    let recorded = record(&table, 1, &v2, 3_600_000, fills(), 7, true).await.unwrap();
    assert_eq!(recorded.number, 2);
    let got = ensure(&table, &v2).await.unwrap();
    assert_eq!(got.number, 2);
    assert_eq!(got.written_from, [("by_campaign".to_string(), Rollup::Minute, 3_600_000)], "cc as before");
    let stored = load(&table).await.unwrap().unwrap();
    assert_eq!((stored.newest.cut_ms, stored.newest.changes.clone()), (3_600_000, fills()));
    let e = ensure(&table, &v1).await.unwrap_err().to_string();
    assert!(e.contains("version 1") && e.contains("version 2") && e.contains("gather layout"), "{e}");
    let mut other = Config::default();
    other.scatter.prefixes = 8;
    let e = ensure(&table, &Layout::of(&other)).await.unwrap_err().to_string();
    assert!(e.contains("scatter.prefixes is 8 here but 16 in the table"), "{e}");
    let stored = load(&table).await.unwrap().unwrap();
    assert_eq!(stored.versions.iter().map(|v| v.number).collect::<Vec<_>>(), [1, 2]);
    assert_eq!(stored.versions[0].layout, v1, "version 1 kept");
    assert_eq!(load_layout(&table).await.unwrap(), Some(v2));
}

#[tokio::test]
async fn a_build_from_before_versions_cannot_read_the_layout_item_once_one_is_applied() {
    let table = MemoryTable::new();
    let (v1, v2) = layouts();
    ensure(&table, &v1).await.unwrap();
    record(&table, 1, &v2, 0, Changes::default(), 0, true).await.unwrap();
    // What such a build does: parse the `#layout` item's text, whatever
    // layout it has.
    let item = table.get(LAYOUT_PK, LAYOUT_SK).await.unwrap().expect("kept");
    let e = crate::layout::from_item(&item).unwrap_err().to_string();
    assert!(e.contains("layout version 3 is newer than this build"), "{e}");
    // This build reads the versions instead.
    assert!(matches!(crate::layout::ensure(&table, &v1).await, Err(LayoutError::Versioned)));
    assert_eq!(ensure(&table, &v2).await.unwrap().number, 2);
}

#[tokio::test]
async fn of_two_applies_expecting_the_same_version_one_wins_and_the_other_is_refused_naming_it() {
    let table = MemoryTable::new();
    let (v1, v2) = layouts();
    ensure(&table, &v1).await.unwrap();
    let third = Config { rollups: vec![Rollup::Minute, Rollup::Hour], ..Config::default() };
    let v3 = Layout::of(&third);
    let (a, b) = futures::join!(
        record(&table, 1, &v2, 0, Changes::default(), 0, true),
        record(&table, 1, &v3, 0, Changes::default(), 0, true)
    );
    let lost = match (a, b) {
        (Ok(_), Err(lost)) | (Err(lost), Ok(_)) => lost,
        other => panic!("one wins: {other:?}"),
    };
    assert!(lost.to_string().contains("recorded version 2 first"), "{lost}");
    let stored = load(&table).await.unwrap().unwrap();
    assert_eq!(stored.versions.len(), 2);
    let e = record(&table, 1, &v2, 0, Changes::default(), 0, true).await.unwrap_err().to_string();
    assert!(e.contains("recorded version 2 first"), "a stale apply later: {e}");
}

#[tokio::test]
async fn a_target_keeps_the_cut_of_the_version_that_added_it_until_dropped_and_added_again() {
    let table = MemoryTable::new();
    let (v1, v2) = layouts();
    ensure(&table, &v1).await.unwrap();
    record(&table, 1, &v2, 100, fills(), 0, true).await.unwrap();
    // Version 3 adds a projection by country; by_campaign minute keeps
    // version 2's cut.
    let c3 = Config::from_toml(
        "[[projection]]\nname = \"by_campaign\"\ndimensions = [\"campaign\"]\n\
         [[projection]]\nname = \"by_country\"\ndimensions = [\"country\"]\nrollups = [\"hour\"]\n",
    )
    .unwrap();
    let hour = NewTarget { projection: "by_country".into(), rollup: Rollup::Hour };
    let v3 = Layout::of(&c3);
    record(&table, 2, &v3, 200, Changes { counted: vec![hour], ..Changes::default() }, 0, true).await.unwrap();
    let got = ensure(&table, &v3).await.unwrap().written_from;
    assert_eq!(got, [("by_campaign".into(), Rollup::Minute, 100), ("by_country".into(), Rollup::Hour, 200)]);
    // Version 4 drops by_campaign; version 5 adds it again, counted.
    record(&table, 3, &v1, 300, Changes::default(), 0, true).await.unwrap();
    assert_eq!(ensure(&table, &v1).await.unwrap().written_from, []);
    let again = NewTarget { projection: "by_campaign".into(), rollup: Rollup::Minute };
    record(&table, 4, &v2, 400, Changes { counted: vec![again], ..Changes::default() }, 0, true).await.unwrap();
    assert_eq!(ensure(&table, &v2).await.unwrap().written_from, [("by_campaign".into(), Rollup::Minute, 400)]);
}

#[tokio::test]
async fn the_layout_items_other_attributes_survive_versions() {
    let table = MemoryTable::new();
    let (v1, v2) = layouts();
    ensure(&table, &v1).await.unwrap();
    let epoch = UpdateRequest::new(LAYOUT_PK, LAYOUT_SK.to_vec()).set("epoch", "e1");
    table.update(&epoch).await.unwrap();
    let before = load(&table).await.unwrap().unwrap();
    record(&table, 1, &v2, 0, Changes::default(), 0, true).await.unwrap();
    let after = load(&table).await.unwrap().unwrap();
    assert_eq!(after.item.attrs.get("epoch"), Some(&AttrValue::S("e1".into())));
    assert!(crate::value_catalog::is_whole(Some(&after.item)));
    assert_ne!(before.identity(), after.identity(), "a reader sees that it moved");
}

#[tokio::test]
async fn a_gained_measure_is_held_from_the_cut_of_the_version_that_added_it_last_while_the_projection_keeps_it() {
    let table = MemoryTable::new();
    let base = "[[measure]]\nname = \"clicks\"\ntype = \"count\"\n";
    let spend = "[[measure]]\nname = \"spend\"\ntype = \"sum\"\nfield = \"cost\"\n";
    let without = Layout::of(&Config::from_toml(base).unwrap());
    let with = Layout::of(&Config::from_toml(&format!("{base}{spend}")).unwrap());
    ensure(&table, &without).await.unwrap();
    let gained = || Changes {
        measures: vec![NewMeasures { projection: "base".into(), measures: vec!["spend".into()] }],
        ..Changes::default()
    };
    record(&table, 1, &with, 100, gained(), 0, false).await.unwrap();
    let from = |s: &Stored| {
        s.measured_from().into_iter().map(|f| (f.measure, f.cut_ms, f.version, f.adopted)).collect::<Vec<_>>()
    };
    let stored = load(&table).await.unwrap().unwrap();
    assert_eq!(from(&stored), [("spend".to_string(), 100, 2, false)], "announced, not adopted");
    assert_eq!(ensure(&table, &with).await.unwrap().measured_from, [("base".into(), "spend".into(), 100)]);
    // Dropped: nothing held; added again: the later cut.
    record(&table, 2, &without, 200, Changes::default(), 0, true).await.unwrap();
    assert_eq!(from(&load(&table).await.unwrap().unwrap()), []);
    assert_eq!(ensure(&table, &without).await.unwrap().measured_from, []);
    record(&table, 3, &with, 300, gained(), 0, true).await.unwrap();
    assert_eq!(from(&load(&table).await.unwrap().unwrap()), [("spend".to_string(), 300, 4, true)]);
    // Versions recorded before measures were: their text has no such field.
    let item = table.get(LAYOUT_PK, &Version::sk(3)).await.unwrap().expect("kept");
    assert!(matches!(item.attrs.get(FILLS), Some(AttrValue::S(s)) if !s.contains("measures")), "{item:?}");
}

/// A table every read of which is throttled.
struct Throttling;

#[async_trait::async_trait]
impl SortedTable for Throttling {
    async fn put(&self, _item: Item) -> Result<(), TableError> {
        Ok(())
    }
    async fn query(&self, _req: &QueryRequest) -> Result<QueryPage, TableError> {
        Err(TableError::Throttled("ProvisionedThroughputExceededException".into()))
    }
    async fn update(&self, _req: &UpdateRequest) -> Result<UpdateOutcome, TableError> {
        Err(TableError::Throttled("ProvisionedThroughputExceededException".into()))
    }
    async fn delete(&self, _req: &DeleteRequest) -> Result<DeleteOutcome, TableError> {
        Err(TableError::Throttled("ProvisionedThroughputExceededException".into()))
    }
}

/// Workers retry a throttled read of the versions (their join, their
/// adoption); one reported as an unreadable layout item was never retried.
#[tokio::test]
async fn a_throttled_read_of_the_versions_is_a_store_error_callers_retry() {
    use zigzag_core::retry::Retryable;
    let e = load(&Throttling).await.unwrap_err();
    assert!(matches!(e, LayoutError::Table(TableError::Throttled(_))), "{e}");
    assert!(e.is_retryable(), "{e}");
    let e = newer_than(&Throttling, 1).await.unwrap_err();
    assert!(e.is_retryable(), "{e}");
}
