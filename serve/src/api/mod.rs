//! The Prometheus HTTP API over an [`Engine`]: the routes Grafana's
//! built-in Prometheus data source and `promtool` call, GET and POST alike,
//! with Prometheus's response shapes (`status`, `data`, `infos`;
//! `errorType` + `error` on failure). Every request is authenticated
//! (when a token is set), bounded in time and counted against the
//! server's query slots, and observed (`observe`: requests by handler and
//! code, their duration; queries in flight, refused by each limit, and the
//! RCU each read: docs/METRICS.md).

mod params;

use crate::engine::{Answer, Engine, MAX_STEPS};
use crate::error::{Result, ServeError};
use crate::eval::Order;
use crate::meta::Lookup;
use crate::series::{format_time, format_value, Labels, Value};
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use futures::FutureExt;
use params::Params;
use serde_json::{json, Map, Value as Json};
use std::sync::Arc;
use std::time::Duration;
use subtle::ConstantTimeEq;
use tokio::sync::Semaphore;

/// The Prometheus API version whose shapes and semantics this serves
/// (what `/api/v1/status/buildinfo` reports as `version`, so Grafana
/// enables the features that version has).
pub const PROMETHEUS_API_VERSION: &str = "2.42.0";

/// The server's settings beyond the engine's.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// Bearer token every request must carry (None: open).
    pub token: Option<String>,
    /// Queries evaluated at once; more are refused (429).
    pub max_queries: usize,
    /// A query's time limit (503 `timeout` past it).
    pub timeout: Duration,
    /// Log each query's plan (`gather --explain`'s text).
    pub explain: bool,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions { token: None, max_queries: 16, timeout: Duration::from_secs(30), explain: false }
    }
}

pub struct Server {
    pub engine: Arc<Engine>,
    options: ServerOptions,
    slots: Semaphore,
}

impl Server {
    pub fn new(engine: Arc<Engine>, options: ServerOptions) -> Arc<Server> {
        let slots = Semaphore::new(options.max_queries.max(1));
        Arc::new(Server { engine, options, slots })
    }

    fn authorize(&self, headers: &HeaderMap) -> Result<()> {
        let Some(token) = &self.options.token else { return Ok(()) };
        let given = headers
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .unwrap_or("");
        match given.as_bytes().ct_eq(token.as_bytes()).into() {
            true => Ok(()),
            false => Err(ServeError::Unauthorized),
        }
    }

    /// Runs `work` in a query slot, within the time limit (the request's
    /// `timeout` if shorter); a panic (a bug) is answered with a 500, not a
    /// dropped connection.
    async fn bounded<T>(&self, params: &Params, work: impl std::future::Future<Output = Result<T>>) -> Result<T> {
        let _slot = self.slots.try_acquire().map_err(|_| ServeError::Busy(self.options.max_queries))?;
        let _in_flight = InFlight::start();
        let limit = match params.duration("timeout")? {
            Some(ms) if ms > 0 => self.options.timeout.min(Duration::from_millis(ms as u64)),
            _ => self.options.timeout,
        };
        match tokio::time::timeout(limit, std::panic::AssertUnwindSafe(work).catch_unwind()).await {
            Err(_) => Err(ServeError::Timeout(limit)),
            Ok(Ok(r)) => r,
            Ok(Err(_)) => Err(ServeError::Internal),
        }
    }
}

/// A query holding a slot, counted in `zigzag_serve_queries_in_flight`
/// until it is dropped (answered, failed, timed out or cancelled).
struct InFlight;

impl InFlight {
    fn start() -> InFlight {
        metrics::gauge!("zigzag_serve_queries_in_flight").increment(1.0);
        InFlight
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        metrics::gauge!("zigzag_serve_queries_in_flight").decrement(1.0);
    }
}

/// Counts every request by the route it matched and its status code, and
/// times it.
async fn observe(req: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let handler = req
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .map_or_else(|| "other".to_string(), |p| p.as_str().to_string());
    let t0 = std::time::Instant::now();
    let response = next.run(req).await;
    let code = response.status().as_u16().to_string();
    metrics::histogram!("zigzag_serve_http_request_duration_seconds", "handler" => handler.clone())
        .record(t0.elapsed().as_secs_f64());
    metrics::counter!("zigzag_serve_http_requests_total", "handler" => handler, "code" => code).increment(1);
    response
}

/// The API's routes.
pub fn router(server: Arc<Server>) -> Router {
    Router::new()
        .route("/api/v1/query", get(query).post(query))
        .route("/api/v1/query_range", get(query_range).post(query_range))
        .route("/api/v1/labels", get(labels).post(labels))
        .route("/api/v1/label/{name}/values", get(label_values))
        .route("/api/v1/series", get(series).post(series))
        .route("/api/v1/metadata", get(metadata))
        .route("/api/v1/format_query", get(format_query).post(format_query))
        .route("/api/v1/status/buildinfo", get(buildinfo))
        .route("/api/v1/query_exemplars", get(empty_list).post(empty_list))
        .route("/api/v1/rules", get(rules))
        .route("/api/v1/status/flags", get(flags))
        .route("/", get(page))
        .route("/-/healthy", get(|| async { "Zigzag gather serve is Healthy.\n" }))
        .route("/-/ready", get(|| async { "Zigzag gather serve is Ready.\n" }))
        .fallback(|| async { error(ServeError::NotFound) })
        .layer(axum::middleware::from_fn(observe))
        .with_state(server)
}

/// A success; `infos` (what was read, how fresh) only when there are any.
fn success(data: Json, infos: &[String]) -> Response {
    let mut body = Map::new();
    body.insert("status".into(), json!("success"));
    body.insert("data".into(), data);
    if !infos.is_empty() {
        body.insert("infos".into(), json!(infos));
    }
    (StatusCode::OK, axum::Json(Json::Object(body))).into_response()
}

fn error(e: ServeError) -> Response {
    if let Some(limit) = e.limit() {
        metrics::counter!("zigzag_serve_queries_refused_total", "limit" => limit.name()).increment(1);
    }
    let status = StatusCode::from_u16(e.status()).unwrap_or(StatusCode::UNPROCESSABLE_ENTITY);
    let body = json!({"status": "error", "errorType": e.error_type(), "error": e.to_string()});
    (status, axum::Json(body)).into_response()
}

fn respond(r: Result<Response>) -> Response {
    r.unwrap_or_else(error)
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

fn labels_json(l: &Labels) -> Json {
    Json::Object(l.iter().map(|(k, v)| (k.clone(), json!(v))).collect())
}

fn sample(t: i64, x: f64) -> Json {
    json!([format_time(t), format_value(x)])
}

/// An instant query's answer: a vector or a scalar.
fn instant_data(a: &Answer) -> Json {
    let t = a.ts[0];
    match &a.value {
        Value::Scalar(s) => json!({"resultType": "scalar", "result": sample(t, s[0])}),
        Value::Vector(v) => {
            let mut rows: Vec<(&Labels, f64)> = v.at(0).collect();
            match a.order {
                Order::Labels => {}
                Order::Ascending => rows.sort_by(|x, y| x.1.total_cmp(&y.1)),
                Order::Descending => rows.sort_by(|x, y| y.1.total_cmp(&x.1)),
            }
            let result: Vec<Json> =
                rows.into_iter().map(|(l, x)| json!({"metric": labels_json(l), "value": sample(t, x)})).collect();
            json!({"resultType": "vector", "result": result})
        }
    }
}

/// A range query's answer: always a matrix (a scalar is one series
/// without labels).
fn range_data(a: &Answer) -> Json {
    let series = |l: &Labels, xs: &[Option<f64>]| {
        let values: Vec<Json> = a.ts.iter().zip(xs).filter_map(|(t, x)| x.map(|x| sample(*t, x))).collect();
        json!({"metric": labels_json(l), "values": values})
    };
    let result: Vec<Json> = match &a.value {
        Value::Scalar(s) => {
            let xs: Vec<Option<f64>> = s.iter().map(|x| Some(*x)).collect();
            vec![series(&Labels::new(), &xs)]
        }
        Value::Vector(v) => v.series.iter().map(|(l, xs)| series(l, xs)).collect(),
    };
    json!({"resultType": "matrix", "result": result})
}

/// A request's parameters (URL query and form body), once its token is
/// checked: every API route takes this, so none can forget the check.
struct Authorized(Params);

impl axum::extract::FromRequest<Arc<Server>> for Authorized {
    type Rejection = Response;

    async fn from_request(req: axum::extract::Request, s: &Arc<Server>) -> std::result::Result<Self, Response> {
        s.authorize(req.headers()).map_err(error)?;
        let raw = req.uri().query().map(str::to_string);
        let body = Bytes::from_request(req, s).await.map_err(|e| error(ServeError::BadData(e.body_text())))?;
        Ok(Authorized(Params::new(raw.as_deref(), &body)))
    }
}

impl Server {
    /// Logs a query's plans, and records the RCU its reads cost.
    fn log_plans(&self, text: &str, a: &Answer) {
        metrics::histogram!("zigzag_serve_query_read_capacity_units").record(a.report.rcu);
        if self.options.explain {
            for plan in &a.report.explain {
                tracing::info!(query = text, "plan:\n{plan}");
            }
        }
        tracing::debug!(query = text, requests = a.report.requests, rcu = a.report.rcu, "answered");
    }
}

async fn query(State(s): State<Arc<Server>>, Authorized(p): Authorized) -> Response {
    respond(
        async {
            let text = p.required("query")?.to_string();
            let now = now_ms();
            let t = p.time("time")?.unwrap_or(now);
            let a = s.bounded(&p, s.engine.query(&text, vec![t], now)).await?;
            s.log_plans(&text, &a);
            Ok(success(instant_data(&a), &a.report.infos))
        }
        .await,
    )
}

async fn query_range(State(s): State<Arc<Server>>, Authorized(p): Authorized) -> Response {
    respond(
        async {
            let text = p.required("query")?.to_string();
            let start = p.time("start")?.ok_or_else(|| ServeError::BadData("missing parameter 'start'".into()))?;
            let end = p.time("end")?.ok_or_else(|| ServeError::BadData("missing parameter 'end'".into()))?;
            let step = p.duration("step")?.ok_or_else(|| ServeError::BadData("missing parameter 'step'".into()))?;
            if end < start {
                return Err(ServeError::BadData(
                    "invalid parameter 'end': end timestamp must not be before start time".into(),
                ));
            }
            if step <= 0 {
                return Err(ServeError::BadData(
                    "invalid parameter 'step': zero or negative query resolution step widths are not accepted. Try \
                     a positive integer"
                        .into(),
                ));
            }
            if (end - start) / step >= MAX_STEPS {
                return Err(ServeError::BadData(format!(
                    "exceeded maximum resolution of {MAX_STEPS} points per timeseries. Try decreasing the query \
                     resolution (?step=XX)"
                )));
            }
            let ts: Vec<i64> =
                (0..).map_while(|k: i64| start.checked_add(k.checked_mul(step)?)).take_while(|t| *t <= end).collect();
            let a = s.bounded(&p, s.engine.query(&text, ts, now_ms())).await?;
            s.log_plans(&text, &a);
            Ok(success(range_data(&a), &a.report.infos))
        }
        .await,
    )
}

/// `start`/`end` of a metadata request, defaulting to the last hours.
/// Where label values and series are looked up: `[start, end)`, or,
/// without `start`, all the data the table keeps (Prometheus's default).
fn lookup(p: &Params) -> Result<Lookup> {
    let end = p.time("end")?;
    match p.time("start")? {
        None => Ok(Lookup::All { end }),
        Some(start) => {
            let end = end.unwrap_or_else(now_ms);
            if end < start {
                return Err(ServeError::BadData(
                    "invalid parameter 'end': end timestamp must not be before start time".into(),
                ));
            }
            Ok(Lookup::Range { start, end })
        }
    }
}

async fn labels(State(s): State<Arc<Server>>, _: Authorized) -> Response {
    success(json!(s.engine.label_names()), &[])
}

async fn label_values(State(s): State<Arc<Server>>, Path(name): Path<String>, Authorized(p): Authorized) -> Response {
    respond(
        async {
            let matches = p.all("match[]");
            let values = s.bounded(&p, s.engine.label_values(&name, &matches, lookup(&p)?, now_ms())).await?;
            Ok(success(json!(values.found), &values.infos))
        }
        .await,
    )
}

async fn series(State(s): State<Arc<Server>>, Authorized(p): Authorized) -> Response {
    respond(
        async {
            let matches = p.all("match[]");
            if matches.is_empty() {
                return Err(ServeError::BadData("no match[] parameter provided".into()));
            }
            let found = s.bounded(&p, s.engine.series(&matches, lookup(&p)?, now_ms())).await?;
            Ok(success(Json::Array(found.found.iter().map(labels_json).collect()), &found.infos))
        }
        .await,
    )
}

async fn metadata(State(s): State<Arc<Server>>, Authorized(p): Authorized) -> Response {
    let only = p.get("metric");
    let mut data = Map::new();
    for (name, kind, help) in s.engine.catalog().metadata() {
        if only.is_none_or(|m| m == name) {
            data.insert(name, json!([{"type": kind, "help": help, "unit": ""}]));
        }
    }
    success(Json::Object(data), &[])
}

async fn format_query(Authorized(p): Authorized) -> Response {
    respond(p.required("query").and_then(crate::compile::parse).map(|e| success(json!(e.prettify()), &[])))
}

/// The live page: a measure, a grouping, filters and a window, as a chart
/// and a table refreshed as new buckets land. Static (no CDN, nothing
/// fetched but this server's API, which it calls like Grafana does).
async fn page() -> axum::response::Html<&'static str> {
    axum::response::Html(include_str!("page.html"))
}

async fn buildinfo(_: Authorized) -> Response {
    success(
        json!({
            "version": PROMETHEUS_API_VERSION,
            "revision": format!("zigzag gather serve {}", env!("CARGO_PKG_VERSION")),
            "branch": "",
            "buildUser": "",
            "buildDate": "",
            "goVersion": "",
        }),
        &[],
    )
}

async fn empty_list(_: Authorized) -> Response {
    success(json!([]), &[])
}

async fn rules(_: Authorized) -> Response {
    success(json!({"groups": []}), &[])
}

async fn flags(_: Authorized) -> Response {
    success(json!({}), &[])
}
