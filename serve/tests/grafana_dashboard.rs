//! The shipped Grafana dashboard (`deploy/grafana/dashboards/zigzag.json`)
//! and data source, played as Grafana plays them against `gather serve`:
//! the dashboard's time range resolved (`now-24h` to `now`), its
//! variable filled from `label_values(...)`, `$__range` substituted, each
//! instant target asked at the range's end and each range target with the
//! start and end aligned down to the step, by form POST. Every panel gets
//! an answer, and the totals equal the events'.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::Router;
use serde_json::Value as Json;
use std::sync::Arc;
use tower::ServiceExt;
use zigzag_core::table::MemoryTable;
use zigzag_gather::execute::ExecOptions;
use zigzag_gather::window::{parse_time_at, Round};
use zigzag_model::ScatterMode;
use zigzag_serve::{router, Catalog, Engine, Limits, Server, ServerOptions};
use zigzag_testkit::fixture::{self, DAY, HOUR, T0};

fn deploy(path: &str) -> String {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/grafana");
    std::fs::read_to_string(root.join(path)).unwrap()
}

async fn post(app: &Router, uri: &str, form: &[(&str, &str)]) -> Json {
    let body: String = form_urlencoded::Serializer::new(String::new()).extend_pairs(form).finish();
    let req = Request::post(uri).header("content-type", "application/x-www-form-urlencoded").body(Body::from(body));
    let res = app.clone().oneshot(req.unwrap()).await.unwrap();
    let status = res.status();
    let bytes = axum::body::to_bytes(res.into_body(), 1 << 24).await.unwrap();
    let json: Json = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(status, StatusCode::OK, "{uri} {form:?}: {json}");
    json
}

/// The fixture's events in a table of the fixture's layout (every
/// dimension, by the minute), and `gather serve`'s API over it.
async fn served() -> (Vec<fixture::Event>, Router) {
    served_on(fixture::config(4, ScatterMode::Random)).await
}

/// The fixture's events in a table of `config`'s layout, and `gather
/// serve`'s API over it.
async fn served_on(config: zigzag_model::Config) -> (Vec<fixture::Event>, Router) {
    let events = fixture::events(31, 3_000);
    let table = MemoryTable::new();
    fixture::write_store(&table, &config, &events).await;
    let engine = Engine::new(Arc::new(table), Catalog::new(config).unwrap(), ExecOptions::default(), Limits::default());
    (events, router(Server::new(Arc::new(engine), ServerOptions::default())))
}

#[tokio::test]
async fn every_panel_of_the_shipped_dashboard_is_answered() {
    let datasource = deploy("provisioning/datasources/zigzag.yaml");
    assert!(datasource.contains("type: prometheus") && datasource.contains("timeInterval: 1m"), "{datasource}");
    let dashboard: Json = serde_json::from_str(&deploy("dashboards/zigzag.json")).unwrap();

    let (events, app) = served().await;

    // Grafana's clock: in the middle of the data's second day.
    let now = T0 + DAY + 10 * HOUR + 1_234_567;
    let from = parse_time_at("from", dashboard["time"]["from"].as_str().unwrap(), now, Round::Down).unwrap();
    let to = parse_time_at("to", dashboard["time"]["to"].as_str().unwrap(), now, Round::Up).unwrap();
    assert_eq!((from, to), (now - DAY, now), "Grafana's default: the last 24 hours");
    let range = format!("{}s", (to - from) / 1000);
    let secs = |ms: i64| (ms / 1000).to_string();

    // The variable, as Grafana fills it.
    let var = &dashboard["templating"]["list"][0];
    assert_eq!(var["definition"], "label_values(clicks, country)");
    let values = app
        .clone()
        .oneshot(
            Request::get(format!(
                "/api/v1/label/country/values?match%5B%5D=clicks&start={}&end={}",
                secs(from),
                secs(to)
            ))
            .body(Body::empty())
            .unwrap(),
        )
        .await
        .unwrap();
    let values: Json =
        serde_json::from_slice(&axum::body::to_bytes(values.into_body(), 1 << 20).await.unwrap()).unwrap();
    assert_eq!(values["data"], serde_json::json!(["DE", "FR", "GB", "US"]));
    let country = "DE";

    let panels: Vec<&Json> =
        dashboard["panels"].as_array().unwrap().iter().filter(|p| p["datasource"]["uid"] == "zigzag").collect();
    assert_eq!(panels.len(), 4, "totals, the 5-minute series, top referrers by CTR, CTR by campaign");
    for panel in panels {
        for target in panel["targets"].as_array().unwrap() {
            let expr = target["expr"].as_str().unwrap().replace("$__range", &range).replace("$country", country);
            let answer = if target["instant"] == true {
                post(&app, "/api/v1/query", &[("query", &expr), ("time", &secs(to))]).await
            } else {
                let step = 300_000; // the panel's interval, 5m
                assert_eq!(panel["interval"], "5m");
                let (start, end) = (from / step * step, to / step * step);
                post(
                    &app,
                    "/api/v1/query_range",
                    &[("query", &expr), ("start", &secs(start)), ("end", &secs(end)), ("step", "300")],
                )
                .await
            };
            let result = answer["data"]["result"].as_array().unwrap();
            assert!(!result.is_empty(), "{}: {expr}: {answer}", panel["title"]);
            if target["refId"] == "A" && panel["id"] == 1 {
                // The minutes ending in (t - $__range, t], t the whole seconds sent.
                let (t, minute) = (to / 1000 * 1000, 60_000);
                let (start, end) = ((t - (to - from) / 1000 * 1000) / minute * minute, t / minute * minute);
                let clicks = events.iter().filter(|e| e.click && start <= e.t && e.t < end).count();
                assert_eq!(result[0]["value"][1], clicks.to_string(), "total clicks over the range");
            }
            if panel["id"] == 3 {
                assert!(result.len() <= 20 && result.iter().all(|r| r["metric"]["referrer"].is_string()), "{answer}");
            }
        }
    }
}

/// The dashboard's server row reads `gather serve`'s own metrics through
/// a Prometheus that scrapes them: every expression parses, and every
/// metric it names is one the server emits, as docs/METRICS.md lists it
/// (a histogram's `_bucket` and `_sum` of a histogram).
#[test]
fn the_server_row_reads_metrics_the_server_documents() {
    let dashboard: Json = serde_json::from_str(&deploy("dashboards/zigzag.json")).unwrap();
    let datasource = deploy("provisioning/datasources/zigzag.yaml");
    assert!(datasource.contains("uid: zigzag-metrics"), "the server row's data source is provisioned");
    let doc =
        std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/METRICS.md")).unwrap();
    let documented = |name: &str| -> Option<String> {
        let row = doc.lines().find(|l| l.starts_with(&format!("| `{name}` |")))?;
        row.split('|').nth(2).map(|t| t.trim().to_string())
    };
    let row: Vec<&Json> =
        dashboard["panels"].as_array().unwrap().iter().filter(|p| p["datasource"]["uid"] == "zigzag-metrics").collect();
    assert!(row.len() >= 5, "requests, durations, in flight and refused, RCU, cache");
    let mut seen = std::collections::BTreeSet::new();
    for panel in row {
        for target in panel["targets"].as_array().unwrap() {
            let expr = target["expr"].as_str().unwrap();
            promql_parser::parser::parse(expr).unwrap_or_else(|e| panic!("{}: {expr}: {e}", panel["title"]));
            for name in
                expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).filter(|w| w.starts_with("zigzag_"))
            {
                let (base, kind) = match ["_bucket", "_sum", "_count"].iter().find_map(|s| name.strip_suffix(s)) {
                    Some(base) if documented(name).is_none() => (base, "histogram"),
                    _ => (name, ""),
                };
                let documented = documented(base).unwrap_or_else(|| panic!("{name} is not in docs/METRICS.md"));
                assert!(kind.is_empty() || documented == kind, "{name}: documented as a {documented}");
                seen.insert(base.to_string());
            }
        }
    }
    for metric in [
        "zigzag_serve_http_requests_total",
        "zigzag_serve_http_request_duration_seconds",
        "zigzag_serve_queries_in_flight",
        "zigzag_serve_queries_refused_total",
        "zigzag_serve_query_read_capacity_units",
    ] {
        assert!(seen.contains(metric), "the server row shows {metric}");
    }
}

/// Every option of Grafana's time picker, as Grafana 11 asks: `$__range`
/// in whole seconds (rounded), instant targets at `time` = the range's end
/// to the millisecond, range targets with start and end aligned down to
/// the panel's interval. Every panel answers, on the fixture's layout
/// (every label by the minute) and on the shipped one, whose referrers are
/// kept by the hour: the totals are the events' in the minutes ending in
/// `(time - $__range, time]`, each referrer's CTR the events' in the hours
/// ending in it, and `infos` says which window that was.
#[tokio::test]
async fn every_time_picker_option_answers_every_panel() {
    for (layout, config) in
        [("fixture", fixture::config(4, ScatterMode::Random)), ("shipped", zigzag_model::Config::shipped())]
    {
        time_picker_options_on(layout, config).await;
    }
}

async fn time_picker_options_on(layout: &str, config: zigzag_model::Config) {
    let dashboard: Json = serde_json::from_str(&deploy("dashboards/zigzag.json")).unwrap();
    let referrer_unit = if layout == "shipped" { HOUR } else { 60_000 };
    let (events, app) = served_on(config).await;
    let now = T0 + DAY + 10 * HOUR + 1_234_567;
    let options = [
        ("now-5m", "now"),
        ("now-15m", "now"),
        ("now-30m", "now"),
        ("now-1h", "now"),
        ("now-3h", "now"),
        ("now-6h", "now"),
        ("now-12h", "now"),
        ("now-24h", "now"),
        ("now-2d", "now"),
        ("now/d", "now"),
        ("now/w", "now"),
        ("now-1d/d", "now-1d/d"),
        ("now/d", "now/d"),
    ];
    let panels: Vec<&Json> =
        dashboard["panels"].as_array().unwrap().iter().filter(|p| p["datasource"]["uid"] == "zigzag").collect();
    let ms = |t: i64| format!("{}.{:03}", t.div_euclid(1000), t.rem_euclid(1000));
    let mut referrers_checked = 0;
    for (from_text, to_text) in options {
        let from = parse_time_at("from", from_text, now, Round::Down).unwrap();
        let to = parse_time_at("to", to_text, now, Round::Up).unwrap().min(now);
        let range_s = ((to - from) as f64 / 1000.0).round() as i64;
        let range = format!("{range_s}s");
        let case = format!("{layout} layout, {from_text}..{to_text}");
        // The buckets of `unit` ending in (to - range, to], as [start, end).
        let ending_in = |unit: i64| ((to - range_s * 1000).div_euclid(unit) * unit, to.div_euclid(unit) * unit);
        for panel in &panels {
            for target in panel["targets"].as_array().unwrap() {
                let expr = target["expr"].as_str().unwrap().replace("$__range", &range).replace("$country", "DE");
                let answer = if target["instant"] == true {
                    post(&app, "/api/v1/query", &[("query", &expr), ("time", &ms(to))]).await
                } else {
                    let step = 300_000;
                    let (start, end) = (from / step * step, to / step * step);
                    let form = [("query", expr.as_str()), ("start", &ms(start)), ("end", &ms(end)), ("step", "300")];
                    post(&app, "/api/v1/query_range", &form).await
                };
                assert_eq!(answer["status"], "success", "{case}: {expr}: {answer}");
                if target["refId"] == "A" && panel["id"] == 1 {
                    let (start, end) = ending_in(60_000);
                    let inside: Vec<_> = events.iter().filter(|e| start <= e.t && e.t < end).collect();
                    let clicks = inside.iter().filter(|e| e.click).count();
                    let got = answer["data"]["result"][0]["value"][1].as_str().map(str::to_string);
                    // A bucket with events has a sample (0 clicks included); none, no series.
                    let want = (!inside.is_empty()).then(|| clicks.to_string());
                    assert_eq!(got, want, "{case}: total clicks over [{range}] at {}", ms(to));
                }
                if panel["id"] == 3 {
                    let (start, end) = ending_in(referrer_unit);
                    let mut want = std::collections::BTreeMap::<&str, (u64, u64)>::new();
                    for e in events.iter().filter(|e| start <= e.t && e.t < end && e.country == "DE") {
                        let w = want.entry(e.referrer).or_default();
                        // An event is a click or an impression.
                        w.0 += e.click as u64;
                        w.1 += !e.click as u64;
                    }
                    let got: std::collections::BTreeMap<&str, f64> = answer["data"]["result"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|r| {
                            (
                                r["metric"]["referrer"].as_str().unwrap(),
                                r["value"][1].as_str().unwrap().parse().unwrap(),
                            )
                        })
                        .collect();
                    let want: std::collections::BTreeMap<&str, f64> = want
                        .into_iter()
                        .filter(|(_, (_, i))| *i > 0)
                        .map(|(r, (c, i))| (r, c as f64 / i as f64))
                        .collect();
                    assert_eq!(got, want, "{case}: CTR by referrer over the {referrer_unit} ms buckets of [{range}]");
                    referrers_checked += got.len();
                    let said = answer["infos"].as_array().into_iter().flatten().any(|i| {
                        let i = i.as_str().unwrap_or_default();
                        i.contains(&format!("read {}", zigzag_gather::window::Window { start, end }))
                            && i.contains("projection referrer_country keeps hours")
                    });
                    assert_eq!(said, layout == "shipped" && start < end, "{case}: infos say the window read: {answer}");
                }
            }
        }
    }
    assert!(referrers_checked > 20, "{layout}: referrers were compared ({referrers_checked})");
}
