//! Every binary prints its shell completions, its man page and a version
//! naming the commit it was built from, and refuses a shell it does not
//! know in one line.

use std::process::Command;

fn run(bin: &str, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(bin).args(args).output().expect("the binary runs");
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into(), String::from_utf8_lossy(&out.stderr).into())
}

#[test]
fn each_binary_prints_completions_a_man_page_and_its_commit() {
    let bins = [
        ("gather", env!("CARGO_BIN_EXE_gather")),
        ("ingest", env!("CARGO_BIN_EXE_ingest")),
        ("loadgen", env!("CARGO_BIN_EXE_loadgen")),
    ];
    for (name, bin) in bins {
        let (ok, out, err) = run(bin, &["--completions", "bash"]);
        assert!(ok && out.contains(&format!("_{name}()")), "{name} --completions bash: {err}");
        let (ok, out, _) = run(bin, &["--completions", "zsh"]);
        assert!(ok && out.starts_with(&format!("#compdef {name}")), "{name} --completions zsh");
        let (ok, out, err) = run(bin, &["--man"]);
        assert!(ok && out.contains(&format!(".TH {name} 1")) && out.contains(".SH OPTIONS"), "{name} --man: {err}");
        let (ok, out, _) = run(bin, &["--version"]);
        assert!(ok && out.starts_with(&format!("{name} {} (commit ", env!("CARGO_PKG_VERSION"))), "{out}");
        let (ok, _, err) = run(bin, &["--completions", "nosh"]);
        assert!(!ok && err.lines().count() == 1 && err.contains("bash, zsh"), "{name}: {err}");
    }
    let (_, out, _) = run(env!("CARGO_BIN_EXE_gather"), &["--man"]);
    for sub in ["timeseries", "top", "serve", "compact"] {
        assert!(out.contains(sub), "the man page lists {sub}");
    }
}
