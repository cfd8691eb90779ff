//! Stock-core scenarios on a private 3-master Redis Cluster.

use crate::common::Env;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency() {
    crate::scenarios::concurrency(Env::cluster()).await;
}

#[tokio::test]
async fn uneven_drain() {
    crate::scenarios::uneven_drain(Env::cluster()).await;
}

#[tokio::test]
async fn limit_across_reroutes() {
    crate::scenarios::limit_across_reroutes(Env::cluster()).await;
}

#[tokio::test]
async fn replay() {
    crate::scenarios::replay(Env::cluster()).await;
}

#[tokio::test]
async fn release_twice() {
    crate::scenarios::release_twice(Env::cluster()).await;
}

#[tokio::test]
async fn script_flush() {
    crate::scenarios::script_flush(Env::cluster()).await;
}

#[tokio::test]
async fn not_preheated() {
    crate::scenarios::not_preheated(Env::cluster()).await;
}

#[tokio::test]
async fn hold_left_behind() {
    crate::scenarios::hold_left_behind(Env::cluster()).await;
}

#[tokio::test]
async fn window() {
    crate::scenarios::window(Env::cluster()).await;
}

/// The shard tags spread over the masters of a real cluster made by
/// `redis-cli --cluster create` (16 shards on 3 masters: 6/5/5), and Redis agrees with our
/// slot arithmetic for every shard key.
#[test]
fn tags_spread_over_real_masters() {
    use shard_router::placement::slot_of_tag;
    use std::collections::HashMap;
    let env = Env::cluster();
    let Env::Cluster(cluster) = &env else {
        unreachable!()
    };
    let placement = shard_router::Placement::new(crate::common::SHARDS).unwrap();
    let mut conn = cluster.nodes()[0].connection();
    let mut per_master: HashMap<u16, u32> = HashMap::new();
    for s in 0..crate::common::SHARDS {
        let key = shard_router::keys::ShardKeys::new(&placement, s, 1).stock();
        let slot: u16 = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(&key)
            .query(&mut conn)
            .unwrap();
        assert_eq!(slot, slot_of_tag(placement.tag(s)), "slot of {key}");
        *per_master.entry(cluster.master_of(slot)).or_default() += 1;
    }
    let mut counts: Vec<u32> = per_master.into_values().collect();
    counts.sort_unstable();
    assert_eq!(counts, vec![5, 5, 6]);
}

/// `WAIT` is routed to the master that owns the claim's shard, whose replica confirms it.
#[tokio::test]
async fn wait_replicas_reaches_the_shard_master() {
    use shard_router::{ClaimOutcome, RedisTarget, StockClient, StockConfig};
    let cluster = test_support::RedisCluster::start(3, 1);
    let client = StockClient::connect(StockConfig::new(
        RedisTarget::Cluster(cluster.urls()),
        crate::common::SHARDS,
    ))
    .await
    .unwrap();
    let meta = crate::common::open_meta(2001, 16, 16, 1);
    client.preheat(&meta).await.unwrap();
    for u in ["w1", "w2", "w3"] {
        let o =
            crate::common::claim_once(&client, &meta, &crate::common::req(meta.sku, u, None)).await;
        let ClaimOutcome::Claimed { claim, .. } = o else {
            panic!("{o:?}")
        };
        let acked = client
            .wait_replicas(claim.shard, 1, std::time::Duration::from_millis(300))
            .await
            .unwrap();
        assert_eq!(acked, 1, "the shard's replica confirms");
    }
}

/// `INFO` for a shard comes from the master serving that shard's slot (the consumer's
/// memory gauges are per shard), not from whichever node the client happens to pick.
#[tokio::test]
async fn shard_info_comes_from_the_shards_own_master() {
    use shard_router::placement::slot_of_tag;
    use shard_router::{RedisTarget, StockClient, StockConfig};
    let cluster = test_support::RedisCluster::start(3, 0);
    let client = StockClient::connect(StockConfig::new(
        RedisTarget::Cluster(cluster.urls()),
        crate::common::SHARDS,
    ))
    .await
    .unwrap();
    let mut ports = std::collections::HashSet::new();
    for shard in 0..crate::common::SHARDS {
        let info = client.shard_info(shard, "server").await.unwrap();
        let port: u16 = info
            .lines()
            .find_map(|l| l.strip_prefix("tcp_port:"))
            .and_then(|p| p.trim().parse().ok())
            .unwrap_or_else(|| panic!("no tcp_port in INFO server: {info}"));
        let slot = slot_of_tag(client.placement().tag(shard));
        assert_eq!(port, cluster.master_of(slot), "shard {shard} (slot {slot})");
        ports.insert(port);
    }
    assert_eq!(ports.len(), 3, "the shards live on all three masters");
}

/// Adaptive runtime: after a graceful failover (`CLUSTER FAILOVER` on the replica, the old
/// master staying up as a replica), claim batches on the near connection reach the
/// promoted master and answer NOSCRIPT while the client's own connection's slot map still
/// names the old master (a keyless INFO and SCRIPT LOAD there raise no MOVED). Claims
/// recover only if the relearn and the retry go through the connection that answered
/// NOSCRIPT (`StockClient::script_batched`); through the own one they loop on NOSCRIPT.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_recover_after_a_graceful_failover_with_a_near_connection() {
    graceful_failover(true).await;
}

/// Control: the same with the client's one connection passes (one MOVED, then claims).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_recover_after_a_graceful_failover_own_connection_only() {
    graceful_failover(false).await;
}

async fn graceful_failover(near: bool) {
    use shard_router::placement::slot_of_tag;
    use std::time::Duration;
    let cluster = test_support::RedisCluster::start(3, 1);
    let target = shard_router::RedisTarget::Cluster(cluster.urls());
    let client = shard_router::StockClient::connect(shard_router::StockConfig::new(
        target,
        crate::common::SHARDS,
    ))
    .await
    .expect("connect");
    if near {
        client.connect_near().await.expect("near connection");
    }
    let meta = crate::common::open_meta(1090, 1000, 1, 1);
    client.preheat(&meta).await.expect("preheat");
    client.load_scripts().await.expect("scripts");
    let home = client.placement().shards_of(meta.sku, 1)[0];
    let users = crate::common::users_with_home(&client, &meta, home, "f", 40);
    // Learned on the first master, through both connections' maps.
    let got = crate::common::claim_at_home(&client, meta.sku, &users[0], home).await;
    assert!(
        matches!(got, Ok(shard_router::HomeOutcome::Claimed { .. })),
        "{got:?}"
    );

    let slot = slot_of_tag(client.placement().tag(home));
    let (_master, replica) = cluster.master_and_replica(slot);
    let _: String = redis::cmd("CLUSTER")
        .arg("FAILOVER")
        .query(&mut cluster.nodes()[replica].connection())
        .expect("CLUSTER FAILOVER");
    let port = cluster.nodes()[replica].port();
    for _ in 0..100 {
        if cluster.master_of(slot) == port {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(cluster.master_of(slot), port, "the replica took over");
    cluster.wait_ok();
    // The consumer's vouch for the promoted master (as after its rebuild).
    let mut p = cluster.nodes()[replica].connection();
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query(&mut p)
        .expect("INFO");
    let run_id = info
        .lines()
        .find_map(|l| l.trim().strip_prefix("run_id:"))
        .expect("run_id")
        .to_owned();
    let _: () = redis::cmd("SET")
        .arg(shard_router::keys::vouch(client.placement(), home))
        .arg(&run_id)
        .query(&mut p)
        .expect("vouch");
    tokio::time::sleep(Duration::from_millis(500)).await;

    let mut answers = Vec::new();
    for u in &users[1..] {
        let got = crate::common::claim_at_home(&client, meta.sku, u, home).await;
        let ok = matches!(got, Ok(shard_router::HomeOutcome::Claimed { .. }));
        answers.push(format!("{got:?}"));
        if ok {
            eprintln!("recovered after {answers:#?}");
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("no claim recovered after the failover: {answers:#?}");
}
