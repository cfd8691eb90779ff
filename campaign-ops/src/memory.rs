//! Redis memory use per shard (`used_memory`, `maxmemory` of the node holding it), exported
//! so an alert fires well before `maxmemory`: at the limit, writes fail (policy
//! `noeviction`) and the sale stops. On a cluster each shard's figure is its master's.

use shard_router::{StockClient, StockError};

use crate::metrics as m;

/// Parses `used_memory` and `maxmemory` out of `INFO memory`.
pub fn parse_info(info: &str) -> (Option<u64>, Option<u64>) {
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':')?.trim().parse().ok())
    };
    (field("used_memory"), field("maxmemory"))
}

/// Reads and exports every shard's figures once.
pub async fn export(client: &StockClient) -> Result<(), StockError> {
    for shard in 0..client.placement().shard_count() {
        let (used, max) = parse_info(&client.shard_info(shard, "memory").await?);
        let label = shard.to_string();
        if let Some(u) = used {
            metrics::gauge!(m::REDIS_USED_MEMORY, "shard" => label.clone()).set(u as f64);
        }
        if let Some(x) = max {
            metrics::gauge!(m::REDIS_MAX_MEMORY, "shard" => label).set(x as f64);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn info_fields_are_read() {
        let info = "# Memory\r\nused_memory:1048576\r\nused_memory_human:1.00M\r\nmaxmemory:2097152\r\nmaxmemory_policy:noeviction\r\n";
        assert_eq!(super::parse_info(info), (Some(1_048_576), Some(2_097_152)));
    }
}
