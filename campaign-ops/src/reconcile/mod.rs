//! Reconciliation of one SKU against invariant `books-close` (docs/DESIGN.md), exact while the sale runs:
//! for every shard `s` of the SKU, `released_s = slice_s + in_flight_s + active_s − debt_s`.
//! `debt_s` is the units sold beyond what was released to `s` (a late claim that found its
//! units sold again after a rebuild, or what a rebuild counted sold beyond the share): they
//! are in `in_flight_s`/`active_s` with no slice they came from. `slice_s` is 0 while it
//! stands, and whatever would grow the slice pays it first (`lua/release_stock.lua`,
//! `lua/wave.lua`) in the very step that records the release or the wave, so
//! `slice_s − debt_s` moves exactly as the slice alone would without the oversell, and
//! every argument below holds with `slice_s − debt_s` in place of `slice_s` (the anchor
//! reads both). A late claim committed but not applied yet is counted by the ledger while
//! its units are still in the slice (`late_pending_s`, see "Late claims" below), so the equation read at `T_s` is
//! `released_s = slice_s − late_pending_s + in_flight_s + active_s − debt_s`.
//!
//! # Why it is exact
//! Stock never moves between shards: a claim takes units from one shard's slice and XADDs
//! its record to that shard's stream in one script; its release SADDs the claim id to that
//! shard's release set and gives the units back in one script; a wave adds to a slice and
//! records its id in that shard's wave hash in one script. So each shard closes on its own,
//! at one instant `T_s`: the anchor (`lua/reconcile.lua`), one atomic step that reads the
//! slice, debt, waves, fix epoch, holds and a cutoff id such that a claim was taken before
//! `T_s` iff its entry id is `<=` the cutoff. The rest of the shard is read in pages around it
//! (`snapshot.rs`; no Redis call reads more than a page), and still stands for `T_s`:
//! - The release set at `T_s`, exactly. While the campaign is live the set only grows (a
//!   release SADDs; only close-out removes it, after its last measurement). So a member a
//!   scan returned before the anchor was a member at `T_s`, and so is each id the anchor
//!   finds among those it is asked about. The anchor also returns the set's size, and the
//!   snapshot is kept only when it equals the number of members known: then none is
//!   missing. The ids asked: a release marks its row `releasing` before its script runs, so
//!   a member the scan missed is a row the ledger shows `releasing`/`released` when read
//!   just before the anchor (members found then are taken, the rest asked, `releasing`
//!   first), unless that release began after the read; then, or for a member the ledger
//!   does not know, the sizes differ and the steps run again (a bounded number of times,
//!   then the run fails: it never guesses).
//! - Stream entries, read after `T_s`: the claims stream up to the cutoff. Entries are only
//!   appended and ids never reused, so the claim of one read in a page was taken before
//!   `T_s` and was still in the stream then. One in the claims stream at `T_s` but gone
//!   when its page was read was trimmed after its commit (the consumer trims only below a
//!   place the ledger committed, `lua/stream_trim.lua`). So a claim taken before `T_s` is
//!   read in a page, or its row is in `L1`, read after every page; or both (committed
//!   entries stay in the stream until a trim).
//!
//! The ledger is read twice: `L0` (stock, applied waves, claims `released`) before every
//! snapshot, `L1` (every claim row, every wave row) after. Rows are never deleted and a
//! status only moves forward (pending → confirmed → releasing → released). For a claim `c`
//! taken on `s` before `T_s` (taken later: its units are still in `slice_s`, and it is
//! skipped by the cutoff):
//! - `c` read in a page: its units are out of the slice at `T_s` unless `c` was in the
//!   release set then (a duplicate whose units went back). Counted once, from the page: as
//!   ledger if `L1` has its row, else as in flight. A commit between `T_s` and `L1`
//!   therefore moves it from one term to the other but never counts it twice.
//! - `c` not read in a page: committed (above), so `L1` has its row. Its units are back in
//!   the slice iff `c` was in the release set at `T_s`; the ledger status read later does
//!   not decide this, so a release between `T_s` and `L1` is not counted twice. Two
//!   disagreements are real drift and named in the details: in the release set while `L1`
//!   says pending/confirmed (the status can only have been that at `T_s` too: Redis gave
//!   units back for a sold claim, +q), and `released` in `L0` but not in the release set at
//!   `T_s` (the SADD precedes the ledger's `released`, so it was due before `T_s`: Redis
//!   lost the release, −q).
//! - Units released to `s`: its share of `L0`'s stock (applied waves included), plus the
//!   waves in `s`'s wave hash at `T_s` not applied in `L0` (a wave being applied) whose row
//!   `L1` holds (rows are written before any slice is touched; an unknown wave id is drift).
//!
//! - Late claims (`consumer/src/late.rs`): acknowledged before a rebuild, committed
//!   after it, their stream entries lost with Redis. From its commit the ledger counts such a
//!   claim (`L1` has its row, its old entry id is below the cutoff), but the rebuilt slice
//!   still holds its units until its apply (`lua/rebuild_late.lua`) takes them, in the step
//!   that sets the claim's `late:<claim id>` mark in the shard meta. So at `T_s` the
//!   apply is pending iff the claim is committed, the shard carries the generation it was
//!   judged against (an older one: the apply waits for the rebuild; a newer one: that
//!   rebuild counted it from the ledger) and the mark is absent; then its units are still in
//!   the slice and `late_pending_s` subtracts them: `slice_s − late_pending_s` moves as the
//!   slice alone would have with the claim taken, whether the apply comes before or after
//!   a release of the claim (a release gives units back either way, and the apply takes
//!   them whatever the claim's status). Which claims were pending at `T_s`, exactly: the
//!   ledger's late claims of the shard are read just before the anchor, the anchor is asked
//!   for the marks of the unapplied ones and reads the generation, and the list is read
//!   again just after it. One applied before the first read has its mark (it is counted
//!   like any committed claim); one the second read adds committed between the reads, and
//!   whether it was applied by `T_s` is unknown, so the steps run again (like a release set
//!   that moved); one that only `L1` lists committed after the second read, so after `T_s`:
//!   pending then. A mark a failover rolled back after the ledger recorded the apply shows
//!   as +q drift, as any write Redis lost: removed as excess.
//!
//! A missing slice is reported as its own figure, and that shard is left out of the drift.
//! Positive drift on a shard (Redis holds more than the ledger allows) is taken out of its
//! slice at once (`excess.rs`). Stale holds are resolved first (`holds.rs`).

pub mod account;
pub mod excess;
pub mod holds;
pub mod snapshot;

use std::time::Duration;

use serde::Serialize;
use shard_router::StockClient;
use sqlx::MySqlPool;

pub use account::{split, ShardFigures};
pub use snapshot::DEFAULT_PAGE;

use crate::metrics as m;
use crate::OpsError;
use shard_router::stream::ShardStream;

/// Reconciliation runs kept per SKU in `reconcile_runs` unless configured.
pub const DEFAULT_KEEP_RUNS: u32 = crate::config::DEFAULT_RECONCILE_KEEP_RUNS;

/// How a run behaves beyond measuring.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// Take positive drift out of the slices (issue: Redis lost writes).
    pub remove_excess: bool,
    /// Runs kept per SKU; older ones are deleted after each run.
    pub keep_runs: u32,
    /// Most stream entries, set members or ids one Redis call of a snapshot reads: what
    /// bounds how long a reconciliation can block Redis (see `snapshot.rs`).
    pub page: usize,
    /// When stale-hold resolutions wait for a replica before they count (`holds.rs`).
    pub replica_wait: consumer::replica::ReplicaWait,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            remove_excess: true,
            keep_runs: DEFAULT_KEEP_RUNS,
            page: DEFAULT_PAGE,
            replica_wait: Default::default(),
        }
    }
}

/// One reconciliation result (also stored in `reconcile_runs`).
#[derive(Debug, Clone, Default, Serialize)]
pub struct Report {
    pub sku: u64,
    /// Units released so far over the shards whose slice exists.
    pub stock: i64,
    pub slices: i64,
    pub in_flight: i64,
    pub active_ledger: i64,
    /// Units sold beyond the slices (recorded oversells the next releases and waves pay).
    pub debt: i64,
    /// Units late claims committed in the ledger will take from the slices when their
    /// apply runs (`lua/rebuild_late.lua`): still in the slices at the snapshots.
    pub late_pending: i64,
    /// `slices − late_pending + in_flight + active_ledger − debt − stock`: positive = Redis
    /// holds more than the ledger allows (oversell risk), negative = units missing from Redis
    /// and the ledger.
    pub drift: i64,
    pub stale_holds: usize,
    /// Shards whose slice is missing: their own figure, never counted as 0.
    pub missing_slices: Vec<u16>,
    /// Units taken out of the slices by this run (its positive drift).
    pub excess_removed: i64,
    /// Units under holds at the snapshots (informative: holds take no stock).
    pub held: i64,
    pub shards: Vec<ShardFigures>,
    /// What disagrees, in words.
    pub details: Vec<String>,
}

/// Measures `sku` without storing, exporting or fixing anything (close-out uses it too).
pub async fn measure(
    pool: &MySqlPool,
    client: &StockClient,
    sku: u64,
    t: Duration,
) -> Result<(Report, Vec<ShardFigures>), OpsError> {
    measure_paged(pool, client, sku, t, DEFAULT_PAGE).await
}

/// [`measure`] reading at most `page` items per Redis call.
pub async fn measure_paged(
    pool: &MySqlPool,
    client: &StockClient,
    sku: u64,
    t: Duration,
    page: usize,
) -> Result<(Report, Vec<ShardFigures>), OpsError> {
    let before = ledger::books::before(pool, sku, t).await?;
    let mut snaps = Vec::new();
    for shard in client.placement().shards_of(sku, before.width) {
        snaps.push(snapshot::take(pool, client, sku, shard, page, t).await?);
    }
    let after = ledger::books::after(pool, sku, t).await?;
    let a = account::account(&before, &snaps, &after);
    let sum = |f: fn(&ShardFigures) -> i64| a.shards.iter().map(f).sum::<i64>();
    let report = Report {
        sku,
        stock: sum(|f| f.expected),
        slices: sum(|f| f.slice),
        in_flight: sum(|f| f.in_flight),
        active_ledger: sum(|f| f.active_ledger),
        debt: sum(|f| f.debt),
        late_pending: sum(|f| f.late_pending),
        drift: sum(|f| f.drift),
        missing_slices: a.missing_slices,
        held: snaps.iter().map(|s| s.held).sum(),
        shards: a.shards.clone(),
        details: a.details,
        ..Default::default()
    };
    Ok((report, a.shards))
}

/// Reconciles `sku` with the default [`Options`].
pub async fn run(
    pool: &MySqlPool,
    client: &StockClient,
    sku: u64,
    now_ms: i64,
    t: Duration,
) -> Result<Report, OpsError> {
    run_with(pool, client, sku, now_ms, t, Options::default()).await
}

/// Reconciles `sku`: resolves stale holds, measures, removes excess, stores, exports, logs.
/// A closed (or closing) campaign is not reconciled any more: its closing report stands.
pub async fn run_with(
    pool: &MySqlPool,
    client: &StockClient,
    sku: u64,
    now_ms: i64,
    t: Duration,
    opts: Options,
) -> Result<Report, OpsError> {
    let c = ledger::campaigns::get(pool, sku, t).await?;
    if ledger::campaigns::is_closing(pool, sku, t).await? {
        return Err(OpsError::Invalid(format!(
            "sku {sku} is closed; its closing report is in `consumer status {sku}`"
        )));
    }
    let shards = client.placement().shards_of(sku, c.width);
    let streams: Vec<ShardStream> = shards
        .iter()
        .map(|&s| ShardStream::new(client, s))
        .collect();
    let holds = holds::resolve_stale_holds(
        pool,
        client,
        &streams,
        sku,
        &shards,
        now_ms,
        t,
        opts.replica_wait,
    )
    .await?;
    if holds.unconfirmed > 0 {
        // Decided again next run: not counted until no failover can take it back.
        tracing::warn!(
            sku,
            unconfirmed = holds.unconfirmed,
            "stale holds not resolved on a replica yet"
        );
    }
    let stale_holds = holds.resolved;
    let (mut report, figures) = measure_paged(pool, client, sku, t, opts.page).await?;
    // Close-out may have started meanwhile (another process): its missing slices are not
    // drift, and its series must not come back.
    if ledger::campaigns::is_closing(pool, sku, t).await? {
        return Err(OpsError::Invalid(format!(
            "sku {sku} started closing during the run; not stored"
        )));
    }
    report.stale_holds = stale_holds;
    if opts.remove_excess && figures.iter().any(|f| f.drift > 0) {
        report.excess_removed = excess::remove(pool, client, sku, &figures, t).await?;
    }
    store(pool, &report, opts.keep_runs, t).await?;
    Ok(report)
}

/// Stores, exports and logs a report; keeps the SKU's last `keep` runs.
async fn store(pool: &MySqlPool, report: &Report, keep: u32, t: Duration) -> Result<(), OpsError> {
    let sku = report.sku;
    let detail = serde_json::to_string(report).unwrap_or_default();
    let run = ledger::reconcile_runs::Run {
        sku,
        stock: report.stock,
        slices: report.slices,
        in_flight: report.in_flight,
        active_ledger: report.active_ledger,
        drift: report.drift,
        stale_holds: report.stale_holds as i32,
        missing_slices: report.missing_slices.len() as i32,
        excess_removed: report.excess_removed,
        detail: &detail,
    };
    let id = ledger::reconcile_runs::store(pool, &run, t).await?;
    ledger::reconcile_runs::trim(pool, sku, keep, t).await?;
    let label = sku.to_string();
    metrics::gauge!(m::RECONCILE_DRIFT, "sku" => label.clone()).set(report.drift as f64);
    metrics::gauge!(m::RECONCILE_MISSING, "sku" => label).set(report.missing_slices.len() as f64);
    if report.drift != 0 || !report.missing_slices.is_empty() {
        tracing::error!(sku, drift = report.drift, missing = ?report.missing_slices, %detail, "reconciliation found drift");
        let kind = if report.drift != 0 {
            "drift"
        } else {
            "missing_slice"
        };
        ledger::anomalies::anomaly(pool, kind, &format!("{sku}:{id}"), Some(sku), &detail, t)
            .await?;
    } else {
        tracing::info!(sku, %detail, "reconciliation closed");
    }
    Ok(())
}

/// Removes the SKU's series from `/metrics` (a closed campaign must not alert).
pub fn forget_metrics(sku: u64) {
    crate::series::forget_sku(sku);
}
