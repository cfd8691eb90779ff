//! Request routing for both listeners, and the per-request bookkeeping (in-flight cap,
//! request counter and latency by route). Handlers live in `api/`, one route each.

mod claim;
pub(crate) mod input;
pub(crate) mod linger;
mod probes;
mod sku;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use hyper::body::Incoming;
use hyper::{Method, Request, Response};

use crate::app::App;
use crate::metrics::{claim_metrics, status_label, REQUESTS, REQUEST_SECONDS};
use crate::reply::{Body, Reply};

/// The claim API listener: every request runs under its trace id (see `access.rs`).
pub(crate) async fn api(app: Arc<App>, peer: SocketAddr, req: Request<Incoming>) -> Response<Body> {
    let started = Instant::now();
    let trace_id = app.access.trace_id(req.headers());
    let method = req.method().clone();
    let access = app.clone();
    // Boxed once here: the route's future is ~3.6 KB, and each layer that holds it by value
    // (the task-local scope, `around`, this future, hyper's slot for it) copied it whole
    // when it was moved in; unboxed, those copies were the gateway's largest user-space
    // cost per sold-out answer (docs/BENCHMARKS.md).
    let serve = Box::pin(route(app, peer, req, started));
    access.access.around(method, trace_id, started, serve).await
}

async fn route(
    app: Arc<App>,
    peer: SocketAddr,
    req: Request<Incoming>,
    started: Instant,
) -> (&'static str, Response<Body>) {
    // The claim route first, without copying the path: it is nearly all the traffic.
    if req.method() == Method::POST && req.uri().path() == "/v1/claims" {
        let resp = match client_limited(&app, &req, peer) {
            Some(reply) => {
                claim_metrics().claim(crate::metrics::outcome::REJECTED);
                reply
            }
            None => claim::handle(&app, peer, req).await,
        }
        .into_response();
        let metrics = claim_metrics();
        metrics.claim_request(resp.status().as_u16());
        metrics
            .claim_seconds
            .record(started.elapsed().as_secs_f64());
        return ("claims", resp);
    }
    let path = req.uri().path().to_owned();
    let (route, reply) = match (path.as_str(), req.method()) {
        ("/healthz", &Method::GET) => ("healthz", probes::healthz()),
        ("/readyz", &Method::GET) => ("readyz", probes::readyz(&app)),
        ("/healthz" | "/readyz", _) => ("probe", Reply::method_not_allowed("GET")),
        ("/v1/claims", _) => ("claims", Reply::method_not_allowed("POST")),
        (p, m) => match p.strip_prefix("/v1/skus/") {
            Some(sku) if m == Method::GET => match client_limited(&app, &req, peer) {
                Some(reply) => ("sku", reply),
                None => ("sku", admitted(&app, sku::handle(&app, sku)).await),
            },
            Some(_) => ("sku", Reply::method_not_allowed("GET")),
            None => ("other", Reply::not_found(p)),
        },
    };
    (route, finish(route, started, reply.into_response()))
}

/// The admin listener.
pub(crate) async fn admin(
    app: Arc<App>,
    _peer: SocketAddr,
    req: Request<Incoming>,
) -> Response<Body> {
    let started = Instant::now();
    let (route, resp) = match (req.uri().path(), req.method()) {
        ("/metrics", &Method::GET) => ("metrics", probes::metrics(&app)),
        ("/healthz", &Method::GET) => ("healthz", probes::healthz().into_response()),
        ("/readyz", &Method::GET) => ("readyz", probes::readyz(&app).into_response()),
        ("/metrics" | "/healthz" | "/readyz", _) => {
            ("admin", Reply::method_not_allowed("GET").into_response())
        }
        (p, _) => ("admin", Reply::not_found(p).into_response()),
    };
    finish(route, started, resp)
}

/// The 429 for a client over `--client-rate`, before anything else is read: a flood from
/// one address costs a hash and a compare-and-swap per request, and no Redis call.
fn client_limited(app: &App, req: &Request<Incoming>, peer: SocketAddr) -> Option<Reply> {
    let limiter = app.clients.as_ref()?;
    let ip = app.identity.trusted().client_ip(req.headers(), peer.ip());
    let wait = limiter.check(ip).err()?;
    Some(Reply::rate_limited(
        "too many requests from this client address; retry later",
        wait,
    ))
}

/// Runs `handler` under an in-flight slot, or sheds the request at once.
async fn admitted(app: &App, handler: impl std::future::Future<Output = Reply>) -> Reply {
    match app.admission.enter() {
        Some(_slot) => handler.await,
        None => Reply::overloaded(),
    }
}

fn finish(route: &'static str, started: Instant, resp: Response<Body>) -> Response<Body> {
    metrics::counter!(REQUESTS, "route" => route, "status" => status_label(resp.status().as_u16()))
        .increment(1);
    metrics::histogram!(REQUEST_SECONDS, "route" => route).record(started.elapsed().as_secs_f64());
    resp
}
