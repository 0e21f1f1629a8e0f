//! The HTTP API as its clients call it: the request shapes Grafana's
//! built-in Prometheus data source sends (recorded from Grafana 10/11: no
//! Grafana server package exists here to run), Prometheus's response
//! shapes and error types, the bearer token, the limits, and a property
//! test that no query or parameter gets a 5xx.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::Router;
use proptest::prelude::*;
use serde_json::Value as Json;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tower::ServiceExt;
use zigzag_core::table::*;
use zigzag_gather::execute::ExecOptions;
use zigzag_model::ScatterMode;
use zigzag_serve::{router, Catalog, Engine, Limits, Server, ServerOptions};
use zigzag_testkit::fixture::{self, DAY, HOUR, T0};

/// A table whose reads of aggregates wait while it is closed (a slow store).
struct Gated {
    inner: MemoryTable,
    closed: AtomicBool,
    open: tokio::sync::Notify,
    entered: tokio::sync::Notify,
}

#[async_trait::async_trait]
impl SortedTable for Gated {
    async fn put(&self, item: Item) -> Result<(), TableError> {
        self.inner.put(item).await
    }
    async fn query(&self, req: &QueryRequest) -> Result<QueryPage, TableError> {
        // The aggregates' partitions wait; the planner's statistics (`#...`) do not.
        if self.closed.load(Ordering::SeqCst) && !req.pk.starts_with('#') {
            self.entered.notify_one();
            self.open.notified().await;
        }
        self.inner.query(req).await
    }
    async fn update(&self, req: &UpdateRequest) -> Result<UpdateOutcome, TableError> {
        self.inner.update(req).await
    }
    async fn delete(&self, req: &DeleteRequest) -> Result<DeleteOutcome, TableError> {
        self.inner.delete(req).await
    }
}

async fn table() -> Arc<Gated> {
    let inner = MemoryTable::new();
    fixture::write_store(&inner, &fixture::config(4, ScatterMode::Random), &fixture::events(5, 1_500)).await;
    Arc::new(Gated {
        inner,
        closed: AtomicBool::new(false),
        open: tokio::sync::Notify::new(),
        entered: tokio::sync::Notify::new(),
    })
}

fn app(table: Arc<Gated>, options: ServerOptions) -> Router {
    let catalog = Catalog::new(fixture::config(4, ScatterMode::Random)).unwrap();
    let engine = Engine::new(table, catalog, ExecOptions::default(), Limits::default());
    router(Server::new(Arc::new(engine), options))
}

async fn call(app: &Router, req: Request<Body>) -> (StatusCode, Json) {
    let res = app.clone().oneshot(req).await.unwrap();
    let status = res.status();
    let bytes = axum::body::to_bytes(res.into_body(), 1 << 24).await.unwrap();
    let body = serde_json::from_slice(&bytes).unwrap_or_else(|_| Json::String(String::from_utf8_lossy(&bytes).into()));
    (status, body)
}

fn get(uri: &str) -> Request<Body> {
    Request::get(uri).body(Body::empty()).unwrap()
}

/// A form POST, as Grafana sends queries.
fn post(uri: &str, form: &[(&str, &str)]) -> Request<Body> {
    let body: String = form_urlencoded::Serializer::new(String::new()).extend_pairs(form).finish();
    Request::post(uri).header("content-type", "application/x-www-form-urlencoded").body(Body::from(body)).unwrap()
}

fn secs(ms: i64) -> String {
    (ms / 1000).to_string()
}

#[tokio::test]
async fn grafana_save_and_test_posts_one_plus_one() {
    let app = app(table().await, ServerOptions::default());
    let (status, body) = call(&app, post("/api/v1/query", &[("query", "1+1"), ("time", "1793404800.123")])).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["status"], "success");
    assert_eq!(body["data"]["resultType"], "scalar");
    assert_eq!(body["data"]["result"], serde_json::json!([1793404800.123, "2"]), "values are strings");
    let (status, body) = call(&app, get("/api/v1/status/buildinfo")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(body["data"]["version"].as_str().unwrap().starts_with("2."), "{body}");
}

#[tokio::test]
async fn grafana_label_autocomplete() {
    let app = app(table().await, ServerOptions::default());
    let (start, end) = (secs(T0), secs(T0 + 2 * DAY));
    let (_, body) = call(&app, get(&format!("/api/v1/labels?start={start}&end={end}"))).await;
    assert_eq!(body["data"], serde_json::json!(["__name__", "campaign", "country", "referrer"]));
    let (_, body) = call(&app, get(&format!("/api/v1/label/__name__/values?start={start}&end={end}"))).await;
    assert_eq!(body["data"], serde_json::json!(["clicks", "impressions", "cost", "cost_min", "cost_max", "ctr"]));
    let (_, body) = call(&app, get(&format!("/api/v1/label/country/values?start={start}&end={end}"))).await;
    assert_eq!(body["data"], serde_json::json!(["DE", "FR", "GB", "US"]));
    let matched = format!(
        "/api/v1/label/campaign/values?match%5B%5D={}&start={start}&end={end}",
        form_urlencoded::byte_serialize(b"clicks{campaign=~\"spring.*\"}").collect::<String>()
    );
    let (status, body) = call(&app, get(&matched)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["data"], serde_json::json!(["spring", "spring-sale"]));
    // Outside the data: no values, an empty list (never null).
    let (_, body) = call(&app, get("/api/v1/label/country/values?start=1000&end=2000")).await;
    assert_eq!(body["data"], serde_json::json!([]));
    let series = format!(
        "/api/v1/series?match%5B%5D={}&start={start}&end={end}",
        form_urlencoded::byte_serialize(b"impressions{country=\"DE\",campaign=\"x\"}").collect::<String>()
    );
    let (status, body) = call(&app, get(&series)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let found = body["data"].as_array().unwrap();
    assert_eq!(found.len(), 5, "one per referrer: {body}");
    assert!(found.iter().all(|s| s["__name__"] == "impressions" && s["country"] == "DE" && s["campaign"] == "x"));
    let (_, body) = call(&app, get("/api/v1/metadata")).await;
    assert_eq!(body["data"]["clicks"][0]["type"], "gauge");
    assert!(body["data"]["ctr"][0]["help"].as_str().unwrap().contains("clicks / impressions"));
}

#[tokio::test]
async fn a_step_as_seconds_or_a_duration_means_the_same_and_starts_align_down() {
    let app = app(table().await, ServerOptions::default());
    let q = "sum by (country) (sum_over_time(clicks[1h]))";
    // Grafana aligns start and end down to the step.
    let (start, end) = (secs(T0 + HOUR), secs(T0 + DAY));
    let range = |step: &'static str| {
        post("/api/v1/query_range", &[("query", q), ("start", &start), ("end", &end), ("step", step)])
    };
    let (status, seconds) = call(&app, range("3600")).await;
    assert_eq!(status, StatusCode::OK, "{seconds}");
    let (_, duration) = call(&app, range("1h")).await;
    assert_eq!(seconds, duration);
    assert_eq!(seconds["data"]["resultType"], "matrix");
    let result = seconds["data"]["result"].as_array().unwrap();
    assert_eq!(result.len(), 4, "one series per country");
    assert_eq!(result[0]["values"].as_array().unwrap().len(), 24, "hourly from 01:00 to 00:00 the next day");
    let info = seconds["infos"][0].as_str().unwrap();
    assert!(info.contains("hour buckets"), "a 1h range at a 1h step reads hour items: {info}");
    // A step that is a duration Prometheus does not write fails as bad data.
    let (status, body) = call(&app, range("soon")).await;
    assert_eq!((status, body["errorType"].as_str()), (StatusCode::BAD_REQUEST, Some("bad_data")));
}

#[tokio::test]
async fn errors_have_prometheus_shapes_and_say_what_to_do() {
    let app = app(table().await, ServerOptions::default());
    let cases: [(Request<Body>, StatusCode, &str, &str); 7] = [
        (post("/api/v1/query", &[]), StatusCode::BAD_REQUEST, "bad_data", "missing parameter 'query'"),
        (
            post("/api/v1/query", &[("query", "sum((")]),
            StatusCode::BAD_REQUEST,
            "bad_data",
            "invalid parameter 'query'",
        ),
        (
            post("/api/v1/query", &[("query", "rate(clicks[5m])")]),
            StatusCode::UNPROCESSABLE_ENTITY,
            "execution",
            "sum_over_time(clicks[5m])",
        ),
        (
            post("/api/v1/query", &[("query", "clicks"), ("time", "tomorrow")]),
            StatusCode::BAD_REQUEST,
            "bad_data",
            "'time'",
        ),
        (
            post("/api/v1/query_range", &[("query", "clicks"), ("start", "10"), ("end", "1"), ("step", "60")]),
            StatusCode::BAD_REQUEST,
            "bad_data",
            "end timestamp must not be before start",
        ),
        (
            post("/api/v1/query_range", &[("query", "clicks"), ("start", "0"), ("end", "100000000"), ("step", "1")]),
            StatusCode::BAD_REQUEST,
            "bad_data",
            "exceeded maximum resolution",
        ),
        (get("/api/v2/query"), StatusCode::NOT_FOUND, "not_found", "/api/v1/"),
    ];
    for (req, status, kind, says) in cases {
        let uri = req.uri().to_string();
        let (got, body) = call(&app, req).await;
        assert_eq!(got, status, "{uri}: {body}");
        assert_eq!(body["status"], "error", "{uri}: {body}");
        assert_eq!(body["errorType"], kind, "{uri}: {body}");
        assert!(body["error"].as_str().unwrap().contains(says), "{uri}: {body}");
    }
    // An empty answer is `result: []`, never null.
    let (status, body) =
        call(&app, post("/api/v1/query", &[("query", "clicks{country=\"XX\"}"), ("time", "1793404800")])).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["data"]["result"], serde_json::json!([]));
}

#[tokio::test]
async fn a_token_is_required_when_set_and_compared_whole() {
    let options = ServerOptions { token: Some("s3cret".into()), ..ServerOptions::default() };
    let app = app(table().await, options);
    let (status, body) = call(&app, post("/api/v1/query", &[("query", "1")])).await;
    assert_eq!((status, body["errorType"].as_str()), (StatusCode::UNAUTHORIZED, Some("unauthorized")));
    for wrong in ["Bearer s3cre", "Bearer s3cret2", "s3cret", "Basic s3cret"] {
        let req = Request::get("/api/v1/labels").header("authorization", wrong).body(Body::empty()).unwrap();
        assert_eq!(call(&app, req).await.0, StatusCode::UNAUTHORIZED, "{wrong}");
    }
    let req = Request::get("/api/v1/labels").header("authorization", "Bearer s3cret").body(Body::empty()).unwrap();
    assert_eq!(call(&app, req).await.0, StatusCode::OK);
}

#[tokio::test]
async fn past_the_query_slots_a_query_is_refused_and_past_its_time_it_times_out() {
    let table = table().await;
    let options = ServerOptions { max_queries: 1, timeout: Duration::from_secs(20), ..ServerOptions::default() };
    let app = app(table.clone(), options);
    table.closed.store(true, Ordering::SeqCst);
    let q = [("query", "sum(sum_over_time(clicks[1d]))"), ("time", "1793491200")];
    let first = tokio::spawn({
        let app = app.clone();
        let req = post("/api/v1/query", &q);
        async move { call(&app, req).await }
    });
    table.entered.notified().await;
    let (status, body) = call(&app, post("/api/v1/query", &q)).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    assert!(body["error"].as_str().unwrap().contains("--max-queries 1"), "{body}");
    table.closed.store(false, Ordering::SeqCst);
    table.open.notify_waiters();
    let (status, body) = first.await.unwrap();
    assert_eq!(status, StatusCode::OK, "{body}");

    // A request's own `timeout` below the server's: 503 `timeout` (a day
    // not read yet: the one read is served from the cache).
    table.closed.store(true, Ordering::SeqCst);
    let (status, body) = call(&app, post("/api/v1/query", &[q[0], ("time", "1793404800"), ("timeout", "0.3")])).await;
    assert_eq!((status, body["errorType"].as_str()), (StatusCode::SERVICE_UNAVAILABLE, Some("timeout")), "{body}");
    table.closed.store(false, Ordering::SeqCst);
    table.open.notify_waiters();
}

#[tokio::test]
async fn limits_refuse_with_the_flag_to_change() {
    let catalog = Catalog::new(fixture::config(4, ScatterMode::Random)).unwrap();
    let limits = Limits { max_buckets: 100, max_series: 3, max_rcu: 5_000.0 };
    let engine = Engine::new(table().await, catalog, ExecOptions::default(), limits);
    let app = router(Server::new(Arc::new(engine), ServerOptions::default()));
    let day = secs(T0 + DAY);
    let (status, body) =
        call(&app, post("/api/v1/query", &[("query", "sum(count_over_time(clicks[3h]))"), ("time", &day)])).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "a count of samples reads 180 minute buckets: {body}");
    assert!(body["error"].as_str().unwrap().contains("--max-buckets"), "{body}");
    let (status, body) =
        call(&app, post("/api/v1/query", &[("query", "sum(sum_over_time(clicks[3h]))"), ("time", &day)])).await;
    assert_eq!(status, StatusCode::OK, "a sum reads three hour buckets: {body}");
    let (status, body) = call(
        &app,
        post("/api/v1/query", &[("query", "sum by (referrer) (sum_over_time(clicks[1h]))"), ("time", &day)]),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "five referrers: {body}");
    assert!(body["error"].as_str().unwrap().contains("--max-series"), "{body}");
}

#[tokio::test]
async fn extreme_durations_and_instants_are_refused_not_overflowed() {
    let app = app(table().await, ServerOptions::default());
    for (q, t) in [
        ("clicks offset 292y", "1793404800"),
        ("clicks offset -292y", "1793404800"),
        ("sum_over_time(clicks[292y])", "1793404800"),
        ("sum_over_time(clicks[100000000000y])", "1793404800"),
        ("clicks", "-9223372036854775"),
        ("clicks", "9223372036854775"),
        ("sum_over_time(clicks[1d] offset 200y)", "-9000000000000000"),
    ] {
        let (status, body) = call(&app, post("/api/v1/query", &[("query", q), ("time", t)])).await;
        assert!(status.is_success() || status.is_client_error(), "{q} at {t}: {status} {body}");
    }
    let huge_step =
        [("query", "1"), ("start", "9000000000000"), ("end", "9000000000001"), ("step", "9223372036854000")];
    let (status, body) = call(&app, post("/api/v1/query_range", &huge_step)).await;
    assert_eq!(status, StatusCode::OK, "one step: {body}");
}

/// Pieces of queries, valid and not.
fn query_text() -> impl Strategy<Value = String> {
    let piece = prop::sample::select(vec![
        "sum",
        "min",
        "max",
        "count",
        "avg",
        "topk(",
        "bottomk(",
        "quantile(",
        "(",
        ")",
        "{",
        "}",
        "[",
        "]",
        ",",
        " ",
        "clicks",
        "impressions",
        "cost",
        "ctr",
        "cost_min",
        "nope",
        "country",
        "campaign",
        "referrer",
        "=",
        "!=",
        "=~",
        "!~",
        "\"DE\"",
        "\"s.*\"",
        "\"(\"",
        "5m",
        "1h",
        "90s",
        "0s",
        "100000d",
        "292y",
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "offset",
        "-",
        "+",
        "*",
        "/",
        "%",
        "^",
        "==",
        ">",
        "and",
        "or",
        "unless",
        "bool",
        "1",
        "0",
        "-1",
        "1e308",
        "NaN",
        "Inf",
        "sum_over_time(",
        "rate(",
        "count_over_time(",
        "last_over_time(",
        "time()",
        "vector(",
        "scalar(",
        "sort_desc(",
        "@",
        "start()",
        ":5m",
        "\u{0}",
        "é",
        "\"",
    ]);
    prop::collection::vec(piece, 0..14).prop_map(|v| v.concat())
}

fn param() -> impl Strategy<Value = Option<String>> {
    prop::option::of(
        prop::sample::select(vec![
            "",
            "0",
            "-1",
            "1793404800",
            "1793404800.5",
            "1793491200",
            "2026-11-01T00:00:00Z",
            "1e300",
            "-1e300",
            "NaN",
            "Inf",
            "60",
            "1m",
            "0.001",
            "3600",
            "1y",
            "abc",
            "9223372036854775807",
            "-9223372036854775808",
        ])
        .prop_map(str::to_string),
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn no_query_or_parameter_gets_a_5xx(
        q in query_text(),
        range in any::<bool>(),
        time in param(), start in param(), end in param(), step in param(), timeout in param(),
    ) {
        static RT: std::sync::OnceLock<(tokio::runtime::Runtime, Router)> = std::sync::OnceLock::new();
        let (rt, app) = RT.get_or_init(|| {
            let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
            let app = rt.block_on(async { app(table().await, ServerOptions::default()) });
            (rt, app)
        });
        let mut form = vec![("query", q.clone())];
        for (name, v) in [("time", time), ("start", start), ("end", end), ("step", step), ("timeout", timeout)] {
            if let Some(v) = v {
                form.push((name, v));
            }
        }
        let pairs: Vec<(&str, &str)> = form.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let uri = if range { "/api/v1/query_range" } else { "/api/v1/query" };
        let (status, body) = rt.block_on(call(app, post(uri, &pairs)));
        prop_assert!(status.is_success() || status.is_client_error(), "{uri} {pairs:?}: {status} {body}");
        prop_assert!(body["status"] == "success" || (body["status"] == "error" && body["error"].is_string()), "{body}");
    }
}

#[tokio::test]
async fn identical_reads_in_flight_are_read_once() {
    let table = table().await;
    let catalog = Catalog::new(fixture::config(4, ScatterMode::Random)).unwrap();
    let engine = Arc::new(Engine::new(table.clone(), catalog, ExecOptions::default(), Limits::default()));
    let app = router(Server::new(engine.clone(), ServerOptions::default()));
    table.closed.store(true, Ordering::SeqCst);
    // Five viewers ask within the same minute (Grafana's `time` is each
    // one's clock): the same buckets, one read.
    let t = T0 + DAY;
    let ask = |k: i64| {
        let app = app.clone();
        let time = format!("{}.{k}", t / 1000 + k);
        async move {
            call(
                &app,
                post("/api/v1/query", &[("query", "sum by (country) (sum_over_time(clicks[1h]))"), ("time", &time)]),
            )
            .await
        }
    };
    let first = tokio::spawn(ask(0));
    table.entered.notified().await;
    let others: Vec<_> = (1..5).map(|k| tokio::spawn(ask(k))).collect();
    while engine.reader().inflight.joined.load(Ordering::SeqCst) < 4 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    table.closed.store(false, Ordering::SeqCst);
    table.open.notify_waiters();
    let (status, want) = first.await.unwrap();
    assert_eq!(status, StatusCode::OK, "{want}");
    for o in others {
        let (status, got) = o.await.unwrap();
        assert_eq!(status, StatusCode::OK, "{got}");
        let values = |b: &Json| {
            b["data"]["result"].as_array().unwrap().iter().map(|r| r["value"][1].clone()).collect::<Vec<_>>()
        };
        assert_eq!(values(&got), values(&want), "the same answer");
    }
    assert_eq!(engine.reader().inflight.started.load(Ordering::SeqCst), 1, "one read for five queries");
    // Finished reads are forgotten: the next query reads again.
    let (status, _) = ask(9).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(engine.reader().inflight.started.load(Ordering::SeqCst), 2, "a later query is read afresh");
}

/// "Last 24 hours" at an instant off every edge (Grafana's `time` is now,
/// to the millisecond), and `$__range` in whole seconds: the range is read
/// from the hour items it holds whole and the minutes at its edges, and
/// the total is the events' in the buckets ending in it.
#[tokio::test]
async fn a_long_range_at_any_instant_reads_whole_hours_from_hour_items() {
    let app = app(table().await, ServerOptions::default());
    let events = fixture::events(5, 1_500);
    let t = T0 + DAY + 10 * HOUR + 17 * 60_000 + 23_456;
    for range in ["1d", "86400s", "75577s"] {
        let r = zigzag_gather::window::parse_duration("range", range).unwrap();
        let q = format!("sum(sum_over_time(clicks[{range}]))");
        let (status, body) =
            call(&app, post("/api/v1/query", &[("query", &q), ("time", &format!("{}.456", t / 1000))])).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        // The buckets (a minute each) ending in (t - r, t].
        let minute = 60_000;
        let (start, end) = ((t - r).div_euclid(minute) * minute, t.div_euclid(minute) * minute);
        let clicks = events.iter().filter(|e| e.click && start <= e.t && e.t < end).count();
        assert_eq!(body["data"]["result"][0]["value"][1], clicks.to_string(), "{range}: {body}");
        let info = body["infos"][0].as_str().unwrap();
        assert!(info.contains("hour+minute buckets"), "{range}: whole hours from hour items: {info}");
    }
}
