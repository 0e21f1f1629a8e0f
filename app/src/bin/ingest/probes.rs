//! The `ingest` binary's listener (`--metrics-addr`): `/metrics`
//! (Prometheus text), `/health` (200 while the process runs: a liveness
//! probe) and `/ready` (200 while the pipeline does its job, 503 with the
//! reason otherwise: `Pipeline::readiness`). Part of the binary, not the
//! library: the library only says whether it is ready. [`probe`] is the
//! client side, for a container health check (`ingest probe`).

use anyhow::{Context, Result};
use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;
use metrics_exporter_prometheus::PrometheusHandle;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use zigzag_ingest::Pipeline;

/// What `/ready` answers from: the pipeline once it exists; before that,
/// what start-up is doing or waiting out.
pub struct Status {
    pipeline: Mutex<Option<Arc<Pipeline>>>,
    starting: Mutex<String>,
}

pub type Watched = Arc<Status>;

impl Status {
    pub fn new() -> Watched {
        Arc::new(Status { pipeline: Mutex::new(None), starting: Mutex::new("starting".into()) })
    }

    /// The pipeline runs: `/ready` is its readiness from now on (the one
    /// that adopted a newer layout's, once it does).
    pub fn running(&self, pipeline: Arc<Pipeline>) {
        *self.pipeline.lock().unwrap_or_else(|p| p.into_inner()) = Some(pipeline);
    }

    /// What start-up is doing, or waiting out, now.
    pub fn starting(&self, what: String) {
        *self.starting.lock().unwrap_or_else(|p| p.into_inner()) = what;
    }

    fn readiness(&self) -> Result<(), String> {
        let current = self.pipeline.lock().unwrap_or_else(|p| p.into_inner()).clone();
        match current {
            Some(p) => p.readiness(),
            None => Err(self.starting.lock().unwrap_or_else(|p| p.into_inner()).clone()),
        }
    }
}

/// Serves the three paths on `addr` (the metrics of `handle`'s recorder);
/// returns the address bound (port 0 picks one).
pub async fn serve(addr: SocketAddr, handle: PrometheusHandle, pipeline: Watched) -> Result<SocketAddr> {
    let app = Router::new()
        .route("/metrics", get(move || std::future::ready(handle.render())))
        .route("/health", get(|| std::future::ready("ok\n")))
        .route("/ready", get(move || std::future::ready(ready(pipeline.readiness()))));
    let listener = tokio::net::TcpListener::bind(addr).await.with_context(|| format!("listening on {addr}"))?;
    let bound = listener.local_addr()?;
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!(error = %e, "the metrics listener stopped");
        }
    });
    Ok(bound)
}

/// Asks the listener at `addr` for `path` (HTTP/1.0, one request, the
/// connection closed by the server): Ok with the answer's first line on a
/// 200, an error naming what was answered otherwise. Enough HTTP for our
/// own listener, so the image needs no curl.
pub async fn probe(addr: SocketAddr, path: &str, timeout: Duration) -> Result<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let exchange = async {
        let mut conn = tokio::net::TcpStream::connect(addr).await?;
        conn.write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes()).await?;
        let mut answer = Vec::new();
        conn.take(64 * 1024).read_to_end(&mut answer).await?;
        Ok::<_, std::io::Error>(answer)
    };
    let answer = tokio::time::timeout(timeout, exchange)
        .await
        .map_err(|_| anyhow::anyhow!("{addr}{path}: no answer within {timeout:?}"))?
        .with_context(|| format!("asking {addr}{path}"))?;
    let answer = String::from_utf8_lossy(&answer);
    let status = answer.lines().next().unwrap_or_default();
    let body = answer.split_once("\r\n\r\n").map(|(_, b)| b.trim()).unwrap_or_default();
    match status.split_whitespace().nth(1) {
        Some("200") => Ok(format!("{path}: {body}")),
        _ => anyhow::bail!("{addr}{path}: {status}: {body}"),
    }
}

/// The `/ready` response for a readiness.
fn ready(readiness: Result<(), String>) -> (StatusCode, String) {
    match readiness {
        Ok(()) => (StatusCode::OK, "ready\n".into()),
        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, format!("not ready: {why}\n")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_is_200_only_for_a_ready_pipeline() {
        assert_eq!(ready(Ok(())).0, StatusCode::OK);
        let (code, body) = ready(Err("flushes are paused".into()));
        assert_eq!((code, body.as_str()), (StatusCode::SERVICE_UNAVAILABLE, "not ready: flushes are paused\n"));
        let status = Status::new();
        assert_eq!(status.readiness(), Err("starting".into()), "no pipeline yet");
        status.starting("opening the tables: timed out".into());
        assert_eq!(ready(status.readiness()).1, "not ready: opening the tables: timed out\n");
    }
}
