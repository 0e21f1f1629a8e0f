//! A record's bytes from its fields' written forms: a JSON object nested as
//! the fields' pointers say (digit tokens become arrays, holes `null`), or
//! a CSV line in the declared column order (RFC 4180 quoting, undeclared
//! columns filled).

use super::value_gen::Written;
use zigzag_model::schema::pointer::Pointer;
use zigzag_model::{Config, ConfigError};

#[derive(Debug, Clone)]
pub(crate) enum Node {
    Field(usize),
    Object(Vec<(String, Node)>),
    Array(Vec<Option<Node>>),
}

#[derive(Debug, Clone)]
pub(crate) enum Shape {
    Json(Node),
    /// Per column, the field written there (None: not declared).
    Csv(Vec<Option<usize>>),
}

impl Shape {
    pub(crate) fn new(config: &Config) -> Result<Shape, ConfigError> {
        if config.input.format == zigzag_model::schema::Format::Csv {
            let cols = &config.input.columns;
            return Ok(Shape::Csv(
                cols.iter().map(|c| config.fields.iter().position(|f| f.column_name() == c)).collect(),
            ));
        }
        let mut root = Node::Object(Vec::new());
        for (i, f) in config.fields.iter().enumerate() {
            insert(&mut root, &f.pointer()?.tokens, i);
        }
        Ok(Shape::Json(root))
    }

    pub(crate) fn is_csv(&self) -> bool {
        matches!(self, Shape::Csv(_))
    }

    /// Fields a JSON record holds at its top level (they can be repeated).
    pub(crate) fn top_level(&self) -> Vec<usize> {
        match self {
            Shape::Json(Node::Object(entries)) => entries
                .iter()
                .filter_map(|(_, n)| match n {
                    Node::Field(i) => Some(*i),
                    _ => None,
                })
                .collect(),
            _ => Vec::new(),
        }
    }

    /// Writes the record; `repeat` writes that top-level field twice.
    pub(crate) fn render(&self, parts: &[Written], repeat: Option<usize>, out: &mut Vec<u8>) {
        out.clear();
        match self {
            Shape::Json(root) => {
                json(root, parts, repeat, out);
            }
            Shape::Csv(columns) => {
                for (c, field) in columns.iter().enumerate() {
                    if c > 0 {
                        out.push(b',');
                    }
                    match field.map(|i| &parts[i]) {
                        None => out.push(b'-'),
                        Some(Written::Omit | Written::Null) => {}
                        Some(Written::Str(t) | Written::Bare(t)) => csv_cell(t, out),
                    }
                }
            }
        }
    }
}

fn insert(node: &mut Node, tokens: &[String], field: usize) {
    let Some((head, rest)) = tokens.split_first() else {
        *node = Node::Field(field);
        return;
    };
    let fresh = || match rest.first().and_then(|t| Pointer::index(t)) {
        Some(_) => Node::Array(Vec::new()),
        None => Node::Object(Vec::new()),
    };
    match node {
        Node::Object(entries) => {
            let at = match entries.iter().position(|(k, _)| k == head) {
                Some(at) => at,
                None => {
                    entries.push((head.clone(), fresh()));
                    entries.len() - 1
                }
            };
            insert(&mut entries[at].1, rest, field);
        }
        Node::Array(items) => match Pointer::index(head) {
            Some(i) => {
                if items.len() <= i {
                    items.resize(i + 1, None);
                }
                insert(items[i].get_or_insert_with(fresh), rest, field);
            }
            // A key beside indexes: digit tokens also name object keys, so
            // the array becomes an object keyed by its indexes.
            None => {
                let entries = std::mem::take(items)
                    .into_iter()
                    .enumerate()
                    .filter_map(|(i, n)| n.map(|n| (i.to_string(), n)))
                    .collect();
                *node = Node::Object(entries);
                insert(node, tokens, field);
            }
        },
        Node::Field(_) => {}
    }
}

/// Writes `node`; false (and nothing) when no field below it is present.
fn json(node: &Node, parts: &[Written], repeat: Option<usize>, out: &mut Vec<u8>) -> bool {
    match node {
        Node::Field(i) => match &parts[*i] {
            Written::Omit => false,
            Written::Null => {
                out.extend_from_slice(b"null");
                true
            }
            Written::Bare(t) => {
                out.extend_from_slice(t.as_bytes());
                true
            }
            Written::Str(t) => {
                // Writing into a Vec cannot fail.
                let _ = serde_json::to_writer(&mut *out, t);
                true
            }
        },
        Node::Object(entries) => {
            out.push(b'{');
            let mut first = true;
            for (key, child) in entries {
                let times = if matches!(child, Node::Field(i) if Some(*i) == repeat) { 2 } else { 1 };
                for _ in 0..times {
                    let mark = out.len();
                    if !first {
                        out.push(b',');
                    }
                    let _ = serde_json::to_writer(&mut *out, key);
                    out.push(b':');
                    if json(child, parts, repeat, out) {
                        first = false;
                    } else {
                        out.truncate(mark);
                    }
                }
            }
            out.push(b'}');
            true
        }
        Node::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                let mark = out.len();
                if !item.as_ref().is_some_and(|n| json(n, parts, repeat, out)) {
                    out.truncate(mark);
                    out.extend_from_slice(b"null");
                }
            }
            out.push(b']');
            true
        }
    }
}

fn csv_cell(text: &str, out: &mut Vec<u8>) {
    if text.contains([',', '"', '\n', '\r']) {
        out.push(b'"');
        out.extend_from_slice(text.replace('"', "\"\"").as_bytes());
        out.push(b'"');
    } else {
        out.extend_from_slice(text.as_bytes());
    }
}
