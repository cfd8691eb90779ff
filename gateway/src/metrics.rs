//! Metric names (docs/OPERATIONS.md "Operations", metrics) and the Prometheus recorder. Names live here only, so
//! the dashboard, the alert rules and the tests have one place to agree with.

use std::sync::OnceLock;
use std::time::Duration;

use metrics::{Counter, Gauge, Histogram};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tokio::sync::watch;

/// Counter `{route, status}`: every HTTP answer.
pub const REQUESTS: &str = "flashgate_requests_total";
/// Histogram `{route}`: server time per request, seconds.
pub const REQUEST_SECONDS: &str = "flashgate_request_duration_seconds";
/// Counter `{outcome}`: how claims ended. `claimed` and `rerouted` partition the successes
/// (home shard vs second chance); `sold_out_cache` never touched Redis.
pub const CLAIMS: &str = "flashgate_claims_total";
/// Histogram `{op}`: Redis time of a claim (`claim`, every script of the protocol) and of
/// `WAIT` (`wait`), seconds.
pub const REDIS_SECONDS: &str = "flashgate_redis_duration_seconds";
/// Gauge: requests being served.
pub const IN_FLIGHT: &str = "flashgate_in_flight_requests";
/// Gauge: open client connections.
pub const CONNECTIONS: &str = "flashgate_open_connections";
/// Counter `{event}`: sold-out cache traffic (hit, miss, load_error, stale (a failed load
/// served from the last loaded state), meta_lost (the metadata gone while the window runs,
/// served likewise), unknown, empty, restock, resync, resync_error (some shard did not
/// answer), invalidate).
pub const CACHE_EVENTS: &str = "flashgate_cache_events_total";
/// Counter: Pub/Sub (re)connections after the first.
pub const PUBSUB_RECONNECTS: &str = "flashgate_pubsub_reconnects_total";
/// Counter: claims answered in replica mode whose `WAIT` saw no replica acknowledge.
pub const REPLICATION_UNCONFIRMED: &str = "flashgate_replication_unconfirmed_total";
/// Gauge: 1 while `/readyz` answers 200.
pub const READY: &str = "flashgate_ready";
/// Gauge: this gateway's clock minus Redis's `TIME` (seconds), from the readiness probe.
pub const CLOCK_SKEW_SECONDS: &str = "flashgate_clock_skew_seconds";
/// Gauge: the largest minus the smallest skew over the shards' masters (`link.rs`).
pub const REDIS_CLOCK_SPREAD_SECONDS: &str = "flashgate_redis_clock_spread_seconds";
/// Gauge: stock shards whose Redis master did not answer the last readiness probe. Not
/// part of readiness unless it is every shard (`link.rs`); this is how a dead master shows.
pub const SHARDS_UNREACHABLE: &str = "flashgate_redis_shards_unreachable";
/// Counter: access log lines dropped by the `--access-log-rate` bound.
pub const ACCESS_LOG_DROPPED: &str = "flashgate_access_log_dropped_total";
/// Log lines of any kind dropped because stderr could not keep up (`telemetry`).
pub const LOG_LINES_DROPPED: &str = "flashgate_log_lines_dropped_total";

/// Every series with its `# HELP` text: [`install`] describes them all, and the tests
/// check that `/metrics` has a HELP line for each series it shows.
pub const DESCRIPTIONS: &[(&str, &str)] = &[
    (REQUESTS, "HTTP answers by route (claims, sku, healthz, readyz, probe, other, metrics, admin) and status code."),
    (REQUEST_SECONDS, "Server time per request by route, from the request head to the answer, in seconds."),
    (CLAIMS, "Claims by outcome: claimed (home shard), rerouted (second chance), replay, sold_out_cache (no Redis call), sold_out_redis, limit_reached, rejected (before Redis), in_progress, unavailable (Redis trouble or unconfirmed replication); on a draw SKU: entered, drawing, won, won_pending, waitlisted, lost, entries_closed."),
    (REDIS_SECONDS, "Redis time of a claim's scripts (op=claim) and of replica WAITs (op=wait), in seconds."),
    (IN_FLIGHT, "Requests being served now; past --max-in-flight claims are shed with 503."),
    (CONNECTIONS, "Open client connections, capped by --max-connections."),
    (CACHE_EVENTS, "Sold-out cache traffic by event: hit, miss, load_error, stale, meta_lost, unknown, empty, restock, resync, resync_error, invalidate."),
    (PUBSUB_RECONNECTS, "Pub/Sub (re)subscriptions after the first; each one resyncs the sold-out cache from Redis."),
    (REPLICATION_UNCONFIRMED, "Claims in --durability replica whose WAIT saw no replica acknowledge; answered 503 with unconfirmed=true."),
    (READY, "1 while /readyz answers 200 (Redis reachable, scripts loaded, not draining), else 0."),
    (ACCESS_LOG_DROPPED, "Access log lines dropped because more than --access-log-rate lines per second were due."),
    (LOG_LINES_DROPPED, "Log lines dropped because stderr was not read fast enough (the log never blocks a request)."),
    (SHARDS_UNREACHABLE, "Stock shards whose Redis master did not answer the last readiness probe; readiness fails only when every shard is unreachable."),
    (CLOCK_SKEW_SECONDS, "This gateway's clock minus Redis's TIME in seconds (the master farthest off), from the readiness probe; past --max-clock-skew-ms claims answer 503."),
    (REDIS_CLOCK_SPREAD_SECONDS, "Largest minus smallest clock skew over the shards' masters as this gateway reads them: how far the masters' clocks are apart."),
];

/// Claim outcomes (values of the `outcome` label).
pub mod outcome {
    pub const CLAIMED: &str = "claimed";
    pub const REROUTED: &str = "rerouted";
    pub const REPLAY: &str = "replay";
    pub const SOLD_OUT_CACHE: &str = "sold_out_cache";
    pub const SOLD_OUT_REDIS: &str = "sold_out_redis";
    pub const LIMIT_REACHED: &str = "limit_reached";
    /// Turned away before Redis: bad input, rate limit, overload, window, unknown SKU.
    pub const REJECTED: &str = "rejected";
    /// The same request id is being served right now.
    pub const IN_PROGRESS: &str = "in_progress";
    /// Redis trouble: nothing (or, when ambiguous, possibly something) was taken.
    pub const UNAVAILABLE: &str = "unavailable";
    /// A draw SKU (campaign mode `draw`): the user is entered (now or before).
    pub const ENTERED: &str = "entered";
    /// Entered; entries closed, the draw has not run yet.
    pub const DRAWING: &str = "drawing";
    /// Won, the unit claimed.
    pub const WON: &str = "won";
    /// Won, the claim not made yet.
    pub const WON_PENDING: &str = "won_pending";
    pub const WAITLISTED: &str = "waitlisted";
    pub const LOST: &str = "lost";
    /// Entries closed and the user never entered.
    pub const ENTRIES_CLOSED: &str = "entries_closed";
    /// A queue SKU (campaign mode `queue`): the user waits in the waiting room.
    pub const QUEUED: &str = "queued";
}

// Buckets from 50µs: the sold-out path is answered in microseconds, the claim path in
// well under a millisecond of server time; the tail buckets catch Redis trouble.
const LATENCY_BUCKETS: &[f64] = &[
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
    2.5,
];

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
static CLAIM_METRICS: OnceLock<ClaimMetrics> = OnceLock::new();

/// Handles of the series every claim touches. `counter!` with labels builds and hashes a
/// key and looks it up on each call, which showed in the claim path's profile; these are
/// looked up once, after the recorder is installed.
pub(crate) struct ClaimMetrics {
    claims: Vec<(&'static str, Counter)>,
    /// One per [`CLAIM_STATUSES`], in its order.
    claim_requests: [Counter; CLAIM_STATUSES.len()],
    pub(crate) claim_seconds: Histogram,
    pub(crate) redis_claim_seconds: Histogram,
    pub(crate) in_flight: Gauge,
    pub(crate) cache_hits: Counter,
}

/// Status codes of the claim route that get a pre-registered handle. Found by the number:
/// comparing label strings was most of what counting an answer cost.
const CLAIM_STATUSES: [u16; 11] = [200, 201, 202, 400, 401, 403, 404, 409, 410, 429, 503];

impl ClaimMetrics {
    fn new() -> Self {
        use outcome::*;
        let outcomes = [
            CLAIMED,
            REROUTED,
            REPLAY,
            SOLD_OUT_CACHE,
            SOLD_OUT_REDIS,
            LIMIT_REACHED,
            REJECTED,
            IN_PROGRESS,
            UNAVAILABLE,
            ENTERED,
            DRAWING,
            WON,
            WON_PENDING,
            WAITLISTED,
            LOST,
            ENTRIES_CLOSED,
            QUEUED,
        ];
        Self {
            claims: outcomes
                .iter()
                .map(|o| (*o, metrics::counter!(CLAIMS, "outcome" => *o)))
                .collect(),
            claim_requests: CLAIM_STATUSES.map(
                |s| metrics::counter!(REQUESTS, "route" => "claims", "status" => status_label(s)),
            ),
            claim_seconds: metrics::histogram!(REQUEST_SECONDS, "route" => "claims"),
            redis_claim_seconds: metrics::histogram!(REDIS_SECONDS, "op" => "claim"),
            in_flight: metrics::gauge!(IN_FLIGHT),
            cache_hits: metrics::counter!(CACHE_EVENTS, "event" => "hit"),
        }
    }

    /// Counts a claim outcome.
    pub(crate) fn claim(&self, outcome: &'static str) {
        match self.claims.iter().find(|(o, _)| *o == outcome) {
            Some((_, c)) => c.increment(1),
            None => metrics::counter!(CLAIMS, "outcome" => outcome).increment(1),
        }
    }

    /// Counts an answer of the claim route.
    pub(crate) fn claim_request(&self, status: u16) {
        match CLAIM_STATUSES.iter().position(|s| *s == status) {
            Some(i) => self.claim_requests[i].increment(1),
            None => {
                metrics::counter!(REQUESTS, "route" => "claims", "status" => status_label(status))
                    .increment(1)
            }
        }
    }
}

/// Status codes as static labels, so the hot path does not allocate a label string.
pub(crate) fn status_label(code: u16) -> &'static str {
    match code {
        200 => "200",
        201 => "201",
        202 => "202",
        400 => "400",
        401 => "401",
        403 => "403",
        404 => "404",
        405 => "405",
        408 => "408",
        409 => "409",
        410 => "410",
        413 => "413",
        415 => "415",
        429 => "429",
        500 => "500",
        503 => "503",
        _ => "other",
    }
}

/// The claim path's metric handles (bound to the recorder once [`install`] ran).
pub(crate) fn claim_metrics() -> &'static ClaimMetrics {
    CLAIM_METRICS.get_or_init(ClaimMetrics::new)
}

/// Installs the process-wide recorder once and returns its handle. Later calls (several
/// gateways in one test process) share it. If another recorder was installed first, the
/// handle renders an empty page rather than failing the gateway.
pub fn install() -> PrometheusHandle {
    HANDLE
        .get_or_init(|| {
            let builder = PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), LATENCY_BUCKETS)
                .expect("bucket list is non-empty");
            let recorder = builder.build_recorder();
            let handle = recorder.handle();
            if metrics::set_global_recorder(recorder).is_err() {
                tracing::warn!("a metrics recorder was already installed; /metrics stays empty");
            }
            describe();
            let _ = claim_metrics();
            handle
        })
        .clone()
}

/// Gives every series its HELP text (the recorder keeps it for the process's life).
fn describe() {
    for (name, help) in DESCRIPTIONS {
        if name.ends_with("_total") {
            metrics::describe_counter!(*name, *help);
        } else if name.ends_with("_seconds") {
            metrics::describe_histogram!(*name, metrics::Unit::Seconds, *help);
        } else {
            metrics::describe_gauge!(*name, *help);
        }
    }
}

/// Registers the series that only move on rare events, so dashboards and alerts see a 0
/// instead of a missing series.
pub(crate) fn register_defaults() {
    metrics::counter!(PUBSUB_RECONNECTS).increment(0);
    metrics::counter!(REPLICATION_UNCONFIRMED).increment(0);
    metrics::counter!(ACCESS_LOG_DROPPED).increment(0);
    metrics::counter!(LOG_LINES_DROPPED).increment(0);
    metrics::gauge!(IN_FLIGHT).increment(0.0);
    metrics::gauge!(CONNECTIONS).increment(0.0);
    metrics::gauge!(READY).set(0.0);
    metrics::gauge!(SHARDS_UNREACHABLE).set(0.0);
}

/// Runs the recorder's upkeep (histogram buffers) until shutdown; without the exporter's
/// own HTTP listener nobody else does.
pub(crate) async fn upkeep(handle: PrometheusHandle, mut shutdown: watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(Duration::from_secs(5));
    loop {
        tokio::select! {
            _ = tick.tick() => handle.run_upkeep(),
            _ = crate::stopped(&mut shutdown) => return,
        }
    }
}
