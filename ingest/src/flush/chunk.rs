//! Writing one chunk of prepared items: every item's first attempt
//! together, then the items whose guards failed planned again from what
//! the store returned, and the retryable failures sent again after a
//! backoff, until each is applied or found already applied.

use super::*;

impl Flusher {
    /// Applies a chunk of items: first attempts together; then items whose
    /// guards failed are planned again from what the store returned (at
    /// once), and items that failed retryably are sent again after a
    /// backoff, until each is applied or found already applied.
    pub(super) async fn write_chunk(&self, chunk: &[Prepared], mark: &str, k: u64) -> Result<(), FlushError> {
        let dims: Vec<Vec<(&str, AttrValue)>> = chunk
            .iter()
            .map(|p| {
                let key_dims = self.projections.get(p.projection as usize).expect("located").dims();
                key_dims.iter().zip(p.values.iter()).map(|(d, text)| (d.name.as_str(), d.attr(text))).collect()
            })
            .collect();
        let writes: Vec<Write> = chunk
            .iter()
            .zip(&dims)
            .map(|(p, dims)| match p.sketch {
                None => Write::Item(ItemWrite {
                    pk: p.pk.clone(),
                    sk: p.sk.clone(),
                    bucket_start: p.bucket,
                    expires: p.expires,
                    dims,
                    values: &p.measures,
                    set: self.set_of(p),
                    mark_attr: mark,
                    flush: k,
                }),
                Some(i) => Write::Sketch(SketchWrite {
                    pk: p.pk.clone(),
                    sk: p.sk.clone(),
                    bucket_start: p.bucket,
                    expires: p.expires,
                    dims,
                    measure: &self.set_of(p).measures()[i],
                    sketch: match &p.measures.0[i] {
                        MeasureValue::Sketch(s) => s,
                        _ => unreachable!("prepared for a sketch measure"),
                    },
                    mark_attr: mark,
                    flush: k,
                }),
            })
            .collect();
        self.stats.items.fetch_add(chunk.len() as u64, Ordering::Relaxed);
        // (index into chunk, what the store last showed of the item: at
        // first, the min and max this worker's last write of it returned)
        let mut todo: Vec<(usize, Option<Item>)> = chunk
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let hash = item_hash(&p.pk, &p.sk);
                if p.sketch.is_some() {
                    // The item this worker last wrote: a stale version is
                    // refused and the store's item comes back to merge with.
                    return (i, self.sketches.get(&hash).map(|item| item.clone()));
                }
                let memory = self.extremes.get(&hash);
                (i, memory.map(|m| remembered_extremes(self.set_of(p), &p.pk, &p.sk, &m)))
            })
            .collect();
        const CONDITIONAL_ROUNDS: u32 = 8;
        let (mut rounds, mut failed_rounds) = (0, 0);
        loop {
            let mut idx = Vec::with_capacity(todo.len());
            let mut reqs = Vec::with_capacity(todo.len());
            for (i, known) in &todo {
                match writes[*i].plan(known.as_ref())? {
                    Some(req) => {
                        idx.push((*i, known.clone()));
                        reqs.push(req);
                    }
                    None => {
                        self.stats.skipped.fetch_add(1, Ordering::Relaxed);
                        metrics::counter!("zigzag_ingest_replayed_writes_skipped_total").increment(1);
                    }
                }
            }
            if reqs.is_empty() {
                return Ok(());
            }
            self.stats.write_requests.fetch_add(reqs.len() as u64, Ordering::Relaxed);
            metrics::counter!("zigzag_ingest_write_requests_total").increment(reqs.len() as u64);
            let results = match self.aggregates.update_batch(&reqs).await {
                Ok(results) => results,
                Err(e) if e.is_retryable() => {
                    reqs.iter().map(|_| Err(TableError::Unavailable(e.to_string()))).collect()
                }
                Err(e) => return Err(e.into()),
            };
            todo.clear();
            let mut retry_later = 0;
            let mut last_error = None;
            for ((i, known), result) in idx.into_iter().zip(results) {
                self.stats.per_prefix[chunk[i].prefix as usize].fetch_add(1, Ordering::Relaxed);
                match result {
                    Ok(UpdateOutcome::Applied(item)) => {
                        let size = item.size() as u64;
                        self.stats.item_write_units.fetch_add(size.div_ceil(1024).max(1), Ordering::Relaxed);
                        self.stats.largest_item.fetch_max(size, Ordering::Relaxed);
                        if chunk[i].sketch.is_some() {
                            if self.sketch_bytes.load(Ordering::Relaxed) < SKETCHES_REMEMBERED_BYTES {
                                let bytes = size as usize + 64;
                                self.sketch_bytes.fetch_add(bytes as u64, Ordering::Relaxed);
                                self.sketches.insert(item_hash(&item.pk, &item.sk), item);
                            }
                            continue;
                        }
                        if !self.remember || self.extremes.len() >= EXTREMES_REMEMBERED {
                            continue; // full: refilled at the next flush
                        }
                        let extremes = extremes_of(self.set_of(&chunk[i]), &item).into_iter().collect();
                        self.extremes.insert(item_hash(&item.pk, &item.sk), extremes);
                    }
                    Ok(UpdateOutcome::ConditionFailed(old)) => {
                        // Absent yet failed cannot happen (every guard accepts
                        // absence); treat it as an empty item.
                        let old = old.unwrap_or_else(|| Item::new(chunk[i].pk.clone(), chunk[i].sk.clone()));
                        todo.push((i, Some(old)));
                    }
                    Err(e) if e.is_retryable() => {
                        retry_later += 1;
                        last_error = Some(e);
                        todo.push((i, known));
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            if todo.is_empty() {
                return Ok(());
            }
            if let Some(e) = last_error {
                self.stats.retries.fetch_add(retry_later, Ordering::Relaxed);
                metrics::counter!("zigzag_ingest_store_retries_total").increment(retry_later);
                // The attempts are spent: the caller pauses the flush and
                // runs it again later (every applied item is then skipped).
                if !self.retry.pause(&mut failed_rounds, &AtomicU64::new(0)).await {
                    return Err(e.into());
                }
            } else {
                rounds += 1;
                if rounds >= CONDITIONAL_ROUNDS {
                    let pk = chunk[todo[0].0].pk.clone();
                    return Err(FlushError::NoConvergence { pk, attempts: rounds });
                }
            }
        }
    }
}

/// One write of a chunk: a key's item, or one of its sketches.
enum Write<'a> {
    Item(ItemWrite<'a>),
    Sketch(SketchWrite<'a>),
}

impl Write<'_> {
    /// The update to send, given what the store last showed of the item;
    /// None when it is already applied.
    fn plan(&self, known: Option<&Item>) -> Result<Option<zigzag_core::table::UpdateRequest>, FlushError> {
        match self {
            Write::Item(w) => plan_update(w, known).map_err(|why| FlushError::Overflow { pk: w.pk.clone(), why }),
            Write::Sketch(w) => {
                plan_sketch_update(w, known).map_err(|why| FlushError::Corrupt { pk: w.pk.clone(), why })
            }
        }
    }
}
