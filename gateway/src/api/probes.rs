//! `/healthz`, `/readyz` and the admin `/metrics` page. Probes bypass admission control so
//! an overloaded gateway still tells its orchestrator the truth.

use hyper::{Response, StatusCode};
use shard_router::ApiStatus;

use crate::app::App;
use crate::reply::{status_only, text, Body, Reply};

/// The process is alive and serving HTTP.
pub(crate) fn healthz() -> Reply {
    status_only(StatusCode::OK, ApiStatus::Ok)
}

/// Not draining, connected with the scripts loaded, and at least one stock shard reachable
/// (see `link.rs` for why one dead master does not make a gateway unready). The body counts
/// the shards that did not answer the last probe.
pub(crate) fn readyz(app: &App) -> Reply {
    let down = app.link.unreachable_shards();
    match app.link.readiness() {
        Ok(()) => status_only(StatusCode::OK, ApiStatus::Ready).with("unreachable_shards", down),
        Err(why) => Reply::error(
            StatusCode::SERVICE_UNAVAILABLE,
            ApiStatus::NotReady,
            why.reason(),
        )
        .with("unreachable_shards", down),
    }
}

pub(crate) fn metrics(app: &App) -> Response<Body> {
    // The log writer counts what it drops itself; read at each scrape.
    metrics::counter!(crate::metrics::LOG_LINES_DROPPED).absolute(telemetry::dropped_lines());
    text(
        StatusCode::OK,
        "text/plain; version=0.0.4",
        app.metrics.render(),
    )
}
