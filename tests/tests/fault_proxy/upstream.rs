//! A tiny recording upstream, and a plain HTTP client for calling through the proxy.

use super::*;

/// One request as the upstream received it.
#[derive(Debug, Clone)]
pub(crate) struct Seen {
    pub(crate) method: String,
    pub(crate) uri: String,
    pub(crate) headers: Vec<(String, Vec<u8>)>,
    pub(crate) body: Bytes,
}

impl Seen {
    pub(crate) fn target(&self) -> &str {
        self.headers
            .iter()
            .find(|(n, _)| n == "x-amz-target")
            .map(|(_, v)| std::str::from_utf8(v).unwrap())
            .unwrap_or("")
    }
}

/// A stand-in emulator: records every request and answers 200 with a JSON body naming the call.
pub(crate) struct Upstream {
    pub(crate) addr: SocketAddr,
    pub(crate) seen: Arc<Mutex<Vec<Seen>>>,
    pub(crate) task: tokio::task::JoinHandle<()>,
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Upstream {
    pub(crate) async fn start() -> Upstream {
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

    pub(crate) fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    pub(crate) fn count(&self, target: &str) -> usize {
        self.seen().iter().filter(|s| s.target() == target).count()
    }
}

pub(crate) const UPSTREAM_HEADERS: &[(&str, &str)] = &[
    ("content-type", "application/x-amz-json-1.0"),
    ("x-amzn-requestid", "UPSTREAMREQUESTID0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"),
    ("x-amz-crc32", "2745614147"),
    ("x-multi", "one"),
    ("x-multi", "two"),
];

pub(crate) async fn answer(
    record: Arc<Mutex<Vec<Seen>>>,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, hyper::Error> {
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

pub(crate) fn client() -> Client<HttpConnector, Full<Bytes>> {
    Client::builder(TokioExecutor::new()).build_http()
}

/// An AWS JSON call as the SDK would send it.
pub(crate) fn call(url: &str, target: &str, body: &str) -> Request<Full<Bytes>> {
    let json = if target.starts_with("Kinesis") { "application/x-amz-json-1.1" } else { "application/x-amz-json-1.0" };
    Request::post(format!("{url}/"))
        .header("content-type", json)
        .header("x-amz-target", target)
        .body(Full::new(Bytes::from(body.to_owned())))
        .unwrap()
}

pub(crate) struct Answer {
    pub(crate) status: u16,
    pub(crate) headers: Vec<(String, Vec<u8>)>,
    pub(crate) body: Bytes,
}

impl Answer {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| std::str::from_utf8(v).unwrap())
    }
}

pub(crate) async fn send(client: &Client<HttpConnector, Full<Bytes>>, req: Request<Full<Bytes>>) -> Answer {
    let resp = client.request(req).await.unwrap();
    let (parts, body) = resp.into_parts();
    let body = body.collect().await.unwrap().to_bytes();
    let headers = parts.headers.iter().map(|(n, v)| (n.as_str().to_owned(), v.as_bytes().to_vec())).collect();
    Answer { status: parts.status.as_u16(), headers, body }
}

pub(crate) fn sorted(mut headers: Vec<(String, Vec<u8>)>) -> Vec<(String, Vec<u8>)> {
    headers.sort_by(|a, b| a.0.cmp(&b.0)); // stable: repeated headers keep their order
    headers
}
