//! Scaffolding the failover tests share: a stack on a master with a replica, a check that
//! a write is on the replica, the failover itself, and the pace of a recovery loop.

use std::time::Duration;

use shard_router::StockClient;
use test_support::RedisServer;

use super::{client_on, Stack};

/// A stack on a master with one replica attached; returns the replica too.
pub(crate) async fn stack_with_replica() -> (Stack, RedisServer) {
    let master = RedisServer::start();
    let replica = RedisServer::start_replica_of(&master);
    (Stack::start_on(master).await, replica)
}

/// Asserts that a replica of `shard` holds what `client` wrote there so far (5 s bound).
pub(crate) async fn assert_on_the_replica(client: &StockClient, shard: u16, what: &str) {
    assert_eq!(
        client
            .wait_replicas(shard, 1, Duration::from_secs(5))
            .await
            .unwrap(),
        1,
        "{what}"
    );
}

/// The master dies with whatever only it held; returns a client on `replica` (promoted
/// before, see [`super::promote`]).
pub(crate) async fn fail_over(s: &mut Stack, replica: &RedisServer) -> StockClient {
    s.redis.kill();
    client_on(replica, s).await
}

/// Runs `step` until it reports done, at most 50 times 100 ms apart (as a recovery loop
/// would run it again); returns whether it did.
pub(crate) async fn retry(mut step: impl AsyncFnMut() -> bool) -> bool {
    for _ in 0..50 {
        if step().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}
