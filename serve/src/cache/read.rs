//! A read through the cache: the slices of a planned read that did not
//! change since they were read come from their entries, the rest is read
//! (planned again over the narrower windows) and kept.

use super::*;

impl SliceCache {
    /// Reads `planned` (its projection, rollup and step; `identity` names
    /// the table and what the read is, all but its window), taking
    /// unchanged slices from the cache. `replan` plans the same read over
    /// a narrower window (the slices not cached).
    pub async fn read<F>(
        &self,
        planned: Planned,
        recent: &Recent,
        identity: &str,
        opts: &ExecOptions,
        replan: impl Fn(i64, i64, Rollup) -> F,
    ) -> Result<CachedRead, GatherError>
    where
        F: std::future::Future<Output = Result<Planned, GatherError>>,
    {
        if planned.plan.single_rollup().is_some() || self.capacity == 0 {
            return self.read_one(planned, recent, identity, opts, &replan).await;
        }
        // Slices are of one rollup: a plan of several (whole days, edge
        // hours, minutes) is read piece by piece, each from its rollup's
        // slices, and the pieces' groups put together (their buckets are
        // apart: the pieces are).
        let mut pieces = Vec::with_capacity(planned.plan.reads.len());
        for i in 0..planned.plan.reads.len() {
            let piece = planned.piece(i).expect("a read of the plan");
            pieces.push(self.read_one(piece, recent, identity, opts, &replan).await?);
        }
        let mut aggregation = planned.empty();
        let (mut actual, mut used) = (Actual::default(), Use::default());
        for piece in &pieces {
            for (k, v) in &piece.aggregation.groups {
                aggregation.merge_group(k.clone(), v);
            }
            actual.add(&piece.actual);
            used.add(&piece.used);
        }
        let Planned { plan, .. } = planned;
        Ok(CachedRead { plan, actual, aggregation: Arc::new(aggregation), used })
    }

    /// [`Self::read`] of a plan of one rollup.
    async fn read_one<F>(
        &self,
        planned: Planned,
        recent: &Recent,
        identity: &str,
        opts: &ExecOptions,
        replan: &impl Fn(i64, i64, Rollup) -> F,
    ) -> Result<CachedRead, GatherError>
    where
        F: std::future::Future<Output = Result<Planned, GatherError>>,
    {
        let plan = &planned.plan;
        let rollup = plan.single_rollup().unwrap_or(Rollup::Minute);
        let slice = changes::slice_ms(rollup);
        let cacheable =
            self.capacity > 0 && plan.single_rollup().is_some() && plan.step.is_some_and(|s| s > 0 && slice % s == 0);
        if !cacheable {
            let Gathered { plan, aggregation, actual } = planned.read(recent, opts).await?;
            return Ok(CachedRead { plan, actual, aggregation: Arc::new(aggregation), used: Use::default() });
        }
        let (from, to) = (plan.window.start, plan.window.end);
        let identity: Arc<str> = Arc::from(format!("{identity}|{}|{rollup}|{:?}", plan.projection, plan.step));
        let marks_pk = format!("{}#{}#{rollup}", changes::CHANGES_PK, plan.projection);
        let marks_failed =
            |e: zigzag_core::table::TableError| GatherError::Query { pk: marks_pk.clone(), source: e.into() };
        let recheck = recent.recheck();
        // The marks that decide what is served: eventually consistent when
        // answers may be `recheck` old anyway (a mark missed a moment
        // serves the slice as before that flush); the ones after a fill,
        // which decide what is kept, always strongly.
        let how = if recheck.is_zero() { changes::Read::Consistently } else { changes::Read::Eventually };
        let before = changes::read_as(recent, &plan.projection, rollup, from, to, how).await.map_err(marks_failed)?;
        let marks_of = |m: &BTreeMap<i64, SliceMarks>, s: i64| m.get(&s).cloned().unwrap_or_default();
        let part = |s: i64| (s.max(from), (s + slice).min(to));
        let (mut served, mut missing) = (Vec::new(), Vec::new());
        let ages = Ages { recheck, unsettled_for: self.unsettled_for };
        self.sort(&identity, changes::slices(rollup, from, to), &before, part, ages, &mut served, &mut missing);
        // One fill of a slice at a time (in slice order: no two reads wait
        // for each other); a read that waited takes what the fill kept.
        let mut _turns = Vec::with_capacity(missing.len());
        if !missing.is_empty() {
            for &s in &missing {
                _turns.push(self.turn(&(identity.clone(), s)).lock_owned().await);
            }
            let waited = std::mem::take(&mut missing);
            self.sort(&identity, waited, &before, part, ages, &mut served, &mut missing);
        }
        let before_flush = served.iter().filter(|(_, a)| *a == Answers::BeforeFlush).count();
        let now = Instant::now();
        let while_flushing: Vec<Duration> = served
            .iter()
            .filter(|(_, a)| *a == Answers::WhileFlushing)
            .map(|(e, _)| now.saturating_duration_since(e.read_at))
            .collect();
        self.hits.fetch_add(served.len() as u64, Relaxed);
        self.misses.fetch_add(missing.len() as u64, Relaxed);
        self.before_flush.fetch_add(before_flush as u64, Relaxed);
        self.while_flushing.fetch_add(while_flushing.len() as u64, Relaxed);
        metrics::counter!("zigzag_serve_cache_slices_total", "result" => "hit").increment(served.len() as u64);
        metrics::counter!("zigzag_serve_cache_slices_total", "result" => "read").increment(missing.len() as u64);
        let whole = format!("{identity}|{from}|{to}");
        if missing.is_empty() {
            if let Some(aggregation) = self.assembled(&whole, &served) {
                self.reassembled.fetch_add(1, Relaxed);
                let used = Use {
                    hits: served.len(),
                    before_flush,
                    while_flushing: while_flushing.len(),
                    oldest_while_flushing: while_flushing.iter().max().copied().unwrap_or_default(),
                    ..Use::default()
                };
                let Planned { plan, .. } = planned;
                return Ok(CachedRead { plan, actual: Actual::default(), aggregation, used });
            }
        }
        let mut aggregation = planned.empty();
        let mut actual = Actual::default();
        let mut used = Use {
            hits: served.len(),
            read: missing.len(),
            before_flush,
            while_flushing: while_flushing.len(),
            oldest_while_flushing: while_flushing.iter().max().copied().unwrap_or_default(),
            kept: 0,
        };
        let mut kept: Vec<Arc<Entry>> = Vec::new();
        if let (Some(&first), Some(&last)) = (missing.first(), missing.last()) {
            let (span_from, span_to) = (part(first).0, part(last).1);
            let span = match (span_from, span_to) == (from, to) {
                true => planned.clone(),
                false => replan(span_from, span_to, rollup).await?,
            };
            // Strongly consistent: the items must hold every flush the
            // marks read before them say is done.
            let consistent = ExecOptions { consistent: true, ..opts.clone() };
            let empty = planned.empty();
            let unmarked = SliceMarks::default();
            let fresh = || BTreeMap::<i64, (Aggregation, bool)>::new();
            let add = |by_slice: &mut BTreeMap<i64, (Aggregation, bool)>, item: &zigzag_core::table::Item| {
                let s = changes::slice_start(rollup, bucket_of(item)?);
                let (agg, covered) = by_slice.entry(s).or_insert_with(|| (empty.clone(), true));
                *covered &= before.get(&s).unwrap_or(&unmarked).covers(item);
                agg.add_item(item)
            };
            let read_at = Instant::now();
            let (by_slice, read_actual) = span.read_into(recent, &consistent, fresh, add).await?;
            actual = read_actual;
            let after = changes::read(&recent.since(read_at), &plan.projection, rollup, span_from, span_to)
                .await
                .map_err(marks_failed)?;
            for &s in &missing {
                let (a, b) = part(s);
                let (agg, covered) = match by_slice.get(&s) {
                    Some((agg, covered)) => (Some(agg), *covered),
                    None => (None, true),
                };
                if let Some(agg) = agg {
                    for (k, v) in &agg.groups {
                        aggregation.merge_group(k.clone(), v);
                    }
                }
                let (marks, after) = (marks_of(&before, s), marks_of(&after, s));
                // Settled: no flush changed the slice while it was read (the
                // same marks before and after), and every item read is of a
                // flush the slice says is done. A flush begun and not done
                // there had then written none of its items in the slice: the
                // read is the slice as before it, kept until it is done.
                let settled = covered && marks == after;
                let busy = !marks.quiet() || !after.quiet();
                if !settled {
                    self.unsettled.fetch_add(1, Relaxed);
                    let held = busy && !self.unsettled_for.is_zero();
                    if recheck.is_zero() && !held {
                        continue; // it would answer nothing
                    }
                }
                let groups: Vec<(GroupKey, MeasureValues)> =
                    agg.map(|a| a.groups.iter().map(|(k, v)| (k.clone(), v.clone())).collect()).unwrap_or_default();
                let bytes = 96 + groups.iter().map(|(k, v)| group_bytes(k, v)).sum::<usize>();
                let entry = Entry { marks, settled, busy, read_at, from: a, to: b, groups, bytes };
                kept.extend(self.put((identity.clone(), s), entry));
                used.kept += usize::from(settled);
            }
        }
        for (e, _) in &served {
            for (k, v) in &e.groups {
                if k.bucket.is_none_or(|t| from <= t && t < to) {
                    aggregation.merge_group(k.clone(), v);
                }
            }
        }
        let aggregation = Arc::new(aggregation);
        // Every slice now has an entry: the next read of the same window
        // that finds the same entries takes this one whole.
        if kept.len() == missing.len() {
            let mut from: Vec<Arc<Entry>> = served.into_iter().map(|(e, _)| e).chain(kept).collect();
            from.sort_by_key(|e| e.from);
            let bytes = from.iter().map(|e| e.bytes).sum();
            self.keep_assembled(whole, Assembled { from, aggregation: aggregation.clone(), bytes });
        }
        let Planned { plan, .. } = planned;
        Ok(CachedRead { plan, actual, aggregation, used })
    }
}
