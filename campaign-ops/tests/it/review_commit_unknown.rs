//! A batch whose COMMIT went through while its answer was lost (the connection dropped
//! after MySQL committed): the writer only sees a server-state error and retries the same
//! batch. What the first attempt found must still be acted on, here a collision, which
//! fences its home shard until the watch rebuilt it from the ledger.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::common::*;

/// A TCP proxy in front of MariaDB. Once armed, the first connection whose transaction
/// prepared the collision insert has its `COMMIT` forwarded, and then both sides closed
/// before MySQL's answer reaches the client: committed, with an unknown outcome.
struct CommitCutter {
    port: u16,
    armed: Arc<AtomicBool>,
    fired: Arc<AtomicBool>,
}

impl CommitCutter {
    /// `hold`: how long the connection stays open, silent, after the COMMIT was forwarded.
    async fn start(upstream: u16, hold: Duration) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let armed = Arc::new(AtomicBool::new(false));
        let fired = Arc::new(AtomicBool::new(false));
        let (a, f) = (armed.clone(), fired.clone());
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)).await else {
                    continue;
                };
                tokio::spawn(relay(client, server, a.clone(), f.clone(), hold));
            }
        });
        Self { port, armed, fired }
    }
}

async fn relay(
    client: TcpStream,
    server: TcpStream,
    armed: Arc<AtomicBool>,
    fired: Arc<AtomicBool>,
    hold: Duration,
) {
    let (mut cr, mut cw) = client.into_split();
    let (mut sr, mut sw) = server.into_split();
    let back = tokio::spawn(async move {
        let _ = tokio::io::copy(&mut sr, &mut cw).await;
        cw
    });
    let mut collided = false;
    loop {
        let mut head = [0u8; 4];
        if cr.read_exact(&mut head).await.is_err() {
            break;
        }
        let len = u32::from_le_bytes([head[0], head[1], head[2], 0]) as usize;
        let mut body = vec![0u8; len];
        if cr.read_exact(&mut body).await.is_err() {
            break;
        }
        if body.windows(9).any(|w| w == b"collides)") {
            collided = true;
        }
        let commit = body.first() == Some(&3) && body[1..].eq_ignore_ascii_case(b"COMMIT");
        if commit && collided && armed.swap(false, Ordering::SeqCst) {
            // Nothing is in flight back to the client (it waits for this answer): stop
            // relaying answers, let MySQL commit, then drop the connection.
            back.abort();
            let _ = sw.write_all(&head).await;
            let _ = sw.write_all(&body).await;
            fired.store(true, Ordering::SeqCst);
            tokio::time::sleep(hold).await;
            return;
        }
        collided &= !commit;
        if sw.write_all(&head).await.is_err() || sw.write_all(&body).await.is_err() {
            break;
        }
    }
    back.abort();
}

/// The consumer's URL through the proxy, in plain text so the proxy can read it.
fn proxied(url: &str, port: u16) -> (String, u16) {
    let (head, db) = url.rsplit_once('/').unwrap();
    let (host, upstream) = head.rsplit_once(':').unwrap();
    let sep = if db.contains('?') { '&' } else { '?' };
    let url = format!("{host}:{port}/{db}{sep}ssl-mode=disabled");
    (url, upstream.parse().unwrap())
}

/// The connection drops once MySQL committed: the writer sees a lost connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collision_whose_commit_answer_was_lost_still_fences_its_home_shard() {
    lost_commit_answer(7191, Lost::Dropped).await;
}

/// No answer within the writer's bound (`db_timeout`), then the connection drops: the writer
/// gave the attempt up on its own clock first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collision_whose_commit_outlived_the_bound_still_fences_its_home_shard() {
    lost_commit_answer(7192, Lost::PastBound).await;
}

/// The consumer dies while the answer is on its way (after MySQL committed, before the
/// writer fenced anything); the next consumer starts from the place the batch moved.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collision_committed_just_before_a_crash_still_fences_its_home_shard() {
    lost_commit_answer(7193, Lost::Crash).await;
}

/// How the writer loses the answer to the colliding batch's COMMIT.
enum Lost {
    /// The connection drops half a second after MySQL committed.
    Dropped,
    /// The connection drops after the writer's bound (`db_timeout`) ran out.
    PastBound,
    /// No answer at all: the consumer is killed, and another one started.
    Crash,
}

/// A collision is committed and its answer lost as `how` says, and the home shard must
/// still be fenced and rebuilt, the books closing.
async fn lost_commit_answer(sku: u64, how: Lost) {
    let s = Stack::start().await;
    let hold = match how {
        Lost::Dropped => Duration::from_millis(500),
        Lost::PastBound => s.cfg.datapath.db_timeout + Duration::from_secs(1),
        Lost::Crash => Duration::from_secs(120),
    };
    let c = campaign(&s, sku, 10, 1, 2, 3600).await;
    let shard = s.client.placement().shards_of(c.sku, 1)[0];
    let (_, upstream) = proxied(&s.cfg.datapath.mysql_url, 0);
    let cutter = CommitCutter::start(upstream, hold).await;
    let mut cfg = s.cfg.clone();
    cfg.datapath.mysql_url = proxied(&s.cfg.datapath.mysql_url, cutter.port).0;
    let gen_before = ::ledger::rebuild::rebuild_gen(&s.pool, c.sku, T)
        .await
        .unwrap();
    let mut consumer = start_consumer(cfg);

    cutter.armed.store(true, Ordering::SeqCst);
    crate::collision::one_seq_claimed_in_order(&s, &c, shard, "dora").await;
    wait_drained(&s, c.sku, 2, Duration::from_secs(20)).await;
    assert!(
        cutter.fired.load(Ordering::SeqCst),
        "the colliding batch's COMMIT answer was not cut"
    );
    assert_eq!(
        s.count("SELECT COUNT(*) FROM anomalies WHERE kind = 'collision'")
            .await,
        1
    );
    if let Lost::Crash = how {
        consumer.kill();
        consumer = start_consumer(s.cfg.clone());
    }

    // The home shard handed out a sequence twice: fenced, then rebuilt by the watch.
    let deadline = Instant::now() + Duration::from_secs(12);
    let mut gen = gen_before;
    while gen == gen_before && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
        gen = ::ledger::rebuild::rebuild_gen(&s.pool, c.sku, T)
            .await
            .unwrap();
    }
    consumer.stop().await;
    assert!(
        gen > gen_before,
        "the collision's home shard was never fenced nor rebuilt (rebuild gen {gen_before} -> {gen})"
    );
    assert_eq!(s.reconcile(c.sku).await.drift, 0);
}
