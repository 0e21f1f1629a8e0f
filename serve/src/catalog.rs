//! What a table's layout offers a PromQL user: metric names (its measures
//! and ratios), labels (its dimensions) and the sample bucket (its finest
//! rollup). Built once per layout; the server swaps it when the table's
//! layout changes.

use crate::error::{Result, ServeError};
use zigzag_model::layout::Layout;
use zigzag_model::measure::MeasureKind;
use zigzag_model::{Config, MeasureSet, Projections};

#[derive(Debug, Clone)]
pub struct Catalog {
    pub config: Config,
    /// The layout the table recorded when this was built (None: the table
    /// has none; the configuration given is read with).
    pub layout: Option<Layout>,
    pub projections: Projections,
    pub measures: MeasureSet,
    /// Every dimension, in layout order (the labels of a full series).
    pub dims: Vec<String>,
    /// Dimensions stored as integers.
    pub numeric: Vec<String>,
    /// The finest rollup's bucket: a bare selector's sample, unless only
    /// coarser projections keep its labels ([`Catalog::sample_of`]).
    pub sample_ms: i64,
    /// Every rollup unit some projection writes, coarsest first.
    pub units_ms: Vec<i64>,
}

impl Catalog {
    /// The catalog of `config` (a table without a recorded layout).
    pub fn new(config: Config) -> Result<Catalog> {
        Catalog::recorded(config, None)
    }

    /// The catalog of a table whose recorded layout is `layout` (`config`
    /// is the configuration read with: that layout applied).
    pub fn recorded(config: Config, layout: Option<Layout>) -> Result<Catalog> {
        let bad = |e: String| ServeError::Gather(zigzag_gather::GatherError::Config(e));
        let projections = Projections::new(&config).map_err(|e| bad(e.to_string()))?;
        let measures = config.measure_set().map_err(|e| bad(e.to_string()))?;
        let all = projections.all_dims();
        let dims = all.dims().iter().map(|d| d.name.clone()).collect();
        let numeric = all.dims().iter().filter(|d| d.numeric).map(|d| d.name.clone()).collect();
        if projections.is_empty() {
            return Err(bad("the layout writes no projection".into()));
        }
        let mut units_ms: Vec<i64> = projections.iter().flat_map(|p| p.rollups()).map(|r| r.unit_ms()).collect();
        units_ms.sort_unstable_by(|a, b| b.cmp(a));
        units_ms.dedup();
        let sample_ms = *units_ms.last().unwrap_or(&60_000);
        Ok(Catalog { config, layout, projections, measures, dims, numeric, sample_ms, units_ms })
    }

    /// A metric name: a measure or a ratio.
    pub fn metric(&self, name: &str) -> Option<crate::query::Metric> {
        use crate::query::Metric;
        if self.measures.position(name).is_some() {
            Some(Metric::Measure(name.to_string()))
        } else if self.measures.ratios().iter().any(|r| r.name == name) {
            Some(Metric::Ratio(name.to_string()))
        } else {
            None
        }
    }

    /// A ratio's numerator and denominator measures, by name.
    pub fn ratio_parts(&self, ratio: &str) -> Option<(&str, &str)> {
        let set = &self.measures;
        let r = set.ratios().iter().find(|r| r.name == ratio)?;
        Some((&set.measures()[r.numerator].name, &set.measures()[r.denominator].name))
    }

    /// Every metric name, measures then ratios.
    pub fn metric_names(&self) -> Vec<String> {
        let m = self.measures.measures().iter().map(|m| m.name.clone());
        m.chain(self.measures.ratios().iter().map(|r| r.name.clone())).collect()
    }

    /// A measure's kind.
    pub fn kind(&self, measure: &str) -> Option<MeasureKind> {
        self.measures.position(measure).map(|i| self.measures.measures()[i].kind)
    }

    /// The measures a metric is read from.
    pub fn measures_of(&self, metric: &crate::query::Metric) -> Vec<String> {
        use crate::query::Metric;
        match metric {
            Metric::Measure(m) => vec![m.clone()],
            Metric::Ratio(r) => self.ratio_parts(r).map_or_else(Vec::new, |(n, d)| vec![n.into(), d.into()]),
        }
    }

    /// The sample bucket of a series told apart by (or filtered on) `dims`
    /// of `metric`: the finest rollup of the projections keeping them, and,
    /// when that is coarser than the table's finest, what keeps it so
    /// (`projection referrer_country keeps hours`). With no such projection,
    /// the finest (the read is refused, saying why, when planned).
    pub fn sample_of(&self, dims: &[String], metric: &crate::query::Metric) -> (i64, Option<String>) {
        match zigzag_gather::finest_answering(&self.projections, dims, &self.measures_of(metric)) {
            Some((km, r)) if r.unit_ms() > self.sample_ms => {
                (r.unit_ms(), Some(format!("projection {} keeps {}s", km.name(), r.name())))
            }
            _ => (self.sample_ms, None),
        }
    }

    pub fn is_dim(&self, label: &str) -> bool {
        self.dims.iter().any(|d| d == label)
    }

    /// For `/api/v1/metadata`: each metric's Prometheus type and help.
    pub fn metadata(&self) -> Vec<(String, &'static str, String)> {
        let mut out = Vec::new();
        for m in self.measures.measures() {
            let condition = self.config.measures.iter().find(|s| s.name == m.name).and_then(|s| s.condition.as_ref());
            let what = match (m.kind, condition) {
                (MeasureKind::Count, Some(c)) => format!("events where {c}"),
                (MeasureKind::Count, None) => "events".to_string(),
                (kind, _) if kind.is_sketch() => kind.sketch_description().unwrap_or_default().to_string(),
                (kind, _) => format!("{} of the field", kind.name()),
            };
            let help = format!(
                "{} ({what}) per bucket, stamped at the bucket's end; sum_over_time(x[r]) for a window",
                m.name
            );
            out.push((m.name.clone(), "gauge", help));
        }
        for r in self.measures.ratios() {
            let (n, d) = self.ratio_parts(&r.name).unwrap_or_default();
            out.push((r.name.clone(), "gauge", format!("{n} / {d}, each summed first (never an average of ratios)")));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_layout_offers_its_measures_ratios_and_dimensions() {
        let c = Catalog::new(Config::shipped()).unwrap();
        assert_eq!(c.metric_names(), ["clicks", "impressions", "cost", "cost_min", "cost_max", "ctr"]);
        assert!(c.dims.contains(&"campaign".to_string()) && c.dims.contains(&"referrer".to_string()));
        assert_eq!(c.sample_ms, 60_000, "minute buckets are the samples");
        assert_eq!(c.units_ms, [86_400_000, 3_600_000, 60_000]);
        assert_eq!(c.metric("ctr"), Some(crate::query::Metric::Ratio("ctr".into())));
        assert_eq!(c.metric("requests"), None);
        assert_eq!(c.metadata().len(), 6);
    }
}
