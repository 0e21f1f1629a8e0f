//! The field traffic file (`loadgen --fields FILE`): how each declared
//! field's values are drawn. Every key is optional; a field without a table
//! gets its type's defaults (see `value_gen.rs`).
//!
//! ```toml
//! [field.user_id]          # a string: a vocabulary of 200k names, Zipf-skewed
//! cardinality = 200000
//! zipf = 0.8
//! absent = 0.05            # optional or defaulted fields only
//!
//! [field.event]            # a string with declared values: their weights
//! weights = [90, 9, 1]
//!
//! [field.status]           # a number drawn from listed values
//! values = [200, 304, 404, 500]
//! weights = [80, 12, 6, 2]
//!
//! [field.price]            # a number, in the field's own units
//! when = "event = click"   # only in clicks (absent in the other records)
//! distribution = "exponential"   # uniform | zipf | normal | exponential
//! min = 100                      #   | lognormal | pareto | bimodal
//! max = 2000000
//! mean = 2500
//!
//! [field.latency_ms]       # shapes for quantiles: a heavy tail, two modes
//! distribution = "lognormal"     # `mean` is the median, `sigma` the log-space sd
//! mean = 120
//! sigma = 1.2
//! zeros = 0.02             # any number distribution: this fraction is 0
//! negative = 0.01          # ... and this fraction has its sign flipped
//!
//! [field.premium]          # a boolean
//! p_true = 0.2
//! ```

use serde::Deserialize;
use std::collections::BTreeMap;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum TrafficError {
    #[error("field traffic file: {0}")]
    Toml(#[from] toml::de::Error),
    #[error("field traffic for `{field}`: {message}")]
    Field { field: String, message: String },
    #[error("field traffic names `{0}`, which the schema does not declare")]
    Unknown(String),
    #[error(transparent)]
    Schema(#[from] zigzag_model::ConfigError),
}

impl TrafficError {
    pub(crate) fn field(field: &str, message: impl Into<String>) -> TrafficError {
        TrafficError::Field { field: field.to_string(), message: message.into() }
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrafficFile {
    #[serde(default)]
    pub field: BTreeMap<String, FieldTraffic>,
}

impl TrafficFile {
    pub fn from_toml(text: &str) -> Result<TrafficFile, TrafficError> {
        Ok(toml::from_str(text)?)
    }
}

/// How one field's values are drawn. Which keys apply depends on the
/// field's type; a key its type does not take is an error.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FieldTraffic {
    /// Fraction of records without the field (optional or defaulted fields).
    pub absent: Option<f64>,
    /// The field is there only in records matching this condition (the
    /// `where` grammar, on fields declared before it), absent in the others
    /// (optional or defaulted fields): `when = "event in click, conversion"`.
    pub when: Option<String>,
    /// The values to draw from: strings without declared values, numbers
    /// (in the field's units, inside its bounds).
    pub values: Option<Vec<toml::Value>>,
    /// Relative weights of the values (a string's declared ones or those
    /// listed here).
    pub weights: Option<Vec<f64>>,
    /// Strings: the size of a generated vocabulary. Numbers with `zipf`:
    /// how many values from `min` up carry the skew.
    pub cardinality: Option<u64>,
    /// Zipf exponent (rank 1 the most frequent). Strings: over the
    /// vocabulary; numbers: with `distribution = "zipf"`.
    pub zipf: Option<f64>,
    /// Numbers: uniform (default), zipf, normal, exponential, lognormal,
    /// pareto or bimodal.
    pub distribution: Option<String>,
    /// Numbers, in the field's units (`2.5` for a decimal): the range drawn
    /// from, inside the field's declared bounds.
    pub min: Option<toml::Value>,
    pub max: Option<toml::Value>,
    /// Numbers: normal and exponential.
    pub mean: Option<toml::Value>,
    /// Numbers: normal and bimodal (each mode's).
    pub sd: Option<toml::Value>,
    /// Numbers, lognormal: the standard deviation of the value's logarithm
    /// (default 1; `mean` is the median).
    pub sigma: Option<f64>,
    /// Numbers, pareto: the tail index (default 1.5: a finite mean, an
    /// infinite variance); `min` is where the tail starts.
    pub alpha: Option<f64>,
    /// Numbers, bimodal: the two modes (each a normal of `sd`), drawn by
    /// `weights` (default equally).
    pub modes: Option<Vec<toml::Value>>,
    /// Numbers: the fraction of draws that are exactly zero.
    pub zeros: Option<f64>,
    /// Numbers: the fraction of draws whose sign is flipped (then clamped
    /// to the field's bounds).
    pub negative: Option<f64>,
    /// Booleans: the probability of `true`.
    pub p_true: Option<f64>,
}

impl FieldTraffic {
    /// The keys set, for "does not apply" errors.
    pub(crate) fn keys_set(&self) -> Vec<&'static str> {
        let mut keys = Vec::new();
        let mut add = |set: bool, key| {
            if set {
                keys.push(key)
            }
        };
        add(self.values.is_some(), "values");
        add(self.weights.is_some(), "weights");
        add(self.cardinality.is_some(), "cardinality");
        add(self.zipf.is_some(), "zipf");
        add(self.distribution.is_some(), "distribution");
        add(self.min.is_some(), "min");
        add(self.max.is_some(), "max");
        add(self.mean.is_some(), "mean");
        add(self.sd.is_some(), "sd");
        add(self.sigma.is_some(), "sigma");
        add(self.alpha.is_some(), "alpha");
        add(self.modes.is_some(), "modes");
        add(self.zeros.is_some(), "zeros");
        add(self.negative.is_some(), "negative");
        add(self.p_true.is_some(), "p_true");
        keys
    }
}
