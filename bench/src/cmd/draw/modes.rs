//! The campaigns of `bench draw` (first come, a draw, a waiting room): made through the
//! consumer binary, offered the population, then their winners counted and their
//! invariants checked.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use bench::stack::cpu::Watched;
use loadgen::http::Target;
use loadgen::token::Tokens;
use shard_router::now_ms;

use super::drive::{self, Kind, Phase, PhaseResult};
use super::ledger::{user_index, Ledger, UserUnits};
use super::population::Shape;
use super::report::{Check, ModeReport, QueueFigures};
use super::DrawOpts;
use crate::cmd::run::SystemArgs;

mod draw;
pub(crate) use draw::draw;

/// Time from making a draw or queue campaign to the opening: two consumer commands and
/// the connections (the draw time or the queue's start is set from it).
const PREP_MS: i64 = 3_000;

pub(crate) struct Ctx<'a> {
    pub(crate) o: &'a DrawOpts,
    pub(crate) sys: &'a SystemArgs,
    pub(crate) bin: &'a Path,
    pub(crate) ledger: Ledger,
    pub(crate) targets: &'a [Target],
    pub(crate) tokens: Option<Arc<Tokens>>,
    pub(crate) tag: &'a str,
    pub(crate) shape: Shape,
    pub(crate) width: u16,
    pub(crate) watched: Vec<Watched>,
}

impl Ctx<'_> {
    async fn phase(&self, sku: u64, kind: Kind) -> PhaseResult {
        let p = Phase {
            targets: self.targets,
            sku,
            kind,
            tag: self.tag,
            connections: self.o.connections,
            timeout: Duration::from_millis(self.o.timeout_ms),
            tokens: self.tokens.clone(),
        };
        drive::run(&p, &self.shape, self.watched.clone()).await
    }

    fn campaign_args(&self, sku: u64, start_ms: i64, end_ms: i64) -> Vec<String> {
        [
            "campaign",
            "--sku",
            &sku.to_string(),
            "--stock",
            &self.o.stock.to_string(),
            "--width",
            &self.width.to_string(),
            "--limit",
            "1",
            "--start",
            &start_ms.to_string(),
            "--end",
            &end_ms.to_string(),
        ]
        .map(str::to_owned)
        .to_vec()
    }

    /// Runs a consumer admin command; `(exit success, stdout, stderr)`.
    async fn consumer(&self, args: &[String]) -> anyhow::Result<(bool, String, String)> {
        let mut common = self.sys.redis.to_args();
        if let Some(url) = &self.sys.mysql {
            common.extend(["--mysql".to_owned(), url.clone()]);
        }
        let out = tokio::time::timeout(
            Duration::from_secs(300),
            tokio::process::Command::new(self.bin)
                .args(&common)
                .args(args)
                .kill_on_drop(true)
                .output(),
        )
        .await
        .with_context(|| format!("consumer {} took over 300 s", args.join(" ")))??;
        Ok((
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        ))
    }

    async fn consumer_ok(&self, args: Vec<String>) -> anyhow::Result<()> {
        let (ok, _, err) = self.consumer(&args).await?;
        anyhow::ensure!(ok, "{} {}: {err}", self.bin.display(), args.join(" "));
        Ok(())
    }

    /// Winners (users holding a unit) and the bots among them, from ledger rows; the
    /// per-user invariants too.
    fn count(&self, rows: &[UserUnits], only_granted: bool) -> (u64, u64, u64, u64) {
        let (mut winners, mut bots, mut units, mut doubled) = (0, 0, 0, 0);
        for r in rows {
            units += r.units;
            if r.units > 1 {
                doubled += 1;
            }
            if only_granted && r.granted == 0 {
                continue;
            }
            winners += 1;
            if user_index(self.tag, &r.user_id).is_some_and(|u| self.shape.is_bot(u)) {
                bots += 1;
            }
        }
        (winners, bots, units, doubled)
    }

    /// The time the population takes to arrive (s): a draw's entry window, a queue's
    /// pre-queue. `--entry-window-s`, else twice the fcfs phase when it ran, else the
    /// requests at `--entry-rate` plus the humans' spread.
    fn arrival_window_s(&self, fcfs_took_s: Option<f64>) -> f64 {
        let o = self.o;
        o.entry_window_s.unwrap_or_else(|| match fcfs_took_s {
            Some(t) => 2.0 * t + 1.0,
            None => {
                self.shape.requests() as f64 / o.entry_rate.max(1.0)
                    + (o.rush_ms + o.delay_max_ms) as f64 / 1e3
            }
        })
    }

    /// A first-come phase's report: the winners are the users told `claimed`, checked
    /// against the stock and against the ledger's claims of the SKU.
    async fn first_come_report(
        &self,
        mode: &'static str,
        sku: u64,
        phase: &PhaseResult,
    ) -> anyhow::Result<ModeReport> {
        let stock = self.o.stock;
        let (mut winners, mut bot_winners, mut units, mut doubled) = (0, 0, 0u64, 0);
        for (u, &n) in phase.per_user.iter().enumerate() {
            if n > 0 {
                winners += 1;
                units += n as u64;
                if self.shape.is_bot(u as u32) {
                    bot_winners += 1;
                }
            }
            if n > 1 {
                doubled += 1;
            }
        }
        let mut m = ModeReport::new(mode, sku, stock, &self.shape, phase, winners, bot_winners);
        m.checks.push(Check::new(
            "units claimed <= stock (answers)",
            units <= stock,
            format!("{units} claimed, stock {stock}"),
        ));
        m.checks.push(Check::new(
            "one unit a user (answers)",
            doubled == 0,
            format!("{doubled} users told claimed twice"),
        ));
        // The ledger, once the consumer has written what was acknowledged.
        let deadline = Instant::now() + Duration::from_secs(self.sys.drain_timeout_s);
        let rows = loop {
            let rows = self.ledger.units(sku).await?;
            let in_ledger: u64 = rows.iter().map(|r| r.units).sum();
            if in_ledger >= units || Instant::now() >= deadline {
                break rows;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        };
        let (_, _, ledger_units, ledger_doubled) = self.count(&rows, false);
        m.checks.push(Check::new(
            "ledger units <= stock, every acknowledged claim in it",
            ledger_units <= stock && ledger_units >= units,
            format!("ledger {ledger_units}, acknowledged {units}, stock {stock}"),
        ));
        m.checks.push(Check::new(
            "one unit a user (ledger)",
            ledger_doubled == 0,
            format!("{ledger_doubled} users with two units"),
        ));
        Ok(m)
    }
}

/// First come, first served: the winners are the users told `claimed`.
pub(crate) async fn fcfs(c: &Ctx<'_>, sku: u64) -> anyhow::Result<ModeReport> {
    let now = now_ms();
    c.consumer_ok(c.campaign_args(sku, now - 1_000, now + 3_600_000))
        .await?;
    c.consumer_ok(vec!["preheat".into(), sku.to_string()])
        .await?;
    let phase = c.phase(sku, Kind::Fcfs).await;
    c.first_come_report("fcfs", sku, &phase).await
}

/// A waiting room in front of first come: the whole population arrives before the start
/// (the pre-queue, shuffled at the start), then polls with its tokens until it is told
/// `claimed`, `sold_out` or a refusal, or `--queue-wait-s` after the start. The winners
/// are the users told `claimed`, as in fcfs.
pub(crate) async fn queue(
    c: &Ctx<'_>,
    sku: u64,
    fcfs_took_s: Option<f64>,
) -> anyhow::Result<ModeReport> {
    let o = c.o;
    let window_s = c.arrival_window_s(fcfs_took_s);
    let created = now_ms();
    let start = created + PREP_MS + ((window_s + o.draw_margin_s) * 1e3) as i64;
    eprintln!(
        "queue: arrivals window {window_s:.1} s, start at {start} ({:.1} s from now), \
         waiting at most {} s after it",
        (start - created) as f64 / 1e3,
        o.queue_wait_s
    );
    let mut args = c.campaign_args(sku, start, start + 3_600_000);
    args.extend(["--mode", "queue"].map(str::to_owned));
    c.consumer_ok(args).await?;
    c.consumer_ok(vec!["preheat".into(), sku.to_string()])
        .await?;
    let deadline = Instant::now()
        + Duration::from_millis((start - now_ms()).max(0) as u64)
        + Duration::from_secs(o.queue_wait_s);
    let phase = c.phase(sku, Kind::Queue { deadline }).await;
    let tally = phase.queue.clone().unwrap_or_default();
    if let Some(done) = tally.arrivals_done_ms.filter(|&d| d > start) {
        eprintln!(
            "warning: the arrivals ran {} ms past the start; later joins were placed behind \
             the pre-queue (raise --entry-window-s or lower --entry-rate)",
            done - start
        );
    }
    let mut m = c.first_come_report("queue", sku, &phase).await?;
    m.checks.push(Check::new(
        "no invalid_queue_token answer",
        tally.invalid_tokens == 0,
        format!("{} answers invalid_queue_token", tally.invalid_tokens),
    ));
    m.queue = Some(QueueFigures {
        start_ms: start,
        arrivals_before_start_ms: tally.arrivals_done_ms.map(|d| start - d),
        with_token: tally.with_token,
        waiting_at_deadline: tally.waiting_at_deadline,
        invalid_tokens: tally.invalid_tokens,
        to_first_claim_ms: tally.first_claim_ms.map(|t| t - start),
        to_last_claim_ms: tally.last_claim_ms.map(|t| t - start),
    });
    Ok(m)
}
