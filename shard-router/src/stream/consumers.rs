//! The consumers of a shard's stream groups: pruning the dead ones, and which processes
//! read the stream now.

use std::time::Duration;

use super::ShardStream;
use crate::{RedisConn, StockClient, StockError};

impl ShardStream {
    /// Removes consumers of the group that hold nothing and were idle for `idle` (each
    /// process start adds a uniquely named consumer; dead ones would pile up forever).
    pub async fn prune_consumers(
        &self,
        client: &StockClient,
        me: &str,
        idle: Duration,
    ) -> Result<usize, StockError> {
        let mut conn = client.conn();
        let info = self.consumers(client, &mut conn, &self.group).await?;
        let mut pruned = 0;
        for c in info.consumers {
            if c.name != me && c.pending == 0 && c.idle as u128 >= idle.as_millis() {
                client
                    .bounded(
                        "xgroup delconsumer",
                        redis::cmd("XGROUP")
                            .arg("DELCONSUMER")
                            .arg(&self.key)
                            .arg(&self.group)
                            .arg(&c.name)
                            .query_async::<i64>(&mut conn),
                    )
                    .await?;
                pruned += 1;
            }
        }
        Ok(pruned)
    }

    /// XINFO CONSUMERS of `group` on this stream.
    async fn consumers(
        &self,
        client: &StockClient,
        conn: &mut RedisConn,
        group: &str,
    ) -> Result<redis::streams::StreamInfoConsumersReply, StockError> {
        client
            .bounded(
                "xinfo consumers",
                redis::cmd("XINFO")
                    .arg("CONSUMERS")
                    .arg(&self.key)
                    .arg(group)
                    .query_async(conn),
            )
            .await
    }

    /// Names of the consumers, in any group of this stream, whose idle time (XINFO
    /// CONSUMERS) is under `within`: the processes reading it now. Redis 7.0 lists a
    /// consumer only once a read delivered it something, so readers of a stream that
    /// stayed empty are not seen. A stream that does not exist has none.
    pub async fn recent_readers(
        &self,
        client: &StockClient,
        within: Duration,
    ) -> Result<Vec<String>, StockError> {
        let mut conn = client.conn();
        let groups: Result<redis::streams::StreamInfoGroupsReply, StockError> = client
            .bounded(
                "xinfo groups",
                redis::cmd("XINFO")
                    .arg("GROUPS")
                    .arg(&self.key)
                    .query_async(&mut conn),
            )
            .await;
        let groups = match groups {
            Ok(g) => g.groups,
            Err(StockError::Redis { source, .. }) if source.to_string().contains("no such key") => {
                return Ok(Vec::new())
            }
            Err(e) => return Err(e),
        };
        let mut out = Vec::new();
        for g in groups {
            let info = self.consumers(client, &mut conn, &g.name).await?;
            out.extend(
                info.consumers
                    .into_iter()
                    .filter(|c| (c.idle as u128) < within.as_millis())
                    .map(|c| c.name),
            );
        }
        Ok(out)
    }
}
