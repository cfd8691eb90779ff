//! `Batcher::replicas_acked`: a batch is confirmed on replicas only when the closing WAIT
//! counted at least every replica the master reported online (and at least the replicas
//! asked for), and the INFO beside it was readable. Each refusal below, if it went, would
//! let replica durability acknowledge a claim a failover can still lose.

use std::time::Duration;

use redis::{RedisResult, Value};

use super::{io_error, Batcher};

const INFO_TWO_ONLINE: &str = "# Replication\r\nrole:master\r\nconnected_slaves:2\r\n\
slave0:ip=127.0.0.1,port=7001,state=online,offset=42,lag=0\r\n\
slave1:ip=127.0.0.1,port=7002,state=online,offset=42,lag=0\r\n\
master_replid:abc123\r\nrepl_backlog_active:1\r\n";

/// The pipeline's last two replies, as `replicas_acked` pops them: WAIT, then INFO.
fn tail(wait: RedisResult<Value>, info: RedisResult<Value>) -> Vec<RedisResult<Value>> {
    vec![Ok(Value::Int(1)), wait, info]
}

fn info(text: &str) -> RedisResult<Value> {
    Ok(Value::BulkString(text.as_bytes().to_vec()))
}

fn refused() -> RedisResult<Value> {
    Err(io_error(std::io::ErrorKind::Other, "refused"))
}

fn acked(need: u32, mut values: Vec<RedisResult<Value>>) -> (u32, Vec<RedisResult<Value>>) {
    let b = Batcher::new(
        1,
        Duration::from_millis(100),
        Some(Duration::from_millis(10)),
    );
    let n = b.replicas_acked(0, need, &mut values);
    (n, values)
}

#[tokio::test]
async fn every_online_replica_acknowledging_confirms_the_batch() {
    let (n, rest) = acked(1, tail(Ok(Value::Int(2)), info(INFO_TWO_ONLINE)));
    assert_eq!(n, 2);
    assert_eq!(rest.len(), 1, "only the WAIT and the INFO are taken off");
}

#[tokio::test]
async fn an_unreadable_info_confirms_nothing() {
    assert_eq!(acked(1, tail(Ok(Value::Int(2)), refused())).0, 0);
    let garbage = Ok(Value::Nil);
    assert_eq!(acked(1, tail(Ok(Value::Int(2)), garbage)).0, 0);
}

#[tokio::test]
async fn a_wait_that_errs_confirms_nothing() {
    assert_eq!(acked(1, tail(refused(), info(INFO_TWO_ONLINE))).0, 0);
    let not_a_count = Ok(Value::SimpleString("OK".into()));
    assert_eq!(acked(1, tail(not_a_count, info(INFO_TWO_ONLINE))).0, 0);
}

#[tokio::test]
async fn fewer_than_asked_for_confirms_nothing() {
    let one_online = INFO_TWO_ONLINE.replace("state=online,offset=42,lag=0\r\nmaster", "x");
    assert_eq!(acked(3, tail(Ok(Value::Int(2)), info(&one_online))).0, 0);
}

#[tokio::test]
async fn fewer_than_every_online_replica_confirms_nothing() {
    // Asked for one, but the INFO read with the batch counts two online: one
    // acknowledgement may be the replica a failover does not promote.
    assert_eq!(
        acked(1, tail(Ok(Value::Int(1)), info(INFO_TWO_ONLINE))).0,
        0
    );
}

#[tokio::test]
async fn the_info_read_sets_the_next_batches_wait() {
    let b = Batcher::new(
        1,
        Duration::from_millis(100),
        Some(Duration::from_millis(10)),
    );
    let mut values = tail(Ok(Value::Int(2)), info(INFO_TWO_ONLINE));
    b.replicas_acked(0, 1, &mut values);
    assert_eq!(b.replicas_to_wait(0), 2);
}

/// A queued item naming the connection it must go through (`Pending::pin`), or none.
struct Pinned(Option<char>);

impl super::Waiting for Pinned {
    fn is_open(&self) -> bool {
        true
    }
}

#[test]
fn a_group_holds_items_for_one_connection_only() {
    let q = super::GroupQueue::new();
    for pin in [None, Some('n'), None, Some('o'), Some('o'), None] {
        q.push(Pinned(pin));
    }
    let next = |max| {
        q.next(max, |p: &Pinned| p.0, 'o')
            .map(|(k, g)| (k, g.len()))
    };
    // The first item names none: the default, up to the item naming another.
    assert_eq!(next(64), Some(('o', 1)));
    assert_eq!(next(64), Some(('n', 2)));
    assert_eq!(next(2), Some(('o', 2)));
    assert_eq!(next(64), Some(('o', 1)));
    assert_eq!(next(64), None, "empty: the queue is released");
}
