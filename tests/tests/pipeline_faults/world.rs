//! A world: a generator, its truth, SQLite stores behind fault wrappers.

use super::*;
use zigzag_model::measure::{MeasureKind, MeasureSpec};

pub(crate) fn gen_config(seed: u64) -> GenConfig {
    GenConfig {
        seed,
        shards: 3,
        records: 4_500,
        referrers: 150,
        campaigns: 6,
        malformed_fraction: 0.02,
        ..GenConfig::default()
    }
}

/// Small flushes, so one run makes many of them; the shipped measures and
/// a quantile of the cost, whose items (counts that add, unlike a distinct
/// count's registers) must be written exactly once too.
pub(crate) fn config() -> Config {
    let mut c = Config::default();
    c.flush.max_keys = 500;
    c.flush.interval_ms = 20;
    c.measures.push(MeasureSpec::new("cost_q", MeasureKind::Quantile, Some("cost"), None));
    c
}

pub(crate) struct World {
    pub(crate) _dir: tempfile::TempDir,
    pub(crate) gen_cfg: GenConfig,
    pub(crate) truth: Truth,
    pub(crate) config: Config,
    /// The real tables (the pipelines see them through `Faulty`).
    pub(crate) aggregates: Arc<dyn SortedTable>,
    pub(crate) leases: Arc<dyn SortedTable>,
    pub(crate) faults: Arc<Faults>,
    pub(crate) dead_letters: PathBuf,
}

impl World {
    pub(crate) fn new(seed: u64) -> World {
        Self::with_config(seed, config())
    }

    pub(crate) fn with_config(seed: u64, config: Config) -> World {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("zigzag.db");
        let aggregates: Arc<dyn SortedTable> = Arc::new(SqliteTable::open(&db).unwrap());
        let leases: Arc<dyn SortedTable> = Arc::new(SqliteTable::open_table(&db, "checkpoints").unwrap());
        let gen_cfg = gen_config(seed);
        World {
            dead_letters: dir.path().join("dead.jsonl"),
            _dir: dir,
            truth: zigzag_loadgen::truth::compute_for(&Generator::new(gen_cfg.clone()), &config).expect("truth"),
            gen_cfg,
            config,
            faults: Faults::new(leases.clone()),
            aggregates,
            leases,
        }
    }

    /// The fewest flushes any run of this world makes, however its readers
    /// and flushes interleave: each reader checks that the generation is
    /// not full before adding a batch, so one holds at most `max_keys - 1`
    /// keys plus a batch per shard, and every key of the finest rollup is
    /// in some generation. Fault points picked at or below it always come.
    pub(crate) fn min_flushes(&self) -> u64 {
        let keys = KeyModel::new(&self.config).expect("a valid layout");
        let fields = self.config.typed_fields().expect("typed fields");
        let finest = keys.rollups().min_by_key(|r| r.unit_ms()).expect("rollups");
        let gen = Generator::new(self.gen_cfg.clone());
        let (mut distinct, mut buf) = (BTreeSet::new(), Vec::new());
        for shard in 0..self.gen_cfg.shards {
            for seq in 1..=gen.shard_len(shard) {
                if let Drawn::Valid(ev) = Traffic::draw(&gen, shard, seq, &mut buf) {
                    let names: Vec<String> =
                        keys.dims().iter().map(|d| display(&fields[d.field].spec, &ev.values[d.field])).collect();
                    distinct.insert((names, finest.floor(ev.ts_ms)));
                }
            }
        }
        let opts = self.options("floor");
        let per_generation = self.config.flush.max_keys - 1 + self.gen_cfg.shards as usize * opts.batch_size;
        distinct.len().div_ceil(per_generation) as u64
    }

    pub(crate) fn options(&self, worker: &str) -> PipelineOptions {
        PipelineOptions {
            failover: FAILOVER,
            max_pause: Duration::from_millis(50),
            batch_size: 100,
            ..PipelineOptions::new(self.config.clone(), STREAM, worker, self.dead_letters.clone())
        }
    }

    /// A pipeline process over the fault wrappers (a fresh source each
    /// time: the synthetic stream replays from any position).
    pub(crate) fn pipeline(&self, name: &str, opts: PipelineOptions) -> (Arc<Process>, Arc<Pipeline>) {
        let process = Process::new(name);
        let wrap = |inner: &Arc<dyn SortedTable>, aggregates| -> Arc<dyn SortedTable> {
            Arc::new(Faulty { inner: inner.clone(), faults: self.faults.clone(), process: process.clone(), aggregates })
        };
        let source = Arc::new(SyntheticSource::new(Generator::new(self.gen_cfg.clone()), None));
        let pipeline = Pipeline::new(source, wrap(&self.aggregates, true), wrap(&self.leases, false), opts);
        (process, Arc::new(pipeline.expect("pipeline")))
    }

    /// Runs a pipeline to its end (bounded by `RUN_LIMIT`).
    pub(crate) async fn run_with(
        &self,
        name: &str,
        opts: PipelineOptions,
    ) -> (Arc<Process>, Result<RunSummary, PipelineError>) {
        let (process, pipeline) = self.pipeline(name, opts);
        let run = tokio::time::timeout(RUN_LIMIT, pipeline.run(process.stop.clone()));
        let result = run.await.unwrap_or_else(|_| panic!("{name} did not finish within {RUN_LIMIT:?}"));
        (process, result)
    }

    /// Runs a pipeline of `worker`, named after it.
    pub(crate) async fn run(&self, worker: &str) -> Result<RunSummary, PipelineError> {
        self.run_with(worker, self.options(worker)).await.1
    }

    pub(crate) async fn lanes(&self) -> Vec<Lane> {
        read_lanes(&self.leases).await
    }

    pub(crate) async fn shard_leases(&self) -> Vec<ShardLease> {
        read_leases(&self.leases).await
    }

    /// The store equals the ground truth (gather's check, every group of
    /// every rollup); every shard lease is finished with its checkpoint at
    /// the shard's end; no lane has a flush in flight; every malformed
    /// record is dead-lettered.
    pub(crate) async fn assert_exact(&self, context: &str) {
        let opts = ExecOptions { consistent: true, ..ExecOptions::default() };
        let now = self.truth.last_ms.unwrap_or_default();
        for &rollup in &self.config.rollups {
            let km = KeyModel::new(&Config { rollups: vec![rollup], ..self.config.clone() }).unwrap();
            let report =
                check::check(&*self.aggregates, &zigzag_model::Projections::from(km.clone()), &self.truth, now, &opts)
                    .await
                    .expect("gather check");
            let text = check::render(&report);
            assert_eq!(report.mismatches(), 0, "{context}: {rollup:?} rollup: store != truth\n{text}");
            assert!(report.rows.iter().all(|r| r.status == Status::Match), "{context}: {rollup:?}\n{text}");
            let total = report.rows.iter().find(|r| r.check == "total").expect("a total row");
            assert_eq!(
                total.store,
                MeasureValues::from_named(&report.set, &self.truth.totals),
                "{context}: {rollup:?}"
            );
        }

        // The value catalog lists every value an event had, and no other.
        for (dim, values) in &self.truth.by {
            let listed = zigzag_model::value_catalog::read(&*self.aggregates, dim, now).await.expect("the catalog");
            let want: Vec<&String> = values.keys().filter(|v| !v.is_empty()).collect();
            assert_eq!(listed.values.iter().collect::<Vec<_>>(), want, "{context}: the values of {dim}");
        }

        let gen = Generator::new(self.gen_cfg.clone());
        let leases = self.shard_leases().await;
        assert_eq!(leases.len(), self.gen_cfg.shards as usize, "{context}: {leases:?}");
        for shard in 0..self.gen_cfg.shards {
            let id = Generator::shard_id(shard);
            let lease = leases.iter().find(|l| l.shard == id).unwrap_or_else(|| panic!("{context}: no lease of {id}"));
            assert!(lease.finished, "{context}: {lease:?}");
            assert_eq!(lease.checkpoint, Some(Position::at(gen.shard_len(shard))).into(), "{context}: {lease:?}");
        }
        for lane in self.lanes().await {
            assert_eq!(lane.in_flight(), None, "{context}: a flush left in flight: {lane:?}");
        }
        self.assert_every_bad_record_dead_lettered(context);
    }

    /// Every malformed record is in the dead-letter file (perhaps twice
    /// after a crash, never missing), and nothing else is.
    pub(crate) fn assert_every_bad_record_dead_lettered(&self, context: &str) {
        let gen = Generator::new(self.gen_cfg.clone());
        let mut expected = BTreeSet::new();
        let mut buf = Vec::new();
        for shard in 0..self.gen_cfg.shards {
            for seq in 1..=gen.shard_len(shard) {
                if let Generated::Malformed(_) = gen.record(shard, seq, &mut buf) {
                    expected.insert((Generator::shard_id(shard), seq.to_string()));
                }
            }
        }
        let seen = dead_letter_positions(&self.dead_letters);
        assert_eq!(seen, expected, "{context}: dead letters");
    }

    /// How many of these item writes are applied: their item carries the
    /// write's mark (`w@<lane>` = k), the change mark or the value
    /// catalog's day the write sets.
    pub(crate) async fn marked(&self, writes: &[UpdateRequest]) -> usize {
        let mut n = 0;
        for req in writes {
            let (attr, want) = match req.pk.starts_with(zigzag_model::changes::CHANGES_PK)
                || req.pk.starts_with(zigzag_model::value_catalog::VALUES_PK)
            {
                true => {
                    match req.actions.iter().find(|(a, _)| a.starts_with("b@") || a.starts_with("d@") || a == "seen") {
                        Some((attr, zigzag_core::table::Action::Set(v @ AttrValue::N(_)))) => (attr.clone(), v.clone()),
                        other => panic!("a change mark sets a flush number, a value its day: {other:?}"),
                    }
                }
                false => {
                    let (lane, k) = item_mark(req);
                    (mark_attr(lane), AttrValue::N(k.into()))
                }
            };
            let item = self.aggregates.get(&req.pk, &req.sk).await.unwrap();
            n += usize::from(item.as_ref().and_then(|i| i.attrs.get(&attr)) == Some(&want));
        }
        n
    }

    pub(crate) async fn assert_marks_quiet(&self, context: &str) {
        let (from, to) = (self.truth.first_ms.unwrap_or_default(), self.truth.last_ms.unwrap_or_default() + 1);
        for &rollup in &self.config.rollups {
            let marks =
                zigzag_model::changes::read(&*self.aggregates, "base", rollup, from - 86_400_000, to + 86_400_000)
                    .await
                    .unwrap();
            assert!(!marks.is_empty(), "{context}: {rollup:?}: no change marks");
            for (slice, m) in marks {
                assert!(m.quiet(), "{context}: {rollup:?} slice {slice}: a flush begun and never done: {m:?}");
            }
        }
    }
}

pub(crate) fn dead_letter_positions(path: &Path) -> BTreeSet<(String, String)> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .map(|line| {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            (v["shard"].as_str().unwrap().to_string(), v["seq"].as_str().unwrap().to_string())
        })
        .collect()
}

/// splitmix64: a seeded choice of fault points.
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..=hi`.
    pub(crate) fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi.max(lo) - lo + 1)
    }
}
