//! Stock-core scenarios on a private single Redis.

use crate::common::Env;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency() {
    crate::scenarios::concurrency(Env::single()).await;
}

#[tokio::test]
async fn uneven_drain() {
    crate::scenarios::uneven_drain(Env::single()).await;
}

#[tokio::test]
async fn limit_across_reroutes() {
    crate::scenarios::limit_across_reroutes(Env::single()).await;
}

#[tokio::test]
async fn replay() {
    crate::scenarios::replay(Env::single()).await;
}

#[tokio::test]
async fn release_twice() {
    crate::scenarios::release_twice(Env::single()).await;
}

#[tokio::test]
async fn script_flush() {
    crate::scenarios::script_flush(Env::single()).await;
}

#[tokio::test]
async fn not_preheated() {
    crate::scenarios::not_preheated(Env::single()).await;
}

#[tokio::test]
async fn hold_left_behind() {
    crate::scenarios::hold_left_behind(Env::single()).await;
}

#[tokio::test]
async fn window() {
    crate::scenarios::window(Env::single()).await;
}

/// Without replicas, `WAIT` reports 0 confirmations after its timeout instead of hanging.
#[tokio::test]
async fn wait_replicas_without_replicas() {
    let env = Env::single();
    let client = env.client().await;
    let t = std::time::Instant::now();
    let n = client
        .wait_replicas(0, 1, std::time::Duration::from_millis(100))
        .await
        .unwrap();
    assert_eq!(n, 0);
    assert!(t.elapsed() < test_support::slack(std::time::Duration::from_secs(2)));
}

/// The claim script writes the caller's qty string as is (no Lua number formatting), so
/// anything but a plain positive integer must leave every key as it was: a value that is
/// not a u32 of at least 1 is BAD_ARGUMENT, any other spelling of one is refused by Redis
/// itself at the first write (the HINCRBY of the user's count errors and the script stops
/// with nothing written); a check that writes nothing may answer for the value first
/// ("1e3" is 1 000 units, over this limit of 5).
#[tokio::test]
async fn claim_script_refuses_a_non_canonical_qty() {
    use shard_router::keys::{claims_stream, ShardKeys};
    let env = Env::single();
    let client = env.client().await;
    let meta = crate::common::open_meta(77, 10, 1, 5);
    client.preheat(&meta).await.expect("preheat");
    let shard = client.placement().shards_of(meta.sku, 1)[0];
    let k = ShardKeys::new(client.placement(), shard, meta.sku);
    let script = redis::Script::new(include_str!("../../../lua/claim.lua"));
    let mut conn = env.node_connections().remove(0);
    let odd = [
        "1.0",
        "01",
        " 1",
        "1e0",
        "0x1",
        "0",
        "-1",
        "",
        "x",
        "1.5",
        "inf",
        "-inf",
        "nan",
        "1e3",
        "4294967296",
        "99999999999999999999",
    ];
    for qty in odd {
        let reply: redis::RedisResult<Vec<i64>> = script
            .key(k.stock())
            .key(k.meta())
            .key(k.users())
            .key(k.user_seq())
            .key(k.holds())
            .key(claims_stream(client.placement(), shard))
            .arg(meta.sku)
            .arg("u")
            .arg(qty)
            .arg(shard_router::now_ms())
            .arg(shard)
            .arg(0)
            .invoke(&mut conn);
        match reply {
            Ok(r) if qty == "1e3" => assert!(r == [11, 0] || r == [15], "qty {qty:?}: {r:?}"),
            Ok(r) => assert_eq!(r, vec![15], "qty {qty:?} must be BAD_ARGUMENT"),
            Err(e) => assert!(
                e.to_string().contains("not an integer") || e.to_string().contains("arithmetic"),
                "qty {qty:?}: {e}"
            ),
        }
    }
    assert_eq!(crate::common::slices_total(&client, &meta).await, 10);
    assert_eq!(client.user_count(meta.sku, 1, "u").await.expect("count"), 0);
    let stream_len: i64 = redis::cmd("XLEN")
        .arg(claims_stream(client.placement(), shard))
        .query(&mut conn)
        .expect("XLEN");
    assert_eq!(stream_len, 0);
}

/// A second chance that comes too late for its hold (a gateway or Redis stalled for most of
/// the hold TTL) takes nothing: the consumer may already have given the user's count back,
/// and a unit taken now would put the user over the limit unseen. The protocol then gives
/// the count back itself and reports that nothing was taken.
#[tokio::test]
async fn a_take_after_its_hold_deadline_takes_nothing() {
    use crate::common::{users_with_home, SHARDS};
    use shard_router::{HomeOutcome, StockConfig, StockError, TakeOutcome};
    let env = Env::single();
    let mut cfg = StockConfig::new(env.target(), SHARDS);
    cfg.hold_ttl = std::time::Duration::from_millis(600);
    let client = shard_router::StockClient::connect(cfg)
        .await
        .expect("connect");
    // 4 units over 2 shards; the home shard of the users below is drained first.
    let meta = crate::common::open_meta(1077, 4, 2, 2);
    client.preheat(&meta).await.expect("preheat");
    let home = client.placement().home_shard(meta.sku, meta.width, "late");
    let other = crate::common::other_shard(&client, &meta, home);
    for u in users_with_home(&client, &meta, home, "h", 2) {
        crate::common::claim_once(&client, &meta, &crate::common::req(meta.sku, &u, None)).await;
    }
    let r = crate::common::req(meta.sku, "late", Some("r1"));

    // Within the deadline (two thirds of the TTL) the take works.
    let now = shard_router::now_ms();
    let HomeOutcome::Hold { user_seq, gen, .. } = client
        .claim_home(&r, home, now, true)
        .await
        .expect("home")
        .outcome
    else {
        panic!("expected a hold")
    };
    assert!(matches!(
        client
            .take(&r, other, home, user_seq, gen, now)
            .await
            .map(|a| a.outcome),
        Ok(TakeOutcome::Claimed { .. })
    ));

    // Past it, the same call is refused and nothing moves.
    let r2 = crate::common::req(meta.sku, "late2", Some("r2"));
    let home2 = client.placement().home_shard(meta.sku, meta.width, "late2");
    let other2 = crate::common::other_shard(&client, &meta, home2);
    let before = crate::common::slices_total(&client, &meta).await;
    let started = shard_router::now_ms() - 500;
    let outcome = client
        .take(&r2, other2, home2, 1, 0, started)
        .await
        .map(|a| a.outcome);
    assert!(
        matches!(outcome, Ok(TakeOutcome::HoldExpired)),
        "{outcome:?}"
    );
    assert_eq!(crate::common::slices_total(&client, &meta).await, before);

    // Through the protocol: a claim whose clock started 500 ms ago (a stalled gateway)
    // holds, finds the deadline passed, and undoes its hold.
    let users = users_with_home(&client, &meta, home, "s", 1);
    let stalled = crate::common::req(meta.sku, &users[0], Some("r3"));
    let err = shard_router::protocol::claim(
        &client,
        &meta,
        &stalled,
        shard_router::protocol::ClaimOptions::new(
            &shard_router::protocol::LocalEmptyShards::default(),
            started,
        ),
    )
    .await
    .map(|a| a.outcome)
    .expect_err("a stalled claim must not take");
    assert!(matches!(err, StockError::Expired { .. }), "{err}");
    assert!(!err.is_ambiguous());
    assert_eq!(crate::common::slices_total(&client, &meta).await, before);
    assert_eq!(
        client
            .user_count(meta.sku, meta.width, &users[0])
            .await
            .expect("count"),
        0
    );
    let holds = client.holds(meta.sku, home).await.expect("holds");
    assert!(
        holds.iter().all(|h| h.user != users[0]),
        "the stalled claim's hold is undone: {holds:?}"
    );
}

/// Group commit: a claim whose caller gave up while it waited behind its shard's batch in
/// flight is never sent, so nothing is taken for an answer nobody will read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_given_up_before_its_batch_left_is_not_sent() {
    use crate::common::users_with_home;
    use std::time::Duration;
    let env = Env::single();
    // A response timeout far above the pause, so the parked batch is not timed out.
    let mut cfg = shard_router::StockConfig::new(env.target(), crate::common::SHARDS);
    cfg.timeouts.response = Duration::from_secs(5);
    let client = shard_router::StockClient::connect(cfg)
        .await
        .expect("connect");
    let meta = crate::common::open_meta(1088, 10, 1, 1);
    client.preheat(&meta).await.expect("preheat");
    // Loaded now, so no NOSCRIPT round trip hides whether the second claim ran.
    client.load_scripts().await.expect("scripts");
    let home = client.placement().shards_of(meta.sku, 1)[0];
    let users = users_with_home(&client, &meta, home, "q", 2);
    let mut admin = env.node_connections().remove(0);

    // Park the shard's batch in Redis: writes pause for a second.
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(1000)
        .arg("WRITE")
        .query(&mut admin)
        .expect("CLIENT PAUSE");
    let first = {
        let (client, user) = (client.clone(), users[0].clone());
        tokio::spawn(
            async move { crate::common::claim_at_home(&client, meta.sku, &user, home).await },
        )
    };
    // Long enough for the first claim's batch to leave, even on a loaded machine.
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Queued behind the parked batch, then given up.
    let second = crate::common::req(meta.sku, &users[1], None);
    let gave_up = tokio::time::timeout(
        Duration::from_millis(100),
        client.claim_home(&second, home, shard_router::now_ms(), false),
    )
    .await;
    assert!(gave_up.is_err(), "the second claim must still be queued");

    assert!(matches!(
        first.await.expect("task"),
        Ok(shard_router::HomeOutcome::Claimed { .. })
    ));
    // Give the flush task time to look at the queue again.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(crate::common::slices_total(&client, &meta).await, 9);
    assert_eq!(
        client
            .user_count(meta.sku, 1, &users[1])
            .await
            .expect("count"),
        0
    );
}

/// Group commit: the caller whose claim started its shard's batch gives up while that
/// batch is in flight; the claims queued behind it are still sent and answered. The flush
/// must not live and die with that caller (`shard-router/src/batch.rs`), on either of the
/// client's connections (`StockClient::connect_near`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_whose_first_caller_gave_up_still_answers_the_others() {
    use crate::common::users_with_home;
    use std::time::Duration;
    let env = Env::single();
    let mut cfg = shard_router::StockConfig::new(env.target(), crate::common::SHARDS);
    cfg.timeouts.response = Duration::from_secs(5);
    let client = shard_router::StockClient::connect(cfg)
        .await
        .expect("connect");
    client.connect_near().await.expect("near connection");
    let meta = crate::common::open_meta(1089, 10, 1, 1);
    client.preheat(&meta).await.expect("preheat");
    client.load_scripts().await.expect("scripts");
    let home = client.placement().shards_of(meta.sku, 1)[0];
    let users = users_with_home(&client, &meta, home, "g", 3);
    let mut admin = env.node_connections().remove(0);
    let claim = |user: &str| {
        let (client, user) = (client.clone(), user.to_owned());
        tokio::spawn(
            async move { crate::common::claim_at_home(&client, meta.sku, &user, home).await },
        )
    };

    // Park the first batch in Redis: writes pause for a second.
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(1000)
        .arg("WRITE")
        .query(&mut admin)
        .expect("CLIENT PAUSE");
    let first = claim(&users[0]);
    // Long enough for the first claim's batch to leave, even on a loaded machine.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let behind = [claim(&users[1]), claim(&users[2])];
    tokio::time::sleep(Duration::from_millis(100)).await;
    first.abort();
    for t in behind {
        let got = tokio::time::timeout(Duration::from_secs(4), t)
            .await
            .expect("a claim queued behind a given-up caller is answered")
            .expect("task");
        assert!(
            matches!(got, Ok(shard_router::HomeOutcome::Claimed { .. })),
            "{got:?}"
        );
    }
    // The given-up caller's claim had left with its batch: it ran.
    assert_eq!(crate::common::slices_total(&client, &meta).await, 7);
}

/// The consumer's stream operations: a read after a place returns only what follows it,
/// under the master's replication id; the trim removes entries below the committed place
/// and keeps the place itself, and does nothing on a stream whose history went back below
/// the place (its newer entries may not be committed yet, `lua/stream_trim.lua`).
#[tokio::test]
async fn reads_follow_the_place_and_the_trim_keeps_what_is_not_committed() {
    use shard_router::stream::ShardStream;
    use shard_router::{RedisTarget, StockClient, StockConfig};
    let redis = test_support::RedisServer::start();
    let client = StockClient::connect(StockConfig::new(
        RedisTarget::Single(redis.url()),
        crate::common::SHARDS,
    ))
    .await
    .unwrap();
    let stream = ShardStream::new(&client, 3);
    let mut conn = redis::Client::open(redis.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    for i in 1..=5 {
        let _: String = redis::cmd("XADD")
            .arg(&stream.key)
            .arg(format!("100-{i}"))
            .arg("x")
            .arg(i)
            .query_async(&mut conn)
            .await
            .unwrap();
    }
    let block = std::time::Duration::from_millis(10);
    let (read, under) = stream
        .read_after_under(&client, "100-2", 10, block)
        .await
        .unwrap();
    let ids: Vec<String> = read
        .iter()
        .map(|e| match e {
            Ok(d) => d.entry_id.clone(),
            Err(p) => p.entry_id.clone(),
        })
        .collect();
    assert_eq!(ids, ["100-3", "100-4", "100-5"]);
    assert!(read.iter().all(|e| e.is_err()), "not claim records: poison");
    assert_eq!(under.replid.len(), 40, "{under:?}");

    assert_eq!(
        stream
            .trim_committed(&client, "100-3", "another-master")
            .await
            .unwrap(),
        0,
        "a place read under another master trims nothing"
    );
    assert_eq!(stream.len(&client).await.unwrap(), 5);
    assert_eq!(
        stream
            .trim_committed(&client, "100-3", &under.replid)
            .await
            .unwrap(),
        3
    );
    assert_eq!(
        stream.len(&client).await.unwrap(),
        2,
        "100-4 and 100-5 stay"
    );
    // A history gone back (a master restarted from an older snapshot): the last generated
    // id is below the place, so nothing is trimmed.
    let _: () = redis::cmd("DEL")
        .arg(&stream.key)
        .query_async(&mut conn)
        .await
        .unwrap();
    let _: String = redis::cmd("XADD")
        .arg(&stream.key)
        .arg("50-1")
        .arg("x")
        .arg(1)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(
        stream
            .trim_committed(&client, "100-3", &under.replid)
            .await
            .unwrap(),
        0
    );
    assert_eq!(stream.len(&client).await.unwrap(), 1);
    assert_eq!(
        stream.first_after_ms(&client, "0-0").await.unwrap(),
        Some(50)
    );
}

/// `bench/redis_claim_batch.sh` (the harness behind docs/BENCHMARKS.md's Redis CPU per
/// claim) runs `lua/claim.lua` with its own `claim_keys` and `claim_args`: the claim it
/// measures must be a real one, whose record the consumer reads, naming the bench's shard
/// (0, tag `{fg:0:1}`) and its request id. With the arguments in another order than the
/// script's header, the record is poison and the bench measures some other path.
#[test]
fn bench_claim_batch_runs_claim_lua_with_its_argument_order() {
    use shard_router::ClaimRecord;
    let sh = include_str!("../../../bench/redis_claim_batch.sh");
    let value = |name: &str| {
        sh.lines()
            .find_map(|l| l.strip_prefix(name))
            .unwrap_or_else(|| panic!("{name} in the bench"))
            .trim_matches('\'')
            .to_owned()
    };
    let (tag, sku) = (value("tag="), value("sku="));
    let now = shard_router::now_ms().to_string();
    let subst = |t: &str| {
        t.trim_matches('"')
            .replace("$tag", &tag)
            .replace("$sku", &sku)
            .replace("$1", &now)
            .replace("__rand_int__", "7")
    };
    let keys_text = sh.split("claim_keys=(").nth(1).expect("claim_keys");
    let keys: Vec<String> = keys_text[..keys_text.find(')').unwrap()]
        .split_whitespace()
        .map(subst)
        .collect();
    let args_line = sh
        .split("claim_args() {")
        .nth(1)
        .and_then(|s| s.lines().find(|l| l.trim_start().starts_with("echo")))
        .expect("claim_args");
    let args: Vec<String> = args_line.split_whitespace().skip(1).map(subst).collect();

    let env = Env::single();
    let mut conn = env.node_connections().remove(0);
    // The bench's preheat: stock that never runs out, a high limit, an open window.
    let _: redis::Value = redis::Script::new(include_str!("../../../lua/preheat.lua"))
        .key(&keys[0])
        .key(&keys[1])
        .arg("1000000000000")
        .arg("1000000000")
        .arg("0")
        .arg("9000000000000")
        .invoke(&mut conn)
        .expect("preheat");
    let reply: redis::Value = redis::Script::new(include_str!("../../../lua/claim.lua"))
        .key(keys.clone())
        .arg(args.clone())
        .invoke(&mut conn)
        .unwrap_or_else(|e| panic!("claim.lua with the bench's {keys:?} {args:?}: {e}"));
    type Entry = (String, Vec<(String, Vec<u8>)>);
    let entries: Vec<Entry> = redis::cmd("XRANGE")
        .arg(&keys[5])
        .arg("-")
        .arg("+")
        .query(&mut conn)
        .expect("XRANGE");
    assert_eq!(
        entries.len(),
        1,
        "one record for the bench's claim ({reply:?})"
    );
    let (id, fields) = &entries[0];
    let record = ClaimRecord::decode(id, fields.iter().map(|(n, v)| (n.as_str(), v.as_slice())))
        .unwrap_or_else(|e| panic!("the bench's claim wrote poison ({args:?}): {e}"));
    assert_eq!(
        (
            record.shard,
            record.home,
            record.user.as_str(),
            record.request_id.as_deref()
        ),
        (0, 0, "u7", Some("r7")),
        "the bench's claim as claim.lua took it ({args:?})"
    );
}

/// Adaptive runtime: Redis closes connections idle past `timeout`; the near connection
/// carries no probe of its own and idles between claims. The health probe must PING it
/// too (`StockClient::probe_near`), or the first claim after an idle spell goes through a
/// closed connection and fails with a broken pipe.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_claim_after_an_idle_spell_succeeds_with_a_near_connection() {
    idle_spell(true).await;
}

/// Control: the same with the client's one connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_claim_after_an_idle_spell_succeeds_own_connection_only() {
    idle_spell(false).await;
}

async fn idle_spell(near: bool) {
    use std::time::Duration;
    let server = test_support::RedisServer::start_with(&["--timeout", "1"]);
    let cfg = shard_router::StockConfig::new(
        shard_router::RedisTarget::Single(server.url()),
        crate::common::SHARDS,
    );
    let client = shard_router::StockClient::connect(cfg)
        .await
        .expect("connect");
    if near {
        client.connect_near().await.expect("near connection");
    }
    let meta = crate::common::open_meta(1091, 10, 1, 1);
    client.preheat(&meta).await.expect("preheat");
    client.load_scripts().await.expect("scripts");
    let home = client.placement().shards_of(meta.sku, 1)[0];
    let users = crate::common::users_with_home(&client, &meta, home, "i", 2);
    let got = crate::common::claim_at_home(&client, meta.sku, &users[0], home).await;
    assert!(
        matches!(got, Ok(shard_router::HomeOutcome::Claimed { .. })),
        "{got:?}"
    );
    // The gateway's probe, every 300 ms, on the client's own connection.
    let probe = {
        let client = client.clone();
        tokio::spawn(async move {
            loop {
                let h = client.shard_health().await;
                assert!(h.unreachable.is_empty(), "health says fine");
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
        })
    };
    tokio::time::sleep(Duration::from_secs(4)).await;
    let got = crate::common::claim_at_home(&client, meta.sku, &users[1], home).await;
    probe.abort();
    assert!(
        matches!(got, Ok(shard_router::HomeOutcome::Claimed { .. })),
        "{got:?}"
    );
}
