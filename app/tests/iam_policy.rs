//! The IAM roles of `deploy/aws/zigzag.yaml` grant each binary exactly the
//! AWS operations it calls: nothing missing (a denied call in production),
//! nothing extra (privilege it does not need), no wildcard action, and only
//! the resources it works on.
//!
//! What a binary calls is read two ways, each checking the other:
//! - from the code: every SDK operation our sources call on a client
//!   (`client.put_item()` → `dynamodb:PutItem`);
//! - from the binaries: each one run through everything it does, against
//!   the emulators, with `ZIGZAG_AWS_CALL_LOG` (every client logs each
//!   operation it starts, `zigzag_aws::call_log`).
//!   The code's operations must all be called by some role's binary (or be
//!   one the template makes unnecessary), and every call logged must be one
//!   the code has (so the scan misses nothing).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::{Command, Output};
use yaml_rust2::{Yaml, YamlLoader};
use zigzag_aws::emulator;
use zigzag_testkit::sources;

type Actions = BTreeSet<String>;

/// Operations the code has that no role is granted, and why.
const NOT_GRANTED: &[(&str, &str)] = &[
    ("dynamodb:CreateTable", "the template creates both tables; ingest runs with --no-create-tables"),
    ("kinesis:CreateStream", "the template creates the stream; loadgen --create-stream is for the emulators"),
    ("dynamodb:PutItem", "DynamoTable implements SortedTable::put, which no binary calls (tests do)"),
    ("dynamodb:UpdateTimeToLive", "only for a table ingest creates; the template enables TTL on its tables"),
];

/// Actions a binary calls on paths the scenario does not reach (a role
/// needs them all the same): the role, the action, and the source file and
/// call that make it. Each is checked: the call is in that file, and the
/// scenario indeed did not log it (else the entry is stale).
const BEYOND_THE_SCENARIO: &[(&str, &str, &str, &str)] = &[
    // The flush proof reads each covered lease by GetItem when that reads
    // fewer units than the stream's lease partition (many shards).
    ("IngestTaskRole", "dynamodb:GetItem", "lease/src/table_io.rs", "t.get(&pk, s.as_bytes())"),
    // Finished leases are deleted after a split or merge.
    ("IngestTaskRole", "dynamodb:DeleteItem", "lease/src/table_io.rs", "t.delete(&req)"),
];

/// Each role of the template, the runs of `scenario` it covers, and the
/// resources (logical ids) it may name.
const ROLES: &[(&str, &str, &[&str])] = &[
    ("IngestTaskRole", "ingest", &["Stream", "AggregateTable", "LeaseTable"]),
    ("GatherRole", "gather", &["AggregateTable", "LeaseTable"]),
    ("ServeTaskRole", "serve", &["AggregateTable", "LeaseTable"]),
    ("OperatorRole", "operator", &["AggregateTable", "LeaseTable"]),
    ("CompactorRole", "compact", &["AggregateTable", "LeaseTable"]),
    ("LoadgenRole", "loadgen", &["Stream"]),
];

// --- from the code ----------------------------------------------------------

/// Every `<...client>.<operation>()` in the workspace's library and binary
/// sources (not tests), as IAM actions. The service is the SDK the file
/// uses.
fn operations_in_code() -> Actions {
    let mut found = Actions::new();
    for file in sources::product_sources() {
        let text = std::fs::read_to_string(&file).unwrap();
        let text = sources::without_unit_tests(&text);
        let ops = client_calls(text);
        if ops.is_empty() {
            continue;
        }
        let service = match (text.contains("aws_sdk_dynamodb"), text.contains("aws_sdk_kinesis")) {
            (true, false) => "dynamodb",
            (false, true) => "kinesis",
            _ => panic!("{}: calls {ops:?} on a client of which service? Teach this test.", file.display()),
        };
        found.extend(ops.iter().map(|op| format!("{service}:{}", pascal(op))));
    }
    found
}

/// The methods called with no arguments on a receiver whose name ends in
/// `client` (`client.query()`, `self.client\n    .put_item()`): the SDK's
/// fluent builders.
fn client_calls(text: &str) -> BTreeSet<String> {
    let mut ops = BTreeSet::new();
    for (at, _) in text.match_indices("client") {
        let rest = text[at + "client".len()..].trim_start();
        let Some(rest) = rest.strip_prefix('.') else { continue };
        let rest = rest.trim_start();
        let name: String = rest.chars().take_while(|c| c.is_ascii_lowercase() || *c == '_').collect();
        if !name.is_empty() && rest[name.len()..].starts_with("()") && !["clone", "config"].contains(&name.as_str()) {
            ops.insert(name);
        }
    }
    ops
}

fn pascal(snake: &str) -> String {
    snake.split('_').map(|w| w[..1].to_ascii_uppercase() + &w[1..]).collect()
}

#[test]
fn the_scan_reads_sdk_calls_as_iam_actions() {
    let text = "let x = self.client\n            .batch_write_item()\n; client.clone(); client.query().send(); \
                client.put_item(item)";
    assert_eq!(client_calls(text), ["batch_write_item", "query"].map(String::from).into());
    assert_eq!(pascal("describe_stream_summary"), "DescribeStreamSummary");
}

// --- from the template ------------------------------------------------------

struct Role {
    actions: Actions,
    /// Every resource named, as written (`Stream.Arn`, `*`, an ARN pattern).
    resources: Vec<String>,
}

fn template() -> Yaml {
    let text = std::fs::read_to_string(sources::workspace_root().join("deploy/aws/zigzag.yaml")).unwrap();
    YamlLoader::load_from_str(&text).expect("the template parses").remove(0)
}

/// The actions and resources of every IAM role in the template.
fn roles(template: &Yaml) -> BTreeMap<String, Role> {
    let mut roles = BTreeMap::new();
    let Some(resources) = template["Resources"].as_hash() else { panic!("no Resources") };
    for (id, resource) in resources {
        if resource["Type"].as_str() != Some("AWS::IAM::Role") {
            continue;
        }
        let mut role = Role { actions: Actions::new(), resources: Vec::new() };
        for policy in resource["Properties"]["Policies"].as_vec().into_iter().flatten() {
            for statement in policy["PolicyDocument"]["Statement"].as_vec().into_iter().flatten() {
                // `!If [Condition, statement, !Ref AWS::NoValue]` (the tag
                // is dropped): the statement, granted when the condition holds.
                let statement = match statement.as_vec() {
                    Some(branches) => &branches[1],
                    None => statement,
                };
                assert_eq!(statement["Effect"].as_str(), Some("Allow"), "{id:?}: only Allow statements");
                role.actions.extend(strings(&statement["Action"]));
                role.resources.extend(strings(&statement["Resource"]));
            }
        }
        roles.insert(id.as_str().unwrap().to_string(), role);
    }
    roles
}

/// A scalar or a list of scalars (intrinsic functions' tags dropped:
/// `!GetAtt Stream.Arn` reads as `Stream.Arn`).
fn strings(node: &Yaml) -> Vec<String> {
    match node {
        Yaml::Array(items) => items.iter().flat_map(strings).collect(),
        Yaml::String(s) => vec![s.clone()],
        Yaml::Hash(h) => h.values().flat_map(strings).collect(),
        Yaml::BadValue | Yaml::Null => Vec::new(),
        other => vec![format!("{other:?}")],
    }
}

#[test]
fn no_role_grants_a_wildcard_action_or_a_service_it_does_not_need() {
    let roles = roles(&template());
    assert!(roles.len() > ROLES.len(), "the binaries' roles and the task execution role: {:?}", roles.keys());
    for (id, role) in &roles {
        for action in &role.actions {
            assert!(!action.contains('*'), "{id} grants the wildcard action {action}");
        }
    }
    // The resource "*" appears once: ecr:GetAuthorizationToken, which has
    // no resource to scope it to.
    for (id, role) in &roles {
        if role.resources.iter().any(|r| r == "*") {
            assert_eq!(id, "TaskExecutionRole", "{id} grants on every resource");
        }
    }
    for (id, _, allowed) in ROLES {
        for resource in &roles[*id].resources {
            // `!GetAtt Stream.Arn`, or `!Sub "${Stream.Arn}/consumer/…"`.
            let logical = resource.trim_start_matches("${").split('.').next().unwrap();
            assert!(allowed.contains(&logical), "{id} names {resource}; it may name only {allowed:?}");
        }
    }
}

// --- from the binaries ------------------------------------------------------

/// Runs every binary through what it does against the emulators; returns
/// the actions each run logged, by the name in [`ROLES`].
fn scenario(dir: &Path) -> BTreeMap<&'static str, Actions> {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let dynamo = emulator::endpoint("DYNAMODB").unwrap();
    let kinesis = emulator::endpoint_in("ZIGZAG_KINESALITE_ENDPOINT").unwrap();
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    let name = format!("iam-{}-{}", std::process::id(), nanos % 1_000_000_000);
    // What the template creates, created here (no binary's role needs it).
    rt.block_on(async {
        let client = zigzag_kinesis::client(&emulator::options_at(kinesis.clone())).await;
        zigzag_kinesis::stream::ensure_stream(&client, &name, 2).await.expect("the stream");
        let client = zigzag_dynamodb::client(&emulator::options_at(dynamo.clone())).await;
        for table in [name.clone(), format!("{name}-checkpoints")] {
            zigzag_dynamodb::ensure_table(&client, &table, zigzag_dynamodb::Billing::OnDemand, true)
                .await
                .expect("the table");
        }
    });
    let truth = dir.join("truth.json");
    let (t, s) = (truth.to_str().unwrap(), format!("kinesis:{name}"));
    // The shipped layout (what ingest writes without --config), and a
    // projection by campaign.
    let new_layout = dir.join("by_campaign.toml");
    let text = format!(
        "{}\n[[projection]]\nname = \"by_campaign\"\ndimensions = [\"campaign\"]\nrollups = [\"hour\", \"day\"]\n",
        zigzag_model::config::SHIPPED_TOML
    );
    std::fs::write(&new_layout, text).unwrap();
    let by_campaign = new_layout.to_str().unwrap();
    let shipped_layout = dir.join("shipped.toml");
    std::fs::write(&shipped_layout, zigzag_model::config::SHIPPED_TOML).unwrap();
    let shipped = shipped_layout.to_str().unwrap();
    let runs: &[(&str, &str, Vec<&str>, bool)] = &[
        ("loadgen", "loadgen", vec!["--sink", &s, "--records", "3000", "--span", "1h", "--truth", t], true),
        (
            "ingest",
            "ingest",
            vec!["--kinesis", &name, "--dynamodb", &name, "--no-create-tables", "--idle-exit", "2s"],
            true,
        ),
        ("ingest", "ingest", vec!["leases", "--stream", &name, "--dynamodb", &name], true),
        ("gather", "gather", vec!["--dynamodb", &name, "totals", "--from", "2026-11-19", "--to", "2026-11-21"], true),
        (
            "gather",
            "gather",
            vec!["--dynamodb", &name, "top", "--from", "2026-11-20", "--to", "2026-11-21", "--group-by", "referrer"],
            true,
        ),
        (
            "gather",
            "gather",
            vec!["--dynamodb", &name, "timeseries", "--from", "2026-11-20", "--to", "2026-11-21", "--step", "5m"],
            true,
        ),
        (
            "gather",
            "gather",
            vec!["--dynamodb", &name, "ratios", "--from", "2026-11-19", "--to", "2026-11-21", "--group-by", "campaign"],
            true,
        ),
        ("gather", "gather", vec!["--dynamodb", &name, "check", "--truth", t], true),
        ("gather", "gather", vec!["--dynamodb", &name, "scatter"], true),
        // An operator reads both tables and writes nothing.
        ("operator", "ingest", vec!["leases", "--stream", &name, "--dynamodb", &name], true),
        ("operator", "gather", vec!["--dynamodb", &name, "totals", "--from", "2026-11-19", "--to", "2026-11-21"], true),
        ("operator", "gather", vec!["--dynamodb", &name, "check", "--truth", t], true),
        ("operator", "gather", vec!["--dynamodb", &name, "scatter"], true),
        // A missing table: gather explains its failed read with DescribeTable.
        ("gather", "gather", vec!["--dynamodb", "no-such-table", "totals", "--last", "1d"], false),
        // A layout change (the compactor's role: the table's upkeep), with
        // no worker running, then its status (a reader's).
        ("compact", "gather", vec!["--dynamodb", &name, "layout", "apply", by_campaign], true),
        ("compact", "gather", vec!["--dynamodb", &name, "layout", "fill"], true),
        ("gather", "gather", vec!["--dynamodb", &name, "layout", "status"], true),
        // Undone, and the dropped projection's items deleted.
        ("compact", "gather", vec!["--dynamodb", &name, "layout", "apply", shipped], true),
        ("compact", "gather", vec!["--dynamodb", &name, "layout", "delete-dropped"], true),
        (
            "compact",
            "gather",
            vec!["--dynamodb", &name, "compact", "--before", "2026-11-21", "--grace", "1s", "--wait", "30s"],
            true,
        ),
    ];
    let mut logged: BTreeMap<&'static str, Actions> = BTreeMap::new();
    for (i, (role, binary, args, succeeds)) in runs.iter().enumerate() {
        let log = dir.join(format!("calls-{i}.log"));
        let out = run(binary, args, &log, &dynamo, &kinesis, dir);
        assert_eq!(
            out.status.success(),
            *succeeds,
            "{binary} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
        let calls = std::fs::read_to_string(&log).unwrap_or_default();
        logged.entry(role).or_default().extend(calls.lines().map(String::from));
    }
    // Over the table ingest wrote.
    logged.insert("serve", serve_run(dir, &name, &dynamo, &kinesis));
    let fan_out = fan_out_run(&rt, dir, &format!("{name}-efo"), &dynamo);
    logged.entry("ingest").or_default().extend(fan_out);
    logged
}

/// `ingest --consumer` (enhanced fan-out) over a stream of kinesis-local,
/// through its TLS port: registering the consumer, describing it and
/// subscribing to each shard (the template grants these only with a
/// FanOutConsumer, but the role must hold them then).
fn fan_out_run(rt: &tokio::runtime::Runtime, dir: &Path, name: &str, dynamo: &str) -> Actions {
    let (kinesis, _) = emulator::kinesis_tls().unwrap_or_else(|e| panic!("{e}"));
    let ca = std::env::var("ZIGZAG_KINESIS_CA").expect("checked by kinesis_tls");
    rt.block_on(async {
        let client = zigzag_kinesis::client(&emulator::kinesis_tls_options().unwrap()).await;
        zigzag_kinesis::stream::ensure_stream(&client, name, 2).await.expect("the stream");
        let client = zigzag_dynamodb::client(&emulator::options_at(dynamo.to_string())).await;
        for table in [name.to_string(), format!("{name}-checkpoints")] {
            zigzag_dynamodb::ensure_table(&client, &table, zigzag_dynamodb::Billing::OnDemand, true)
                .await
                .expect("the table");
        }
    });
    let log = dir.join("calls-fan-out.log");
    let args =
        ["--kinesis", name, "--consumer", "zigzag", "--dynamodb", name, "--no-create-tables", "--idle-exit", "2s"];
    let out = command(env!("CARGO_BIN_EXE_ingest"), &log, dynamo, &kinesis, dir)
        .env("AWS_CA_BUNDLE", &ca)
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "ingest {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr));
    std::fs::read_to_string(&log).unwrap_or_default().lines().map(String::from).collect()
}

/// `gather serve` on the table, asked what Grafana asks (a query, a range
/// query, labels, label values, series), then stopped: the calls it logged.
fn serve_run(dir: &Path, table: &str, dynamo: &str, kinesis: &str) -> Actions {
    use std::io::{Read, Write};
    let log = dir.join("calls-serve.log");
    let mut command = command(env!("CARGO_BIN_EXE_gather"), &log, dynamo, kinesis, dir);
    command.args(["--dynamodb", table, "serve", "--listen", "127.0.0.1:0"]);
    let (child, addr) = zigzag_testkit::spawn_listening(&mut command).unwrap();
    for path in [
        "/api/v1/query?query=sum(sum_over_time(clicks%5B1d%5D))&time=1795219200",
        "/api/v1/query_range?query=sum(sum_over_time(clicks%5B1h%5D))&start=1795132800&end=1795219200&step=3600",
        "/api/v1/labels",
        "/api/v1/label/country/values?start=1795132800&end=1795219200",
        "/api/v1/series?match%5B%5D=clicks%7Bcountry%3D%22DE%22%7D&start=1795132800&end=1795219200",
    ] {
        let mut conn = std::net::TcpStream::connect(addr).unwrap();
        conn.write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes()).unwrap();
        let mut answer = String::new();
        conn.read_to_string(&mut answer).unwrap();
        assert!(
            answer.starts_with("HTTP/1.0 200") || answer.starts_with("HTTP/1.1 200"),
            "gather serve {path}: {answer}"
        );
    }
    let status = Command::new("kill").arg("-TERM").arg(child.id().to_string()).status().unwrap();
    assert!(status.success());
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "gather serve after SIGTERM: {out:?}");
    std::fs::read_to_string(&log).unwrap_or_default().lines().map(String::from).collect()
}

fn run(binary: &str, args: &[&str], log: &Path, dynamo: &str, kinesis: &str, dir: &Path) -> Output {
    let exe = match binary {
        "ingest" => env!("CARGO_BIN_EXE_ingest"),
        "gather" => env!("CARGO_BIN_EXE_gather"),
        _ => env!("CARGO_BIN_EXE_loadgen"),
    };
    command(exe, log, dynamo, kinesis, dir).args(args).output().unwrap()
}

/// A binary run against the emulators, logging its calls to `log`.
fn command(exe: &str, log: &Path, dynamo: &str, kinesis: &str, dir: &Path) -> Command {
    let mut c = Command::new(exe);
    c.current_dir(dir)
        .env(zigzag_aws::call_log::CALL_LOG_ENV, log)
        .env("AWS_ENDPOINT_URL_DYNAMODB", dynamo)
        .env("AWS_ENDPOINT_URL_KINESIS", kinesis)
        .env("AWS_ACCESS_KEY_ID", emulator::ACCESS_KEY)
        .env("AWS_SECRET_ACCESS_KEY", emulator::SECRET_KEY)
        .env("AWS_REGION", emulator::REGION)
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env("RUST_LOG", "warn");
    c
}

#[test]
fn every_role_grants_exactly_what_its_binary_calls() {
    if !emulator::gate("every_role_grants_exactly_what_its_binary_calls") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let logged = scenario(dir.path());
    let in_code = operations_in_code();
    let roles = roles(&template());

    for (role, action, file, call) in BEYOND_THE_SCENARIO {
        let text = std::fs::read_to_string(sources::workspace_root().join(file)).unwrap();
        assert!(sources::without_unit_tests(&text).contains(call), "{role} {action}: {file} no longer has {call}");
        assert!(in_code.contains(*action), "{role} {action}: not in the code");
        let run = ROLES.iter().find(|r| r.0 == *role).unwrap().1;
        assert!(!logged[run].contains(*action), "{role} {action}: the scenario reaches it now, drop the entry");
    }
    for (id, run, _) in ROLES {
        let granted = &roles[*id].actions;
        let mut called = logged[run].clone();
        called.extend(BEYOND_THE_SCENARIO.iter().filter(|b| b.0 == *id).map(|b| b.1.to_string()));
        let missing: Vec<_> = called.difference(granted).collect();
        let extra: Vec<_> = granted.difference(&called).collect();
        assert!(missing.is_empty(), "{id} lacks {missing:?}, which {run} calls");
        assert!(extra.is_empty(), "{id} grants {extra:?}, which {run} never calls");
    }

    let mut all_logged: Actions = logged.values().flatten().cloned().collect();
    let unscanned: Vec<_> = all_logged.difference(&in_code).collect();
    assert!(unscanned.is_empty(), "the binaries called {unscanned:?}, which the scan of the code did not find");
    all_logged.extend(BEYOND_THE_SCENARIO.iter().map(|b| b.1.to_string()));
    let not_granted: Actions = NOT_GRANTED.iter().map(|(a, _)| a.to_string()).collect();
    let uncovered: Vec<_> = in_code.difference(&all_logged).filter(|a| !not_granted.contains(*a)).collect();
    assert!(
        uncovered.is_empty(),
        "the code can call {uncovered:?}, which no role's run called: grant it or say why not"
    );
    for (action, why) in NOT_GRANTED {
        assert!(in_code.contains(*action), "{action} is no longer in the code: drop it from NOT_GRANTED");
        for (id, role) in &roles {
            assert!(!role.actions.contains(*action), "{id} grants {action}, but {why}");
        }
    }
}
