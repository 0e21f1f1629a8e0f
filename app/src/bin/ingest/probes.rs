//! The `ingest` binary's listener (`--metrics-addr`): `/metrics`
//! (Prometheus text), `/health` (200 while the process runs: a liveness
//! probe) and `/ready` (200 while the pipeline does its job, 503 with the
//! reason otherwise: `Pipeline::readiness`). Part of the binary, not the
//! library: the library only says whether it is ready.

use anyhow::{Context, Result};
use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use zigzag_ingest::Pipeline;

/// The pipeline, once it exists (before that, `/ready` says it is starting).
pub type Watched = Arc<OnceLock<Arc<Pipeline>>>;

/// Installs the metrics recorder and serves the three paths on `addr`;
/// returns the address bound (port 0 picks one).
pub async fn serve(addr: SocketAddr, pipeline: Watched) -> Result<SocketAddr> {
    let handle = PrometheusBuilder::new().install_recorder().context("installing the metrics recorder")?;
    tokio::spawn(upkeep(handle.clone()));
    let app = Router::new()
        .route("/metrics", get(move || std::future::ready(handle.render())))
        .route("/health", get(|| std::future::ready("ok\n")))
        .route("/ready", get(move || std::future::ready(ready(pipeline.get().map(|p| p.readiness())))));
    let listener = tokio::net::TcpListener::bind(addr).await.with_context(|| format!("listening on {addr}"))?;
    let bound = listener.local_addr()?;
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!(error = %e, "the metrics listener stopped");
        }
    });
    Ok(bound)
}

/// The `/ready` response for a pipeline's readiness (None: not built yet).
fn ready(readiness: Option<Result<(), String>>) -> (StatusCode, String) {
    match readiness {
        Some(Ok(())) => (StatusCode::OK, "ready\n".into()),
        Some(Err(why)) => (StatusCode::SERVICE_UNAVAILABLE, format!("not ready: {why}\n")),
        None => (StatusCode::SERVICE_UNAVAILABLE, "not ready: starting\n".into()),
    }
}

/// Histograms' buckets are drained by upkeep, which the recorder leaves to
/// its owner.
async fn upkeep(handle: PrometheusHandle) {
    let mut every = tokio::time::interval(Duration::from_secs(5));
    loop {
        every.tick().await;
        handle.run_upkeep();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_is_200_only_for_a_ready_pipeline() {
        assert_eq!(ready(Some(Ok(()))).0, StatusCode::OK);
        let (code, body) = ready(Some(Err("flushes are paused".into())));
        assert_eq!((code, body.as_str()), (StatusCode::SERVICE_UNAVAILABLE, "not ready: flushes are paused\n"));
        assert_eq!(ready(None).0, StatusCode::SERVICE_UNAVAILABLE, "no pipeline yet");
    }
}
