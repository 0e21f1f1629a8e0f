//! One configuration: every option of a binary's command line (`--failover
//! 10s`) is also an environment variable (`ZIGZAG_FAILOVER=10s`) and a key
//! of the binary's table in the configuration file (`[ingest]`,
//! `failover = "10s"`), the same name everywhere. The flag wins over the
//! variable, the variable over the file, the file over the default.
//!
//! Why clap and not figment or config-rs: the flags already say what each
//! setting is, its type, its default and its check; layering the variable
//! and the file onto the command line, as if they had been typed, keeps
//! one parser and one error for a bad value (naming the flag, and where
//! the value came from) instead of a second schema to keep in step.
//!
//! `--print-config` prints every setting's effective value and where it
//! came from, then exits. Options of subcommands (`gather totals --from`)
//! are the command's words, not settings: only the binary's own options
//! (and its global ones) are layered.

use clap::parser::ValueSource;
use clap::{Arg, ArgAction, ArgMatches, Parser};
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// The prefix of every setting's environment variable.
pub const ENV_PREFIX: &str = "ZIGZAG_";
const PRINT_CONFIG: &str = "print-config";
const COMPLETIONS: &str = "completions";
const MAN: &str = "man";

/// Where a setting's value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    Flag,
    Env(String),
    File(PathBuf),
    Default,
    Unset,
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Flag => f.write_str("flag"),
            Source::Env(var) => write!(f, "environment ({var})"),
            Source::File(path) => write!(f, "file ({})", path.display()),
            Source::Default => f.write_str("default"),
            Source::Unset => f.write_str("unset"),
        }
    }
}

/// One setting as `--print-config` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Setting {
    pub name: String,
    pub value: String,
    pub source: Source,
}

/// The environment variable of the flag `--long`.
pub fn env_var(long: &str) -> String {
    format!("{ENV_PREFIX}{}", long.replace('-', "_").to_ascii_uppercase())
}

/// A command line parsed with its settings layered.
pub struct Parsed<C> {
    pub cli: C,
    /// Every setting: its value and where it came from.
    pub settings: Vec<Setting>,
    /// `--print-config` was given: the binary prints the settings and the
    /// pipeline configuration's, then exits.
    pub print: bool,
}

/// Parses the command line of `binary` with its settings layered (see the
/// module docs); prints the error and exits on a bad value, as clap does.
pub fn parse<C: Parser>(binary: &str) -> Parsed<C> {
    let argv: Vec<OsString> = std::env::args_os().collect();
    if let Some(done) = documents::<C>(binary, &argv) {
        std::process::exit(done);
    }
    match parse_from::<C>(binary, argv, &|var| std::env::var(var).ok()) {
        Ok((cli, settings, print)) => Parsed { cli, settings, print },
        Err(e) => e.exit(),
    }
}

/// The command line `C` with the options every binary takes.
fn command<C: Parser>() -> clap::Command {
    C::command()
        .arg(
            Arg::new(PRINT_CONFIG)
                .long(PRINT_CONFIG)
                .action(ArgAction::SetTrue)
                .help("Print every setting's effective value and where it came from (flag, ZIGZAG_* variable, file, default), then exit"),
        )
        .arg(
            Arg::new(COMPLETIONS)
                .long(COMPLETIONS)
                .value_name("SHELL")
                .value_parser(clap::value_parser!(clap_complete::Shell))
                .exclusive(true)
                .help("Print a completion script for SHELL (bash, zsh, fish, elvish, powershell), then exit"),
        )
        .arg(Arg::new(MAN).long(MAN).action(ArgAction::SetTrue).exclusive(true).help("Print the man page (roff), then exit"))
}

/// `--completions SHELL` or `--man` as the whole command line: the
/// document on stdout, and the exit code (None: another command line).
fn documents<C: Parser>(binary: &str, argv: &[OsString]) -> Option<i32> {
    let args: Vec<&str> = argv.iter().skip(1).map(|a| a.to_str()).collect::<Option<_>>()?;
    let shell = match args.as_slice() {
        [flag] if *flag == format!("--{MAN}") => None,
        [flag, shell] if *flag == format!("--{COMPLETIONS}") => Some(*shell),
        [flag] if flag.starts_with(&format!("--{COMPLETIONS}=")) => flag.split_once('=').map(|(_, s)| s),
        [flag, ..] if *flag == format!("--{COMPLETIONS}") || *flag == format!("--{MAN}") => {
            eprintln!("error: {flag} is given alone: `{binary} --completions SHELL` or `{binary} --man`");
            return Some(2);
        }
        _ => return None,
    };
    let mut cmd = command::<C>().bin_name(binary.to_string());
    let mut out = std::io::stdout();
    let written = match shell {
        Some(name) => match <clap_complete::Shell as std::str::FromStr>::from_str(name) {
            Ok(shell) => {
                clap_complete::generate(shell, &mut cmd, binary, &mut out);
                Ok(())
            }
            Err(_) => {
                eprintln!("error: --completions {name:?}: give bash, zsh, fish, elvish or powershell");
                return Some(2);
            }
        },
        None => clap_mangen::Man::new(cmd).render(&mut out),
    };
    Some(match written {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("error: writing the document: {e}");
            1
        }
    })
}

/// [`parse`] on `argv` and the environment `env`: the parsed command line,
/// every setting, and whether `--print-config` was given.
pub fn parse_from<C: Parser>(
    binary: &str,
    argv: Vec<OsString>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<(C, Vec<Setting>, bool), clap::Error> {
    let cmd = command::<C>();
    let settings: Vec<Arg> = cmd
        .get_arguments()
        .filter(|a| a.get_long().is_some_and(|l| ![PRINT_CONFIG, COMPLETIONS, MAN].contains(&l)) && !a.is_positional())
        .filter(|a| !matches!(a.get_action(), ArgAction::Help | ArgAction::Version | ArgAction::Append))
        .filter(|a| a.get_num_args().is_none_or(|n| n.max_values() <= 1))
        .cloned()
        .collect();
    // What the command line gives, leniently (a required option may come
    // from the environment or the file).
    let typed = cmd.clone().ignore_errors(true).try_get_matches_from(&argv)?;
    let ids: Vec<String> = settings.iter().map(|a| a.get_id().to_string()).collect();
    let known = |id: &str| ids.iter().any(|i| i == id);
    let on_line = |id: &str| known(id) && typed.value_source(id) == Some(ValueSource::CommandLine);
    let file = match (on_line("config"), typed.try_get_raw("config").ok().flatten()) {
        (true, Some(mut raw)) => raw.next().map(PathBuf::from),
        _ if known("config") => env(&env_var("config")).map(PathBuf::from),
        _ => None,
    };
    // Under a subcommand (`ingest leases`), only global options may be
    // given before it.
    let settings: Vec<Arg> = match typed.subcommand_name() {
        Some(_) => settings.into_iter().filter(Arg::is_global_set).collect(),
        None => settings,
    };
    // The pipeline configuration's flags have their keys in the file
    // already (`[flush] interval_ms`): only the variable is layered here.
    let from_file: Vec<Arg> = settings.iter().filter(|a| !is_pipeline(a)).cloned().collect();
    let table = match &file {
        Some(path) => file_table(&cmd, binary, path, &from_file)?,
        None => BTreeMap::new(),
    };

    let mut injected: Vec<OsString> = Vec::new();
    let mut sources: BTreeMap<String, Source> = BTreeMap::new();
    for arg in &settings {
        let (id, long) = (arg.get_id().as_str(), arg.get_long().expect("filtered on"));
        if on_line(id) {
            sources.insert(id.into(), Source::Flag);
            continue;
        }
        let var = env_var(long);
        let (value, source) = match (env(&var), table.get(long)) {
            (Some(v), _) => (v, Source::Env(var)),
            (None, Some(v)) => (v.clone(), Source::File(file.clone().expect("a table comes from a file"))),
            (None, None) => continue,
        };
        if matches!(arg.get_action(), ArgAction::SetTrue | ArgAction::SetFalse) {
            match value.trim() {
                "true" | "1" => injected.push(format!("--{long}").into()),
                "false" | "0" | "" => {}
                other => {
                    return Err(cmd.clone().error(
                        clap::error::ErrorKind::InvalidValue,
                        format!("--{long} from {source}: {other:?} is not true or false"),
                    ))
                }
            }
        } else {
            injected.push(format!("--{long}={value}").into());
        }
        sources.insert(id.into(), source);
    }
    // At the end: after a subcommand's name too (global options are taken
    // there; before it they would conflict with it).
    let mut layered = argv.clone();
    layered.extend(injected);
    // `--print-config` shows what is set, complete or not: an option still
    // missing (`ingest --input`) is not an error then; a bad value still is.
    let printing = typed.try_get_one::<bool>(PRINT_CONFIG).ok().flatten().copied().unwrap_or(false);
    let strict = cmd.clone().try_get_matches_from(&layered);
    let strict = match strict {
        Err(e) if printing && e.kind() == clap::error::ErrorKind::MissingRequiredArgument => {
            cmd.clone().ignore_errors(true).try_get_matches_from(&layered)
        }
        other => other,
    };
    let matches = strict.map_err(|e| {
        // A bad value from the variable or the file: say which.
        let from: Vec<String> = sources
            .iter()
            .filter(|(_, s)| !matches!(s, Source::Flag))
            .map(|(id, s)| format!("--{} from {s}", long_of(&settings, id)))
            .collect();
        let said = e.to_string();
        let first = said.lines().next().unwrap_or_default().trim_start_matches("error: ");
        match from.is_empty() {
            true => e,
            false => cmd.clone().error(e.kind(), format!("{first} (layered: {})", from.join(", "))),
        }
    })?;
    let cli = C::from_arg_matches(&matches)?;
    let print = matches.get_flag(PRINT_CONFIG);
    Ok((cli, effective(&matches, &settings, &sources), print))
}

/// A flag of the pipeline configuration (`config::overrides::KEYS`).
fn is_pipeline(arg: &Arg) -> bool {
    arg.get_long().and_then(crate::config::overrides::key_of_flag).is_some()
}

fn long_of<'a>(settings: &'a [Arg], id: &'a str) -> &'a str {
    settings.iter().find(|a| a.get_id() == id).and_then(Arg::get_long).unwrap_or(id)
}

/// The binary's table of the file: every key a setting of it, every value
/// a scalar (given as the flag's text).
fn file_table(
    cmd: &clap::Command,
    binary: &str,
    path: &Path,
    settings: &[Arg],
) -> Result<BTreeMap<String, String>, clap::Error> {
    let bad = |m: String| cmd.clone().error(clap::error::ErrorKind::InvalidValue, m);
    let text = std::fs::read_to_string(path).map_err(|e| bad(format!("reading {}: {e}", path.display())))?;
    let doc: toml::Table = toml::from_str(&text).map_err(|e| bad(format!("{}: {e}", path.display())))?;
    let Some(table) = doc.get(binary) else { return Ok(BTreeMap::new()) };
    let table = table.as_table().ok_or_else(|| bad(format!("{}: [{binary}] must be a table", path.display())))?;
    let mut out = BTreeMap::new();
    for (key, value) in table {
        if let Some(k) = crate::config::overrides::key_of_flag(key) {
            return Err(bad(format!(
                "{} [{binary}] {key}: that is the pipeline configuration's {}: write it there",
                path.display(),
                k.dotted()
            )));
        }
        if !settings.iter().any(|a| a.get_long() == Some(key.as_str())) {
            let mut known: Vec<&str> = settings.iter().filter_map(Arg::get_long).collect();
            known.sort_unstable();
            return Err(bad(format!(
                "{} [{binary}] {key}: {binary} has no such setting (it has {})",
                path.display(),
                known.join(", ")
            )));
        }
        let text = match value {
            toml::Value::String(s) => s.clone(),
            toml::Value::Integer(_) | toml::Value::Float(_) | toml::Value::Boolean(_) => value.to_string(),
            _ => {
                return Err(bad(format!(
                    "{} [{binary}] {key}: give one value (a string, number or boolean)",
                    path.display()
                )))
            }
        };
        out.insert(key.clone(), text);
    }
    Ok(out)
}

/// Every setting's value after layering, with its source.
fn effective(matches: &ArgMatches, settings: &[Arg], sources: &BTreeMap<String, Source>) -> Vec<Setting> {
    settings
        .iter()
        .map(|a| {
            let id = a.get_id().as_str();
            let raw = matches.try_get_raw(id).ok().flatten();
            let value = raw.map(|v| v.map(|s| s.to_string_lossy()).collect::<Vec<_>>().join(" "));
            let source = match (sources.get(id), matches.value_source(id), &value) {
                (Some(s), _, _) => s.clone(),
                (None, Some(ValueSource::DefaultValue), _) => Source::Default,
                (None, _, None) => Source::Unset,
                (None, _, Some(_)) => Source::Default,
            };
            let value = match (a.get_action(), matches.try_get_one::<bool>(id)) {
                (ArgAction::SetTrue | ArgAction::SetFalse, Ok(Some(b))) => b.to_string(),
                _ => value.unwrap_or_default(),
            };
            Setting { name: a.get_long().unwrap_or(id).to_string(), value, source }
        })
        .collect()
}

/// The settings as `--print-config` prints them: name, value, source,
/// and the variable that would set it (the pipeline configuration's are
/// shown with it: `config::print_with`).
pub fn render(settings: &[Setting]) -> String {
    let settings: Vec<&Setting> =
        settings.iter().filter(|s| crate::config::overrides::key_of_flag(&s.name).is_none()).collect();
    let width = settings.iter().map(|s| s.name.len()).max().unwrap_or(0);
    let vwidth = settings.iter().map(|s| s.value.len()).max().unwrap_or(0).min(40);
    let mut out = String::new();
    for s in &settings {
        out.push_str(&format!(
            "{:<width$}  {:<vwidth$}  {}  [{}]\n",
            s.name,
            if s.value.is_empty() { "-" } else { &s.value },
            s.source,
            env_var(&s.name)
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[derive(Debug, Parser)]
    #[command(name = "t", args_conflicts_with_subcommands = true)]
    struct Cli {
        #[command(subcommand)]
        command: Option<Sub>,
        #[arg(long)]
        config: Option<PathBuf>,
        #[arg(long, default_value = "10s", value_parser = crate::duration::positive)]
        failover: Duration,
        #[arg(long, default_value = "30s", value_parser = crate::duration::positive)]
        relist: Duration,
        #[arg(long, default_value_t = 1000)]
        batch: usize,
        #[arg(long)]
        follow: bool,
        #[arg(long, global = true)]
        db: Option<String>,
        #[arg(long, required = true)]
        stream: Option<String>,
    }

    #[derive(Debug, clap::Subcommand)]
    enum Sub {
        Leases,
    }

    fn parse(args: &[&str], env: &[(&str, &str)]) -> Result<(Cli, Vec<Setting>, bool), clap::Error> {
        let env: BTreeMap<String, String> = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let argv = std::iter::once("t").chain(args.iter().copied()).map(OsString::from).collect();
        parse_from::<Cli>("t", argv, &|var| env.get(var).cloned())
    }

    fn source(settings: &[Setting], name: &str) -> Source {
        settings.iter().find(|s| s.name == name).expect("a setting").source.clone()
    }

    #[test]
    fn a_flag_wins_over_its_variable_which_wins_over_the_file_which_wins_over_the_default() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("z.toml");
        std::fs::write(
            &file,
            "rollups = [\"hour\"]\n[t]\nfailover = \"4s\"\nrelist = \"6s\"\nbatch = 7\nstream = \"s\"\n",
        )
        .unwrap();
        let f = file.to_str().unwrap();
        let (cli, settings, print) =
            parse(&["--config", f, "--failover", "2s"], &[("ZIGZAG_FAILOVER", "3s"), ("ZIGZAG_RELIST", "5s")]).unwrap();
        assert_eq!((cli.failover, cli.relist, cli.batch), (Duration::from_secs(2), Duration::from_secs(5), 7));
        assert_eq!(source(&settings, "failover"), Source::Flag);
        assert_eq!(source(&settings, "relist"), Source::Env("ZIGZAG_RELIST".into()));
        assert_eq!(source(&settings, "batch"), Source::File(file.clone()));
        assert_eq!(source(&settings, "follow"), Source::Default);
        assert_eq!(source(&settings, "db"), Source::Unset);
        assert!(!print);
        // The file named by the variable, and a switch from the variable.
        let (cli, _, _) = parse(&[], &[("ZIGZAG_CONFIG", f), ("ZIGZAG_FOLLOW", "true")]).unwrap();
        assert_eq!((cli.failover, cli.follow, cli.stream.as_deref()), (Duration::from_secs(4), true, Some("s")));
    }

    #[test]
    fn a_bad_value_names_the_flag_and_where_it_came_from() {
        let e = parse(&["--stream", "s"], &[("ZIGZAG_FAILOVER", "0s")]).unwrap_err().to_string();
        assert!(e.contains("--failover") && e.contains("ZIGZAG_FAILOVER"), "{e}");
        let e = parse(&["--stream", "s"], &[("ZIGZAG_FOLLOW", "yes")]).unwrap_err().to_string();
        assert!(e.contains("--follow") && e.contains("not true or false"), "{e}");
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("z.toml");
        std::fs::write(&file, "[t]\nfailovr = \"4s\"\n").unwrap();
        let e = parse(&["--config", file.to_str().unwrap()], &[]).unwrap_err().to_string();
        assert!(e.contains("[t] failovr: t has no such setting") && e.contains("failover"), "{e}");
        // A required option missing everywhere is clap's own error.
        assert!(parse(&[], &[]).unwrap_err().to_string().contains("--stream"));
    }

    #[test]
    fn under_a_subcommand_only_global_settings_are_layered() {
        let env = [("ZIGZAG_FAILOVER", "3s"), ("ZIGZAG_DB", "x.db")];
        let (cli, settings, _) = parse(&["leases"], &env).unwrap();
        assert!(matches!(cli.command, Some(Sub::Leases)));
        assert_eq!(cli.db.as_deref(), Some("x.db"), "global: layered");
        assert!(settings.iter().all(|s| s.name != "failover"), "not an option of `leases`: {settings:?}");
    }

    #[test]
    fn print_config_lists_each_setting_with_its_value_source_and_variable() {
        let (_, settings, print) = parse(&["--stream", "s", "--print-config"], &[("ZIGZAG_BATCH", "9")]).unwrap();
        assert!(print);
        let text = render(&settings);
        let line = text.lines().find(|l| l.starts_with("batch")).unwrap();
        assert!(line.contains(" 9 ") && line.contains("environment (ZIGZAG_BATCH)"), "{line}");
        let line = text.lines().find(|l| l.starts_with("failover")).unwrap();
        assert!(line.contains("10s") && line.contains("default") && line.contains("[ZIGZAG_FAILOVER]"), "{line}");
    }
}
