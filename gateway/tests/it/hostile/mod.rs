//! Drill `hostile_input` (docs/DESIGN.md), socket half: a real gateway on `127.0.0.1:0` and a real
//! Redis, attacked over raw TCP while a normal client keeps claiming.
//!
//! - slowloris: hundreds of connections trickling a request head byte by byte (and some
//!   sending nothing) are cut off by the header read timeout, and normal claims stay fast;
//! - the connection cap: past it, new connections wait, and service resumes as soon as the
//!   hogs leave or are cut off;
//! - oversized bodies (declared or chunked) are 413 JSON and take nothing, and a client
//!   that writes the whole body before reading still reads that 413 (lingering close);
//! - header floods (many headers, one huge header, a huge request line) are refused without
//!   harming the server;
//! - a wrong content type is 415 JSON and takes nothing;
//! - slow bodies hold a connection until the body timeout (408), never an in-flight slot, so
//!   they do not shed normal claims;
//! - a client that pipelines requests and never reads is cut by the write timeout, and a
//!   connection past its maximum age is closed after its current request.
//!
//! Every drill prints one `drill=...` line of figures.
//!
//! One file per side of the attack: `slow.rs` (heads, connections and bodies that take
//! their time), `oversize.rs` (too big, too many headers, wrongly typed), `write_side.rs`
//! (clients that do not read, and old connections), `linger.rs` (oversized bodies sent
//! whole, and senders that never stop).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::raw::*;
use crate::common::*;
use shard_router::SkuMeta;
use test_support::RedisServer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::task::JoinSet;

mod linger;
mod oversize;
mod slow;
mod write_side;

fn p99(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v.get((v.len() * 99).div_ceil(100).saturating_sub(1))
        .copied()
        .unwrap_or_default()
}

struct Setup {
    redis: RedisServer,
    gw: Gateway,
    stock: shard_router::StockClient,
    meta: SkuMeta,
}

async fn setup(sku: u64, stock_units: u64, tune: impl FnOnce(&mut gateway::Config)) -> Setup {
    let redis = RedisServer::start();
    let stock = stock_client(&redis.url(), false).await;
    let meta = preheat(&stock, sku, stock_units, 4, 1).await;
    let mut cfg = config(&redis.url(), false);
    tune(&mut cfg);
    let gw = Gateway::start(cfg).await;
    Setup {
        redis,
        gw,
        stock,
        meta,
    }
}
