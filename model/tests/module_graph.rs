//! The modules of `model`, `gather` and `serve`, submodules included, form
//! no circle. In `model`, `config` assembles the others and nothing imports
//! it back; shared types (errors, dimension types) have homes of their own.
//! In `gather`, the layers run window/filter/compact → plan → cost → route
//! → execute → statistics → choice → run/explain/check. A circle makes
//! every module in it a change to all of them, so this reads the sources'
//! `crate::` and `super::` paths (code, not comments or tests) and refuses
//! one. A module and its own submodules are one family (a parent declares
//! its children, a child may use its parent's items): only edges between
//! modules neither of which contains the other count.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

type Graph = BTreeMap<String, BTreeSet<String>>;

/// Module path (`schema::value`) → the modules its code names, in the
/// crate `name` of the workspace (`model`, `gather`, `serve`).
fn graph_of(name: &str) -> Graph {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(name).join("src");
    let mut files: BTreeMap<String, std::path::PathBuf> = BTreeMap::new();
    let mut dirs = vec![src.clone()];
    while let Some(path) = dirs.pop() {
        if path.is_dir() {
            dirs.extend(std::fs::read_dir(&path).expect("readable source dir").map(|e| e.expect("entry").path()));
        } else if path.extension().is_some_and(|e| e == "rs") {
            let rel = path.strip_prefix(&src).expect("under src").with_extension("");
            let mut parts: Vec<String> =
                rel.components().map(|c| c.as_os_str().to_string_lossy().into_owned()).collect();
            if parts.last().is_some_and(|l| l == "mod" || l == "lib" || l == "main") {
                parts.pop();
            }
            files.insert(parts.join("::"), path);
        }
    }
    let mut graph = Graph::new();
    for (module, path) in &files {
        if module.is_empty() || path.file_name().is_some_and(|f| f == "tests.rs") {
            continue;
        }
        let here: Vec<String> = module.split("::").map(String::from).collect();
        let text = std::fs::read_to_string(path).expect("readable source");
        let deps = graph.entry(module.clone()).or_default();
        for target in module_paths(&code_of(&text), &here) {
            // The longest prefix of the path that is a module.
            let found = (1..=target.len()).rev().map(|k| target[..k].join("::")).find(|m| files.contains_key(m));
            if let Some(m) = found {
                let family =
                    m == *module || module.starts_with(&format!("{m}::")) || m.starts_with(&format!("{module}::"));
                if !family {
                    deps.insert(m);
                }
            }
        }
    }
    graph
}

/// The text without comments and without its `#[cfg(test)]` tail (tests
/// may use anything).
fn code_of(text: &str) -> String {
    let body = match text.find("#[cfg(test)]") {
        Some(i) => &text[..i],
        None => text,
    };
    body.lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The paths named by `crate::a::b`, `super::c` and groups
/// (`crate::{a, b::{c, d}}`), from module `here`, as full paths from the
/// crate root.
fn module_paths(code: &str, here: &[String]) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let bytes = code.as_bytes();
    let mut starts: Vec<(usize, &str)> =
        ["crate::", "super::"].iter().flat_map(|s| code.match_indices(*s).map(|(i, _)| (i, *s))).collect();
    starts.sort();
    // The end of the last path read: a `super::` inside its group is part
    // of it, not a path of its own.
    let mut read_to = 0;
    for (i, start) in starts {
        // Not the tail of a longer word (`my_crate::`).
        let tail = i > 0 && (bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_' || bytes[i - 1] == b':');
        if tail || i < read_to {
            continue;
        }
        let rest = &code[i + start.len()..];
        let base = match start {
            "crate::" => Vec::new(),
            _ => here[..here.len().saturating_sub(1)].to_vec(),
        };
        expand(base, rest, &mut out);
        read_to = i + start.len() + extent(rest);
    }
    out
}

/// The length of the path text at the start of `rest`, groups included.
fn extent(rest: &str) -> usize {
    let mut depth = 0;
    for (j, c) in rest.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => return j,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return j + 1;
                }
            }
            _ if depth > 0 => {}
            c if c.is_ascii_alphanumeric() || c == '_' || c == ':' => {}
            _ => return j,
        }
    }
    rest.len()
}

/// Appends the paths `rest` (after a `::`) names below `base`.
fn expand(mut base: Vec<String>, rest: &str, out: &mut Vec<Vec<String>>) {
    let ident = |s: &str| s.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect::<String>();
    let mut rest = rest.trim_start();
    loop {
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 0;
            let mut from = 0;
            for (j, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => {
                        expand(base.clone(), &group[from..j], out);
                        return;
                    }
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        expand(base.clone(), &group[from..j], out);
                        from = j + 1;
                    }
                    _ => {}
                }
            }
            return;
        }
        let word = ident(rest);
        match word.as_str() {
            "" => break,
            "super" => {
                base.pop();
            }
            "self" => {}
            w => base.push(w.to_string()),
        }
        rest = &rest[word.len()..];
        match rest.strip_prefix("::") {
            Some(r) => rest = r.trim_start(),
            None => break,
        }
    }
    if !base.is_empty() {
        out.push(base);
    }
}

/// A circle in `graph`, if there is one (depth-first search).
fn circle(graph: &Graph) -> Option<Vec<String>> {
    fn visit(node: &str, graph: &Graph, done: &mut BTreeSet<String>, path: &mut Vec<String>) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|p| p == node) {
            let mut c = path[at..].to_vec();
            c.push(node.to_string());
            return Some(c);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(c) = visit(next, graph, done, path) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = BTreeSet::new();
    graph.keys().find_map(|n| visit(n, graph, &mut done, &mut Vec::new()))
}

fn assert_no_circle(name: &str, at_least: usize) {
    let graph = graph_of(name);
    assert!(graph.len() >= at_least, "the {name} crate's modules were read: {:?}", graph.keys());
    if let Some(c) = circle(&graph) {
        panic!("{name} modules import each other in a circle: {}", c.join(" -> "));
    }
}

#[test]
fn model_modules_form_no_circle() {
    assert_no_circle("model", 20);
}

#[test]
fn gather_modules_form_no_circle() {
    assert_no_circle("gather", 20);
}

#[test]
fn serve_modules_form_no_circle() {
    assert_no_circle("serve", 10);
}

#[test]
fn nothing_imports_config() {
    let graph = graph_of("model");
    let in_config = |m: &str| m == "config" || m.starts_with("config::");
    let importers: Vec<&String> =
        graph.iter().filter(|(m, deps)| !in_config(m) && deps.iter().any(|d| in_config(d))).map(|(m, _)| m).collect();
    assert!(importers.is_empty(), "config assembles the others; these import it back: {importers:?}");
}

#[test]
fn the_reader_sees_paths_groups_and_super() {
    let here = ["schema".to_string(), "value".to_string()];
    let code = "use crate::a::B;\nuse crate::{c::D, e, f::{g, h}};\nlet x = crate::i::j();\nuse super::timestamp::t;\n\
                use super::{pointer::P, super::k::L};\nlet y = my_crate::z;";
    let paths: Vec<String> = module_paths(code, &here).iter().map(|p| p.join("::")).collect();
    assert_eq!(
        paths,
        ["a::B", "c::D", "e", "f::g", "f::h", "i::j", "schema::timestamp::t", "schema::pointer::P", "k::L"]
    );
    let mut g = Graph::new();
    g.insert("a".to_string(), BTreeSet::from(["b".to_string()]));
    g.insert("b".to_string(), BTreeSet::from(["a".to_string()]));
    assert_eq!(circle(&g), Some(vec!["a".to_string(), "b".to_string(), "a".to_string()]));
    g.insert("b".to_string(), BTreeSet::new());
    assert_eq!(circle(&g), None);
    assert_eq!(code_of("a // crate::x\nb\n#[cfg(test)]\nuse crate::y;"), "a \nb");
}

/// The circle this check missed while it read top-level modules only: two
/// siblings under one parent.
#[test]
fn siblings_naming_each_other_are_a_circle() {
    let value = ["schema".to_string(), "value".to_string()];
    let timestamp = ["schema".to_string(), "timestamp".to_string()];
    let mut g = Graph::new();
    for (me, code) in [(&value, "use super::timestamp::timestamp;"), (&timestamp, "use super::value::ValueError;")] {
        let deps = g.entry(me.join("::")).or_default();
        for p in module_paths(code, me) {
            deps.insert(p[..2].join("::"));
        }
    }
    assert!(circle(&g).is_some(), "{g:?}");
}
