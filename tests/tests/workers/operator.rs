//! What operators do wrong, on the embedded store: each either stays exact
//! or refuses loudly, never loses or double counts in silence.

use super::*;
use zigzag_ingest::PipelineError;
use zigzag_lease::LeaseError;

/// Waits until worker id `id` holds `n` leases of stream "st" and has
/// committed a checkpoint on one of them.
async fn until_holding(stores: &Stores, id: &str, n: usize) {
    within(30, "the first worker holds its leases", async {
        loop {
            let held = leases(&*stores.leases, "st").await;
            let mine: Vec<&ShardLease> = held.iter().filter(|l| l.worker_id() == Some(id)).collect();
            if mine.len() == n && mine.iter().any(|l| l.checkpoint.earliest().is_some()) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
}

/// A deployment pinning one `--worker-id` on two replicas, or a restart
/// while the predecessor is paused: the later process fences the earlier,
/// which stops with an error naming the id, and the totals are exact. (On
/// an owner that was only the id, both read the same shards under the same
/// lease and both flushes proved: 15 % of the clicks went missing.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_live_process_with_the_same_worker_id_fences_the_first_which_stops() {
    keep_log();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("z.db");
    let gen = generator(6, 4, 24_000);
    let truth = truth::compute(&gen);
    // The shards end only once both processes have run together.
    let (gate, gate_rx) = watch::channel(false);
    let rate = Some(8_000.0);
    let (first, _) = gated_worker(&gen, rate, &gate_rx, open(&db), options("st", "same", dir.path(), 3_000));
    let first = tokio::spawn(first.run(CancellationToken::new()));
    let stores = open(&db);
    until_holding(&stores, "same", 4).await;

    let (second, _) = gated_worker(&gen, rate, &gate_rx, open(&db), options("st", "same", dir.path(), 3_000));
    let second = tokio::spawn(second.run(CancellationToken::new()));
    let first = within(30, "the first process stops", first).await.unwrap();
    match &first {
        Err(PipelineError::Lease(e @ LeaseError::Superseded { id, .. })) => {
            assert_eq!(id, "same");
            assert!(e.to_string().contains("--worker-id"), "the error says what to do: {e}");
        }
        other => panic!("the first process must stop, replaced: {other:?}"),
    }
    gate.send(true).expect("the second's source listens");
    let second = within(90, "the second process finishes", second).await.unwrap().expect("the second runs on");
    assert!(second.leases_taken >= 4, "the second took every lease from the first: {second:?}");
    assert_exact(&db, &truth).await;
}

/// Runs one worker (id "w") on `gen` until its shards end, with the lease
/// state in table `lease_table` of the database.
async fn ingest(db: &Path, gen: &Generator, lease_table: &str, dir: &Path) -> Result<RunSummary, PipelineError> {
    let stores = Stores {
        aggregates: Arc::new(SqliteTable::open(db).expect("items")),
        leases: Arc::new(SqliteTable::open_table(db, lease_table).expect("leases")),
    };
    let w = worker(gen, None, stores, options("st", "w", dir, 3_000));
    within(90, "ingest", w.run(CancellationToken::new())).await
}

/// The lease state lost while the aggregate items are kept — the table
/// dropped, or ingest pointed at another one — then new events on the same
/// shard ids: refused before anything is written, with a message that
/// says how to recover. (Before lease tables had epochs, the lanes started
/// over at flush 0 under the items' later marks: 29 % of the new clicks
/// were skipped as already applied, and the run exited 0.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_or_other_lease_table_is_refused_before_anything_is_written() {
    keep_log();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("z.db");
    let first = generator(7, 4, 12_000);
    let truth = truth::compute(&first);
    ingest(&db, &first, "checkpoints", dir.path()).await.expect("the first run");
    assert_exact(&db, &truth).await;

    let later = generator(8, 4, 12_000);
    let refused = |r: Result<RunSummary, PipelineError>, how: &str| match r {
        Err(PipelineError::Lease(e @ LeaseError::OtherLeaseTable { .. })) => {
            assert!(e.to_string().contains("restore the lease table"), "{how}: says how to recover: {e}");
        }
        other => panic!("{how}: must be refused: {other:?}"),
    };
    // Another lease table named by mistake.
    refused(ingest(&db, &later, "checkpoints_new", dir.path()).await, "another lease table");
    // The lease table dropped (ingest makes a new, empty one).
    rusqlite::Connection::open(&db).unwrap().execute_batch("DROP TABLE checkpoints").unwrap();
    refused(ingest(&db, &later, "checkpoints", dir.path()).await, "the lease table dropped");
    // Nothing of the later events was written.
    assert_exact(&db, &truth).await;
}

/// Workers starting at once (a deployment of many) all join: each with
/// its own connection, as processes would have. (When every joiner raced
/// for the same next lane, after 16 rounds the rest ended `Contended`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_workers_starting_at_once_on_sqlite_all_join() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("z.db");
    zigzag_tests::joins::all_join_at_once(60, || {
        Arc::new(SqliteTable::open_table(&db, "checkpoints").expect("leases"))
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_workers_starting_at_once_on_one_table_all_join() {
    let table: Arc<dyn SortedTable> = Arc::new(zigzag_core::table::MemoryTable::new());
    zigzag_tests::joins::all_join_at_once(100, || table.clone()).await;
}
