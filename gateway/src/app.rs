//! The state every handler shares.

use std::sync::Arc;
use std::time::Duration;

use identity::Identity;
use metrics_exporter_prometheus::PrometheusHandle;

use crate::admission::Admission;
use crate::cache::SoldOutCache;
use crate::limiter::ClientLimiter;
use crate::link::RedisLink;

pub(crate) struct App {
    /// Trace ids and the bounded access log of the API listener.
    pub(crate) access: crate::access::AccessLog,
    pub(crate) link: Arc<RedisLink>,
    pub(crate) cache: SoldOutCache,
    pub(crate) admission: Arc<Admission>,
    /// Where the user comes from (token, trusted header, or the body when allowed), and
    /// which peers are trusted proxies.
    pub(crate) identity: Identity,
    /// Per-client-address rate limit (`--client-rate`); `None` when off.
    pub(crate) clients: Option<ClientLimiter>,
    pub(crate) max_body: usize,
    pub(crate) body_timeout: Duration,
    /// Ablation switches (`--no-sold-out-cache`, `--no-second-chance`).
    pub(crate) sold_out_cache: bool,
    pub(crate) second_chance: bool,
    /// `--replay-filter-max-users` (0: off) and `--replay-filter-total-users`.
    pub(crate) replay_limits: std::sync::Arc<crate::replay_filter::ReplayLimits>,
    pub(crate) metrics: PrometheusHandle,
    /// The waiting room of queue SKUs (`--queue-secret-file`).
    pub(crate) queue: crate::waiting_room::QueueGate,
    /// The listeners' stop signal: work a request leaves behind (a lingering close) ends
    /// with them.
    pub(crate) stop: tokio::sync::watch::Receiver<bool>,
}
