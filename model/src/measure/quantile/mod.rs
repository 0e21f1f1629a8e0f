//! `type = "quantile"`: quantiles (p50, p90, p99, any q) of an integer or
//! decimal field, by a DDSketch (Masson, Rim, Lee 2019): values fall in
//! buckets whose bounds grow geometrically, so any quantile read from the
//! counts is within a relative error of the exact one. Its merge adds
//! counts: associative and commutative, so partials merge in any order and
//! rollups re-merge with no extra error (KLL and t-digest have neither).
//! Adding counts is not idempotent: its items are written under the lane's
//! mark ([`super::update`]).
//!
//! ```toml
//! [[measure]]
//! name = "latency"
//! type = "quantile"
//! field = "latency_ms"
//! accuracy = 0.01     # relative error of every quantile; default 1 %
//! bins = 512          # optional cap on buckets per sign (see below)
//! ```
//!
//! **The mapping is fixed and exact** (`mapping.rs`): `m` buckets an
//! octave with edges `2^(k/m)`, computed once per `m` in integer fixed
//! point, so no logarithm is taken per value and every machine maps a
//! value to the same bucket: equal sketches are equal bytes. A bucket's
//! representative is within `(gamma - 1) / (gamma + 1)` of any value in it
//! (`gamma = 2^(1/m)`); `m` is the fewest that gives the declared accuracy
//! (35 at 1 %, 18 at 2 %). Measured against the `sketches-ddsketch` crate
//! (BENCHMARKS.md): 5 ns an add against 16, and the crate cannot give this
//! (its `ln` mapping depends on the platform's libm, its bins are private,
//! its encoding stores f64 counts and sums). A linear split of each octave
//! (exact with no table) needs 50 buckets at 1 %: ~30 % larger sketches.
//!
//! **Quantiles.** Of n values sorted, the q-quantile is the value at rank
//! `floor(q (n - 1))`; the sketch answers the representative of that rank's
//! bucket (clamped to the exact min and max), so within `a` of the exact
//! value relatively. Zero is its own count; negative values map by their
//! magnitude. Sum, min, max and count are kept exactly.
//!
//! **Bins cap.** None by default: buckets only grow with the range of the
//! values (log2 of max/min, times m: 1e-3..1e6 in units of 1e-3 is 30
//! octaves, at most 1,050 buckets at 1 %). With `bins = N`, a sign's store
//! keeps its N highest buckets and folds the lower ones into the lowest
//! kept: quantiles whose rank falls in folded buckets are overestimated in
//! magnitude (at most to the lowest kept bucket's value; the clamp to the
//! exact min bounds them), the rest keep the guarantee. Folding is
//! deterministic and order-free: the kept buckets of a merge are the N
//! highest of the union, which are kept by every partial too.

mod codec;
mod mapping;
#[cfg(test)]
mod tests;

pub use mapping::Mapping;

use super::sketch::{ShowOptions, Shown, SketchKind};
use super::MeasureSpec;
use crate::schema::{FieldType, FieldValue, TypedField};

/// Accuracy unless declared: 1 %.
pub const DEFAULT_ACCURACY: f64 = 0.01;
/// The finest accuracy declarable (5,000 slices an octave).
pub const MIN_ACCURACY: f64 = 0.0001;
/// The coarsest.
pub const MAX_ACCURACY: f64 = 0.1;
/// The smallest bins cap: a cap below it loses the tail it is kept for.
pub const MIN_BINS: u32 = 16;

/// What a quantile measure's declaration fixes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct QuantileParams {
    /// Slices an octave (`m`).
    pub slices: u32,
    /// Buckets kept per sign (0: no cap).
    pub bins: u32,
}

impl QuantileParams {
    /// For relative accuracy `a`: the fewest buckets an octave that give it.
    pub fn for_accuracy(a: f64, bins: u32) -> Result<QuantileParams, String> {
        if !(MIN_ACCURACY..=MAX_ACCURACY).contains(&a) {
            return Err(format!("accuracy {a} is outside {MIN_ACCURACY}..={MAX_ACCURACY}"));
        }
        if bins != 0 && bins < MIN_BINS {
            return Err(format!("bins = {bins}: keep at least {MIN_BINS} buckets (or leave `bins` out)"));
        }
        Ok(QuantileParams { slices: mapping::bins_per_octave_for(a), bins })
    }

    /// Its mapping (None: more buckets an octave than any accuracy asks).
    pub fn mapping(self) -> Option<Mapping> {
        Mapping::new(self.slices)
    }

    /// The relative error bound of its quantiles, `(gamma - 1) / (gamma + 1)`.
    pub fn accuracy(self) -> f64 {
        let gamma = 2f64.powf(1.0 / f64::from(self.slices));
        (gamma - 1.0) / (gamma + 1.0)
    }
}

/// Buckets of one sign: (bucket, count) sorted by bucket, counts >= 1.
type Store = Vec<(u32, u64)>;

/// A DDSketch over i64 units.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quantiles {
    params: QuantileParams,
    /// `params.slices`' mapping (shared, so adding takes no lock).
    mapping: Mapping,
    positive: Store,
    /// By magnitude.
    negative: Store,
    zeros: u64,
    count: u64,
    sum: i128,
    /// Exact; meaningful when `count > 0`.
    min: i64,
    max: i64,
}

impl Quantiles {
    /// An empty sketch; `params` from [`QuantileParams::for_accuracy`] or a
    /// checked decode (a mapping exists for them).
    pub fn new(params: QuantileParams) -> Quantiles {
        let mapping = params.mapping().unwrap_or_else(|| Mapping::new(mapping::MAX_BINS_PER_OCTAVE).expect("the most"));
        Quantiles {
            params,
            mapping,
            positive: Vec::new(),
            negative: Vec::new(),
            zeros: 0,
            count: 0,
            sum: 0,
            min: i64::MAX,
            max: i64::MIN,
        }
    }

    pub fn params(&self) -> QuantileParams {
        self.params
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    pub fn sum(&self) -> i128 {
        self.sum
    }

    pub fn min(&self) -> Option<i64> {
        (self.count > 0).then_some(self.min)
    }

    pub fn max(&self) -> Option<i64> {
        (self.count > 0).then_some(self.max)
    }

    /// Buckets with a count (both signs).
    pub fn buckets(&self) -> usize {
        self.positive.len() + self.negative.len()
    }

    /// Adds `n` values of `units`.
    #[inline]
    pub fn add_n(&mut self, units: i64, n: u64) {
        if n == 0 {
            return;
        }
        self.count += n;
        self.sum += i128::from(units) * i128::from(n);
        self.min = self.min.min(units);
        self.max = self.max.max(units);
        let cap = self.params.bins;
        match units {
            0 => self.zeros += n,
            u if u > 0 => add_to(&mut self.positive, self.mapping.index(u as u64), n, cap),
            u => add_to(&mut self.negative, self.mapping.index(u.unsigned_abs()), n, cap),
        }
    }

    #[inline]
    pub fn add(&mut self, units: i64) {
        self.add_n(units, 1);
    }

    /// Adds `other`'s values (equal parameters, else an error).
    pub fn merge(&mut self, other: &Quantiles) -> Result<(), String> {
        if self.params != other.params {
            return Err(format!("a quantile sketch of {:?} cannot merge one of {:?}", self.params, other.params));
        }
        if other.count == 0 {
            return Ok(());
        }
        self.count += other.count;
        self.sum += other.sum;
        self.zeros += other.zeros;
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
        merge_store(&mut self.positive, &other.positive, self.params.bins);
        merge_store(&mut self.negative, &other.negative, self.params.bins);
        Ok(())
    }

    /// The q-quantile in units (None: no value, or q outside 0..=1).
    pub fn quantile(&self, q: f64) -> Option<f64> {
        self.quantiles(&[q]).pop().flatten()
    }

    /// Several quantiles in one walk, in the order asked.
    pub fn quantiles(&self, qs: &[f64]) -> Vec<Option<f64>> {
        let mut order: Vec<usize> = (0..qs.len()).collect();
        order.sort_by(|&a, &b| qs[a].total_cmp(&qs[b]));
        let mut out = vec![None; qs.len()];
        if self.count == 0 {
            return out;
        }
        // Values in ascending order: negatives by decreasing magnitude,
        // zeros, positives.
        let p = &self.mapping;
        let walk = self
            .negative
            .iter()
            .rev()
            .map(|&(b, n)| (-p.representative(b), n))
            .chain((self.zeros > 0).then_some((0.0, self.zeros)))
            .chain(self.positive.iter().map(|&(b, n)| (p.representative(b), n)));
        let mut walk = walk.peekable();
        let mut below = 0u64; // values before the current bucket
        for i in order {
            let q = qs[i];
            if !(0.0..=1.0).contains(&q) {
                continue;
            }
            let rank = (q * (self.count - 1) as f64).floor() as u64;
            while let Some(&(_, n)) = walk.peek() {
                if rank < below + n {
                    break;
                }
                below += n;
                walk.next();
            }
            out[i] = walk.peek().map(|&(v, _)| v.clamp(self.min as f64, self.max as f64));
        }
        out
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    pub fn heap_bytes(&self) -> usize {
        (self.positive.capacity() + self.negative.capacity()) * std::mem::size_of::<(u32, u64)>()
    }
}

#[inline]
fn add_to(store: &mut Store, bucket: u32, n: u64, cap: u32) {
    match store.binary_search_by_key(&bucket, |&(b, _)| b) {
        Ok(i) => store[i].1 += n,
        Err(i) => {
            store.insert(i, (bucket, n));
            fold(store, cap);
        }
    }
}

fn merge_store(into: &mut Store, other: &Store, cap: u32) {
    let mut merged = Vec::with_capacity(into.len() + other.len());
    let (mut a, mut b) = (into.iter().peekable(), other.iter().peekable());
    loop {
        let next = match (a.peek(), b.peek()) {
            (Some(&&(x, n)), Some(&&(y, k))) if x == y => {
                a.next();
                b.next();
                (x, n + k)
            }
            (Some(&&x), Some(&&y)) if x.0 < y.0 => {
                a.next();
                x
            }
            (_, Some(&&y)) => {
                b.next();
                y
            }
            (Some(&&x), None) => {
                a.next();
                x
            }
            (None, None) => break,
        };
        merged.push(next);
    }
    *into = merged;
    fold(into, cap);
}

/// Keeps the `cap` highest buckets, the lower ones' counts added to the
/// lowest kept (0: no cap).
fn fold(store: &mut Store, cap: u32) {
    let cap = cap as usize;
    if cap == 0 || store.len() <= cap {
        return;
    }
    let cut = store.len() - cap;
    let folded: u64 = store[..cut].iter().map(|&(_, n)| n).sum();
    store.drain(..cut);
    store[0].1 += folded;
}

impl SketchKind for Quantiles {
    type Params = QuantileParams;
    const NAME: &'static str = "quantile";
    const SCALED: bool = true;
    const DESCRIPTION: &'static str =
        "quantiles of the field (DDSketch, within its declared relative accuracy; merged)";
    const IDEMPOTENT: bool = false;

    fn params(spec: &MeasureSpec, field: &TypedField) -> Result<QuantileParams, String> {
        spec.only_options(&["accuracy", "bins"])?;
        if !matches!(field.spec.kind, FieldType::Integer { .. } | FieldType::Decimal { .. }) {
            return Err(format!(
                "a quantile needs an integer or decimal field; {} is a {}",
                field.spec.name,
                field.spec.type_name()
            ));
        }
        let accuracy = spec.option_f64("accuracy")?.unwrap_or(DEFAULT_ACCURACY);
        let bins = spec.option_u64("bins")?.map_or(0, |b| u32::try_from(b).unwrap_or(u32::MAX));
        QuantileParams::for_accuracy(accuracy, bins)
    }

    fn empty(params: QuantileParams) -> Quantiles {
        Quantiles::new(params)
    }

    fn params_of(&self) -> QuantileParams {
        self.params
    }

    #[inline]
    fn add(&mut self, value: &FieldValue<'_>) {
        if let Some(units) = value.units() {
            Quantiles::add(self, units);
        }
    }

    fn merge(&mut self, other: &Quantiles) -> Result<(), String> {
        Quantiles::merge(self, other)
    }

    fn is_empty(&self) -> bool {
        Quantiles::is_empty(self)
    }

    fn to_bytes(&self) -> Vec<u8> {
        Quantiles::to_bytes(self)
    }

    fn from_bytes(bytes: &[u8]) -> Result<Quantiles, String> {
        Quantiles::from_bytes(bytes).map_err(|e| e.to_string())
    }

    fn heap_bytes(&self) -> usize {
        Quantiles::heap_bytes(self)
    }

    fn columns(name: &str, ask: &ShowOptions) -> Vec<String> {
        ask.quantiles.iter().map(|&q| format!("{name}_{}", quantile_label(q))).collect()
    }

    fn shown(&self, ask: &ShowOptions) -> Vec<Shown> {
        self.quantiles(&ask.quantiles).into_iter().map(Shown::Estimate).collect()
    }

    const QUANTILES: bool = true;
    const CHECKS_VALUES: bool = true;

    fn check_values(&self, values: &mut [i64]) -> Result<(), String> {
        self.check_against(values)
    }
}

/// The quantiles a truth check compares: both ends, the tails, the middle.
pub const CHECKED_QUANTILES: [f64; 9] = [0.0, 0.001, 0.01, 0.25, 0.5, 0.9, 0.99, 0.999, 1.0];

impl Quantiles {
    /// Each of [`CHECKED_QUANTILES`] against the exact one of `values`
    /// (sorted here): within the accuracy, unless a bins cap folded the
    /// rank's bucket away (then no guarantee is claimed). Count, sum, min
    /// and max must be exact.
    pub fn check_against(&self, values: &mut [i64]) -> Result<(), String> {
        values.sort_unstable();
        let exact = (
            values.len() as u64,
            values.iter().map(|&v| i128::from(v)).sum::<i128>(),
            values.first().copied(),
            values.last().copied(),
        );
        if (self.count, self.sum, self.min(), self.max()) != exact {
            return Err(format!(
                "count, sum, min, max are {:?}, exactly {exact:?}",
                (self.count, self.sum, self.min(), self.max())
            ));
        }
        let folded = |x: i64| {
            let store = if x > 0 { &self.positive } else { &self.negative };
            let full = self.params.bins > 0 && store.len() == self.params.bins as usize;
            x != 0 && full && store.first().is_some_and(|&(lowest, _)| self.mapping.index(x.unsigned_abs()) < lowest)
        };
        for (&q, estimate) in CHECKED_QUANTILES.iter().zip(self.quantiles(&CHECKED_QUANTILES)) {
            let Some(&x) = values.get((q * (values.len().saturating_sub(1)) as f64).floor() as usize) else {
                continue;
            };
            if folded(x) {
                continue;
            }
            let estimate = estimate.ok_or_else(|| format!("q {q}: no estimate of {x}"))?;
            let bound = self.params.accuracy() * (x as f64).abs();
            if (estimate - x as f64).abs() > bound * (1.0 + 1e-9) {
                return Err(format!(
                    "q {q}: {estimate} is {:.3} % from the exact {x} (accuracy {:.3} %)",
                    100.0 * (estimate - x as f64).abs() / (x as f64).abs().max(1.0),
                    100.0 * self.params.accuracy()
                ));
            }
        }
        Ok(())
    }
}

/// A quantile's column suffix: `p50`, `p99`, `p99.9`, `p100`.
pub fn quantile_label(q: f64) -> String {
    let percent = format!("{:.4}", q * 100.0);
    format!("p{}", percent.trim_end_matches('0').trim_end_matches('.'))
}
