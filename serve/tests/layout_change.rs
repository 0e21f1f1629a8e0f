//! A table recreated with another layout under a running server: the next
//! query reads with the table's new layout (scatter prefixes, here), never
//! with the old one, whose plan would miss half the new table's items.

use std::sync::{Arc, RwLock};
use zigzag_core::table::*;
use zigzag_gather::execute::ExecOptions;
use zigzag_model::layout::Layout;
use zigzag_model::{Config, ScatterMode};
use zigzag_serve::series::Value;
use zigzag_serve::{Catalog, Engine, Limits};
use zigzag_testkit::fixture::{self, DAY, T0};

/// The table behind one name, which an operator may recreate.
struct Recreatable(RwLock<Arc<MemoryTable>>);

impl Recreatable {
    fn current(&self) -> Arc<MemoryTable> {
        self.0.read().unwrap().clone()
    }
}

#[async_trait::async_trait]
impl SortedTable for Recreatable {
    async fn put(&self, item: Item) -> Result<(), TableError> {
        self.current().put(item).await
    }
    async fn query(&self, req: &QueryRequest) -> Result<QueryPage, TableError> {
        self.current().query(req).await
    }
    async fn update(&self, req: &UpdateRequest) -> Result<UpdateOutcome, TableError> {
        self.current().update(req).await
    }
    async fn delete(&self, req: &DeleteRequest) -> Result<DeleteOutcome, TableError> {
        self.current().delete(req).await
    }
}

async fn written(config: &Config, seed: u64) -> Arc<MemoryTable> {
    let table = MemoryTable::new();
    fixture::write_recorded(&table, config, &fixture::events(seed, 2_000)).await;
    Arc::new(table)
}

fn total(v: &Value) -> f64 {
    match v {
        Value::Vector(v) => v.series.values().next().and_then(|xs| xs[0]).unwrap_or(0.0),
        Value::Scalar(s) => s[0],
    }
}

#[tokio::test]
async fn a_recreated_table_is_read_with_its_own_layout() {
    let (four, eight) = (fixture::config(4, ScatterMode::Random), fixture::config(8, ScatterMode::Random));
    let first = written(&four, 1).await;
    let table = Arc::new(Recreatable(RwLock::new(first)));
    let catalog = Catalog::recorded(four.clone(), Some(Layout::of(&four))).unwrap();
    let engine =
        Engine::new(table.clone(), catalog, ExecOptions::default(), Limits::default()).with_base(Config::default());
    let q = "sum(sum_over_time(clicks[2d]))";
    let t = vec![T0 + 2 * DAY];
    let before = engine.query(q, t.clone(), T0 + 10 * DAY).await.unwrap();

    // Recreated: other events, eight prefixes.
    let second = written(&eight, 2).await;
    *table.0.write().unwrap() = second.clone();
    let after = engine.query(q, t.clone(), T0 + 10 * DAY).await.unwrap();
    let fresh = Engine::new(
        second,
        Catalog::recorded(eight.clone(), Some(Layout::of(&eight))).unwrap(),
        ExecOptions::default(),
        Limits::default(),
    );
    let want = fresh.query(q, t, T0 + 10 * DAY).await.unwrap();
    assert_eq!(total(&after.value), total(&want.value), "read with the new layout");
    assert_ne!(total(&after.value), total(&before.value), "the data did change");
    assert_eq!(engine.catalog().layout, Some(Layout::of(&eight)), "the server now reads with it");
    let clicks = fixture::events(2, 2_000).iter().filter(|e| e.click).count() as f64;
    assert_eq!(total(&after.value), clicks, "every click of the new table, all eight prefixes read");
}
