//! Tests of the fault-injecting proxy against a tiny recording upstream (no emulator needed), and
//! of how the real SDK clients parse the errors it injects: typed variants are the point, since
//! our retry logic and the tests' retry counts rely on them.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use zigzag_tests::fault_proxy::{dynamodb, kinesis, Fault, FaultPlan, FaultProxy, Rule};

/// One request as the upstream received it.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    uri: String,
    headers: Vec<(String, Vec<u8>)>,
    body: Bytes,
}

impl Seen {
    fn target(&self) -> &str {
        self.headers
            .iter()
            .find(|(n, _)| n == "x-amz-target")
            .map(|(_, v)| std::str::from_utf8(v).unwrap())
            .unwrap_or("")
    }
}

/// A stand-in emulator: records every request and answers 200 with a JSON body naming the call.
struct Upstream {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Upstream {
    async fn start() -> Upstream {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let record = seen.clone();
        let task = tokio::spawn(async move {
            let mut conns = tokio::task::JoinSet::new();
            loop {
                let (stream, _) = listener.accept().await.unwrap();
                let record = record.clone();
                conns.spawn(async move {
                    let service = hyper::service::service_fn(move |req| answer(record.clone(), req));
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Upstream { addr, seen, task }
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    fn count(&self, target: &str) -> usize {
        self.seen().iter().filter(|s| s.target() == target).count()
    }
}

const UPSTREAM_HEADERS: &[(&str, &str)] = &[
    ("content-type", "application/x-amz-json-1.0"),
    ("x-amzn-requestid", "UPSTREAMREQUESTID0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"),
    ("x-amz-crc32", "2745614147"),
    ("x-multi", "one"),
    ("x-multi", "two"),
];

async fn answer(record: Arc<Mutex<Vec<Seen>>>, req: Request<Incoming>) -> Result<Response<Full<Bytes>>, hyper::Error> {
    let (parts, body) = req.into_parts();
    let body = body.collect().await?.to_bytes();
    let headers = parts.headers.iter().map(|(n, v)| (n.as_str().to_owned(), v.as_bytes().to_vec())).collect();
    let seen = Seen { method: parts.method.to_string(), uri: parts.uri.to_string(), headers, body };
    let reply = format!(r#"{{"Echo":"{}","Bytes":{}}}"#, seen.target(), seen.body.len());
    record.lock().unwrap().push(seen);
    let mut resp = Response::new(Full::new(Bytes::from(reply)));
    for (n, v) in UPSTREAM_HEADERS {
        resp.headers_mut().append(*n, v.parse().unwrap());
    }
    Ok(resp)
}

fn client() -> Client<HttpConnector, Full<Bytes>> {
    Client::builder(TokioExecutor::new()).build_http()
}

/// An AWS JSON call as the SDK would send it.
fn call(url: &str, target: &str, body: &str) -> Request<Full<Bytes>> {
    let json = if target.starts_with("Kinesis") { "application/x-amz-json-1.1" } else { "application/x-amz-json-1.0" };
    Request::post(format!("{url}/"))
        .header("content-type", json)
        .header("x-amz-target", target)
        .body(Full::new(Bytes::from(body.to_owned())))
        .unwrap()
}

struct Answer {
    status: u16,
    headers: Vec<(String, Vec<u8>)>,
    body: Bytes,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| std::str::from_utf8(v).unwrap())
    }
}

async fn send(client: &Client<HttpConnector, Full<Bytes>>, req: Request<Full<Bytes>>) -> Answer {
    let resp = client.request(req).await.unwrap();
    let (parts, body) = resp.into_parts();
    let body = body.collect().await.unwrap().to_bytes();
    let headers = parts.headers.iter().map(|(n, v)| (n.as_str().to_owned(), v.as_bytes().to_vec())).collect();
    Answer { status: parts.status.as_u16(), headers, body }
}

fn sorted(mut headers: Vec<(String, Vec<u8>)>) -> Vec<(String, Vec<u8>)> {
    headers.sort_by(|a, b| a.0.cmp(&b.0)); // stable: repeated headers keep their order
    headers
}

#[tokio::test]
async fn share_zero_forwards_requests_and_answers_byte_exact() {
    let upstream = Upstream::start().await;
    let proxy =
        FaultProxy::start(upstream.addr, vec![Rule::new("", 0.0, vec![dynamodb::throttling()])], 1).await.unwrap();
    let body = "{\"TableName\":\"clicks\",\"Key\":{\"pk\":{\"S\":\"ä/€\"}}}\n";
    let sent: Vec<(&str, &str)> = vec![
        ("host", "dynamodb.us-east-1.amazonaws.com"),
        ("content-type", "application/x-amz-json-1.0"),
        ("x-amz-target", dynamodb::UPDATE_ITEM),
        ("x-amz-date", "20240101T000000Z"),
        (
            "authorization",
            "AWS4-HMAC-SHA256 Credential=AKID/20240101/us-east-1/dynamodb/aws4_request, \
             SignedHeaders=content-type;host;x-amz-date;x-amz-target, Signature=00ff",
        ),
        ("amz-sdk-invocation-id", "8c0c0a4e-0d52-4a4b-9b9b-3b0a4c1f3d2e"),
        ("amz-sdk-request", "attempt=1; max=1"),
        ("user-agent", "aws-sdk-rust/1.3 os/linux lang/rust/1.80"),
        ("x-multi", "first"),
        ("x-multi", "second"),
    ];
    let mut req =
        Request::post(format!("{}/some/path?a=1&b=%2F", proxy.url())).body(Full::new(Bytes::from(body))).unwrap();
    for (n, v) in &sent {
        req.headers_mut().append(*n, v.parse().unwrap());
    }
    let answer = send(&client(), req).await;

    let seen = upstream.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].method, "POST");
    assert_eq!(seen[0].uri, "/some/path?a=1&b=%2F");
    assert_eq!(seen[0].body, Bytes::from(body));
    let mut expected: Vec<(String, Vec<u8>)> =
        sent.iter().map(|(n, v)| (n.to_string(), v.as_bytes().to_vec())).collect();
    expected.push(("content-length".into(), body.len().to_string().into_bytes()));
    assert_eq!(sorted(seen[0].headers.clone()), sorted(expected), "the upstream sees the client's headers unchanged");

    assert_eq!(answer.status, 200);
    let reply = format!(r#"{{"Echo":"{}","Bytes":{}}}"#, dynamodb::UPDATE_ITEM, body.len());
    assert_eq!(answer.body, Bytes::from(reply.clone()));
    let mut expected: Vec<(String, Vec<u8>)> =
        UPSTREAM_HEADERS.iter().map(|(n, v)| (n.to_string(), v.as_bytes().to_vec())).collect();
    expected.push(("content-length".into(), reply.len().to_string().into_bytes()));
    let date = answer.header("date").expect("the upstream's date header").as_bytes().to_vec();
    expected.push(("date".into(), date));
    assert_eq!(sorted(answer.headers.clone()), sorted(expected), "the client sees the upstream's headers unchanged");

    let stats = proxy.stats().target(dynamodb::UPDATE_ITEM);
    assert_eq!((stats.requests, stats.passed, stats.forwarded, stats.injected_total()), (1, 1, 1, 0));
    assert_eq!(stats.upstream_status.get(&200), Some(&1));
    proxy.shutdown().await;
}

/// Reads one HTTP/1.1 message (head and Content-Length body) from a raw socket.
async fn read_message(stream: &mut tokio::net::TcpStream) -> Vec<u8> {
    use tokio::io::AsyncReadExt;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = std::str::from_utf8(&buf[..end]).unwrap().to_ascii_lowercase();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map(|v| v.trim().parse().unwrap())
                .unwrap_or(0);
            if buf.len() >= end + 4 + len {
                buf.truncate(end + 4 + len);
                return buf;
            }
        }
        let n = stream.read(&mut chunk).await.unwrap();
        assert!(n > 0, "connection closed mid-message: {:?}", String::from_utf8_lossy(&buf));
        buf.extend_from_slice(&chunk[..n]);
    }
}

#[tokio::test]
async fn passing_calls_keep_their_bytes_including_header_case() {
    use tokio::io::AsyncWriteExt;
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let upstream_addr = listener.local_addr().unwrap();
    let response: &[u8] = b"HTTP/1.1 200 OK\r\nServer: Jetty(12.0.0)\r\nDate: Mon, 01 Jan 2024 00:00:00 GMT\r\n\
        Content-Type: application/x-amz-json-1.0\r\nx-amzn-RequestId: REQ123\r\nx-amz-crc32: 2745614147\r\n\
        Content-Length: 2\r\n\r\n{}";
    let upstream = tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        let request = read_message(&mut stream).await;
        stream.write_all(response).await.unwrap();
        request
    });
    let proxy = FaultProxy::start(upstream_addr, vec![], 0).await.unwrap();
    let request: &[u8] = b"POST /?x=1 HTTP/1.1\r\nHost: 127.0.0.1:8000\r\nX-Amz-Target: DynamoDB_20120810.GetItem\r\n\
        Content-Type: application/x-amz-json-1.0\r\nX-Amz-Date: 20240101T000000Z\r\n\
        Authorization: AWS4-HMAC-SHA256 Signature=00ff\r\nContent-Length: 17\r\n\r\n{\"TableName\":\"t\"}";
    let mut client = tokio::net::TcpStream::connect(proxy.addr()).await.unwrap();
    client.write_all(request).await.unwrap();
    let answer = read_message(&mut client).await;
    assert_eq!(String::from_utf8_lossy(&upstream.await.unwrap()), String::from_utf8_lossy(request));
    assert_eq!(String::from_utf8_lossy(&answer), String::from_utf8_lossy(response));
}

#[tokio::test]
async fn ten_megabyte_bodies_pass_both_ways() {
    use tokio::io::AsyncWriteExt;
    const BIG: usize = 10 * 1024 * 1024;
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let upstream_addr = listener.local_addr().unwrap();
    let upstream = tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        let request = read_message(&mut stream).await;
        let head =
            format!("HTTP/1.1 200 OK\r\nContent-Type: application/x-amz-json-1.1\r\nContent-Length: {BIG}\r\n\r\n");
        stream.write_all(head.as_bytes()).await.unwrap();
        stream.write_all(&vec![b'r'; BIG]).await.unwrap();
        request.len()
    });
    let proxy = FaultProxy::start(upstream_addr, vec![], 0).await.unwrap();
    let body = "p".repeat(BIG);
    let answer = send(&client(), call(&proxy.url(), kinesis::PUT_RECORDS, &body)).await;
    assert!(upstream.await.unwrap() > BIG, "the whole request body reached the upstream");
    assert_eq!(answer.status, 200);
    assert_eq!(answer.body.len(), BIG);
    assert!(answer.body.iter().all(|b| *b == b'r'));
}

#[tokio::test]
async fn share_one_answers_matching_targets_with_the_error_and_passes_the_rest() {
    let upstream = Upstream::start().await;
    let rules = vec![
        Rule::new(dynamodb::UPDATE_ITEM, 1.0, vec![dynamodb::provisioned_throughput_exceeded()]),
        Rule::new(
            kinesis::TARGET_PREFIX,
            1.0,
            vec![kinesis::provisioned_throughput_exceeded("clicks", "shardId-000000000000")],
        ),
    ];
    let proxy = FaultProxy::start(upstream.addr, rules, 7).await.unwrap();
    let client = client();

    for _ in 0..3 {
        let a = send(&client, call(&proxy.url(), dynamodb::UPDATE_ITEM, r#"{"TableName":"t"}"#)).await;
        assert_eq!(a.status, 400);
        assert_eq!(a.header("content-type"), Some("application/x-amz-json-1.0"));
        assert_eq!(a.header("x-amzn-errortype"), Some(dynamodb::PROVISIONED_THROUGHPUT_EXCEEDED));
        assert!(a.header("x-amzn-requestid").is_some_and(|id| !id.is_empty()));
        let expected = format!(
            r#"{{"__type":"{}","message":"{}"}}"#,
            dynamodb::PROVISIONED_THROUGHPUT_EXCEEDED,
            "The level of configured provisioned throughput for the table was exceeded. Consider increasing your \
             provisioning level with the UpdateTable API."
        );
        assert_eq!(a.body, Bytes::from(expected));
    }
    let k = send(&client, call(&proxy.url(), kinesis::GET_RECORDS, r#"{"ShardIterator":"x"}"#)).await;
    assert_eq!(k.status, 400);
    assert_eq!(k.header("content-type"), Some("application/x-amz-json-1.1"));
    assert_eq!(k.header("x-amzn-errortype"), Some("ProvisionedThroughputExceededException"));
    assert_eq!(
        k.body,
        Bytes::from(concat!(
            r#"{"__type":"ProvisionedThroughputExceededException","#,
            r#""message":"Rate exceeded for shard shardId-000000000000 in stream clicks under account 000000000000."}"#
        ))
    );

    for target in [dynamodb::GET_ITEM, dynamodb::BATCH_WRITE_ITEM] {
        let a = send(&client, call(&proxy.url(), target, "{}")).await;
        assert_eq!(a.status, 200);
        assert_eq!(a.body, Bytes::from(format!(r#"{{"Echo":"{target}","Bytes":2}}"#)));
    }

    assert_eq!(upstream.count(dynamodb::UPDATE_ITEM), 0, "a rejected call never reaches the emulator");
    assert_eq!(upstream.count(kinesis::GET_RECORDS), 0);
    assert_eq!(upstream.seen().len(), 2);
    let stats = proxy.stats();
    let update = stats.target(dynamodb::UPDATE_ITEM);
    assert_eq!((update.requests, update.passed, update.forwarded), (3, 0, 0));
    assert_eq!(update.injected(dynamodb::PROVISIONED_THROUGHPUT_EXCEEDED), 3);
    assert_eq!(stats.matching(kinesis::TARGET_PREFIX).injected(kinesis::PROVISIONED_THROUGHPUT_EXCEEDED), 1);
    let total = stats.total();
    assert_eq!((total.requests, total.passed, total.forwarded, total.injected_total()), (6, 2, 2, 4));
}

/// Sends `n` calls one after another and returns their statuses in order.
async fn statuses(proxy: &FaultProxy, n: usize) -> Vec<u16> {
    let client = client();
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        out.push(send(&client, call(&proxy.url(), dynamodb::UPDATE_ITEM, &format!("{{\"n\":{i}}}"))).await.status);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_share_injects_within_its_band_reproducibly_and_the_counts_add_up() {
    let upstream = Upstream::start().await;
    let rules = || vec![Rule::new(dynamodb::TARGET_PREFIX, 0.3, vec![dynamodb::throttling()])];
    let proxy = FaultProxy::start(upstream.addr, rules(), 42).await.unwrap();
    let first = statuses(&proxy, 1000).await;
    let injected = first.iter().filter(|s| **s == 400).count() as u64;
    assert!((230..=370).contains(&injected), "0.3 of 1000 should inject about 300, injected {injected}");
    assert_eq!(first.iter().filter(|s| **s == 200).count() as u64, 1000 - injected);

    let stats = proxy.stats().target(dynamodb::UPDATE_ITEM);
    assert_eq!(stats.requests, 1000);
    assert_eq!(stats.injected(dynamodb::THROTTLING), injected);
    assert_eq!(stats.passed + stats.injected_total(), 1000);
    assert_eq!(stats.forwarded, stats.passed);
    assert_eq!(upstream.count(dynamodb::UPDATE_ITEM) as u64, stats.forwarded);

    // The same seed gives the same decisions, call by call; another seed does not.
    let again = FaultProxy::start(upstream.addr, rules(), 42).await.unwrap();
    assert_eq!(statuses(&again, 1000).await, first);
    let other = FaultProxy::start(upstream.addr, rules(), 43).await.unwrap();
    assert_ne!(statuses(&other, 1000).await, first);

    // Concurrent keep-alive connections race for positions in the sequence, but the total of
    // 1000 calls stays the same.
    let concurrent = Arc::new(FaultProxy::start(upstream.addr, rules(), 42).await.unwrap());
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..8 {
        let proxy = concurrent.clone();
        tasks.spawn(async move { statuses(&proxy, 125).await });
    }
    let mut all = Vec::new();
    while let Some(statuses) = tasks.join_next().await {
        all.extend(statuses.unwrap());
    }
    assert_eq!(all.iter().filter(|s| **s == 400).count() as u64, injected);
    assert_eq!(concurrent.stats().target(dynamodb::UPDATE_ITEM).injected_total(), injected);
}

#[tokio::test]
async fn apply_then_timeout_applies_the_call_but_the_client_times_out() {
    let upstream = Upstream::start().await;
    let rules =
        vec![Rule::new(dynamodb::UPDATE_ITEM, 1.0, vec![Fault::ApplyThenTimeout { hold: Duration::from_secs(5) }])];
    let proxy = FaultProxy::start(upstream.addr, rules, 3).await.unwrap();
    let client = client();
    let started = Instant::now();
    let result = tokio::time::timeout(
        Duration::from_millis(200),
        client.request(call(&proxy.url(), dynamodb::UPDATE_ITEM, r#"{"write":1}"#)),
    )
    .await;
    assert!(result.is_err(), "the client must time out");
    assert!(started.elapsed() < Duration::from_secs(2));
    // The proxy forwards before holding, so the emulator has the write by now (allow for scheduling).
    let deadline = Instant::now() + Duration::from_secs(2);
    while upstream.count(dynamodb::UPDATE_ITEM) == 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let seen = upstream.seen();
    assert_eq!(seen.len(), 1, "the write was applied");
    assert_eq!(seen[0].body, Bytes::from(r#"{"write":1}"#));
    let stats = proxy.stats().target(dynamodb::UPDATE_ITEM);
    assert_eq!((stats.requests, stats.forwarded, stats.injected("apply-then-timeout")), (1, 1, 1));
    assert_eq!(stats.upstream_status.get(&200), Some(&1));

    // Other calls still go through while that connection is held.
    assert_eq!(send(&client, call(&proxy.url(), dynamodb::GET_ITEM, "{}")).await.status, 200);
    proxy.shutdown().await;
}

#[tokio::test]
async fn max_injections_caps_the_faults() {
    let upstream = Upstream::start().await;
    let rules = vec![Rule::new(dynamodb::UPDATE_ITEM, 1.0, vec![dynamodb::request_limit_exceeded()]).max_injections(5)];
    let proxy = FaultProxy::start(upstream.addr, rules, 5).await.unwrap();
    let got = statuses(&proxy, 20).await;
    assert_eq!(got[..5], [400; 5]);
    assert_eq!(got[5..], [200; 15]);
    let stats = proxy.stats().target(dynamodb::UPDATE_ITEM);
    assert_eq!((stats.requests, stats.passed, stats.injected(dynamodb::REQUEST_LIMIT_EXCEEDED)), (20, 15, 5));
    assert_eq!(upstream.count(dynamodb::UPDATE_ITEM), 15);

    // New rules start their counts afresh.
    proxy
        .set_rules(vec![
            Rule::new(dynamodb::UPDATE_ITEM, 1.0, vec![dynamodb::request_limit_exceeded()]).max_injections(1)
        ])
        .unwrap();
    assert_eq!(statuses(&proxy, 3).await, [400, 200, 200]);
}

#[tokio::test]
async fn faults_rotate_and_each_kind_behaves() {
    let upstream = Upstream::start().await;
    let faults =
        vec![dynamodb::provisioned_throughput_exceeded(), dynamodb::throttling(), dynamodb::internal_server_error()];
    let proxy = FaultProxy::start(upstream.addr, vec![Rule::new("", 1.0, faults)], 9).await.unwrap();
    assert_eq!(statuses(&proxy, 6).await, [400, 400, 500, 400, 400, 500]);
    let stats = proxy.stats().target(dynamodb::UPDATE_ITEM);
    for shape in [dynamodb::PROVISIONED_THROUGHPUT_EXCEEDED, dynamodb::THROTTLING, dynamodb::INTERNAL_SERVER_ERROR] {
        assert_eq!(stats.injected(shape), 2, "{shape}");
    }
    let client = client();

    // Delay: answered, late.
    proxy.set_rules(vec![Rule::new("", 1.0, vec![Fault::Delay(Duration::from_millis(300))])]).unwrap();
    let started = Instant::now();
    assert_eq!(send(&client, call(&proxy.url(), dynamodb::GET_ITEM, "{}")).await.status, 200);
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert_eq!(upstream.count(dynamodb::GET_ITEM), 1);

    // ApplyThenError: applied, yet answered with the error.
    let fault = Fault::ApplyThenError {
        status: 500,
        shape: dynamodb::INTERNAL_SERVER_ERROR.into(),
        message: "Internal server error".into(),
    };
    proxy.set_rules(vec![Rule::new("", 1.0, vec![fault])]).unwrap();
    let a = send(&client, call(&proxy.url(), dynamodb::PUT_ITEM, "{}")).await;
    assert_eq!((a.status, a.header("x-amzn-errortype")), (500, Some(dynamodb::INTERNAL_SERVER_ERROR)));
    assert_eq!(upstream.count(dynamodb::PUT_ITEM), 1);

    // Reset: no answer, not applied; the next call gets a fresh connection.
    proxy.set_rules(vec![Rule::new(dynamodb::QUERY, 1.0, vec![Fault::Reset])]).unwrap();
    assert!(client.request(call(&proxy.url(), dynamodb::QUERY, "{}")).await.is_err());
    assert_eq!(upstream.count(dynamodb::QUERY), 0);
    assert_eq!(send(&client, call(&proxy.url(), dynamodb::GET_ITEM, "{}")).await.status, 200);

    let stats = proxy.stats();
    assert_eq!(stats.target(dynamodb::GET_ITEM).injected("delay"), 1);
    assert_eq!(
        stats
            .target(dynamodb::PUT_ITEM)
            .injected("apply-then-error:com.amazonaws.dynamodb.v20120810#InternalServerError"),
        1
    );
    assert_eq!(stats.target(dynamodb::QUERY).injected("reset"), 1);
    let total = stats.total();
    assert_eq!(total.requests, total.passed + total.injected_total());
}

#[tokio::test]
async fn invalid_rules_are_rejected() {
    let upstream: SocketAddr = "127.0.0.1:9".parse().unwrap();
    assert!(FaultProxy::start(upstream, vec![Rule::new("", 1.5, vec![Fault::Reset])], 0).await.is_err());
    assert!(FaultProxy::start(upstream, vec![Rule::new("", 0.5, vec![])], 0).await.is_err());
    let bad_status = Fault::Error { status: 1000, shape: "X".into(), message: String::new() };
    assert!(FaultProxy::start(upstream, vec![Rule::new("", 0.5, vec![bad_status])], 0).await.is_err());
    assert!(FaultProxy::start(upstream, vec![Rule::new("", 0.0, vec![])], 0).await.is_ok());
}

#[tokio::test]
async fn an_unreachable_upstream_is_a_502() {
    // Bind and drop a listener to find a port nobody listens on.
    let dead = TcpListener::bind("127.0.0.1:0").await.unwrap().local_addr().unwrap();
    let proxy = FaultProxy::start(dead, vec![], 0).await.unwrap();
    let a = send(&client(), call(&proxy.url(), dynamodb::GET_ITEM, "{}")).await;
    assert_eq!(a.status, 502);
    let stats = proxy.stats().target(dynamodb::GET_ITEM);
    assert_eq!((stats.requests, stats.passed, stats.forwarded, stats.upstream_failures), (1, 1, 1, 1));
}

#[tokio::test]
async fn shutdown_and_drop_close_the_listener_and_held_connections() {
    let upstream = Upstream::start().await;
    let rules =
        vec![Rule::new(dynamodb::UPDATE_ITEM, 1.0, vec![Fault::ApplyThenTimeout { hold: Duration::from_secs(60) }])];
    let proxy = FaultProxy::start(upstream.addr, rules.clone(), 0).await.unwrap();
    let addr = proxy.addr();
    let url = proxy.url();
    let held = tokio::spawn(async move { client().request(call(&url, dynamodb::UPDATE_ITEM, "{}")).await.map(|_| ()) });
    let deadline = Instant::now() + Duration::from_secs(2);
    while upstream.count(dynamodb::UPDATE_ITEM) == 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(upstream.count(dynamodb::UPDATE_ITEM), 1);
    proxy.shutdown().await;
    let result = tokio::time::timeout(Duration::from_secs(2), held).await.expect("shutdown ends the held call");
    assert!(result.unwrap().is_err(), "the held call ends without an answer");
    assert!(tokio::net::TcpStream::connect(addr).await.is_err(), "the listener is closed");

    let proxy = FaultProxy::start(upstream.addr, rules, 0).await.unwrap();
    let addr = proxy.addr();
    drop(proxy);
    let deadline = Instant::now() + Duration::from_secs(2);
    while tokio::net::TcpStream::connect(addr).await.is_ok() {
        assert!(Instant::now() < deadline, "a dropped proxy stops listening");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn a_plan_is_the_same_as_rules_and_seed() {
    let upstream = Upstream::start().await;
    let plan = FaultPlan::new(11).rule(Rule::new(dynamodb::TARGET_PREFIX, 0.5, vec![dynamodb::throttling()]));
    let a = FaultProxy::start_plan(upstream.addr, plan.clone()).await.unwrap();
    let b = FaultProxy::start(upstream.addr, plan.rules, plan.seed).await.unwrap();
    assert_eq!(statuses(&a, 50).await, statuses(&b, 50).await);
}

mod sdk {
    //! The real SDK clients, pointed at the proxy: each injected shape must land in the typed
    //! variant (or, for unmodelled shapes, the unhandled error with the bare code) that production
    //! code and our retry classification match on.

    use super::*;
    use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
    use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
    use aws_sdk_dynamodb::operation::RequestId;
    use aws_sdk_dynamodb::types::AttributeValue;
    use aws_sdk_kinesis::operation::get_records::GetRecordsError;
    use aws_sdk_kinesis::operation::list_shards::ListShardsError;

    fn dynamodb_client(url: &str, attempt_timeout: Option<Duration>) -> aws_sdk_dynamodb::Client {
        use aws_sdk_dynamodb::config::{
            retry::RetryConfig, timeout::TimeoutConfig, BehaviorVersion, Credentials, Region,
        };
        let mut timeouts = TimeoutConfig::builder();
        if let Some(t) = attempt_timeout {
            timeouts = timeouts.operation_attempt_timeout(t);
        }
        let conf = aws_sdk_dynamodb::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new("us-east-1"))
            .credentials_provider(Credentials::new("AKIDFAULTPROXY", "secret", None, None, "fault-proxy-test"))
            .endpoint_url(url)
            // Our code retries through zigzag_core::retry with SDK retries off; so do we here, so
            // that each call is exactly one request.
            .retry_config(RetryConfig::disabled())
            .timeout_config(timeouts.build())
            .build();
        aws_sdk_dynamodb::Client::from_conf(conf)
    }

    fn kinesis_client(url: &str) -> aws_sdk_kinesis::Client {
        use aws_sdk_kinesis::config::{retry::RetryConfig, BehaviorVersion, Credentials, Region};
        let conf = aws_sdk_kinesis::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new("us-east-1"))
            .credentials_provider(Credentials::new("AKIDFAULTPROXY", "secret", None, None, "fault-proxy-test"))
            .endpoint_url(url)
            .retry_config(RetryConfig::disabled())
            .build();
        aws_sdk_kinesis::Client::from_conf(conf)
    }

    async fn update(client: &aws_sdk_dynamodb::Client) -> Result<(), SdkError<UpdateItemError>> {
        client
            .update_item()
            .table_name("clicks")
            .key("pk", AttributeValue::S("p".into()))
            .key("sk", AttributeValue::S("s".into()))
            .update_expression("ADD c :one")
            .expression_attribute_values(":one", AttributeValue::N("1".into()))
            .send()
            .await
            .map(|_| ())
    }

    fn message(fault: &Fault) -> String {
        match fault {
            Fault::Error { message, .. } => message.clone(),
            _ => unreachable!(),
        }
    }

    #[tokio::test]
    async fn dynamodb_errors_become_typed_update_item_variants() {
        let upstream = Upstream::start().await;
        let proxy = FaultProxy::start(upstream.addr, vec![], 0).await.unwrap();
        let client = dynamodb_client(&proxy.url(), None);

        // Passes through: the upstream's JSON answer is a valid (empty) UpdateItemOutput.
        update(&client).await.expect("an untouched call succeeds");
        let seen = upstream.seen();
        assert_eq!(seen.len(), 1);
        assert_eq!(seen[0].target(), dynamodb::UPDATE_ITEM);

        type Check = fn(&UpdateItemError) -> bool;
        let cases: Vec<(Fault, u16, &str, Check)> = vec![
            (dynamodb::provisioned_throughput_exceeded(), 400, "ProvisionedThroughputExceededException", |e| {
                matches!(e, UpdateItemError::ProvisionedThroughputExceededException(_))
            }),
            (dynamodb::throttling(), 400, "ThrottlingException", |e| {
                matches!(e, UpdateItemError::ThrottlingException(_))
            }),
            (dynamodb::coral_throttling(), 400, "ThrottlingException", |e| {
                matches!(e, UpdateItemError::ThrottlingException(_))
            }),
            (dynamodb::request_limit_exceeded(), 400, "RequestLimitExceeded", |e| {
                matches!(e, UpdateItemError::RequestLimitExceeded(_))
            }),
            (dynamodb::internal_server_error(), 500, "InternalServerError", |e| {
                matches!(e, UpdateItemError::InternalServerError(_))
            }),
            // Not modelled by DynamoDB: the unhandled error, with the bare code and the 503.
            (dynamodb::service_unavailable(), 503, "ServiceUnavailableException", |e| {
                format!("{e:?}").starts_with("Unhandled")
            }),
        ];
        for (fault, status, code, check) in cases {
            proxy.set_rules(vec![Rule::new(dynamodb::UPDATE_ITEM, 1.0, vec![fault.clone()])]).unwrap();
            let err = update(&client).await.expect_err("the proxy answers with the error");
            let raw_status = match &err {
                SdkError::ServiceError(ctx) => ctx.raw().status().as_u16(),
                other => panic!("{code}: expected a service error, got {other:?}"),
            };
            assert_eq!(raw_status, status, "{code}");
            let e = err.into_service_error();
            assert!(check(&e), "{code}: got {e:?}");
            assert_eq!(e.code(), Some(code));
            assert_eq!(e.message(), Some(message(&fault).as_str()));
            assert!(e.request_id().is_some_and(|id| id.starts_with("fa017000-")), "{code}: {:?}", e.request_id());
        }
        assert_eq!(upstream.seen().len(), 1, "no injected call reached the upstream");
    }

    #[tokio::test]
    async fn apply_then_timeout_is_an_sdk_timeout_and_reset_a_dispatch_or_response_failure() {
        let upstream = Upstream::start().await;
        let rules =
            vec![Rule::new(dynamodb::UPDATE_ITEM, 1.0, vec![Fault::ApplyThenTimeout { hold: Duration::from_secs(3) }])];
        let proxy = FaultProxy::start(upstream.addr, rules, 0).await.unwrap();
        let client = dynamodb_client(&proxy.url(), Some(Duration::from_millis(300)));
        let err = update(&client).await.expect_err("held");
        assert!(matches!(err, SdkError::TimeoutError(_)), "{err:?}");
        assert_eq!(upstream.count(dynamodb::UPDATE_ITEM), 1, "applied although the client timed out");

        proxy.set_rules(vec![Rule::new(dynamodb::UPDATE_ITEM, 1.0, vec![Fault::Reset])]).unwrap();
        let err = update(&client).await.expect_err("reset");
        assert!(matches!(err, SdkError::DispatchFailure(_) | SdkError::ResponseError(_)), "{err:?}");
        assert_eq!(upstream.count(dynamodb::UPDATE_ITEM), 1, "a reset call is not applied");
        proxy.shutdown().await;
    }

    #[tokio::test]
    async fn kinesis_errors_become_typed_variants_or_carry_the_code() {
        let upstream = Upstream::start().await;
        let proxy = FaultProxy::start(upstream.addr, vec![], 0).await.unwrap();
        let client = kinesis_client(&proxy.url());
        let get_records = || client.get_records().shard_iterator("AAAA").send();

        type Check = fn(&GetRecordsError) -> bool;
        let unhandled: Check = |e| format!("{e:?}").starts_with("Unhandled");
        let cases: Vec<(Fault, u16, &str, Check)> = vec![
            (
                kinesis::provisioned_throughput_exceeded("clicks", "shardId-000000000000"),
                400,
                "ProvisionedThroughputExceededException",
                |e| matches!(e, GetRecordsError::ProvisionedThroughputExceededException(_)),
            ),
            (kinesis::internal_failure_exception(), 500, "InternalFailureException", |e| {
                matches!(e, GetRecordsError::InternalFailureException(_))
            }),
            // Not modelled for GetRecords: unhandled, with the bare code and the status.
            (kinesis::limit_exceeded("clicks"), 400, "LimitExceededException", unhandled),
            (kinesis::internal_failure(), 500, "InternalFailure", unhandled),
            (kinesis::service_unavailable(), 503, "ServiceUnavailable", unhandled),
        ];
        for (fault, status, code, check) in cases {
            proxy.set_rules(vec![Rule::new(kinesis::GET_RECORDS, 1.0, vec![fault.clone()])]).unwrap();
            let err = get_records().await.expect_err("the proxy answers with the error");
            let raw_status = match &err {
                aws_sdk_kinesis::error::SdkError::ServiceError(ctx) => ctx.raw().status().as_u16(),
                other => panic!("{code}: expected a service error, got {other:?}"),
            };
            assert_eq!(raw_status, status, "{code}");
            let e = err.into_service_error();
            assert!(check(&e), "{code}: got {e:?}");
            assert_eq!(aws_sdk_kinesis::error::ProvideErrorMetadata::code(&e), Some(code));
            assert_eq!(aws_sdk_kinesis::error::ProvideErrorMetadata::message(&e), Some(message(&fault).as_str()));
        }

        // ListShards models LimitExceededException.
        proxy.set_rules(vec![Rule::new(kinesis::LIST_SHARDS, 1.0, vec![kinesis::limit_exceeded("clicks")])]).unwrap();
        let e = client.list_shards().stream_name("clicks").send().await.expect_err("limited").into_service_error();
        assert!(matches!(e, ListShardsError::LimitExceededException(_)), "{e:?}");
        assert_eq!(upstream.seen().len(), 0);
        let stats = proxy.stats().matching(kinesis::TARGET_PREFIX);
        assert_eq!((stats.requests, stats.injected_total(), stats.forwarded), (6, 6, 0));
    }
}
