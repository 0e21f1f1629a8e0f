//! From a read's groups to each leaf's series: the buckets of every step's
//! range folded into one sample (`Pick::fold`). The series of a read
//! served whole from the cache are kept while it is the same read (the
//! same `Arc` of groups, `cache.rs`): a dashboard asking again folds
//! nothing.

use crate::error::{too_many_series, Limits, Result, ServeError};
use crate::query::{merges, spans, Leaf, Metric, OverTime};
use crate::series::{Labels, Vector, NAME};
use lru::LruCache;
use std::collections::BTreeMap;
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};
use zigzag_gather::merge::Aggregation;
use zigzag_model::measure::MeasureKind;
use zigzag_model::measure::ShowOptions;
use zigzag_model::{MeasureValue, MeasureValues};

/// Folded series kept (per leaves and instants; each a few series for a
/// dashboard's panel, thousands at most under `--max-series`).
const KEPT: usize = 64;

/// Values computed from shared inputs, kept (least recently used out)
/// while their inputs are the same `Arc`s: what an unchanged read gave is
/// computed once, however many ask.
pub struct Memo<I, V> {
    kept: Mutex<Kept<I, V>>,
}

/// Per key, the inputs a value was computed from, and the value.
type Kept<I, V> = LruCache<String, (Vec<Arc<I>>, V)>;

impl<I, V: Clone> Memo<I, V> {
    pub fn new(entries: usize) -> Memo<I, V> {
        Memo { kept: Mutex::new(LruCache::new(NonZeroUsize::new(entries).unwrap_or(NonZeroUsize::MIN))) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Kept<I, V>> {
        self.kept.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The value kept under `key`, if computed from exactly `inputs`.
    pub fn get(&self, key: &str, inputs: &[&Arc<I>]) -> Option<V> {
        let mut kept = self.lock();
        let (from, v) = kept.get(key)?;
        let same = from.len() == inputs.len() && from.iter().zip(inputs).all(|(a, b)| Arc::ptr_eq(a, b));
        same.then(|| v.clone())
    }

    pub fn put(&self, key: String, inputs: Vec<Arc<I>>, v: V) {
        self.lock().put(key, (inputs, v));
    }
}

/// The series folded from reads still current.
pub struct Samples {
    kept: Memo<Aggregation, Arc<Vec<Vector>>>,
}

impl Default for Samples {
    fn default() -> Self {
        Samples { kept: Memo::new(KEPT) }
    }
}

impl Samples {
    /// Each leaf's series at the instants `ts`, from the groups one read
    /// gave them.
    pub fn vectors(
        &self,
        read: &Arc<Aggregation>,
        leaves: &[&Leaf],
        ts: &[i64],
        limits: &Limits,
    ) -> Result<Arc<Vec<Vector>>> {
        let key = format!("{leaves:?}|{ts:?}");
        if let Some(vectors) = self.kept.get(&key, &[read]) {
            return Ok(vectors);
        }
        let vectors = Arc::new(fold(read, leaves, ts, limits)?);
        self.kept.put(key, vec![read.clone()], vectors.clone());
        Ok(vectors)
    }
}

fn fold(read: &Aggregation, leaves: &[&Leaf], ts: &[i64], limits: &Limits) -> Result<Vec<Vector>> {
    // Per group, its buckets in time order.
    let mut groups: BTreeMap<&Vec<String>, BTreeMap<i64, &MeasureValues>> = BTreeMap::new();
    for (k, v) in &read.groups {
        groups.entry(&k.values).or_default().insert(k.bucket.unwrap_or_default(), v);
    }
    let mut out = Vec::with_capacity(leaves.len());
    for leaf in leaves {
        let pick = Pick::new(&leaf.metric, &read.set)?;
        let spans = spans(leaf, ts);
        let mut v = Vector::default();
        for (values, buckets) in &groups {
            let mut labels: Labels = leaf
                .group
                .iter()
                .zip(values.iter())
                .filter(|(_, v)| !v.is_empty())
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            if leaf.keeps_name {
                labels.insert(NAME.into(), leaf.metric.name().to_string());
            }
            let samples: Vec<Option<f64>> = spans
                .iter()
                .map(|&(start, end)| pick.fold(leaf.func, buckets.range(start..end).map(|(_, v)| *v)))
                .collect();
            if samples.iter().any(Option::is_some) {
                v.series.insert(labels, samples);
            }
        }
        if v.series.len() > limits.max_series {
            return Err(too_many_series(v.series.len(), limits));
        }
        out.push(v);
    }
    Ok(out)
}

/// Where a metric's values are in the measures read, and their scale.
enum Pick {
    Measure { at: usize, scale: u32, kind: MeasureKind },
    Ratio { num: (usize, u32), den: (usize, u32) },
}

impl Pick {
    fn new(metric: &Metric, set: &zigzag_model::MeasureSet) -> Result<Pick> {
        let at = |name: &str| {
            set.position(name).ok_or_else(|| {
                ServeError::Execution(format!("the projection read does not keep {name} (a planner error)"))
            })
        };
        match metric {
            Metric::Measure(m) => {
                let i = at(m)?;
                Ok(Pick::Measure { at: i, scale: set.measures()[i].scale, kind: set.measures()[i].kind })
            }
            Metric::Ratio(r) => {
                let ratio = set.ratios().iter().find(|x| &x.name == r);
                let ratio = ratio.ok_or_else(|| ServeError::Execution(format!("the projection read has no {r}")))?;
                let (n, d) = (&set.measures()[ratio.numerator], &set.measures()[ratio.denominator]);
                Ok(Pick::Ratio { num: (at(&n.name)?, n.scale), den: (at(&d.name)?, d.scale) })
            }
        }
    }

    /// One bucket's sample (None: the bucket has no value of it).
    fn sample(&self, v: &MeasureValues) -> Option<f64> {
        match self {
            Pick::Measure { at, scale, .. } => v.0.get(*at)?.as_f64(*scale),
            Pick::Ratio { num, den } => Some(v.0.get(num.0)?.as_f64(num.1)? / v.0.get(den.0)?.as_f64(den.1)?),
        }
    }

    /// The buckets of one step's range (in time order) folded by `func`.
    fn fold<'v>(&self, func: OverTime, buckets: impl Iterator<Item = &'v MeasureValues>) -> Option<f64> {
        if let Pick::Measure { at, scale, kind } = self {
            if func != OverTime::Present && merges(func, Some(*kind)) {
                // The measure's own merge, exact (sums as integers, sketches as a union).
                let mut acc: Option<MeasureValue> = None;
                for v in buckets {
                    let Some(x) = v.0.get(*at) else { continue };
                    match &mut acc {
                        None => acc = Some(x.clone()),
                        Some(a) => a.merge(x),
                    }
                }
                return match func {
                    OverTime::Quantile(phi) => {
                        let ask = ShowOptions { quantiles: vec![phi.q()] };
                        acc?.shown(&ask).first()?.as_f64(*scale)
                    }
                    _ => acc?.as_f64(*scale),
                };
            }
        }
        let mut samples: Vec<f64> = buckets.filter_map(|v| self.sample(v)).collect();
        if samples.is_empty() {
            return None;
        }
        let n = samples.len() as f64;
        Some(match func {
            OverTime::Last => *samples.last()?,
            OverTime::Sum => samples.iter().sum(),
            OverTime::Min => samples.iter().copied().fold(f64::NAN, |m, x| if m.is_nan() || x < m { x } else { m }),
            OverTime::Max => samples.iter().copied().fold(f64::NAN, |m, x| if m.is_nan() || x > m { x } else { m }),
            OverTime::Avg => samples.iter().sum::<f64>() / n,
            OverTime::Count => n,
            OverTime::Present => 1.0,
            OverTime::Quantile(phi) => {
                // Prometheus's: rank q (n - 1), linearly interpolated.
                samples.sort_by(f64::total_cmp);
                let rank = phi.q() * (n - 1.0);
                let (lo, hi) = (rank.floor() as usize, rank.ceil() as usize);
                samples[lo] + (samples[hi] - samples[lo]) * (rank - rank.floor())
            }
        })
    }
}
