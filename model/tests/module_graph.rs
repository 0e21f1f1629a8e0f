//! The modules of `model`, `gather` and `serve` form no circle. In `model`,
//! `config` assembles the others and nothing imports it back; shared types
//! (errors, dimension types) have homes of their own. In `gather`, the
//! layers run window/filter/compact → plan → cost → route → execute →
//! statistics → choice → run/explain/check. A circle makes every module
//! in it a change to all of them, so this reads the sources' `crate::`
//! paths (code, not comments or tests) and refuses one.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Top-level module → the top-level modules its code names, in the crate
/// `name` of the workspace (`model`, `gather`, `serve`).
fn graph_of(name: &str) -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(name).join("src");
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut files = vec![src.clone()];
    while let Some(path) = files.pop() {
        if path.is_dir() {
            files.extend(std::fs::read_dir(&path).expect("readable source dir").map(|e| e.expect("entry").path()));
            continue;
        }
        let rel = path.strip_prefix(&src).expect("under src");
        let first = rel.components().next().expect("a component").as_os_str().to_string_lossy().into_owned();
        let module = first.trim_end_matches(".rs").to_string();
        if module == "lib" || rel.file_name().is_some_and(|f| f == "tests.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("readable source");
        let deps = graph.entry(module.clone()).or_default();
        for target in crate_paths(&code_of(&text)) {
            if target != module {
                deps.insert(target);
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

/// The top-level modules named by `crate::x` and `crate::{x, y::z}`.
fn crate_paths(code: &str) -> Vec<String> {
    let ident = |s: &str| s.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect::<String>();
    let mut out = Vec::new();
    for (i, _) in code.match_indices("crate::") {
        let rest = &code[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            // Top-level names of the group: after `{` or a `,` at depth 0.
            let mut depth = 0;
            let mut start = true;
            for (j, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => start = true,
                    c if c.is_whitespace() => {}
                    _ if start && depth == 0 => {
                        out.push(ident(&group[j..]));
                        start = false;
                    }
                    _ => {}
                }
            }
        } else {
            out.push(ident(rest));
        }
    }
    out.retain(|m| !m.is_empty() && m != "self");
    out
}

/// A circle in `graph`, if there is one (depth-first search).
fn circle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        done: &mut BTreeSet<String>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
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

fn graph() -> BTreeMap<String, BTreeSet<String>> {
    graph_of("model")
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
    assert_no_circle("model", 10);
}

#[test]
fn gather_modules_form_no_circle() {
    assert_no_circle("gather", 15);
}

#[test]
fn serve_modules_form_no_circle() {
    assert_no_circle("serve", 10);
}

#[test]
fn nothing_imports_config() {
    let graph = graph();
    let importers: Vec<&String> = graph.iter().filter(|(_, deps)| deps.contains("config")).map(|(m, _)| m).collect();
    assert!(importers.is_empty(), "config assembles the others; these import it back: {importers:?}");
}

#[test]
fn the_reader_sees_paths_and_groups() {
    let code = "use crate::a::B;\nuse crate::{c::D, e, f::{g, h}};\nlet x = crate::i::j();";
    assert_eq!(crate_paths(code), ["a", "c", "e", "f", "i"]);
    let mut g = BTreeMap::new();
    g.insert("a".to_string(), BTreeSet::from(["b".to_string()]));
    g.insert("b".to_string(), BTreeSet::from(["a".to_string()]));
    assert_eq!(circle(&g), Some(vec!["a".to_string(), "b".to_string(), "a".to_string()]));
    g.insert("b".to_string(), BTreeSet::new());
    assert_eq!(circle(&g), None);
    assert_eq!(code_of("a // crate::x\nb\n#[cfg(test)]\nuse crate::y;"), "a \nb");
}
