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
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::{JoinHandle, JoinSet};

/// The header naming the operation of an AWS JSON call.
const TARGET_HEADER: &str = "x-amz-target";

/// Idle upstream connections are closed after this long. Node's HTTP server (kinesis-local)
/// closes idle keep-alive connections after 5 s; reusing one at that instant races its close and
/// fails a request the emulator never saw, a spurious fault no rule asked for. Staying well below
/// any server's idle timeout keeps every failure the client sees one we injected.
const UPSTREAM_IDLE: Duration = Duration::from_secs(2);

/// What happens to a request a rule picked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// Answer with an AWS error without forwarding: the emulator never sees the call, exactly like
    /// a throttled call that AWS rejected up front.
    Error { status: u16, shape: String, message: String },
    /// Forward the call (so the emulator applies it), wait for its answer, then answer with this
    /// error instead: a write that succeeded although the client was told it failed, which its
    /// retry must not count twice. Unlike [`Fault::ApplyThenTimeout`] it costs no waiting.
    ApplyThenError { status: u16, shape: String, message: String },
    /// Forward the call (so the emulator applies it), discard the answer, keep the client waiting
    /// for `hold` and then close the connection: the client times out (when `hold` exceeds its
    /// attempt timeout) although the write happened.
    ApplyThenTimeout { hold: Duration },
    /// Wait this long before forwarding: a slow service, without failing anything.
    Delay(Duration),
    /// Close the connection without an answer and without forwarding: a broken connection, which
    /// the SDK reports as a dispatch/response failure rather than a service error.
    Reset,
}

impl Fault {
    /// The key under which [`TargetStats::injected`] counts this fault: the error shape for an
    /// error, so tests can count throttles by shape, and a fixed name otherwise.
    pub fn label(&self) -> String {
        match self {
            Fault::Error { shape, .. } => shape.clone(),
            Fault::ApplyThenError { shape, .. } => format!("apply-then-error:{shape}"),
            Fault::ApplyThenTimeout { .. } => "apply-then-timeout".to_owned(),
            Fault::Delay(_) => "delay".to_owned(),
            Fault::Reset => "reset".to_owned(),
        }
    }

    /// Whether the emulator sees (and applies) a request this fault picked.
    pub fn forwards(&self) -> bool {
        matches!(self, Fault::ApplyThenError { .. } | Fault::ApplyThenTimeout { .. } | Fault::Delay(_))
    }

    fn error(status: u16, shape: &str, message: &str) -> Fault {
        Fault::Error { status, shape: shape.to_owned(), message: message.to_owned() }
    }
}

/// Targets and real error shapes of DynamoDB (awsJson1_0). The SDK strips everything up to `#`
/// from the error code (`sanitize_error_code`), so a namespaced shape lands in the typed variant of
/// its bare name.
pub mod dynamodb {
    use super::Fault;

    /// Prefix of every DynamoDB target: a rule with it matches all DynamoDB calls.
    pub const TARGET_PREFIX: &str = "DynamoDB_20120810.";
    pub const UPDATE_ITEM: &str = "DynamoDB_20120810.UpdateItem";
    pub const PUT_ITEM: &str = "DynamoDB_20120810.PutItem";
    pub const GET_ITEM: &str = "DynamoDB_20120810.GetItem";
    pub const BATCH_WRITE_ITEM: &str = "DynamoDB_20120810.BatchWriteItem";
    pub const BATCH_GET_ITEM: &str = "DynamoDB_20120810.BatchGetItem";
    pub const QUERY: &str = "DynamoDB_20120810.Query";
    pub const SCAN: &str = "DynamoDB_20120810.Scan";
    pub const TRANSACT_WRITE_ITEMS: &str = "DynamoDB_20120810.TransactWriteItems";
    pub const DESCRIBE_TABLE: &str = "DynamoDB_20120810.DescribeTable";
    pub const CREATE_TABLE: &str = "DynamoDB_20120810.CreateTable";

    pub const PROVISIONED_THROUGHPUT_EXCEEDED: &str =
        "com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException";
    pub const THROTTLING: &str = "com.amazonaws.dynamodb.v20120810#ThrottlingException";
    /// The same throttle as [`THROTTLING`] from the request router rather than the table.
    pub const CORAL_THROTTLING: &str = "com.amazon.coral.availability#ThrottlingException";
    pub const REQUEST_LIMIT_EXCEEDED: &str = "com.amazonaws.dynamodb.v20120810#RequestLimitExceeded";
    pub const INTERNAL_SERVER_ERROR: &str = "com.amazonaws.dynamodb.v20120810#InternalServerError";
    pub const SERVICE_UNAVAILABLE: &str = "com.amazon.coral.availability#ServiceUnavailableException";

    /// 400: a provisioned table's capacity was exceeded.
    pub fn provisioned_throughput_exceeded() -> Fault {
        Fault::error(
            400,
            PROVISIONED_THROUGHPUT_EXCEEDED,
            "The level of configured provisioned throughput for the table was exceeded. \
             Consider increasing your provisioning level with the UpdateTable API.",
        )
    }

    /// 400: an on-demand table (or a hot partition) is throttled.
    pub fn throttling() -> Fault {
        Fault::error(
            400,
            THROTTLING,
            "Throughput exceeds the current capacity of your table or index. DynamoDB is automatically \
             scaling your table or index so please try again shortly. If exceptions persist, check if \
             you have a hot key: \
             https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/bp-partition-key-design.html",
        )
    }

    /// 400: the router's throttle, namespaced `com.amazon.coral.availability`.
    pub fn coral_throttling() -> Fault {
        Fault::error(400, CORAL_THROTTLING, "Rate of requests exceeds the allowed throughput.")
    }

    /// 400: the account-level request limit.
    pub fn request_limit_exceeded() -> Fault {
        Fault::error(
            400,
            REQUEST_LIMIT_EXCEEDED,
            "Throughput exceeds the current throughput limit for your account. \
             Please contact AWS Support at https://aws.amazon.com/support request a limit increase",
        )
    }

    /// 500: a server-side failure.
    pub fn internal_server_error() -> Fault {
        Fault::error(500, INTERNAL_SERVER_ERROR, "Internal server error")
    }

    /// 503: the service is briefly unavailable.
    pub fn service_unavailable() -> Fault {
        Fault::error(503, SERVICE_UNAVAILABLE, "Service Unavailable")
    }
}

/// Targets and real error shapes of Kinesis (awsJson1_1), whose `__type` carries no namespace.
pub mod kinesis {
    use super::Fault;

    /// Prefix of every Kinesis target: a rule with it matches all Kinesis calls.
    pub const TARGET_PREFIX: &str = "Kinesis_20131202.";
    pub const GET_RECORDS: &str = "Kinesis_20131202.GetRecords";
    pub const GET_SHARD_ITERATOR: &str = "Kinesis_20131202.GetShardIterator";
    pub const LIST_SHARDS: &str = "Kinesis_20131202.ListShards";
    pub const PUT_RECORDS: &str = "Kinesis_20131202.PutRecords";
    pub const PUT_RECORD: &str = "Kinesis_20131202.PutRecord";
    pub const DESCRIBE_STREAM_SUMMARY: &str = "Kinesis_20131202.DescribeStreamSummary";
    pub const DESCRIBE_STREAM: &str = "Kinesis_20131202.DescribeStream";
    pub const CREATE_STREAM: &str = "Kinesis_20131202.CreateStream";

    pub const PROVISIONED_THROUGHPUT_EXCEEDED: &str = "ProvisionedThroughputExceededException";
    pub const LIMIT_EXCEEDED: &str = "LimitExceededException";
    /// The common (unmodelled) 500 every AWS JSON service may send.
    pub const INTERNAL_FAILURE: &str = "InternalFailure";
    /// Kinesis's modelled 500, which the SDK turns into a typed `InternalFailureException` variant.
    pub const INTERNAL_FAILURE_EXCEPTION: &str = "InternalFailureException";
    pub const SERVICE_UNAVAILABLE: &str = "ServiceUnavailable";

    /// The account id the emulators report.
    pub const ACCOUNT: &str = "000000000000";

    /// 400: a shard's read (5 calls/s, 2 MB/s) or write (1000 records/s, 1 MB/s) limit.
    pub fn provisioned_throughput_exceeded(stream: &str, shard_id: &str) -> Fault {
        Fault::error(
            400,
            PROVISIONED_THROUGHPUT_EXCEEDED,
            &format!("Rate exceeded for shard {shard_id} in stream {stream} under account {ACCOUNT}."),
        )
    }

    /// 400: a control-plane rate limit (ListShards, DescribeStreamSummary, ...).
    pub fn limit_exceeded(stream: &str) -> Fault {
        Fault::error(400, LIMIT_EXCEEDED, &format!("Rate exceeded for stream {stream} under account {ACCOUNT}."))
    }

    /// 500: the common `InternalFailure` (the SDK keeps it unhandled, code `InternalFailure`).
    pub fn internal_failure() -> Fault {
        Fault::error(500, INTERNAL_FAILURE, "Internal service failure.")
    }

    /// 500: Kinesis's modelled `InternalFailureException`.
    pub fn internal_failure_exception() -> Fault {
        Fault::error(500, INTERNAL_FAILURE_EXCEPTION, "Internal service failure.")
    }

    /// 503: the service is briefly unavailable.
    pub fn service_unavailable() -> Fault {
        Fault::error(503, SERVICE_UNAVAILABLE, "The request has failed due to a temporary failure of the server.")
    }
}

/// Which calls to disturb, how often, and how.
#[derive(Debug, Clone)]
pub struct Rule {
    /// Matches calls whose `X-Amz-Target` starts with this: a whole operation
    /// (`DynamoDB_20120810.UpdateItem`) or a whole service (`Kinesis_20131202.`). Empty matches
    /// every call, including those without a target. The first matching rule decides.
    pub target_prefix: String,
    /// Probability (0..=1) that a matching call gets a fault.
    pub share: f64,
    /// The faults to apply, taken in turn (round-robin over this rule's injections), so a test sees
    /// every listed shape and can predict their counts.
    pub faults: Vec<Fault>,
    /// Stop injecting after this many faults (the draws go on, so the sequence stays the same).
    pub max_injections: Option<u64>,
}

impl Rule {
    pub fn new(target_prefix: impl Into<String>, share: f64, faults: Vec<Fault>) -> Rule {
        Rule { target_prefix: target_prefix.into(), share, faults, max_injections: None }
    }

    pub fn max_injections(mut self, max: u64) -> Rule {
        self.max_injections = Some(max);
        self
    }

    fn validate(&self) -> io::Result<()> {
        if !(0.0..=1.0).contains(&self.share) {
            return Err(invalid(format!("rule {:?}: share {} is not within 0..=1", self.target_prefix, self.share)));
        }
        if self.share > 0.0 && self.faults.is_empty() {
            return Err(invalid(format!("rule {:?}: a share above 0 needs at least one fault", self.target_prefix)));
        }
        for fault in &self.faults {
            if let Fault::Error { status, .. } | Fault::ApplyThenError { status, .. } = fault {
                if StatusCode::from_u16(*status).is_err() {
                    return Err(invalid(format!("rule {:?}: invalid HTTP status {status}", self.target_prefix)));
                }
            }
        }
        Ok(())
    }
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

/// The rules of a proxy with the seed of their random draws.
#[derive(Debug, Clone, Default)]
pub struct FaultPlan {
    pub rules: Vec<Rule>,
    pub seed: u64,
}

impl FaultPlan {
    pub fn new(seed: u64) -> FaultPlan {
        FaultPlan { rules: Vec::new(), seed }
    }

    pub fn rule(mut self, rule: Rule) -> FaultPlan {
        self.rules.push(rule);
        self
    }
}

/// Counters of one `X-Amz-Target` value. Always `requests == passed + injected_total()`; the
/// emulator saw `forwarded` of them (`passed` plus the faults that forward).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TargetStats {
    /// Calls received from the client (each retry counts again).
    pub requests: u64,
    /// Calls forwarded untouched (no fault picked them).
    pub passed: u64,
    /// Faults applied, by [`Fault::label`] (the error shape for errors).
    pub injected: BTreeMap<String, u64>,
    /// Calls sent to the emulator: untouched ones and those of forwarding faults.
    pub forwarded: u64,
    /// The emulator's answers by HTTP status.
    pub upstream_status: BTreeMap<u16, u64>,
    /// Forwarded calls the emulator did not answer (connection failed); the client got a 502 unless
    /// a fault had already decided its answer.
    pub upstream_failures: u64,
}

impl TargetStats {
    pub fn injected_total(&self) -> u64 {
        self.injected.values().sum()
    }

    /// Faults with this label (an error shape, or `"delay"`, ...).
    pub fn injected(&self, label: &str) -> u64 {
        self.injected.get(label).copied().unwrap_or(0)
    }

    fn add(&mut self, other: &TargetStats) {
        self.requests += other.requests;
        self.passed += other.passed;
        self.forwarded += other.forwarded;
        self.upstream_failures += other.upstream_failures;
        for (label, n) in &other.injected {
            *self.injected.entry(label.clone()).or_default() += n;
        }
        for (status, n) in &other.upstream_status {
            *self.upstream_status.entry(*status).or_default() += n;
        }
    }
}

/// A copy of the proxy's counters, keyed by `X-Amz-Target` (empty for calls without one).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StatsSnapshot {
    pub targets: BTreeMap<String, TargetStats>,
}

impl StatsSnapshot {
    /// The counters of exactly this target (zero if it was never called).
    pub fn target(&self, target: &str) -> TargetStats {
        self.targets.get(target).cloned().unwrap_or_default()
    }

    /// The counters of all targets starting with `prefix`, summed (`""` sums everything).
    pub fn matching(&self, prefix: &str) -> TargetStats {
        let mut sum = TargetStats::default();
        for stats in self.targets.iter().filter(|(t, _)| t.starts_with(prefix)).map(|(_, s)| s) {
            sum.add(stats);
        }
        sum
    }

    /// All targets summed.
    pub fn total(&self) -> TargetStats {
        self.matching("")
    }
}

/// A rule with the state of its draws.
struct RuleState {
    rule: Rule,
    rng: ChaCha8Rng,
    injections: u64,
}

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

fn rule_states(rules: Vec<Rule>, seed: u64) -> io::Result<Vec<RuleState>> {
    rules
        .into_iter()
        .enumerate()
        .map(|(i, rule)| {
            rule.validate()?;
            // One independent stream per rule: calls of one operation do not shift the draws of
            // another, whose call count may depend on timing (e.g. GetRecords polling).
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            rng.set_stream(i as u64);
            Ok(RuleState { rule, rng, injections: 0 })
        })
        .collect()
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
