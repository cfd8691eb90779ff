//! A campaign as the Redis side knows it: the metadata a preheat or a rebuild writes.

use ledger::campaigns::Campaign;
use shard_router::SkuMeta;

/// The SKU metadata of `c`.
pub fn meta(c: &Campaign) -> SkuMeta {
    SkuMeta {
        sku: c.sku,
        stock: c.stock,
        width: c.width,
        limit: c.limit,
        start_ms: c.start_ms,
        end_ms: c.end_ms,
        draw: None,
    }
}
