//! The shutdown signal every background task takes: a `watch` that turns true once.

use tokio::sync::watch;

/// Resolves when shutdown was signalled (or its sender is gone). Dropping the guard that
/// `wait_for` returns here keeps callers' futures `Send`.
pub async fn stopped(rx: &mut watch::Receiver<bool>) {
    let _ = rx.wait_for(|s| *s).await;
}

/// A new signal: send `true` to stop.
pub fn channel() -> (watch::Sender<bool>, watch::Receiver<bool>) {
    watch::channel(false)
}
