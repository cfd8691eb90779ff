//! The waiting room's scripts (`lua/queue_join.lua`, `lua/queue_admit.lua`) on a private
//! Redis, around the start and a loss: no join is placed ahead of users already waiting.

use shard_router::queue::{Place, QueueState};
use shard_router::{now_ms, Joined, StockClient};

use crate::common::Env;

const SKU: u64 = 7_707;

async fn ticket(client: &StockClient, user: &str, now: i64, start: i64) -> Joined {
    client.queue_join(SKU, user, now, start).await.unwrap()
}

/// A gateway whose clock is behind (within the skew bound) still sees "before the start"
/// after the admission step fixed the pre-queue's length. Its join must not get a
/// pre-queue place: those are scaled into `1..=pre`, ahead of every ticket, and the user
/// was not counted in `pre`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_join_after_the_pre_queue_is_fixed_gets_a_ticket_whatever_the_gateways_clock() {
    let env = Env::single();
    let client = env.client().await;
    let start = now_ms() - 100;
    assert_eq!(
        ticket(&client, "early", start - 5_000, start).await,
        Joined::Pre
    );
    let fixed = client.queue_admit(SKU, 0, 0, None, 0).await.unwrap();
    assert_eq!(fixed.pre, Some(1));
    assert_eq!(
        ticket(&client, "t1", start + 10, start).await,
        Joined::Ticket(1)
    );
    // The skewed gateway: 50 ms behind, so "before the start" for it.
    let late = ticket(&client, "skewed", start - 50, start).await;
    assert_eq!(
        late,
        Joined::Ticket(2),
        "placed ahead of the ticket holders"
    );
}

/// Redis lost the queue after the start: until the admission step has written the
/// ledger's marks back (the pre-queue's length, the tickets' high-water), a join must get
/// no ticket: counting from 1 again hands out positions under the admitted watermark,
/// ahead of everyone who was waiting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_join_after_a_loss_waits_for_the_marks_and_queues_behind_the_waiting() {
    let env = Env::single();
    let client = env.client().await;
    let start = now_ms() - 1_000;
    let now = now_ms();
    client.queue_admit(SKU, 0, 0, None, 0).await.unwrap();
    for i in 1..=10u64 {
        let j = ticket(&client, &format!("u{i}"), now, start).await;
        assert_eq!(j, Joined::Ticket(i));
    }
    // Three admitted; u4..u10 wait. The ledger holds these marks.
    let before = client.queue_admit(SKU, 3, 10, None, 0).await.unwrap();
    assert_eq!((before.pre, before.admitted, before.next), (Some(0), 3, 10));

    for mut c in env.node_connections() {
        redis::cmd("FLUSHALL").query::<()>(&mut c).unwrap();
    }
    // A newcomer before the write-back: no place yet (not ticket 1, which is admitted).
    let early = client.queue_join(SKU, "newcomer", now, start).await;
    if let Ok(Joined::Ticket(n)) = early {
        let pos = QueueState {
            pre: Some(0),
            admitted: 3,
            next: 10,
            rate: 0,
        }
        .position(Place::Ticket(n))
        .unwrap();
        panic!("ticket {n} (position {pos}) handed out before the marks came back");
    }
    assert_eq!(early.unwrap(), Joined::NotOpen);
    // The step writes the ledger's marks back: the newcomer queues behind u10.
    let after = client.queue_admit(SKU, 3, 10, Some(0), 10).await.unwrap();
    assert_eq!((after.pre, after.admitted, after.next), (Some(0), 3, 10));
    assert_eq!(
        ticket(&client, "newcomer", now, start).await,
        Joined::Ticket(11)
    );
}

/// Bad arguments are refused and write nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_join_arguments_change_nothing() {
    let env = Env::single();
    let client = env.client().await;
    assert!(client.queue_join(SKU, "", now_ms(), 0).await.is_err());
    assert!(client
        .queue_join(SKU, &"x".repeat(10_000), now_ms(), 0)
        .await
        .is_err());
    assert_eq!(env.key_count(), 0);
}
