//! The Lua scripts, embedded at build time (claim and take only as `guard.rs` loads them,
//! settle also there; the plain settle serves the replay path's `final`). `redis::Script` keeps each SHA1 and runs
//! EVALSHA, loading the script (on every primary of a cluster) when Redis answers NOSCRIPT,
//! so a `SCRIPT FLUSH` or a restarted Redis costs one extra round trip, not an error.

use std::sync::LazyLock;

use redis::Script;

pub(crate) static SETTLE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/settle.lua")));
pub(crate) static PREHEAT: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/preheat.lua")));
pub(crate) static RELEASE_STOCK: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/release_stock.lua")));
pub(crate) static RELEASE_USER: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/release_user.lua")));
pub(crate) static REBUILD_FENCE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/rebuild_fence.lua")));
pub(crate) static REBUILD: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/rebuild.lua")));
pub(crate) static REBUILD_RENEW: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/rebuild_renew.lua")));
pub(crate) static REBUILD_LATE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/rebuild_late.lua")));
pub(crate) static RECONCILE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/reconcile.lua")));
pub(crate) static RECONCILE_FIX: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/reconcile_fix.lua")));
pub(crate) static WAVE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/wave.lua")));
pub(crate) static DRAW_OPEN: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/draw_open.lua")));
pub(crate) static DRAW_ENTER: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/draw_enter.lua")));
pub(crate) static DRAW_CLOSE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/draw_close.lua")));
pub(crate) static DRAW_MARK: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/draw_mark.lua")));
pub(crate) static DRAW_RESTORE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/draw_restore.lua")));
pub(crate) static QUEUE_JOIN: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/queue_join.lua")));
pub(crate) static VOUCH: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/vouch.lua")));
pub(crate) static QUEUE_ADMIT: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/queue_admit.lua")));

/// Every script, for loading them all ahead of traffic (readiness).
pub(crate) fn all() -> [&'static Script; 19] {
    [
        &SETTLE,
        &PREHEAT,
        &RELEASE_STOCK,
        &RELEASE_USER,
        &REBUILD_FENCE,
        &REBUILD,
        &REBUILD_RENEW,
        &REBUILD_LATE,
        &RECONCILE,
        &RECONCILE_FIX,
        &WAVE,
        &DRAW_OPEN,
        &DRAW_ENTER,
        &DRAW_CLOSE,
        &DRAW_MARK,
        &DRAW_RESTORE,
        &QUEUE_JOIN,
        &QUEUE_ADMIT,
        &VOUCH,
    ]
}

/// Script return codes (see the header of each file in `lua/`).
pub(crate) mod code {
    pub(crate) const CLAIMED: i64 = 1;
    pub(crate) const REPLAY: i64 = 2;
    pub(crate) const HOLD: i64 = 3;
    pub(crate) const IN_PROGRESS: i64 = 4;
    pub(crate) const SOLD_OUT: i64 = 10;
    pub(crate) const LIMIT: i64 = 11;
    pub(crate) const NOT_STARTED: i64 = 12;
    pub(crate) const ENDED: i64 = 13;
    pub(crate) const NOT_PREHEATED: i64 = 14;
    pub(crate) const BAD_ARGUMENT: i64 = 15;
    pub(crate) const HOLD_EXPIRED: i64 = 16;
    /// `lua/guard.lua`: the process is not the one the ledger vouched for.
    pub(crate) const RESTORING: i64 = 17;
    pub(crate) const VOUCHED: i64 = 18;
    pub(crate) const NOT_THIS_PROCESS: i64 = 19;
    pub(crate) const PREHEATED: i64 = 20;
    pub(crate) const LIVE: i64 = 21;
    pub(crate) const WAVE_ADDED: i64 = 70;
    pub(crate) const WAVE_ALREADY: i64 = 71;
    pub(crate) const REBUILDING: i64 = 22;
    pub(crate) const SETTLED: i64 = 30;
    pub(crate) const HOLD_GONE: i64 = 31;
    pub(crate) const RELEASED: i64 = 40;
    pub(crate) const ALREADY_RELEASED: i64 = 41;
    pub(crate) const FENCED: i64 = 50;
    pub(crate) const BUSY: i64 = 51;
    pub(crate) const REBUILT: i64 = 60;
    pub(crate) const FENCE_LOST: i64 = 61;
    pub(crate) const LATE_APPLIED: i64 = 70;
    pub(crate) const LATE_ALREADY: i64 = 71;
    pub(crate) const LATE_STALE: i64 = 72;
    pub(crate) const LATE_WAIT: i64 = 73;
    pub(crate) const ENTERED: i64 = 80;
    pub(crate) const WON: i64 = 81;
    pub(crate) const WON_PENDING: i64 = 82;
    pub(crate) const WAITLISTED: i64 = 83;
    pub(crate) const LOST: i64 = 84;
    pub(crate) const DRAW_CLOSED: i64 = 85;
    pub(crate) const DRAW_OVER: i64 = 86;
    pub(crate) const DRAW_LIST: i64 = 90;
    pub(crate) const DRAW_MARKED: i64 = 91;
    pub(crate) const DRAW_RESTORED: i64 = 92;
    pub(crate) const PRE_QUEUED: i64 = 100;
    pub(crate) const TICKET: i64 = 101;
    pub(crate) const QUEUE_STATE: i64 = 102;
}
