//! How far behind a shard's stream is: its length, what is pending, the oldest pending id.

use redis::Value;

/// How deep a shard stream is, for the lag gauges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Depth {
    pub len: u64,
    pub pending: u64,
    /// When the oldest delivered-but-unacknowledged entry was added (ms since the epoch,
    /// the time part of its id); `None` when nothing is pending.
    pub oldest_ms: Option<i64>,
}

/// The count and the oldest id's time from the summary form of XPENDING:
/// `[count, smallest id, greatest id, [[consumer, count], ...]]`.
pub(super) fn pending_summary(summary: &Value) -> (u64, Option<i64>) {
    let Value::Array(v) = summary else {
        return (0, None);
    };
    let count = match v.first() {
        Some(Value::Int(n)) => (*n).max(0) as u64,
        _ => 0,
    };
    let oldest = match v.get(1) {
        Some(Value::BulkString(id)) => std::str::from_utf8(id)
            .ok()
            .and_then(|id| id.split('-').next())
            .and_then(|ms| ms.parse().ok()),
        Some(Value::SimpleString(id)) => id.split('-').next().and_then(|ms| ms.parse().ok()),
        _ => None,
    };
    (count, if count > 0 { oldest } else { None })
}

#[cfg(test)]
mod depth_tests {
    use super::*;

    #[test]
    fn pending_summary_reads_count_and_oldest_id() {
        let s = Value::Array(vec![
            Value::Int(3),
            Value::BulkString(b"1700000000123-4".to_vec()),
            Value::BulkString(b"1700000000999-0".to_vec()),
            Value::Array(vec![]),
        ]);
        assert_eq!(pending_summary(&s), (3, Some(1_700_000_000_123)));
        let empty = Value::Array(vec![Value::Int(0), Value::Nil, Value::Nil, Value::Nil]);
        assert_eq!(pending_summary(&empty), (0, None));
        assert_eq!(pending_summary(&Value::Nil), (0, None));
    }
}
