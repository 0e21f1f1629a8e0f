//! The pipeline configuration's settings as flags and `ZIGZAG_*`
//! variables: `[flush] interval_ms` is also `--flush-interval-ms` and
//! `ZIGZAG_FLUSH_INTERVAL_MS`, the name being the key's path with `-` for
//! `.` and `_`. A flag wins over its variable (layered by
//! [`crate::settings`]), the variable over the `--config` file's key, the
//! file over the default.
//!
//! Only settings are here: the scalar keys, and the three maps (cadences,
//! retention, the scatter rule's cardinalities) as `KEY=VALUE,...`, merged
//! key by key into the file's. The
//! declarations (`[[field]]`, `[[dimension]]`, `[[measure]]`, `[[ratio]]`,
//! `[[projection]]`) describe the data and stay in the file (which
//! `ZIGZAG_CONFIG` may name).

use crate::settings::{Setting, Source};
use clap::{Arg, ArgMatches};

/// The heading of these flags in `--help` ([`crate::settings`] knows them
/// by [`key_of_flag`]: their file key is the configuration's, not
/// `[ingest] ...`).
const HEADING: &str = "Pipeline configuration (each also a key of the --config file)";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A non-negative integer.
    Count,
    /// A non-negative integer or `auto`.
    CountOrAuto,
    /// A string, checked by the configuration.
    Text,
    /// `a,b,c` (empty: none).
    List,
    /// `KEY=VALUE,...`, merged into the file's table; the values of this kind.
    Map(&'static Kind),
}

/// One setting of the configuration file that a flag and a variable can set.
#[derive(Debug)]
pub struct Key {
    /// The flag's long name (the variable is `ZIGZAG_` + it, upper case).
    pub flag: &'static str,
    /// The key's path in the file.
    pub path: &'static [&'static str],
    kind: Kind,
    help: &'static str,
}

impl Key {
    /// `flush.interval_ms`, as `--print-config` and messages name it.
    pub fn dotted(&self) -> String {
        self.path.join(".")
    }
}

/// Every one of them. The flag's name is the path's (`a.b_c` → `a-b-c`):
/// a test holds them to it.
pub const KEYS: &[Key] = &[
    Key {
        flag: "rollups",
        path: &["rollups"],
        kind: Kind::List,
        help: "rollups of the base projection (every dimension), e.g. minute,hour,day; \"\" writes no base",
    },
    Key {
        flag: "scatter-prefixes",
        path: &["scatter", "prefixes"],
        kind: Kind::CountOrAuto,
        help: "scatter prefixes of projections that do not declare their own; auto: the scatter rule's, from writers and cardinality",
    },
    Key {
        flag: "scatter-writers",
        path: &["scatter", "writers"],
        kind: Kind::Count,
        help: "the most ingest workers writing at once (the scatter rule's input for prefixes = auto)",
    },
    Key {
        flag: "scatter-events-per-sec",
        path: &["scatter", "events_per_sec"],
        kind: Kind::Count,
        help: "the stream's peak events per second (caps the scatter rule's writes per second)",
    },
    Key {
        flag: "scatter-cardinality",
        path: &["scatter", "cardinality"],
        kind: Kind::Map(&Kind::Count),
        help: "distinct values expected per dimension, DIMENSION=N,... (the scatter rule's input); merged into the file's",
    },
    Key {
        flag: "scatter-mode",
        path: &["scatter", "mode"],
        kind: Kind::Text,
        help: "how a write picks its prefix: hash or random",
    },
    Key {
        flag: "retention",
        path: &["retention"],
        kind: Kind::Map(&Kind::Text),
        help: "how long each rollup's items are kept, e.g. minute=14d,hour=400d (or forever); merged into the file's [retention]",
    },
    Key {
        flag: "flush-interval-ms",
        path: &["flush", "interval_ms"],
        kind: Kind::Count,
        help: "milliseconds between flushes: the fastest cadence",
    },
    Key {
        flag: "flush-every-ms",
        path: &["flush", "every_ms"],
        kind: Kind::Map(&Kind::Count),
        help: "slower cadences, PROJECTION[.ROLLUP]=MS,...; merged into the file's [flush] every_ms",
    },
    Key {
        flag: "flush-max-keys",
        path: &["flush", "max_keys"],
        kind: Kind::Count,
        help: "live keys in memory before an early flush",
    },
    Key {
        flag: "flush-max-memory-mb",
        path: &["flush", "max_memory_mb"],
        kind: Kind::Count,
        help: "estimated memory (MiB) of the live keys before an early flush",
    },
    Key {
        flag: "flush-concurrency",
        path: &["flush", "concurrency"],
        kind: Kind::Count,
        help: "item updates in flight at once during a flush",
    },
];

/// The key a flag sets, if it is one of these.
pub fn key_of_flag(flag: &str) -> Option<&'static Key> {
    KEYS.iter().find(|k| k.flag == flag)
}

/// The flags, as a binary that runs the pipeline takes them
/// (`#[command(flatten)]`).
#[derive(Debug, Clone, Default)]
pub struct PipelineArgs {
    given: Vec<(&'static Key, String)>,
}

impl clap::FromArgMatches for PipelineArgs {
    fn from_arg_matches(matches: &ArgMatches) -> Result<Self, clap::Error> {
        let given = KEYS.iter().filter_map(|k| matches.get_one::<String>(k.flag).map(|v| (k, v.clone()))).collect();
        Ok(PipelineArgs { given })
    }

    fn update_from_arg_matches(&mut self, matches: &ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(matches)?;
        Ok(())
    }
}

impl clap::Args for PipelineArgs {
    fn augment_args(cmd: clap::Command) -> clap::Command {
        cmd.args(KEYS.iter().map(|k| {
            let kind = k.kind;
            Arg::new(k.flag)
                .long(k.flag)
                .help_heading(HEADING)
                .value_name(match kind {
                    Kind::Count => "N",
                    Kind::CountOrAuto => "N|auto",
                    Kind::Text => "NAME",
                    Kind::List => "LIST",
                    Kind::Map(_) => "KEY=VALUE,...",
                })
                .help(format!("[{}] {}", k.dotted(), k.help))
                .value_parser(move |s: &str| check(kind, s).map(|()| s.to_string()))
        }))
    }

    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        Self::augment_args(cmd)
    }
}

/// A value's form (what the configuration checks beyond it, it checks).
fn check(kind: Kind, text: &str) -> Result<(), String> {
    match kind {
        Kind::Count | Kind::CountOrAuto => to_value(kind, text).map(drop),
        Kind::Text | Kind::List => Ok(()),
        Kind::Map(_) => entries(text).and_then(|e| e.iter().try_for_each(|(_, v)| check(kind_of_entry(kind), v))),
    }
}

fn kind_of_entry(kind: Kind) -> Kind {
    match kind {
        Kind::Map(k) => *k,
        k => k,
    }
}

fn entries(text: &str) -> Result<Vec<(&str, &str)>, String> {
    text.split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .map(|e| match e.split_once('=') {
            Some((k, v)) if !k.trim().is_empty() => Ok((k.trim(), v.trim())),
            _ => Err(format!("{e:?}: expected KEY=VALUE")),
        })
        .collect()
}

fn to_value(kind: Kind, text: &str) -> Result<toml::Value, String> {
    Ok(match kind {
        Kind::Count => {
            let n: u64 = text.trim().parse().map_err(|_| format!("{text:?} is not a non-negative integer"))?;
            toml::Value::Integer(i64::try_from(n).map_err(|_| format!("{text} is too large"))?)
        }
        Kind::CountOrAuto if text.trim() == "auto" => toml::Value::String("auto".into()),
        Kind::CountOrAuto => to_value(Kind::Count, text).map_err(|e| format!("{e} nor auto"))?,
        Kind::Text => toml::Value::String(text.trim().to_string()),
        Kind::List => toml::Value::Array(
            text.split(',').map(str::trim).filter(|s| !s.is_empty()).map(|s| toml::Value::String(s.into())).collect(),
        ),
        Kind::Map(_) => unreachable!("maps are merged entry by entry"),
    })
}

/// One value given by a flag or a variable, to lay over the file.
#[derive(Debug, Clone)]
pub struct Override {
    pub key: &'static Key,
    pub text: String,
    pub source: Source,
}

impl Override {
    /// Whether it sets part of the layout (anything but `[flush]`).
    pub fn is_layout(&self) -> bool {
        self.key.path.first() != Some(&"flush")
    }

    /// `--flush-interval-ms from environment (ZIGZAG_FLUSH_INTERVAL_MS)`.
    pub fn origin(&self) -> String {
        format!("--{} from {}", self.key.flag, self.source)
    }

    /// Sets the key in `doc` (a map: each entry), making the tables on the
    /// way.
    pub fn apply(&self, doc: &mut toml::Table) -> Result<(), String> {
        let (last, tables) = self.key.path.split_last().expect("a path has a key");
        let mut at = doc;
        for name in tables.iter().copied().chain(matches!(self.key.kind, Kind::Map(_)).then_some(*last)) {
            at = at
                .entry(name)
                .or_insert_with(|| toml::Value::Table(Default::default()))
                .as_table_mut()
                .ok_or_else(|| format!("{}: the file's {name} is not a table", self.origin()))?;
        }
        match self.key.kind {
            Kind::Map(kind) => {
                for (k, v) in entries(&self.text)? {
                    at.insert(k.to_string(), to_value(*kind, v)?);
                }
            }
            kind => {
                at.insert(last.to_string(), to_value(kind, &self.text)?);
            }
        }
        Ok(())
    }
}

impl PipelineArgs {
    /// The values given, each with where it came from (`settings`: what
    /// [`crate::settings::parse`] found).
    pub fn overrides(&self, settings: &[Setting]) -> Vec<Override> {
        self.given
            .iter()
            .map(|(key, text)| Override {
                key,
                text: text.clone(),
                source: settings.iter().find(|s| s.name == key.flag).map_or(Source::Flag, |s| s.source.clone()),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_flag_is_its_keys_path_with_dashes() {
        for k in KEYS {
            assert_eq!(k.flag, k.dotted().replace(['.', '_'], "-"), "{k:?}");
        }
    }

    fn apply(doc: &str, flag: &str, text: &str) -> Result<toml::Table, String> {
        let mut doc: toml::Table = toml::from_str(doc).unwrap();
        let key = key_of_flag(flag).unwrap();
        check(key.kind, text)?;
        Override { key, text: text.into(), source: Source::Flag }.apply(&mut doc)?;
        Ok(doc)
    }

    #[test]
    fn a_scalar_replaces_the_files_and_a_map_merges_into_it() {
        let doc = apply("[flush]\ninterval_ms = 2000\nmax_keys = 5\n", "flush-interval-ms", "9000").unwrap();
        assert_eq!(doc["flush"]["interval_ms"].as_integer(), Some(9000));
        assert_eq!(doc["flush"]["max_keys"].as_integer(), Some(5), "the rest of the table is kept");
        let doc = apply("[flush.every_ms]\n\"cc.hour\" = 300000\n\"x\" = 1\n", "flush-every-ms", "cc.hour=60000, y=7")
            .unwrap();
        let every = doc["flush"]["every_ms"].as_table().unwrap();
        assert_eq!(every["cc.hour"].as_integer(), Some(60000));
        assert_eq!((every["x"].as_integer(), every["y"].as_integer()), (Some(1), Some(7)));
        let doc = apply("", "retention", "minute=14d,hour=forever").unwrap();
        assert_eq!(doc["retention"]["minute"].as_str(), Some("14d"));
        assert_eq!(doc["retention"]["hour"].as_str(), Some("forever"));
        let doc = apply("rollups = [\"minute\"]\n", "rollups", "hour, day").unwrap();
        assert_eq!(doc["rollups"].as_array().unwrap().len(), 2);
        assert_eq!(apply("rollups = [\"minute\"]\n", "rollups", "").unwrap()["rollups"].as_array().unwrap().len(), 0);
    }

    #[test]
    fn a_malformed_value_is_refused_with_what_was_expected() {
        assert!(apply("", "flush-interval-ms", "2s").unwrap_err().contains("not a non-negative integer"));
        assert!(apply("", "flush-every-ms", "cc.hour").unwrap_err().contains("expected KEY=VALUE"));
        assert!(apply("", "flush-every-ms", "cc.hour=soon").unwrap_err().contains("not a non-negative integer"));
        assert!(apply("flush = 3\n", "flush-max-keys", "1").unwrap_err().contains("not a table"));
    }
}
