//! Startup that rides out a Redis still coming up: connection refused, `LOADING` (a node
//! reading its data set), `CLUSTERDOWN` (a cluster not yet formed or healing). Every step
//! retries with backoff and one clear log line per failure, until it works or shutdown.
//! Only a bad setting (nothing a retry can fix) ends the process.

use shard_router::{StockClient, StockConfig, StockError};
use tokio::sync::watch;

use crate::backoff::Backoff;
use crate::config::Config;

/// Errors no retry can fix: a bad shard count or address in the configuration.
fn fatal(e: &StockError) -> bool {
    matches!(e, StockError::InvalidArgument(_))
}

/// Connects to Redis, retrying until it answers. `Ok(None)` when shutdown came first.
pub async fn connect_redis(
    cfg: &Config,
    stock: StockConfig,
    what: &'static str,
    shutdown: &mut watch::Receiver<bool>,
) -> Result<Option<StockClient>, StockError> {
    let mut backoff = Backoff::new(cfg.backoff_min, cfg.backoff_max);
    loop {
        let attempt = async {
            let c = StockClient::connect(stock.clone()).await?;
            // A cluster connection may open before its slots are served: ask once.
            c.ping().await?;
            Ok::<_, StockError>(c)
        };
        match attempt.await {
            Ok(c) => return Ok(Some(c)),
            Err(e) if fatal(&e) => return Err(e),
            Err(e) => {
                tracing::warn!(what, error = %e, "redis not ready (still starting, loading or cluster down?); retrying");
                if !backoff.sleep(shutdown).await {
                    return Ok(None);
                }
            }
        }
    }
}
