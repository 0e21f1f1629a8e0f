//! A fault-injecting HTTP/1 proxy for the AWS emulators.
//!
//! DynamoDB Local and kinesis-local never throttle and never fail, so on their own they leave our
//! retry paths untested. Point an SDK client's endpoint (`AWS_ENDPOINT_URL_DYNAMODB`,
//! `AWS_ENDPOINT_URL_KINESIS`, or `endpoint_url`) at [`FaultProxy::url`] instead of the emulator:
//! the proxy forwards every call to the emulator unchanged, except a configurable share of calls,
//! which it answers with errors shaped exactly like the real services' (status, `__type`,
//! `x-amzn-ErrorType`, `x-amzn-RequestId`), so the SDK deserializes them into the same typed
//! variants production would see (`UpdateItemError::ProvisionedThroughputExceededException`, ...).
//!
//! Both services speak AWS JSON over `POST /`, with the operation named in the `X-Amz-Target`
//! header (`DynamoDB_20120810.UpdateItem`, `Kinesis_20131202.GetRecords`); rules match on a prefix
//! of that header, and [`FaultProxy::stats`] counts per target, so a test can assert exact totals
//! (what the emulator applied) and how many retries the faults caused.
//!
//! Decisions are reproducible: each rule draws from its own ChaCha stream seeded from the proxy's
//! seed, one draw per matching request, so the *sequence* of decisions for a rule depends only on
//! the seed. Concurrent requests may race for positions in that sequence, but the totals over a
//! given number of requests do not change.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use rand::Rng;
use std::collections::BTreeMap;
use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::{JoinHandle, JoinSet};

mod fault;
mod plan;
mod stats;

pub use fault::{dynamodb, kinesis, Fault};
use plan::{rule_states, RuleState};
pub use plan::{FaultPlan, Rule};
pub use stats::{StatsSnapshot, TargetStats};

/// The header naming the operation of an AWS JSON call.
const TARGET_HEADER: &str = "x-amz-target";

/// Idle upstream connections are closed after this long. Node's HTTP server (kinesis-local)
/// closes idle keep-alive connections after 5 s; reusing one at that instant races its close and
/// fails a request the emulator never saw, a spurious fault no rule asked for. Staying well below
/// any server's idle timeout keeps every failure the client sees one we injected.
const UPSTREAM_IDLE: Duration = Duration::from_secs(2);

struct Shared {
    upstream: SocketAddr,
    seed: u64,
    rules: Mutex<Vec<RuleState>>,
    stats: Mutex<BTreeMap<String, TargetStats>>,
    client: Client<HttpConnector, Full<Bytes>>,
    request_ids: AtomicU64,
}

/// Poisoning only means a test thread panicked mid-update; the counters are still usable.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Shared {
    fn stat(&self, target: &str, update: impl FnOnce(&mut TargetStats)) {
        let mut stats = lock(&self.stats);
        match stats.get_mut(target) {
            Some(s) => update(s),
            None => update(stats.entry(target.to_owned()).or_default()),
        }
    }

    /// Counts the call and decides its fate: `None` forwards it untouched.
    fn decide(&self, target: &str) -> Option<Fault> {
        let fault = {
            let mut rules = lock(&self.rules);
            rules.iter_mut().find(|r| target.starts_with(&r.rule.target_prefix)).and_then(|state| {
                let hit = state.rng.gen_bool(state.rule.share);
                let capped = state.rule.max_injections.is_some_and(|max| state.injections >= max);
                if !hit || capped {
                    return None;
                }
                let fault = state.rule.faults[(state.injections % state.rule.faults.len() as u64) as usize].clone();
                state.injections += 1;
                Some(fault)
            })
        };
        self.stat(target, |s| {
            s.requests += 1;
            match &fault {
                Some(f) => *s.injected.entry(f.label()).or_default() += 1,
                None => s.passed += 1,
            }
        });
        fault
    }

    /// Sends the call to the emulator as the client sent it (method, path, headers including Host
    /// and X-Amz-Target, body) and buffers the answer.
    async fn forward(
        &self,
        target: &str,
        parts: &hyper::http::request::Parts,
        body: Bytes,
    ) -> Result<Response<Full<Bytes>>, String> {
        let path = parts.uri.path_and_query().map(|p| p.as_str()).unwrap_or("/");
        let uri = format!("http://{}{}", self.upstream, path);
        let mut req = Request::builder()
            .method(parts.method.clone())
            .uri(uri)
            .body(Full::new(body))
            .map_err(|e| e.to_string())?;
        *req.headers_mut() = parts.headers.clone();
        // Carries hyper's record of the header names' original case, so the emulator sees them as
        // the client wrote them.
        *req.extensions_mut() = parts.extensions.clone();
        self.stat(target, |s| s.forwarded += 1);
        let result = async {
            let resp = self.client.request(req).await.map_err(|e| format!("{e:?}"))?;
            let (parts, body) = resp.into_parts();
            let body = body.collect().await.map_err(|e| e.to_string())?.to_bytes();
            Ok::<_, String>(Response::from_parts(parts, Full::new(body)))
        }
        .await;
        match &result {
            Ok(resp) => self.stat(target, |s| *s.upstream_status.entry(resp.status().as_u16()).or_default() += 1),
            Err(_) => self.stat(target, |s| s.upstream_failures += 1),
        }
        result
    }

    /// An error answer as AWS sends it. The SDK takes the code from `x-amzn-ErrorType` before
    /// `__type`, so both carry the shape; the request id is what the SDK reports as `request_id()`.
    fn error_response(
        &self,
        content_type: Option<&hyper::header::HeaderValue>,
        status: u16,
        shape: &str,
        message: &str,
    ) -> Response<Full<Bytes>> {
        let n = self.request_ids.fetch_add(1, Ordering::Relaxed);
        let body = serde_json::json!({ "__type": shape, "message": message }).to_string();
        let mut resp = Response::new(Full::new(Bytes::from(body)));
        *resp.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let headers = resp.headers_mut();
        let json = hyper::header::HeaderValue::from_static("application/x-amz-json-1.0");
        headers.insert(hyper::header::CONTENT_TYPE, content_type.cloned().unwrap_or(json));
        headers.insert("x-amzn-requestid", header_value(&format!("fa017000-0000-4000-8000-{:012x}", n ^ self.seed)));
        headers.insert("x-amzn-errortype", header_value(shape));
        resp
    }

    async fn handle(self: Arc<Self>, req: Request<Incoming>) -> Result<Response<Full<Bytes>>, ConnectionDropped> {
        let target = req.headers().get(TARGET_HEADER).and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
        let (parts, body) = req.into_parts();
        // Read the whole body before deciding, so a client that gives up mid-request uses no draw.
        let body = body.collect().await.map_err(|_| ConnectionDropped)?.to_bytes();
        let content_type = parts.headers.get(hyper::header::CONTENT_TYPE);
        let upstream_failed = |e: String| {
            let mut resp = Response::new(Full::new(Bytes::from(format!(
                "fault proxy: upstream {} did not answer: {e}",
                self.upstream
            ))));
            *resp.status_mut() = StatusCode::BAD_GATEWAY;
            resp
        };
        match self.decide(&target) {
            None => Ok(self.forward(&target, &parts, body).await.unwrap_or_else(upstream_failed)),
            Some(Fault::Delay(d)) => {
                tokio::time::sleep(d).await;
                Ok(self.forward(&target, &parts, body).await.unwrap_or_else(upstream_failed))
            }
            Some(Fault::Error { status, shape, message }) => {
                Ok(self.error_response(content_type, status, &shape, &message))
            }
            Some(Fault::ApplyThenError { status, shape, message }) => {
                let _ = self.forward(&target, &parts, body).await;
                Ok(self.error_response(content_type, status, &shape, &message))
            }
            Some(Fault::ApplyThenTimeout { hold }) => {
                let _ = self.forward(&target, &parts, body).await;
                tokio::time::sleep(hold).await;
                Err(ConnectionDropped)
            }
            Some(Fault::Reset) => Err(ConnectionDropped),
        }
    }
}

fn header_value(s: &str) -> hyper::header::HeaderValue {
    hyper::header::HeaderValue::from_str(s).unwrap_or_else(|_| hyper::header::HeaderValue::from_static("invalid"))
}

/// Returned by the service to make hyper close the connection without an answer.
#[derive(Debug)]
struct ConnectionDropped;

impl std::fmt::Display for ConnectionDropped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("fault proxy closed the connection")
    }
}

impl std::error::Error for ConnectionDropped {}

/// A running proxy on `127.0.0.1:<ephemeral>`. Dropping it (or [`FaultProxy::shutdown`]) stops
/// the listener and every connection, including held ones.
pub struct FaultProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for FaultProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultProxy").field("addr", &self.addr).field("upstream", &self.shared.upstream).finish()
    }
}

impl FaultProxy {
    /// Starts a proxy in front of `upstream` (the emulator) on the current tokio runtime.
    pub async fn start(upstream: SocketAddr, rules: Vec<Rule>, seed: u64) -> io::Result<FaultProxy> {
        Self::start_plan(upstream, FaultPlan { rules, seed }).await
    }

    /// [`FaultProxy::start`] with the rules and seed in one value.
    pub async fn start_plan(upstream: SocketAddr, plan: FaultPlan) -> io::Result<FaultProxy> {
        let rules = rule_states(plan.rules, plan.seed)?;
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
        let addr = listener.local_addr()?;
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(UPSTREAM_IDLE)
            .pool_timer(TokioTimer::new())
            .http1_preserve_header_case(true)
            .build(connector);
        let shared = Arc::new(Shared {
            upstream,
            seed: plan.seed,
            rules: Mutex::new(rules),
            stats: Mutex::new(BTreeMap::new()),
            client,
            request_ids: AtomicU64::new(0),
        });
        let (stop, stopped) = oneshot::channel();
        let task = tokio::spawn(serve(listener, shared.clone(), stopped));
        Ok(FaultProxy { addr, shared, stop: Some(stop), task: Some(task) })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The endpoint URL for the SDK (`http://127.0.0.1:PORT`).
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn upstream(&self) -> SocketAddr {
        self.shared.upstream
    }

    pub fn stats(&self) -> StatsSnapshot {
        StatsSnapshot { targets: lock(&self.shared.stats).clone() }
    }

    /// Zeroes the counters, e.g. after setting up tables and streams through the proxy.
    pub fn reset_stats(&self) {
        lock(&self.shared.stats).clear();
    }

    /// Replaces the rules, e.g. to throttle only a phase of a test. The new rules start their draws
    /// and injection counts afresh from the proxy's seed; calls in flight keep their decision.
    pub fn set_rules(&self, rules: Vec<Rule>) -> io::Result<()> {
        let states = rule_states(rules, self.shared.seed)?;
        *lock(&self.shared.rules) = states;
        Ok(())
    }

    /// Stops accepting, closes every connection (held ones too) and waits until the listener is
    /// closed.
    pub async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        // Dropping the sender alone would stop the loop at its next poll; aborting also covers a
        // runtime that is itself shutting down.
        self.stop.take();
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// Accepts connections until told to stop. Connections live in a JoinSet owned by this task, so
/// ending (or aborting) it ends them all.
async fn serve(listener: TcpListener, shared: Arc<Shared>, mut stopped: oneshot::Receiver<()>) {
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            _ = &mut stopped => break,
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    conns.spawn(serve_connection(stream, shared.clone()));
                }
                // Out of file descriptors and the like: back off instead of spinning.
                Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            },
        }
    }
    drop(listener);
    conns.shutdown().await;
}

async fn serve_connection(stream: TcpStream, shared: Arc<Shared>) {
    let _ = stream.set_nodelay(true);
    let service = hyper::service::service_fn(move |req| shared.clone().handle(req));
    let _ = hyper::server::conn::http1::Builder::new()
        .keep_alive(true)
        .preserve_header_case(true)
        // hyper's default 30 s limit would also close idle keep-alive connections, racing the
        // SDK's pool (idle for 90 s) and failing calls no rule chose to fail.
        .header_read_timeout(None)
        .timer(TokioTimer::new())
        .serve_connection(TokioIo::new(stream), service)
        .await;
}
