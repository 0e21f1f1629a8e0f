//! `--where` filters. Grammar (one expression per `--where`; several are
//! AND-ed; spaces around operators and values are ignored):
//!
//! ```text
//! FIELD = VALUE          equality              country=DE
//! FIELD != VALUE         inequality            campaign!=spring
//! FIELD in V1,V2,...     one of                country in DE,FR
//! FIELD >= VALUE         range (also > <= <)   referrer>=m
//! ```
//!
//! A bare value is the rest of the expression (in a list: up to the next
//! comma), trimmed. A value is quoted like a measure's `where` value
//! ([`zigzag_model::literal`]) to keep its spaces, hold a comma, be empty
//! in a list, or start with an operator character: `path in "/a, b", /c`.
//!
//! FIELD is one of the layout's dimensions; values compare as UTF-8 bytes
//! (text dimensions) or as numbers (integer dimensions), like the store does.
//!
//! Each filter on an indexed dimension narrows the Z-box (equality, IN
//! and ranges on `string` dimensions, equality on `hash` ones). Z-strings
//! are fixed-width prefixes, so the box is a superset; every filter is also
//! applied exactly to the item's stored value after reading. The rest (`!=`,
//! ranges and multi-value IN on `hash` dimensions) are applied after reading
//! only. A field the configuration does not index is an error: aggregates
//! are summed over it, so it cannot be filtered.

use crate::error::{GatherError, Result};
use zigzag_core::schema::{Constraint, Encoding, Schema, Value};
use zigzag_core::table::{AttrValue, Filter, Item, Test};
use zigzag_model::literal;
use zigzag_model::schema::FieldType;
use zigzag_model::Config;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    Eq(String),
    Ne(String),
    In(Vec<String>),
    Ge(String),
    Gt(String),
    Le(String),
    Lt(String),
    /// The whole value matches (`gather serve`'s `=~`); applied after reading.
    Matches(Pattern),
    /// The whole value does not match (`!~`).
    NotMatches(Pattern),
}

/// A regular expression matched against a whole value (anchored, as
/// PromQL's `=~` is), equal to another by its text.
#[derive(Debug, Clone)]
pub struct Pattern {
    pub text: String,
    anchored: regex::Regex,
}

impl Pattern {
    /// `text` anchored at both ends; an error says why it is not a regex.
    pub fn new(text: &str) -> std::result::Result<Pattern, String> {
        regex::Regex::new(&format!("^(?:{text})$"))
            .map(|anchored| Pattern { text: text.to_string(), anchored })
            .map_err(|e| format!("{text:?} is not a regular expression: {e}"))
    }

    pub fn is_match(&self, v: &str) -> bool {
        self.anchored.is_match(v)
    }
}

impl PartialEq for Pattern {
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text
    }
}

impl Eq for Pattern {}

/// One parsed `--where` expression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Predicate {
    /// The dimension (its item attribute).
    pub field: String,
    /// An integer dimension: values compare as numbers.
    pub numeric: bool,
    pub op: Op,
    /// The expression as written (for messages).
    pub expr: String,
}

fn filter_err(expr: &str, why: impl Into<String>) -> GatherError {
    GatherError::Filter { expr: expr.to_string(), why: why.into() }
}

/// Resolves a name against the layout's dimensions.
pub fn configured_dimension(name: &str, config: &Config) -> std::result::Result<String, String> {
    let dims = || config.dimensions.iter().map(|d| d.field.as_str()).collect::<Vec<_>>().join(", ");
    match (config.dimensions.iter().any(|d| d.field == name), config.field(name)) {
        (true, _) => Ok(name.to_string()),
        (false, Some(_)) => Err(format!(
            "{name} is not a configured dimension, so aggregates are summed over it; the dimensions are {}",
            dims()
        )),
        (false, None) => Err(format!("unknown field {name:?}; the dimensions are {}", dims())),
    }
}

impl Predicate {
    pub fn parse(expr: &str, config: &Config) -> Result<Predicate> {
        let (name, op) = split(expr)?;
        let field = configured_dimension(name, config).map_err(|why| filter_err(expr, why))?;
        let numeric = config.field(&field).is_some_and(|f| matches!(f.kind, FieldType::Integer { .. }));
        let p = Predicate { field, numeric, op, expr: expr.to_string() };
        if numeric {
            for v in p.values() {
                v.parse::<i64>().map_err(|_| filter_err(expr, format!("{v:?} is not an integer")))?;
            }
        }
        Ok(p)
    }

    fn values(&self) -> Vec<&String> {
        match &self.op {
            Op::Eq(x) | Op::Ne(x) | Op::Ge(x) | Op::Gt(x) | Op::Le(x) | Op::Lt(x) => vec![x],
            Op::In(xs) => xs.iter().collect(),
            Op::Matches(_) | Op::NotMatches(_) => Vec::new(),
        }
    }

    /// The exact test on a stored attribute.
    pub fn matches_attr(&self, v: &AttrValue) -> bool {
        match v {
            AttrValue::S(s) if !self.numeric => self.matches(s),
            AttrValue::N(n) if self.numeric => {
                let cmp = |x: &String| x.parse::<rust_decimal::Decimal>().ok().map(|x| n.cmp(&x));
                use std::cmp::Ordering::*;
                match &self.op {
                    Op::Eq(x) => cmp(x) == Some(Equal),
                    Op::Ne(x) => cmp(x) != Some(Equal),
                    Op::In(xs) => xs.iter().any(|x| cmp(x) == Some(Equal)),
                    Op::Ge(x) => matches!(cmp(x), Some(Greater | Equal)),
                    Op::Gt(x) => cmp(x) == Some(Greater),
                    Op::Le(x) => matches!(cmp(x), Some(Less | Equal)),
                    Op::Lt(x) => cmp(x) == Some(Less),
                    Op::Matches(p) => p.is_match(&n.normalize().to_string()),
                    Op::NotMatches(p) => !p.is_match(&n.normalize().to_string()),
                }
            }
            _ => false,
        }
    }

    /// The exact test on a stored text value.
    pub fn matches(&self, v: &str) -> bool {
        let v = v.as_bytes();
        match &self.op {
            Op::Eq(x) => v == x.as_bytes(),
            Op::Ne(x) => v != x.as_bytes(),
            Op::In(xs) => xs.iter().any(|x| v == x.as_bytes()),
            Op::Ge(x) => v >= x.as_bytes(),
            Op::Gt(x) => v > x.as_bytes(),
            Op::Le(x) => v <= x.as_bytes(),
            Op::Lt(x) => v < x.as_bytes(),
            Op::Matches(p) => std::str::from_utf8(v).is_ok_and(|v| p.is_match(v)),
            Op::NotMatches(p) => !std::str::from_utf8(v).is_ok_and(|v| p.is_match(v)),
        }
    }

    /// The Z-box constraint, if this filter can narrow a dimension of this
    /// encoding (exclusive bounds become inclusive: still a superset).
    pub fn constraint(&self, encoding: &Encoding) -> Option<Constraint<'_>> {
        fn value(x: &str, numeric: bool) -> Value<'_> {
            match x.parse::<i128>() {
                Ok(n) if numeric => Value::Int(n),
                _ => Value::Str(x),
            }
        }
        let n = self.numeric;
        let hash = matches!(encoding, Encoding::Hash);
        match &self.op {
            Op::Eq(x) => Some(Constraint::Eq(value(x, n))),
            Op::In(xs) if xs.len() == 1 => Some(Constraint::Eq(value(&xs[0], n))),
            Op::In(xs) if !hash => Some(Constraint::In(xs.iter().map(|x| value(x, n)).collect())),
            Op::Ge(x) | Op::Gt(x) if !hash => Some(Constraint::Range(Some(value(x, n)), None)),
            Op::Le(x) | Op::Lt(x) if !hash => Some(Constraint::Range(None, Some(value(x, n)))),
            _ => None,
        }
    }

    /// The store-side filter test (saves bandwidth, not capacity), if any.
    fn server_test(&self) -> Option<Test> {
        let s = |x: &String| match x.parse::<rust_decimal::Decimal>() {
            Ok(n) if self.numeric => AttrValue::N(n),
            _ => AttrValue::S(x.clone()),
        };
        match &self.op {
            Op::Eq(x) => Some(Test::Eq(s(x))),
            Op::In(xs) => Some(Test::In(xs.iter().map(s).collect())),
            Op::Ge(x) | Op::Gt(x) => Some(Test::Ge(s(x))),
            Op::Le(x) | Op::Lt(x) => Some(Test::Le(s(x))),
            Op::Ne(_) | Op::Matches(_) | Op::NotMatches(_) => None,
        }
    }
}

/// Splits `FIELD OP VALUE` (or `FIELD in LIST`).
fn split(expr: &str) -> Result<(&str, Op)> {
    let grammar = "expected FIELD=VALUE, FIELD!=VALUE, FIELD in V1,V2, or FIELD>=|>|<=|<VALUE";
    let lower = expr.to_ascii_lowercase();
    if let Some(i) = lower.find(" in ") {
        let name = expr[..i].trim();
        if !name.is_empty() && !name.contains(['=', '<', '>', '!']) {
            return Ok((name, Op::In(list(expr, &expr[i + 4..])?)));
        }
    }
    let i = expr.find(['=', '<', '>', '!']).ok_or_else(|| filter_err(expr, grammar))?;
    let name = expr[..i].trim();
    if name.is_empty() {
        return Err(filter_err(expr, format!("no field before the operator; {grammar}")));
    }
    let rest = &expr[i..];
    // Two-character operators first.
    type MakeOp = fn(String) -> Op;
    let ops: [(&str, MakeOp); 7] =
        [("==", Op::Eq), (">=", Op::Ge), ("<=", Op::Le), ("!=", Op::Ne), ("=", Op::Eq), (">", Op::Gt), ("<", Op::Lt)];
    for (sym, make) in ops {
        if let Some(v) = rest.strip_prefix(sym) {
            if v.starts_with(['=', '<', '>', '!']) {
                return Err(filter_err(expr, format!("unknown operator {:?}; {grammar}", &rest[..sym.len() + 1])));
            }
            return Ok((name, make(single(expr, v)?)));
        }
    }
    Err(filter_err(expr, format!("unknown operator; {grammar}")))
}

/// One value: quoted, or the rest of the expression, trimmed.
fn single(expr: &str, text: &str) -> Result<String> {
    let text = text.trim();
    match literal::quoted(text) {
        None => Ok(text.to_string()),
        Some(Err(why)) => Err(filter_err(expr, why)),
        Some(Ok((value, rest))) if rest.trim().is_empty() => Ok(value),
        Some(Ok((_, rest))) => Err(filter_err(expr, format!("{:?} after a quoted value", rest.trim()))),
    }
}

/// A comma-separated list, each value quoted or bare (up to the next comma,
/// trimmed; an empty one must be quoted).
fn list(expr: &str, mut text: &str) -> Result<Vec<String>> {
    let mut values = Vec::new();
    loop {
        text = text.trim_start();
        let (value, rest) = match literal::quoted(text) {
            Some(q) => q.map_err(|why| filter_err(expr, why))?,
            None => {
                let end = text.find(',').unwrap_or(text.len());
                let bare = text[..end].trim_end();
                if bare.is_empty() {
                    return Err(filter_err(expr, "IN needs a value before each comma and at the end: FIELD in V1,V2"));
                }
                (bare.to_string(), &text[end..])
            }
        };
        values.push(value);
        let rest = rest.trim_start();
        match rest.strip_prefix(',') {
            Some(after) => text = after,
            None if rest.is_empty() => return Ok(values),
            None => return Err(filter_err(expr, format!("expected a comma or the end at {rest:?}"))),
        }
    }
}

/// The filters of one request, checked against the configuration.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FilterSet {
    pub predicates: Vec<Predicate>,
}

impl FilterSet {
    pub fn parse<S: AsRef<str>>(exprs: &[S], config: &Config) -> Result<FilterSet> {
        let predicates = exprs.iter().map(|e| Predicate::parse(e.as_ref(), config)).collect::<Result<_>>()?;
        Ok(FilterSet { predicates })
    }

    pub fn is_empty(&self) -> bool {
        self.predicates.is_empty()
    }

    /// The exact test, on the item's stored dimension values. An item
    /// without the attribute, or with a non-string one, does not match.
    pub fn matches(&self, item: &Item) -> bool {
        self.predicates.iter().all(|p| item.attrs.get(&p.field).is_some_and(|v| p.matches_attr(v)))
    }

    /// The values a dimension can take under the predicates when they fix
    /// it to a finite set (`=` or `in`, intersected), sorted; None when
    /// none of them does.
    pub fn bound_values(&self, field: &str) -> Option<Vec<String>> {
        let mut bound: Option<std::collections::BTreeSet<String>> = None;
        for p in self.predicates.iter().filter(|p| p.field == field) {
            let these: std::collections::BTreeSet<String> = match &p.op {
                Op::Eq(v) => [v.clone()].into(),
                Op::In(vs) => vs.iter().cloned().collect(),
                _ => continue,
            };
            bound = Some(match bound {
                None => these,
                Some(b) => b.intersection(&these).cloned().collect(),
            });
        }
        bound.map(|b| b.into_iter().collect())
    }

    /// Fixes `field` to `values` (a check reading a partitioned projection
    /// value by value).
    pub fn with_values(mut self, field: &str, values: Vec<String>) -> FilterSet {
        let expr = format!("{field} in ({})", values.join(", "));
        self.predicates.push(Predicate { field: field.to_string(), numeric: false, op: Op::In(values), expr });
        self
    }

    /// Z-box constraints by schema dimension index.
    pub fn constraints<'a>(&'a self, schema: &Schema) -> Vec<(usize, Constraint<'a>)> {
        let mut out = Vec::new();
        for p in &self.predicates {
            let Some(d) = schema.index_of(&p.field) else { continue };
            if let Some(c) = p.constraint(&schema.dims()[d].encoding) {
                out.push((d, c));
            }
        }
        out
    }

    /// The store-side filter mirroring the predicates it can express.
    pub fn server_filter(&self) -> Filter {
        let mut f = Filter::none();
        for p in &self.predicates {
            if let Some(t) = p.server_test() {
                f = f.and(&p.field, t);
            }
        }
        f
    }

    /// One line per predicate for `--explain`: how it is applied.
    pub fn describe(&self, schema: &Schema) -> Vec<String> {
        self.predicates
            .iter()
            .map(|p| {
                let boxed =
                    schema.index_of(&p.field).is_some_and(|d| p.constraint(&schema.dims()[d].encoding).is_some());
                let how = if boxed { "narrows the Z-box, then exact on the value" } else { "exact, after reading" };
                format!("{}: {how}", p.expr)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(e: &str) -> Result<Predicate> {
        Predicate::parse(e, &Config::default())
    }

    #[test]
    fn grammar() {
        assert_eq!(p("country=DE").unwrap().op, Op::Eq("DE".into()));
        assert_eq!(p(" country == DE ").unwrap().op, Op::Eq("DE".into()));
        assert_eq!(p("country in DE, FR").unwrap().op, Op::In(vec!["DE".into(), "FR".into()]));
        assert_eq!(p("country IN DE").unwrap().op, Op::In(vec!["DE".into()]));
        assert_eq!(p("referrer>=m").unwrap().op, Op::Ge("m".into()));
        assert_eq!(p("referrer>m").unwrap().op, Op::Gt("m".into()));
        assert_eq!(p("referrer<=m").unwrap().op, Op::Le("m".into()));
        assert_eq!(p("referrer<m").unwrap().op, Op::Lt("m".into()));
        assert_eq!(p("campaign!=x").unwrap().op, Op::Ne("x".into()));
        assert_eq!(p("campaign=").unwrap().op, Op::Eq("".into()));
        assert_eq!(p("campaign=a=b").unwrap().op, Op::Eq("a=b".into()));
        assert_eq!(p("campaign = spring sale ").unwrap().op, Op::Eq("spring sale".into()), "bare: the rest, trimmed");
    }

    #[test]
    fn quoted_values_keep_what_a_bare_one_cannot() {
        assert_eq!(p(r#"campaign = " a, b ""#).unwrap().op, Op::Eq(" a, b ".into()));
        assert_eq!(p(r#"campaign = """#).unwrap().op, Op::Eq("".into()));
        assert_eq!(p(r#"campaign = "=x""#).unwrap().op, Op::Eq("=x".into()));
        assert_eq!(p(r#"campaign != "say \"hi\"""#).unwrap().op, Op::Ne(r#"say "hi""#.into()));
        let list = p(r#"country in DE, "GB" ,"a, b", "", New York"#).unwrap().op;
        assert_eq!(list, Op::In(vec!["DE".into(), "GB".into(), "a, b".into(), "".into(), "New York".into()]));
        let quoted_in = p(r#"campaign = "x in y""#).unwrap().op;
        assert_eq!(quoted_in, Op::Eq("x in y".into()), "` in ` inside a quoted value is text");
    }

    #[test]
    fn errors_name_the_bad_part() {
        let e = p("colour=red").unwrap_err().to_string();
        assert!(e.contains("colour=red") && e.contains("unknown field \"colour\""), "{e}");
        let e = p("url=/a").unwrap_err().to_string();
        assert!(e.contains("url is not a configured dimension"), "{e}");
        let e = p("country").unwrap_err().to_string();
        assert!(e.contains("expected FIELD=VALUE"), "{e}");
        let e = p("=DE").unwrap_err().to_string();
        assert!(e.contains("no field"), "{e}");
        let e = p("country=>DE").unwrap_err().to_string();
        assert!(e.contains("unknown operator \"=>\""), "{e}");
        for bad in ["country in ,", "country in DE,,FR", "country in DE,"] {
            let e = p(bad).unwrap_err().to_string();
            assert!(e.contains("a value before each comma"), "{bad}: {e}");
        }
        let e = p(r#"country in "DE" FR"#).unwrap_err().to_string();
        assert!(e.contains(r#"expected a comma or the end at "FR""#), "{e}");
        let e = p(r#"country = "DE" x"#).unwrap_err().to_string();
        assert!(e.contains(r#""x" after a quoted value"#), "{e}");
        let e = p(r#"country = "DE"#).unwrap_err().to_string();
        assert!(e.contains("does not end"), "{e}");
    }

    #[test]
    fn exact_matching() {
        let ge = p("referrer>=news.example.org").unwrap();
        assert!(ge.matches("news.example.org") && ge.matches("z") && !ge.matches("news.example"));
        let lt = p("referrer<b").unwrap();
        assert!(lt.matches("a") && !lt.matches("b") && !lt.matches("ba"));
        let item = Item::new("p", vec![1]).with("country", "DE");
        let set = FilterSet::parse(&["country in FR,DE", "country!=FR"], &Config::default()).unwrap();
        assert!(set.matches(&item));
        let set = FilterSet::parse(&["campaign=x"], &Config::default()).unwrap();
        assert!(!set.matches(&item), "a missing attribute never matches");
    }
}
