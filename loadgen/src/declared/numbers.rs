//! A number field's draws: a distribution over its units (uniform, listed
//! values, Zipf, normal, exponential, lognormal, Pareto, bimodal), then
//! fractions made zero or negative, written in one of several exact
//! spellings.

use super::traffic_file::FieldTraffic;
use super::value_gen::{pick, Pick, Written};
use rand::rngs::SmallRng;
use rand::Rng;
use rand_distr::{Distribution, Exp, LogNormal, Normal, Pareto, Zipf};
use zigzag_model::schema::decimal::{decimal_units, format_units};
use zigzag_model::schema::value::Bounds;
use zigzag_model::schema::{scalar_text, FieldSpec, FieldType, FieldValue};

/// Units of 10^-scale in `lo..=hi` (then `signs`, inside the field's
/// `bounds`).
#[derive(Debug, Clone)]
pub(super) struct NumberGen {
    lo: i64,
    hi: i64,
    dist: NumberDist,
    signs: Signs,
    bounds: (i64, i64),
    scale: u32,
    integer: bool,
}

#[derive(Debug, Clone)]
enum NumberDist {
    Listed(Vec<i64>, Pick),
    Uniform,
    Zipf(Zipf<f64>),
    Normal(Normal<f64>),
    /// `lo` plus an exponential draw.
    Exponential(Exp<f64>),
    LogNormal(LogNormal<f64>),
    Pareto(Pareto<f64>),
    /// Two normals, the first drawn with this probability.
    Bimodal(Normal<f64>, Normal<f64>, f64),
}

/// What is done to a number after its draw: a fraction made zero, a
/// fraction made negative (then clamped).
#[derive(Debug, Clone, Copy, Default)]
struct Signs {
    zeros: f64,
    negative: f64,
}

impl NumberGen {
    /// From the field's declaration and traffic table (Err: what to change).
    pub(super) fn new(spec: &FieldSpec, t: &FieldTraffic, bounds: Bounds) -> Result<NumberGen, String> {
        let (scale, integer) = match spec.kind {
            FieldType::Decimal { scale, .. } => (scale, false),
            _ => (0, true),
        };
        let units = |v: &Option<toml::Value>, key: &str| -> Result<Option<i64>, String> {
            v.as_ref()
                .map(|v| {
                    let text = scalar_text(v).ok_or_else(|| format!("`{key}` must be a number"))?;
                    decimal_units(&text, scale).map_err(|e| format!("`{key}` = {text}: {e}"))
                })
                .transpose()
        };
        let whole = 10i64.checked_pow(scale).ok_or("scale too large to draw from")?;
        let lo = units(&t.min, "min")?.unwrap_or(if bounds.min > i64::MIN { bounds.min } else { 0.min(bounds.max) });
        // Tails run to the field's bound unless told otherwise; the rest span
        // 1000 of the field's units.
        let tailed = matches!(t.distribution.as_deref(), Some("lognormal" | "pareto"));
        let hi = units(&t.max, "max")?.unwrap_or_else(|| match tailed {
            true => bounds.max,
            false => bounds.max.min(lo.saturating_add(1000i64.saturating_mul(whole))),
        });
        if lo < bounds.min || hi > bounds.max {
            return Err("min and max must lie inside the field's declared bounds".into());
        }
        if lo > hi {
            return Err("min is above max".into());
        }
        let span = hi as f64 - lo as f64;
        let dist = match t.distribution.as_deref().unwrap_or("uniform") {
            "uniform" if t.values.is_some() => {
                let listed = t
                    .values
                    .iter()
                    .flatten()
                    .map(|v| units(&Some(v.clone()), "values"))
                    .collect::<Result<Vec<_>, _>>()?;
                let listed: Vec<i64> = listed.into_iter().flatten().collect();
                if listed.iter().any(|v| !(bounds.min..=bounds.max).contains(v)) {
                    return Err("`values` must lie inside the field's declared bounds".into());
                }
                if t.min.is_some() || t.max.is_some() {
                    return Err("give `values` or `min`/`max`, not both".into());
                }
                let pick = pick(listed.len() as u64, t.weights.as_deref(), None)?;
                NumberDist::Listed(listed, pick)
            }
            "uniform" => NumberDist::Uniform,
            "zipf" => {
                let n = t.cardinality.unwrap_or_else(|| (hi as i128 - lo as i128 + 1).clamp(1, 1000) as u64);
                NumberDist::Zipf(Zipf::new(n, t.zipf.unwrap_or(1.0)).map_err(|e| format!("zipf: {e}"))?)
            }
            "normal" => {
                let mean = units(&t.mean, "mean")?.map_or(lo as f64 + span / 2.0, |m| m as f64);
                let sd = units(&t.sd, "sd")?.map_or(span / 6.0, |s| s as f64);
                NumberDist::Normal(Normal::new(mean, sd).map_err(|e| format!("normal: {e}"))?)
            }
            "exponential" => {
                let mean = units(&t.mean, "mean")?.map_or(span / 10.0, |m| m as f64 - lo as f64).max(1.0);
                NumberDist::Exponential(Exp::new(1.0 / mean).map_err(|e| format!("exponential: {e}"))?)
            }
            "lognormal" => {
                let median = units(&t.mean, "mean")?.map_or((lo.max(1) as f64 * hi.max(1) as f64).sqrt(), |m| m as f64);
                if median <= 0.0 {
                    return Err("a lognormal's `mean` (its median) must be positive".into());
                }
                let sigma = t.sigma.unwrap_or(1.0);
                NumberDist::LogNormal(LogNormal::new(median.ln(), sigma).map_err(|e| format!("lognormal: {e}"))?)
            }
            "pareto" => {
                let start = lo.max(1) as f64;
                NumberDist::Pareto(Pareto::new(start, t.alpha.unwrap_or(1.5)).map_err(|e| format!("pareto: {e}"))?)
            }
            "bimodal" => {
                let modes = t.modes.as_ref().ok_or("a bimodal distribution needs `modes = [low, high]`")?;
                let modes: Vec<i64> = modes
                    .iter()
                    .map(|v| units(&Some(v.clone()), "modes"))
                    .collect::<Result<Vec<_>, _>>()?
                    .into_iter()
                    .flatten()
                    .collect();
                let [a, b] = modes[..] else { return Err("`modes` takes two numbers".into()) };
                let sd = units(&t.sd, "sd")?.map_or(span / 40.0, |s| s as f64).max(f64::MIN_POSITIVE);
                let first = match t.weights.as_deref() {
                    None => 0.5,
                    Some([x, y]) if *x >= 0.0 && *y >= 0.0 && x + y > 0.0 => x / (x + y),
                    Some(_) => return Err("a bimodal's `weights` are two non-negative numbers".into()),
                };
                let normal = |m: i64| Normal::new(m as f64, sd).map_err(|e| format!("bimodal: {e}"));
                NumberDist::Bimodal(normal(a)?, normal(b)?, first)
            }
            other => {
                return Err(format!(
                    "distribution {other:?}: expected uniform, zipf, normal, exponential, lognormal, pareto or bimodal"
                ))
            }
        };
        let used = |set: bool, key: &str, by: &[&str]| {
            if set && !by.contains(&t.distribution.as_deref().unwrap_or("uniform")) {
                Err(format!("`{key}` applies to distribution {}", by.join(" or ")))
            } else {
                Ok(())
            }
        };
        used(t.mean.is_some(), "mean", &["normal", "exponential", "lognormal"])?;
        used(t.sd.is_some(), "sd", &["normal", "bimodal"])?;
        used(t.sigma.is_some(), "sigma", &["lognormal"])?;
        used(t.alpha.is_some(), "alpha", &["pareto"])?;
        used(t.modes.is_some(), "modes", &["bimodal"])?;
        used(t.zipf.is_some() || t.cardinality.is_some(), "zipf/cardinality", &["zipf"])?;
        used(t.values.is_some(), "values", &["uniform"])?;
        used(t.weights.is_some(), "weights", &["uniform", "bimodal"])?;
        let bimodal = t.distribution.as_deref() == Some("bimodal");
        if t.weights.is_some() && t.values.is_none() && !bimodal {
            return Err("`weights` of a number need its `values`".into());
        }
        let fraction = |v: Option<f64>, key: &str| match v {
            Some(f) if !(0.0..=1.0).contains(&f) => Err(format!("`{key}` = {f} is not a fraction")),
            v => Ok(v.unwrap_or(0.0)),
        };
        let signs = Signs { zeros: fraction(t.zeros, "zeros")?, negative: fraction(t.negative, "negative")? };
        if signs.zeros > 0.0 && !(bounds.min..=bounds.max).contains(&0) {
            return Err("`zeros`: 0 is outside the field's declared bounds".into());
        }
        if signs.negative > 0.0 && bounds.min >= 0 {
            return Err("`negative`: the field's declared bounds hold no negative value".into());
        }
        Ok(NumberGen { lo, hi, dist, signs, bounds: (bounds.min, bounds.max), scale, integer })
    }

    /// One draw: its units, then `signs`, inside the field's bounds.
    pub(super) fn draw(&self, rng: &mut SmallRng) -> (FieldValue<'static>, Written) {
        let mut v = draw_units(rng, self.lo, self.hi, &self.dist);
        if self.signs.zeros > 0.0 && rng.gen_bool(self.signs.zeros) {
            v = 0.clamp(self.bounds.0, self.bounds.1);
        } else if self.signs.negative > 0.0 && rng.gen_bool(self.signs.negative) {
            v = v.saturating_neg().clamp(self.bounds.0, self.bounds.1);
        }
        let value = if self.integer { FieldValue::Int(v) } else { FieldValue::Dec(v) };
        (value, number_written(rng, v, self.scale))
    }
}

fn draw_units(rng: &mut SmallRng, lo: i64, hi: i64, dist: &NumberDist) -> i64 {
    let clamp = |x: f64| (x.round() as i64).clamp(lo, hi);
    match dist {
        NumberDist::Listed(values, pick) => values[pick.rank(rng, values.len() as u64) as usize],
        NumberDist::Uniform => rng.gen_range(lo..=hi),
        NumberDist::Zipf(z) => lo.saturating_add(z.sample(rng) as i64 - 1).min(hi),
        NumberDist::Normal(n) => clamp(n.sample(rng)),
        NumberDist::Exponential(e) => clamp(lo as f64 + e.sample(rng)),
        NumberDist::LogNormal(d) => clamp(d.sample(rng)),
        NumberDist::Pareto(d) => clamp(d.sample(rng)),
        NumberDist::Bimodal(a, b, first) => clamp(if rng.gen_bool(*first) { a.sample(rng) } else { b.sample(rng) }),
    }
}

/// `v` units of 10^-scale in one of several exact spellings.
fn number_written(rng: &mut SmallRng, v: i64, scale: u32) -> Written {
    let plain = format_units(v as i128, scale);
    let text = match rng.gen_range(0..10) {
        // Every digit of the scale, trailing zeros kept: 1.500.
        0 if scale > 0 => {
            let digits = format!("{:0>width$}", v.unsigned_abs(), width = scale as usize + 1);
            let (int, frac) = digits.split_at(digits.len() - scale as usize);
            format!("{}{int}.{frac}", if v < 0 { "-" } else { "" })
        }
        // The units with a negative exponent: 1500e-3.
        1 if scale > 0 => format!("{v}e-{scale}"),
        2 => return Written::Str(plain),
        _ => plain,
    };
    Written::Bare(text)
}
