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

mod sdk;
mod upstream;

use upstream::*;

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
    // The client's timeout must also cover the call reaching the proxy (a client that gives up
    // before that sends nothing); the hold, far longer, is what it times out on.
    let hold = Duration::from_secs(30);
    let rules = vec![Rule::new(dynamodb::UPDATE_ITEM, 1.0, vec![Fault::ApplyThenTimeout { hold }])];
    let proxy = FaultProxy::start(upstream.addr, rules, 3).await.unwrap();
    let client = client();
    let started = Instant::now();
    let result = tokio::time::timeout(
        Duration::from_secs(2),
        client.request(call(&proxy.url(), dynamodb::UPDATE_ITEM, r#"{"write":1}"#)),
    )
    .await;
    assert!(result.is_err(), "the client must time out");
    assert!(started.elapsed() < hold, "the client gave up before the proxy let go");
    // The proxy forwards before holding: the emulator has the write (polled, for scheduling).
    let deadline = Instant::now() + Duration::from_secs(20);
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
    // Held far longer than the waits below: only the shutdown can end the call within them.
    let rules =
        vec![Rule::new(dynamodb::UPDATE_ITEM, 1.0, vec![Fault::ApplyThenTimeout { hold: Duration::from_secs(600) }])];
    let proxy = FaultProxy::start(upstream.addr, rules.clone(), 0).await.unwrap();
    let addr = proxy.addr();
    let url = proxy.url();
    let held = tokio::spawn(async move { client().request(call(&url, dynamodb::UPDATE_ITEM, "{}")).await.map(|_| ()) });
    let deadline = Instant::now() + Duration::from_secs(20);
    while upstream.count(dynamodb::UPDATE_ITEM) == 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(upstream.count(dynamodb::UPDATE_ITEM), 1);
    proxy.shutdown().await;
    let result = tokio::time::timeout(Duration::from_secs(20), held).await.expect("shutdown ends the held call");
    assert!(result.unwrap().is_err(), "the held call ends without an answer");
    assert!(tokio::net::TcpStream::connect(addr).await.is_err(), "the listener is closed");

    let proxy = FaultProxy::start(upstream.addr, rules, 0).await.unwrap();
    let addr = proxy.addr();
    drop(proxy);
    let deadline = Instant::now() + Duration::from_secs(20);
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
