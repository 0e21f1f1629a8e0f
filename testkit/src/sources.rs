//! The workspace's own Rust sources, for tests that read the code (which
//! AWS operations it calls, which metrics it emits).

use std::path::{Path, PathBuf};

/// The workspace root.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Every `.rs` file under a `src/` directory of the workspace: what the
/// libraries and binaries are built from, not tests, benches, examples or
/// the test kit.
pub fn product_sources() -> Vec<PathBuf> {
    let mut files = Vec::new();
    collect(&workspace_root(), &mut files);
    files.sort();
    files
}

/// A source file's text without its unit tests (everything from the first
/// `#[cfg(test)]` on, where our files keep them).
pub fn without_unit_tests(text: &str) -> &str {
    text.split("#[cfg(test)]").next().unwrap_or_default()
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    const SKIP: &[&str] = &["target", "tests", "benches", "examples", "node_modules", "testkit", "demo"];
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().to_string();
        if path.is_dir() {
            if !name.starts_with('.') && !SKIP.contains(&name.as_str()) {
                collect(&path, out);
            }
        } else if name.ends_with(".rs") && path.components().any(|c| c.as_os_str() == "src") {
            out.push(path);
        }
    }
}
