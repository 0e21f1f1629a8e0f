//! The `zbench` query file: box queries as TOML, one `[[query]]` each.
//!
//! ```toml
//! [[query]]
//! name = "Atlanta, last week of March"
//! latitude = [33.7, 33.9]                                  # inclusive range
//! timestamp = ["2016-03-25T00:00:00Z", "2016-04-01T00:00:00Z"]
//! celsius = { min = -20 }                                  # one-sided
//! sourceId = 1                                             # equality
//! station = { in = ["a", "b"] }                            # set
//! ```
//!
//! Fields that are schema dimensions shape the Z-box and the filter; other
//! fields only filter. Every error names the line it comes from.

use super::dataset::attribute;
use super::ZbenchError;
use std::collections::BTreeMap;
use toml::{Spanned, Value as Toml};
use zigzag_core::schema::{Constraint, Schema};
use zigzag_core::table::{Filter, Test};

#[derive(Debug, Clone, PartialEq)]
pub enum Bound {
    Eq(String),
    Range(Option<String>, Option<String>),
    In(Vec<String>),
}

#[derive(Debug, Clone)]
pub struct FieldBound {
    pub field: String,
    pub line: usize,
    pub bound: Bound,
}

#[derive(Debug, Clone)]
pub struct BenchQuery {
    pub name: String,
    pub line: usize,
    pub bounds: Vec<FieldBound>,
}

#[derive(serde::Deserialize)]
struct File {
    #[serde(default)]
    query: Vec<BTreeMap<String, Spanned<Toml>>>,
}

fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].bytes().filter(|&b| b == b'\n').count() + 1
}

fn scalar(v: &Toml) -> Option<String> {
    match v {
        Toml::String(s) => Some(s.clone()),
        Toml::Integer(i) => Some(i.to_string()),
        Toml::Float(f) => Some(f.to_string()),
        Toml::Boolean(b) => Some(b.to_string()),
        Toml::Datetime(d) => Some(d.to_string()),
        Toml::Array(_) | Toml::Table(_) => None,
    }
}

pub fn parse(text: &str) -> Result<Vec<BenchQuery>, ZbenchError> {
    let file: File = toml::from_str(text).map_err(|e| {
        let line = e.span().map_or(0, |s| line_of(text, s.start));
        ZbenchError::Queries { line, why: e.message().to_string() }
    })?;
    let mut out = Vec::new();
    for (i, q) in file.query.into_iter().enumerate() {
        let first = q.values().map(|v| v.span().start).min().unwrap_or(0);
        let qline = line_of(text, first);
        let name = match q.get("name").map(|v| v.get_ref()) {
            Some(Toml::String(s)) => s.clone(),
            Some(_) => return Err(ZbenchError::Queries { line: qline, why: "`name` must be a string".into() }),
            None => format!("query {}", i + 1),
        };
        let mut bounds = Vec::new();
        for (field, value) in q {
            if field == "name" {
                continue;
            }
            let line = line_of(text, value.span().start);
            let bad =
                |why: String| ZbenchError::Queries { line, why: format!("query {name:?}, field {field:?}: {why}") };
            let bound = match value.get_ref() {
                Toml::Array(a) => match a.as_slice() {
                    [lo, hi] => Bound::Range(
                        Some(scalar(lo).ok_or_else(|| bad("range ends must be scalars".into()))?),
                        Some(scalar(hi).ok_or_else(|| bad("range ends must be scalars".into()))?),
                    ),
                    _ => return Err(bad(format!("a range is [low, high]; got {} elements", a.len()))),
                },
                Toml::Table(t) => {
                    let get = |k: &str| {
                        t.get(k).map(|v| scalar(v).ok_or_else(|| bad(format!("`{k}` must be a scalar")))).transpose()
                    };
                    if let Some(unknown) = t.keys().find(|k| !["min", "max", "in"].contains(&k.as_str())) {
                        return Err(bad(format!("unknown key `{unknown}`; use min, max or in")));
                    }
                    match t.get("in") {
                        Some(Toml::Array(items)) if t.len() == 1 => Bound::In(
                            items
                                .iter()
                                .map(|v| scalar(v).ok_or_else(|| bad("`in` takes scalars".into())))
                                .collect::<Result<_, _>>()?,
                        ),
                        Some(_) => return Err(bad("`in` takes an array, alone".into())),
                        None => Bound::Range(get("min")?, get("max")?),
                    }
                }
                v => Bound::Eq(scalar(v).expect("scalar")),
            };
            bounds.push(FieldBound { field, line, bound });
        }
        out.push(BenchQuery { name, line: qline, bounds });
    }
    if out.is_empty() {
        return Err(ZbenchError::Queries { line: 1, why: "no [[query]] tables".into() });
    }
    Ok(out)
}

impl BenchQuery {
    fn err(&self, fb: &FieldBound, why: impl std::fmt::Display) -> ZbenchError {
        ZbenchError::Queries { line: fb.line, why: format!("query {:?}, field {:?}: {why}", self.name, fb.field) }
    }

    /// Constraints on schema dimensions, by dimension index.
    pub fn constraints<'a>(&'a self, schema: &'a Schema) -> Result<Vec<(usize, Constraint<'a>)>, ZbenchError> {
        let mut out = Vec::new();
        for fb in &self.bounds {
            let Some(d) = schema.index_of(&fb.field) else { continue };
            let dim = &schema.dims()[d];
            let parse = |t: &'a String| dim.parse(t).map_err(|e| self.err(fb, e.error));
            let c = match &fb.bound {
                Bound::Eq(v) => Constraint::Eq(parse(v)?),
                Bound::Range(lo, hi) => {
                    Constraint::Range(lo.as_ref().map(parse).transpose()?, hi.as_ref().map(parse).transpose()?)
                }
                Bound::In(vs) => Constraint::In(vs.iter().map(parse).collect::<Result<_, _>>()?),
            };
            out.push((d, c));
        }
        Ok(out)
    }

    /// The filter expression: every bound, on the stored attributes.
    pub fn filter(&self, schema: &Schema) -> Filter {
        let mut f = Filter::none();
        for fb in &self.bounds {
            let attr = |t: &String| attribute(schema, &fb.field, t);
            let test = match &fb.bound {
                Bound::Eq(v) => Test::Eq(attr(v)),
                Bound::Range(Some(lo), Some(hi)) => Test::Between(attr(lo), attr(hi)),
                Bound::Range(Some(lo), None) => Test::Ge(attr(lo)),
                Bound::Range(None, Some(hi)) => Test::Le(attr(hi)),
                Bound::Range(None, None) => continue,
                Bound::In(vs) => Test::In(vs.iter().map(attr).collect()),
            };
            f = f.and(&fb.field, test);
        }
        f
    }

    /// The bound on one field, if any.
    pub fn bound_on(&self, field: &str) -> Option<&FieldBound> {
        self.bounds.iter().find(|b| b.field == field)
    }

    pub fn field_error(&self, fb: &FieldBound, why: impl std::fmt::Display) -> ZbenchError {
        self.err(fb, why)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_bound_form() {
        let q = parse(
            "[[query]]\nname = 'q'\na = 1\nb = [2, 3.5]\nc = { min = 4 }\nd = { in = ['x', 'y'] }\ne = 2016-01-01T00:00:00Z\n",
        )
        .unwrap();
        assert_eq!(q[0].name, "q");
        let get = |f: &str| q[0].bound_on(f).unwrap().bound.clone();
        assert_eq!(get("a"), Bound::Eq("1".into()));
        assert_eq!(get("b"), Bound::Range(Some("2".into()), Some("3.5".into())));
        assert_eq!(get("c"), Bound::Range(Some("4".into()), None));
        assert_eq!(get("d"), Bound::In(vec!["x".into(), "y".into()]));
        assert_eq!(get("e"), Bound::Eq("2016-01-01T00:00:00Z".into()));
        assert_eq!(q[0].bound_on("d").unwrap().line, 6);
    }

    #[test]
    fn errors_name_the_line() {
        let e = parse("[[query]]\nname = 'q'\n\nlat = [1, 2, 3]\n").unwrap_err().to_string();
        assert_eq!(e, "query file, line 4: query \"q\", field \"lat\": a range is [low, high]; got 3 elements");
        let e = parse("[[query]]\nname = 'q'\nlat = { above = 3 }\n").unwrap_err().to_string();
        assert!(e.starts_with("query file, line 3:"), "{e}");
        let e = parse("[[query]]\nname = 'q'\nlat = [1,\n").unwrap_err().to_string();
        assert!(e.starts_with("query file, line "), "{e}");
        assert!(parse("").is_err());
    }
}
