//! `/healthz`, `/readyz` and the admin `/metrics` page. Probes bypass admission control so
//! an overloaded gateway still tells its orchestrator the truth.

use hyper::{Response, StatusCode};

use super::reply::{status_only, text, Body, Reply};
use crate::app::App;

/// The process is alive and serving HTTP.
pub(crate) fn healthz() -> Reply {
    status_only(StatusCode::OK, "ok")
}

/// Redis reachable, scripts loaded, not draining.
pub(crate) fn readyz(app: &App) -> Reply {
    match app.link.readiness() {
        Ok(()) => status_only(StatusCode::OK, "ready"),
        Err(why) => Reply::error(StatusCode::SERVICE_UNAVAILABLE, "not_ready", why.reason()),
    }
}

pub(crate) fn metrics(app: &App) -> Response<Body> {
    text(
        StatusCode::OK,
        "text/plain; version=0.0.4",
        app.metrics.render(),
    )
}
