//! The draw: entries until the draw time, then the consumer draws and grants; the winners
//! are the ledger's claims under the request id `draw`, and `consumer draw verify` must
//! recompute the result from the revealed seed.

use std::time::{Duration, Instant};

use anyhow::Context;
use shard_router::now_ms;

use super::{Ctx, PREP_MS};
use crate::cmd::draw::drive::{Kind, PhaseResult, CLOSED, ENTERED};
use crate::cmd::draw::ledger::{DrawRow, UserUnits};
use crate::cmd::draw::report::{Check, DrawFigures, ModeReport};

/// The draw mode: its campaign, its entries phase, then its result once granted.
pub(crate) async fn draw(
    c: &Ctx<'_>,
    sku: u64,
    fcfs_took_s: Option<f64>,
) -> anyhow::Result<ModeReport> {
    let o = c.o;
    let draw_at = create(c, sku, fcfs_took_s).await?;
    let phase = c.phase(sku, Kind::Draw).await;
    let ended = now_ms();
    if ended > draw_at {
        eprintln!(
            "warning: the entries ran {} ms past the draw time; later requests were answered \
             as closed (raise --entry-window-s or lower --entry-rate)",
            ended - draw_at
        );
    }
    let mut fig = entry_figures(c, &phase, draw_at);
    let wait_s = (draw_at - now_ms()).max(0) as f64 / 1e3;
    eprintln!("draw: entries done in {:.1} s; waiting {wait_s:.1} s for the draw time, then for the grants ...", phase.took.as_secs_f64());
    let (row, rows, grants_seen) = wait_for_grants(c, sku, draw_at).await?;
    fig.entrants = row.entrants;
    fig.granted_rank = row.granted_rank;
    fig.drawn_at_ms = row.drawn_at_ms;
    fig.to_drawn_ms = row.drawn_at_ms.map(|d| d - row.draw_at_ms);
    fig.to_all_grants_ms = rows
        .iter()
        .filter(|r| r.granted > 0)
        .map(|r| r.last_claimed_ms)
        .max()
        .filter(|_| grants_seen)
        .map(|t| t - row.draw_at_ms);
    let (winners, bot_winners, units, doubled) = c.count(&rows, true);
    let (ok, verdict) = verify(c, sku, &mut fig).await?;
    let mut m = ModeReport::new("draw", sku, o.stock, &c.shape, &phase, winners, bot_winners);
    m.per_entry(fig.entrants.unwrap_or(fig.entered_answers));
    let due = o.stock.min(fig.entrants.unwrap_or(0));
    m.checks.push(Check::new(
        "`consumer draw verify`",
        fig.verified == Some(true),
        format!("exit ok: {ok}, verified: {verdict:?}"),
    ));
    m.checks.push(Check::new(
        "winners <= stock",
        units <= o.stock && winners <= o.stock,
        format!("{winners} winners, {units} units, stock {}", o.stock),
    ));
    m.checks.push(Check::new(
        "one unit a user",
        doubled == 0,
        format!("{doubled} users with two units"),
    ));
    m.checks.push(Check::new(
        "every winner granted",
        grants_seen && winners == due,
        format!(
            "{winners} granted of {due} within {} s of the draw time",
            o.draw_wait_s
        ),
    ));
    m.draw = Some(fig);
    Ok(m)
}

/// Makes the draw campaign, open from now, drawn after the entry window; its draw time.
async fn create(c: &Ctx<'_>, sku: u64, fcfs_took_s: Option<f64>) -> anyhow::Result<i64> {
    let o = c.o;
    let window_s = c.arrival_window_s(fcfs_took_s);
    let created = now_ms();
    let draw_at = created + PREP_MS + ((window_s + o.draw_margin_s) * 1e3) as i64;
    eprintln!(
        "draw: entries window {window_s:.1} s, draw at {draw_at} ({:.1} s from now)",
        (draw_at - created) as f64 / 1e3
    );
    let mut args = c.campaign_args(sku, created - 1_000, draw_at + 3_600_000);
    args.extend(
        [
            "--mode",
            "draw",
            "--draw-at",
            &draw_at.to_string(),
            "--waitlist",
            "0",
        ]
        .map(str::to_owned),
    );
    c.consumer_ok(args).await?;
    c.consumer_ok(vec!["preheat".into(), sku.to_string()])
        .await?;
    Ok(draw_at)
}

/// The entries the answers told of, and the humans who came too late.
fn entry_figures(c: &Ctx<'_>, phase: &PhaseResult, draw_at: i64) -> DrawFigures {
    let mut fig = DrawFigures {
        draw_at_ms: draw_at,
        ..DrawFigures::default()
    };
    for (u, &f) in phase.per_user.iter().enumerate() {
        if f & ENTERED != 0 {
            fig.entered_answers += 1;
        } else if f & CLOSED != 0 && !c.shape.is_bot(u as u32) {
            fig.late_humans += 1;
        }
    }
    fig
}

/// Waits for the draw, its grants, and the grants' rows in the ledger (at most
/// `--draw-wait-s` after the draw time): the draw's row, the SKU's units per user, and
/// whether every grant was seen. An error when it was not drawn by then.
async fn wait_for_grants(
    c: &Ctx<'_>,
    sku: u64,
    draw_at: i64,
) -> anyhow::Result<(DrawRow, Vec<UserUnits>, bool)> {
    let o = c.o;
    let deadline = Instant::now()
        + Duration::from_millis((draw_at - now_ms()).max(0) as u64)
        + Duration::from_secs(o.draw_wait_s);
    let mut grants_seen = false;
    let (row, rows) = loop {
        let row = c
            .ledger
            .draw(sku)
            .await?
            .context("the draw's ledger row is missing")?;
        let mut rows = Vec::new();
        if row.state == "drawn" {
            let due = o.stock.min(row.entrants.unwrap_or(0));
            if u64::from(row.granted_rank) >= due {
                rows = c.ledger.units(sku).await?;
                let granted: u64 = rows.iter().map(|r| r.granted).sum();
                grants_seen = granted >= due;
            }
        }
        if grants_seen || Instant::now() >= deadline {
            break (row, rows);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    anyhow::ensure!(
        row.state == "drawn",
        "SKU {sku} was not drawn within {} s of its draw time (is `consumer run` up?)",
        o.draw_wait_s
    );
    let rows = if rows.is_empty() {
        c.ledger.units(sku).await?
    } else {
        rows
    };
    Ok((row, rows, grants_seen))
}

/// Runs `consumer draw verify` into `fig`; whether it exited ok and what it said.
async fn verify(
    c: &Ctx<'_>,
    sku: u64,
    fig: &mut DrawFigures,
) -> anyhow::Result<(bool, Option<bool>)> {
    let (ok, out, err) = c
        .consumer(&["draw".into(), "verify".into(), sku.to_string()])
        .await?;
    let verdict: Option<bool> = serde_json::from_str::<serde_json::Value>(&out)
        .ok()
        .and_then(|v| v.get("verified").and_then(|b| b.as_bool()));
    fig.verified = Some(ok && verdict == Some(true));
    fig.verify_output = if ok { out } else { format!("{out}\n{err}") };
    Ok((ok, verdict))
}
