//! The shutdown signal every background task takes: a `watch` that turns true once.

use tokio::sync::watch;

/// A new signal: send `true` to stop.
pub fn channel() -> (watch::Sender<bool>, watch::Receiver<bool>) {
    watch::channel(false)
}

/// Resolves once shutdown was signalled (or its sender is gone). Every background loop
/// selects on it.
pub async fn stopped(rx: &mut watch::Receiver<bool>) {
    // The guard `wait_for` returns is not Send; drop it here, not across the caller's await.
    let _ = rx.wait_for(|s| *s).await.map(|_| ());
}

/// Resolves on SIGTERM (what an orchestrator sends) or Ctrl-C.
pub async fn terminated() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "cannot watch SIGTERM; Ctrl-C only");
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn stopped_resolves_on_true_and_when_the_sender_is_gone() {
        let (tx, mut rx) = channel();
        tx.send(true).unwrap();
        stopped(&mut rx).await;
        let (tx, mut rx) = channel();
        drop(tx);
        stopped(&mut rx).await;
    }
}
