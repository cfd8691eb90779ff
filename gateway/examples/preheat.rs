//! Preheats one SKU for manual load tests (sale window open for a day):
//! `cargo run --release -p gateway --example preheat -- redis://127.0.0.1:6379 SKU STOCK WIDTH LIMIT`

use shard_router::{now_ms, RedisTarget, SkuMeta, StockClient, StockConfig};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let a: Vec<String> = std::env::args().skip(1).collect();
    anyhow::ensure!(
        a.len() == 5,
        "usage: preheat REDIS_URL SKU STOCK WIDTH LIMIT"
    );
    let client =
        StockClient::connect(StockConfig::new(RedisTarget::parse(&a[0], false)?, 16)).await?;
    let meta = SkuMeta {
        sku: a[1].parse()?,
        stock: a[2].parse()?,
        width: a[3].parse()?,
        limit: a[4].parse()?,
        start_ms: now_ms() - 1_000,
        end_ms: now_ms() + 86_400_000,
    };
    println!("{:?}", client.preheat(&meta).await?);
    Ok(())
}
