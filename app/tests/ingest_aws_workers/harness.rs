//! The emulators, the worker processes and what the tests read of the
//! lease table while they run.

use super::*;

pub(crate) struct Env {
    dir: tempfile::TempDir,
    pub(crate) stream: String,
    kinesis_url: String,
    dynamo_url: String,
    config: PathBuf,
    failover: Duration,
    reading: Reading,
}

/// How the workers read the stream.
#[derive(Clone)]
pub(crate) enum Reading {
    /// GetRecords, from kinesalite.
    Polling,
    /// SubscribeToShard as this consumer, from kinesis-local's TLS port,
    /// trusting its CA (this file) in the workers' and the test's clients
    /// only; subscriptions renewed this often.
    FanOut { consumer: String, ca: String, renew: Duration },
}

impl Reading {
    /// How long the workers may take to catch up after the last put.
    /// kinesis-local (0.6.2) keeps a subscription open until its client is
    /// seen gone or its 5 minutes end, and refuses another meanwhile; a
    /// worker killed mid-subscribe can leave one it never sees gone, which
    /// then keeps the shard from its next owner for up to 5 minutes (seen
    /// in 2 of 16 runs). AWS hands a subscription over after 5 s.
    fn catch_up(&self) -> Duration {
        match self {
            Reading::Polling => Duration::from_secs(180),
            Reading::FanOut { .. } => Duration::from_secs(180 + 300),
        }
    }
}

pub(crate) fn unique(name: &str) -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    format!("{name}-{}-{}", std::process::id(), nanos % 1_000_000_000_000)
}

pub(crate) fn flush_config() -> Config {
    let mut c = Config::default();
    c.flush.interval_ms = 1000;
    c
}

impl Env {
    pub(crate) async fn new(name: &str, shards: i32, failover: Duration) -> Env {
        Self::reading(name, shards, failover, Reading::Polling).await
    }

    pub(crate) async fn reading(name: &str, shards: i32, failover: Duration, reading: Reading) -> Env {
        let kinesis_url = match &reading {
            Reading::Polling => emulator::endpoint_in("ZIGZAG_KINESALITE_ENDPOINT"),
            Reading::FanOut { .. } => emulator::kinesis_tls().map(|(url, _)| url),
        }
        .unwrap_or_else(|e| panic!("{e}"));
        let dynamo_url = emulator::endpoint("DYNAMODB").unwrap_or_else(|e| panic!("{e}"));
        let stream = unique(name);
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("zigzag.toml");
        std::fs::write(&config, "[flush]\ninterval_ms = 1000\n").unwrap();
        let env = Env { dir, stream, kinesis_url, dynamo_url, config, failover, reading };
        ensure_stream(&zigzag_kinesis::client(&env.kinesis_options()).await, &env.stream, shards)
            .await
            .expect("create stream");
        env
    }

    fn kinesis_options(&self) -> zigzag_aws::AwsOptions {
        match &self.reading {
            Reading::Polling => emulator::options_at(self.kinesis_url.clone()),
            Reading::FanOut { .. } => emulator::kinesis_tls_options().unwrap_or_else(|e| panic!("{e}")),
        }
    }

    pub(crate) fn spawn(&self, worker: &str) -> Reaped {
        let mut command = Command::new(env!("CARGO_BIN_EXE_ingest"));
        if let Reading::FanOut { consumer, ca, renew } = &self.reading {
            command.args(["--consumer", consumer, "--ca-bundle", ca]);
            command.args(["--renew-subscriptions", &format!("{}ms", renew.as_millis())]);
        }
        let child = command
            .args(["--kinesis", &self.stream, "--dynamodb", &self.stream, "--worker-id", worker])
            .args(["--failover", &self.failover.as_secs_f64().to_string(), "--relist", "2", "--max-pause", "1"])
            .arg("--config")
            .arg(&self.config)
            .arg("--dead-letters")
            .arg(self.dir.path().join(format!("{worker}.dead.jsonl")))
            .env("AWS_ENDPOINT_URL_KINESIS", &self.kinesis_url)
            .env("AWS_ENDPOINT_URL_DYNAMODB", &self.dynamo_url)
            .env("AWS_ACCESS_KEY_ID", emulator::ACCESS_KEY)
            .env("AWS_SECRET_ACCESS_KEY", emulator::SECRET_KEY)
            .env("AWS_REGION", emulator::REGION)
            .env("AWS_EC2_METADATA_DISABLED", "true")
            // More detail when a run is being looked into, e.g.
            // ZIGZAG_TEST_WORKER_LOG=info,zigzag_kinesis=debug.
            .env("RUST_LOG", std::env::var("ZIGZAG_TEST_WORKER_LOG").unwrap_or_else(|_| "info".into()))
            .stdout(Stdio::null())
            .stderr(Stdio::from(std::fs::File::create(self.dir.path().join(format!("{worker}.log"))).unwrap()))
            .spawn()
            .expect("spawn ingest");
        Reaped::from(child)
    }

    pub(crate) fn log(&self, worker: &str) -> String {
        std::fs::read_to_string(self.dir.path().join(format!("{worker}.log"))).unwrap_or_default()
    }

    pub(crate) async fn tables(&self) -> (DynamoTable, DynamoTable) {
        let client = zigzag_dynamodb::client(&emulator::options_at(self.dynamo_url.clone())).await;
        // ingest creates both on start: wait for them.
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let ok = zigzag_dynamodb::ensure_table(&client, &self.stream, zigzag_dynamodb::Billing::OnDemand, false)
                .await
                .is_ok()
                && zigzag_dynamodb::ensure_table(
                    &client,
                    &format!("{}-checkpoints", self.stream),
                    zigzag_dynamodb::Billing::OnDemand,
                    false,
                )
                .await
                .is_ok();
            if ok || Instant::now() > deadline {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        (
            DynamoTable::new(client.clone(), &self.stream),
            DynamoTable::new(client, format!("{}-checkpoints", self.stream)),
        )
    }

    /// A producer writing `gen` at `rate` records/s; cancelled token when done.
    pub(crate) fn produce(&self, gen: &Generator, rate: f64) -> (tokio::task::JoinHandle<u64>, CancellationToken) {
        let done = CancellationToken::new();
        let (gen, stream, d) = (gen.clone(), self.stream.clone(), done.clone());
        let options = self.kinesis_options();
        let task = tokio::spawn(async move {
            let client = zigzag_kinesis::client(&options).await;
            let mut producer = Producer::new(client, &stream);
            let opts = SinkOptions { partition_key: PartitionKey::Random, rate: Some(rate), kpl_max_bytes: None };
            let sent = produce(&gen, &mut producer, &opts, |_| {}).await.expect("produce");
            d.cancel();
            sent
        });
        (task, done)
    }
}

pub(crate) fn generator(seed: u64, records: u64) -> Generator {
    Generator::new(GenConfig {
        seed,
        shards: 4,
        records,
        referrers: 40,
        campaigns: 5,
        span_ms: 3 * 3_600_000,
        malformed_fraction: 0.005,
        ..GenConfig::default()
    })
}

pub(crate) async fn leases(table: &DynamoTable, stream: &str) -> Vec<ShardLease> {
    let mut req = QueryRequest::new(shards_pk(stream), SortKeyCondition::Any);
    req.consistent = true;
    match table.query(&req).await {
        Ok(page) => page.items.iter().filter_map(|i| ShardLease::from_item(i).ok()).collect(),
        Err(_) => Vec::new(),
    }
}

/// [`leases`], read again while the store fails to answer.
pub(crate) async fn read_leases(table: &DynamoTable, stream: &str) -> Vec<ShardLease> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let l = leases(table, stream).await;
        if !l.is_empty() {
            return l;
        }
        assert!(Instant::now() < deadline, "the lease table never answered");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Every lane, strongly consistent, read again while the store fails to answer.
pub(crate) async fn read_lanes(table: &DynamoTable) -> Vec<Lane> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let req = QueryRequest { consistent: true, ..QueryRequest::new(LANES_PK, SortKeyCondition::Any) };
        match table.query(&req).await {
            Ok(page) => return page.items.iter().map(|i| Lane::from_item(i).expect("a lane")).collect(),
            Err(e) => assert!(Instant::now() < deadline, "the lane table never answered: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Watches one worker's lane beat in the lease table until stopped.
pub(crate) struct BeatWatch {
    stop: CancellationToken,
    task: tokio::task::JoinHandle<Option<Instant>>,
}

impl BeatWatch {
    pub(crate) fn start(table: Arc<DynamoTable>, worker: &'static str) -> BeatWatch {
        let stop = CancellationToken::new();
        let token = stop.clone();
        let task = tokio::spawn(async move {
            // (beat, start of the last read that showed the beat before it)
            let (mut last, mut written_after): (Option<u64>, Option<Instant>) = (None, None);
            let mut previous_read = None;
            while !token.is_cancelled() {
                let started = Instant::now();
                // Beats are written to the lanes' beat items.
                let req = QueryRequest::new(zigzag_lease::items::BEATS_PK, SortKeyCondition::Any);
                if let Ok(page) = table.query(&QueryRequest { consistent: true, ..req }).await {
                    let beat = page
                        .items
                        .iter()
                        .filter_map(|i| zigzag_lease::Beat::from_item(i).ok())
                        .find(|b| b.owner.as_deref().map(zigzag_lease::owner::worker_id) == Some(worker))
                        .map(|b| b.beat);
                    if let (Some(b), Some(before)) = (beat, last) {
                        if b != before {
                            written_after = previous_read;
                        }
                    }
                    last = beat.or(last);
                    previous_read = Some(started);
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            written_after
        });
        BeatWatch { stop, task }
    }

    /// The start of the read before the one that showed the last beat (the
    /// beat was written after it); None if no beat changed while watched.
    pub(crate) async fn stop(self) -> Option<Instant> {
        self.stop.cancel();
        self.task.await.expect("the watch ran")
    }
}

pub(crate) fn signal(child: &Child, sig: &str) {
    let ok = Command::new("kill").arg(format!("-{sig}")).arg(child.id().to_string()).status().unwrap().success();
    assert!(ok, "kill -{sig}");
}

pub(crate) async fn check_report(aggregates: &DynamoTable, truth: &Truth) -> check::CheckReport {
    let km = KeyModel::new(&flush_config()).unwrap();
    let exec = ExecOptions { consistent: true, ..ExecOptions::default() };
    check::check(
        aggregates,
        &zigzag_model::Projections::from(km.clone()),
        truth,
        truth.last_ms.unwrap_or_default(),
        &exec,
    )
    .await
    .expect("gather check")
}

/// Waits until the store matches the truth (the workers caught up), stops
/// every worker with SIGTERM (each must exit 0), and checks again.
pub(crate) async fn converge_and_stop(
    env: &Env,
    workers: &mut BTreeMap<String, Reaped>,
    aggregates: &DynamoTable,
    truth: &Truth,
) {
    let deadline = Instant::now() + env.reading.catch_up();
    loop {
        let report = check_report(aggregates, truth).await;
        if report.mismatches() == 0 {
            break;
        }
        if Instant::now() > deadline {
            let logs: Vec<String> = workers.keys().map(|w| format!("{w}:\n{}", env.log(w))).collect();
            panic!("the workers never caught up:\n{}\n{}", check::render(&report), logs.join("\n"));
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    for (id, child) in workers.iter_mut() {
        signal(child, "TERM");
        let status = child.wait().unwrap();
        assert!(status.success(), "{id} after SIGTERM: {status}\n{}", env.log(id));
    }
    let report = check_report(aggregates, truth).await;
    assert_eq!(report.mismatches(), 0, "after the final flushes:\n{}", check::render(&report));
}

/// Every shard's owner and checkpoint at one moment.
pub(crate) type Snapshot = HashMap<String, (Option<String>, Option<Position>)>;

/// Owner and checkpoint of every shard, polled, for "when did it resume".
#[derive(Clone, Default)]
pub(crate) struct Watch(Arc<Mutex<Vec<(Instant, Snapshot)>>>);

impl Watch {
    pub(crate) fn start(&self, table: DynamoTable, stream: String, stop: CancellationToken) {
        let log = self.0.clone();
        tokio::spawn(async move {
            while !stop.is_cancelled() {
                let now = Instant::now();
                let snapshot: Snapshot = leases(&table, &stream)
                    .await
                    .into_iter()
                    .map(|l| (l.worker_id().map(str::to_string), l))
                    .map(|(w, l)| (l.shard, (w, l.checkpoint.earliest())))
                    .collect();
                // An empty one is a failed query (the store is busy), not news.
                if !snapshot.is_empty() {
                    log.lock().unwrap().push((now, snapshot));
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
    }

    /// The first time after `t` (just after the kill) that `shard`'s
    /// checkpoint is past where it stood then, with `dead` not its owner (a
    /// worker stopped at the end releases its leases: no owner then). The
    /// dead worker wrote nothing after `t`, so the move is another's work.
    pub(crate) fn resumed(&self, shard: &str, dead: &str, t: Instant) -> Option<Instant> {
        let log = self.0.lock().unwrap();
        let mut after = log.iter().filter(|(when, _)| *when >= t);
        let (_, first) = after.next()?;
        let (_, at_kill) = first.get(shard)?;
        after.find_map(|(when, snap)| {
            let (owner, cp) = snap.get(shard)?;
            (owner.as_deref() != Some(dead) && cp > at_kill).then_some(*when)
        })
    }
}
