//! SIGINT and SIGTERM (Ctrl-C where there are no Unix signals) as a
//! cancellation token: a run that is told to stop flushes and checkpoints
//! what it holds before it exits, whichever signal an operator or an
//! orchestrator (ECS, systemd, Kubernetes: SIGTERM) sends.

use tokio_util::sync::CancellationToken;

/// A token cancelled at the first SIGINT or SIGTERM; `what` is logged then
/// (what stopping does).
pub fn stop_on_signal(what: &'static str) -> CancellationToken {
    let stop = CancellationToken::new();
    let token = stop.clone();
    tokio::spawn(async move {
        wait_for_signal().await;
        tracing::info!("stopping: {what}");
        token.cancel();
    });
    stop
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match (signal(SignalKind::interrupt()), signal(SignalKind::terminate())) {
            (Ok(mut int), Ok(mut term)) => {
                tokio::select! {
                    _ = int.recv() => {},
                    _ = term.recv() => {},
                }
            }
            // No handler could be installed: the default action (exit) stays.
            _ => std::future::pending().await,
        }
    }
    #[cfg(not(unix))]
    if tokio::signal::ctrl_c().await.is_err() {
        std::future::pending::<()>().await
    }
}
