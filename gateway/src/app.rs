//! The state every handler shares.

use std::sync::Arc;
use std::time::Duration;

use hyper::header::HeaderName;
use metrics_exporter_prometheus::PrometheusHandle;

use crate::admission::Admission;
use crate::cache::SoldOutCache;
use crate::link::Link;

pub(crate) struct App {
    pub(crate) link: Arc<Link>,
    pub(crate) cache: SoldOutCache,
    pub(crate) admission: Arc<Admission>,
    /// Trusted header carrying the authenticated user, when an auth layer sits in front.
    pub(crate) user_header: Option<HeaderName>,
    pub(crate) max_body: usize,
    pub(crate) body_timeout: Duration,
    /// `Some(wait)` in replica durability mode.
    pub(crate) replica_wait: Option<Duration>,
    /// Ablation switches (`--no-sold-out-cache`, `--no-second-chance`).
    pub(crate) sold_out_cache: bool,
    pub(crate) second_chance: bool,
    pub(crate) metrics: PrometheusHandle,
}
