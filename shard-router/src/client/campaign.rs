//! A SKU in Redis: preheating its slices, its metadata for the gateways, the live SKU set,
//! and reading the slices back.

use redis::AsyncCommands;

use super::StockClient;
use crate::error::StockError;
use crate::keys;
use crate::outcome::*;
use crate::placement::ShardId;
use crate::scripts::{self, code};

impl StockClient {
    /// Splits `meta.stock` over the SKU's shards and writes the SKU metadata. A shard whose
    /// slice already exists keeps it (reported as `Live`): preheat never overwrites sales.
    pub async fn preheat(
        &self,
        meta: &SkuMeta,
    ) -> Result<Vec<(ShardId, PreheatOutcome)>, StockError> {
        self.placement
            .check_width(meta.width)
            .map_err(|e| StockError::InvalidArgument(e.to_string()))?;
        if meta.limit == 0 || meta.end_ms <= meta.start_ms {
            return Err(StockError::InvalidArgument(
                "limit must be >= 1 and the window must not be empty".into(),
            ));
        }
        let shards = self.placement.shards_of(meta.sku, meta.width);
        let mut out = Vec::with_capacity(shards.len());
        for (shard, slice) in shards.into_iter().zip(meta.slices()) {
            // Before the slice: a snapshot that holds the slice holds the vouch too, so no
            // older copy of this shard can come back unvouched (`lua/guard.lua`).
            self.vouch_if_none(shard).await?;
            let k = self.keys(shard, meta.sku);
            let mut inv = scripts::PREHEAT.prepare_invoke();
            inv.key(k.stock())
                .key(k.meta())
                .arg(slice)
                .arg(meta.limit)
                .arg(meta.start_ms)
                .arg(meta.end_ms);
            let r = self.run("preheat", &inv).await?;
            out.push((
                shard,
                match r.code {
                    code::PREHEATED => PreheatOutcome::Preheated { slice: r.int(0)? },
                    code::LIVE => PreheatOutcome::Live { current: r.int(0)? },
                    code::REBUILDING => PreheatOutcome::Rebuilding,
                    _ => return Err(r.unexpected()),
                },
            ));
        }
        // Written after the slices: a gateway that sees the metadata finds the slices too.
        self.write_sku_meta(meta).await?;
        Ok(out)
    }

    /// The SKU-wide metadata hash and the SKU set entry gateways resync from.
    pub async fn write_sku_meta(&self, meta: &SkuMeta) -> Result<(), StockError> {
        let mut conn = self.conn.clone();
        let mut fields = vec![
            ("stock", meta.stock.to_string()),
            ("width", meta.width.to_string()),
            ("limit", meta.limit.to_string()),
            ("start", meta.start_ms.to_string()),
            ("end", meta.end_ms.to_string()),
        ];
        // Mode is fixed at creation, so a draw's fields are never removed; absent = fcfs.
        if meta.mode != SkuMode::Fcfs {
            fields.push(("mode", meta.mode.name().into()));
        }
        if let SkuMode::Draw(d) = &meta.mode {
            fields.push(("draw_at", d.draw_at_ms.to_string()));
            fields.push(("seed_sha256", d.seed_sha256.clone()));
            if let Some(seed) = &d.seed {
                fields.push(("seed", seed.clone()));
            }
        }
        self.bounded(
            "preheat meta",
            conn.hset_multiple::<_, _, _, ()>(keys::sku_meta(meta.sku), &fields),
        )
        .await?;
        self.bounded(
            "preheat meta",
            conn.sadd::<_, _, ()>(keys::SKU_SET, meta.sku),
        )
        .await?;
        // Gateways answer SKUs outside their copy of SKU_SET with 404 from memory; this
        // tells them at once (a gateway that misses it rereads the set on resubscribe).
        self.bounded(
            "preheat meta",
            conn.publish::<_, _, ()>(keys::EVENTS_CHANNEL, format!("live {}", meta.sku)),
        )
        .await
    }

    /// The SKU metadata written at preheat, or `None` when the SKU was never preheated.
    pub async fn sku_meta(&self, sku: u64) -> Result<Option<SkuMeta>, StockError> {
        let mut conn = self.conn.clone();
        let vals: Vec<Option<String>> = self
            .bounded(
                "sku meta",
                redis::cmd("HMGET")
                    .arg(keys::sku_meta(sku))
                    .arg(&[
                        "stock",
                        "width",
                        "limit",
                        "start",
                        "end",
                        "mode",
                        "draw_at",
                        "seed_sha256",
                        "seed",
                    ])
                    .query_async(&mut conn),
            )
            .await?;
        let int = |i: usize| vals[i].as_deref().and_then(|v| v.parse::<i64>().ok());
        let (Some(stock), Some(width), Some(limit), Some(start), Some(end)) =
            (int(0), int(1), int(2), int(3), int(4))
        else {
            return Ok(None);
        };
        let bad = || StockError::Protocol {
            op: "sku meta",
            detail: format!("sku {sku}: metadata out of range"),
        };
        let meta = SkuMeta {
            sku,
            stock: u64::try_from(stock).map_err(|_| bad())?,
            width: u16::try_from(width).map_err(|_| bad())?,
            limit: u32::try_from(limit).map_err(|_| bad())?,
            start_ms: start,
            end_ms: end,
            mode: match vals[5].as_deref() {
                None | Some("fcfs") => SkuMode::Fcfs,
                Some("queue") => SkuMode::Queue,
                Some("draw") => SkuMode::Draw(SkuDraw {
                    draw_at_ms: int(6).ok_or_else(bad)?,
                    seed_sha256: vals[7].clone().ok_or_else(bad)?,
                    seed: vals[8].clone(),
                }),
                // A mode this release does not know: never sold as first come, first served.
                Some(_) => return Err(bad()),
            },
        };
        self.placement.check_width(meta.width).map_err(|_| bad())?;
        Ok(Some(meta))
    }

    /// Every preheated SKU id.
    pub async fn skus(&self) -> Result<Vec<u64>, StockError> {
        let mut conn = self.conn.clone();
        self.bounded("skus", conn.smembers(keys::SKU_SET)).await
    }

    /// Each shard's slice of a SKU; `None` where the slice is missing.
    pub async fn slices(
        &self,
        sku: u64,
        width: u16,
    ) -> Result<Vec<(ShardId, Option<i64>)>, StockError> {
        let mut out = Vec::new();
        for shard in self.placement.shards_of(sku, width) {
            let mut conn = self.conn.clone();
            let v: Option<i64> = self
                .bounded("slices", conn.get(self.keys(shard, sku).stock()))
                .await?;
            out.push((shard, v));
        }
        Ok(out)
    }

    /// Adds stock wave `id`'s `share` to `shard`'s slice once per wave id, paying the
    /// shard's debt first (`lua/wave.lua`). `false`: the slice is missing (not preheated).
    pub async fn add_wave(
        &self,
        shard: ShardId,
        sku: u64,
        id: &str,
        share: i64,
    ) -> Result<bool, StockError> {
        let k = self.keys(shard, sku);
        let mut inv = scripts::WAVE.prepare_invoke();
        inv.key(k.stock())
            .key(k.waves())
            .key(k.debt())
            .arg(id)
            .arg(share)
            .arg(sku)
            .arg(shard)
            .arg(keys::EVENTS_CHANNEL);
        let r = self.run("wave", &inv).await?;
        match r.code {
            code::WAVE_ADDED | code::WAVE_ALREADY => Ok(true),
            code::NOT_PREHEATED => Ok(false),
            _ => Err(r.unexpected()),
        }
    }
}
