//! Two workers on one SQLite file (one table, two lanes): what the sketch
//! measures' end-to-end tests (`distinct.rs`, `quantiles.rs`) run, so a
//! sketch item is merged by concurrent writers.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use zigzag_core::table::SortedTable;
use zigzag_ingest::{Pipeline, PipelineOptions, RunSummary};
use zigzag_loadgen::{Generator, SyntheticSource};
use zigzag_model::Config;
use zigzag_sqlite::SqliteTable;

fn pipeline(config: &Config, gen: &Generator, db: &Path, worker: &str) -> Arc<Pipeline> {
    let opts = PipelineOptions {
        // Not about expiry: a heartbeat waits behind the other worker's
        // flush transactions (one SQLite file), seconds on a slow machine.
        failover: Duration::from_secs(5),
        max_pause: Duration::from_millis(200),
        batch_size: 200,
        ..PipelineOptions::new(config.clone(), "st", worker, db.with_file_name(format!("dead-{worker}.jsonl")))
    };
    let aggregates: Arc<dyn SortedTable> = Arc::new(SqliteTable::open(db).unwrap());
    let leases: Arc<dyn SortedTable> = Arc::new(SqliteTable::open_table(db, "checkpoints").unwrap());
    Arc::new(
        Pipeline::new(Arc::new(SyntheticSource::new(gen.clone(), Some(10_000.0))), aggregates, leases, opts).unwrap(),
    )
}

/// Workers `w1` and `w2` ingest all of `gen` into `db` under `config`;
/// their summaries, once both are done (two minutes at most).
pub async fn ingest(config: &Config, gen: &Generator, db: &Path) -> Vec<RunSummary> {
    let runs: Vec<_> = ["w1", "w2"]
        .into_iter()
        .map(|w| {
            let p = pipeline(config, gen, db, w);
            tokio::spawn(async move { p.run(CancellationToken::new()).await.expect("run") })
        })
        .collect();
    let done = tokio::time::timeout(Duration::from_secs(120), futures::future::join_all(runs)).await.expect("in time");
    done.into_iter().map(|r| r.unwrap()).collect()
}
