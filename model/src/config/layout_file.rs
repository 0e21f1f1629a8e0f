//! A recorded layout written back as the configuration file that gives it
//! (`gather layout show`): `ingest --config` reads it as the same layout,
//! and a person edits it to change what is not layout (the cadences).

use super::FlushConfig;
use crate::error::ConfigError;
use crate::layout::Layout;
use toml::{Table, Value};

impl Layout {
    /// The configuration file of this layout, flushing as `flush` says
    /// (cadences are not recorded with the layout: the caller says whose
    /// they are). `Config::from_toml` of it gives this layout again.
    pub fn to_toml(&self, flush: &FlushConfig) -> Result<String, ConfigError> {
        let value = |v: Result<Value, toml::ser::Error>| v.map_err(|e| ConfigError::Invalid(format!("layout: {e}")));
        let scatter = |prefixes: u32, mode: crate::scatter::ScatterMode| -> Result<Value, ConfigError> {
            let mut t = Table::new();
            t.insert("prefixes".into(), Value::Integer(i64::from(prefixes)));
            t.insert("mode".into(), value(Value::try_from(mode))?);
            Ok(Value::Table(t))
        };
        // Sections in the order the configuration docs write them (a table
        // sorts its keys): one table each, written one after another.
        let mut doc: Vec<(&str, Value)> = vec![
            ("rollups", value(Value::try_from(&self.rollups))?),
            ("input", value(Value::try_from(&self.input))?),
            ("field", value(Value::try_from(&self.fields))?),
            ("dimension", value(Value::try_from(&self.dimensions))?),
            ("measure", value(Value::try_from(&self.measures))?),
            ("ratio", value(Value::try_from(&self.ratios))?),
            ("scatter", scatter(self.scatter_prefixes, self.scatter_mode)?),
        ];
        let mut projections = Vec::with_capacity(self.projections.len());
        for p in &self.projections {
            let mut t = Table::new();
            t.insert("name".into(), Value::String(p.name.clone()));
            t.insert("dimensions".into(), value(Value::try_from(&p.dimensions))?);
            t.insert("rollups".into(), value(Value::try_from(&p.rollups))?);
            t.insert("measures".into(), value(Value::try_from(&p.measures))?);
            t.insert("scatter".into(), scatter(p.scatter.prefixes, p.scatter.mode)?);
            if let Some(d) = &p.partition_by {
                t.insert("partition_by".into(), Value::String(d.clone()));
            }
            projections.push(Value::Table(t));
        }
        if !projections.is_empty() {
            doc.push(("projection", Value::Array(projections)));
        }
        let retention = self.retention.to_table();
        if !retention.is_empty() {
            doc.push(("retention", value(Value::try_from(retention))?));
        }
        doc.push(("flush", value(Value::try_from(flush))?));
        // A plain value (an empty list included) written after a table
        // would belong to that table: plain ones first.
        let plain = |v: &Value| match v {
            Value::Table(_) => false,
            Value::Array(a) => a.is_empty() || !a.iter().all(Value::is_table),
            _ => true,
        };
        let (first, tables): (Vec<_>, Vec<_>) = doc.into_iter().partition(|(_, v)| plain(v));
        let mut text = String::new();
        for (key, v) in first.into_iter().chain(tables) {
            let section = Table::from_iter([(key.to_string(), v)]);
            let part = toml::to_string_pretty(&section).map_err(|e| ConfigError::Invalid(format!("layout: {e}")))?;
            text.push_str(part.trim_end());
            text.push_str("\n\n");
        }
        Ok(text.trim_end().to_string() + "\n")
    }
}

#[cfg(test)]
mod tests {
    use super::super::Config;
    use crate::layout::Layout;

    /// Every layout shipped as an example, the shipped one, and the ones
    /// the configuration docs show: written as a file, read back as the
    /// same layout and the same flush settings.
    #[test]
    fn a_layout_written_as_a_file_reads_back_as_the_same_layout() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/layouts");
        let mut texts: Vec<(String, String)> = vec![("shipped".into(), crate::shipped::SHIPPED_TOML.into())];
        for entry in std::fs::read_dir(&dir).expect("examples/layouts") {
            let path = entry.expect("an entry").path();
            if path.extension().is_some_and(|e| e == "toml") {
                texts.push((path.display().to_string(), std::fs::read_to_string(&path).expect("readable")));
            }
        }
        texts.push((
            "retention and a custom schema".into(),
            r#"
rollups = ["minute", "hour"]
[input]
format = "csv"
columns = ["ts", "path", "status", "bytes"]
time = "ts"
[[field]]
name = "ts"
type = "timestamp"
[[field]]
name = "path"
type = "string"
[[field]]
name = "status"
type = "integer"
min = 100
max = 599
[[field]]
name = "bytes"
type = "decimal"
scale = 2
[[dimension]]
field = "path"
type = "hash"
bits = 20
[[dimension]]
field = "status"
type = "integer"
[[measure]]
name = "requests"
type = "count"
[[measure]]
name = "errors"
type = "count"
where = "status in 500, 502, 503"
[[measure]]
name = "bytes"
type = "sum"
field = "bytes"
[scatter]
prefixes = 4
mode = "random"
[retention]
minute = "14d"
hour = "400d"
[flush]
interval_ms = 5000
every_ms = { "base.hour" = 60000 }
"#
            .into(),
        ));
        assert!(texts.len() >= 8, "the example layouts were read: {}", texts.len());
        for (name, text) in texts {
            let config = Config::from_toml(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
            let layout = Layout::of(&config);
            let file = layout.to_toml(&config.flush).unwrap_or_else(|e| panic!("{name}: {e}"));
            let again =
                Config::from_toml(&file).unwrap_or_else(|e| panic!("{name}: its file does not read: {e}\n{file}"));
            assert_eq!(Layout::of(&again), layout, "{name}: the same layout\n{file}");
            assert_eq!(again.layout_digest(), config.layout_digest(), "{name}");
            assert_eq!(again.flush, config.flush, "{name}: the same cadences\n{file}");
        }
    }
}
