//! The log never holds up a request: a gateway whose stderr nobody reads (a stalled log
//! pipeline, a full pipe) keeps answering, and the lines it could not hand on are dropped
//! and counted (`flashgate_log_lines_dropped_total`) instead of blocking the workers that
//! wrote them (`telemetry/src/lib.rs`).

use std::time::Duration;

use crate::binary::GatewayProc;
use crate::common::*;
use hyper::{Method, StatusCode};
use test_support::RedisServer;

/// Requests sent while stderr is never read: each writes an access line (`--access-log-rate`
/// at its maximum), more than a pipe's 64 KiB and the writer's queue hold together.
const REQUESTS: usize = 20_000;
const _: () = assert!(REQUESTS > telemetry::BUFFERED_LINES + 1_000);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_log_reader_blocks_no_request() {
    let _one = crate::common::one_at_a_time().await;
    let redis = RedisServer::start();
    // stderr is a pipe this test holds open and never reads.
    let mut child = GatewayProc::start(&redis.url(), 100_000, &[]).await;
    let _unread = child.child.stderr.take().unwrap();
    let (api, admin) = (child.api, child.admin);

    // An unknown SKU: answered from memory, one access line each. Four clients at once.
    let bound = drills::scaled(Duration::from_secs(5));
    let mut clients = tokio::task::JoinSet::new();
    for c in 0..4 {
        clients.spawn(async move {
            for i in 0..REQUESTS / 4 {
                let body = format!(r#"{{"sku": 5, "user": "u{c}-{i}"}}"#);
                let answer = tokio::time::timeout(
                    bound,
                    request(
                        api,
                        Method::POST,
                        "/v1/claims",
                        Some(("application/json", &body)),
                        &[],
                    ),
                )
                .await;
                match answer {
                    Ok(Ok((status, _, _))) => assert_eq!(status, StatusCode::NOT_FOUND),
                    Ok(Err(e)) => panic!("request {c}/{i} failed: {e}"),
                    Err(_) => {
                        panic!("request {c}/{i} not answered within {bound:?}: blocked on the log?")
                    }
                }
            }
        });
    }
    while let Some(r) = clients.join_next().await {
        r.unwrap();
    }

    let (_, _, text) =
        tokio::time::timeout(bound, request(admin, Method::GET, "/metrics", None, &[]))
            .await
            .expect("metrics answered")
            .unwrap();
    let text = String::from_utf8(text.to_vec()).unwrap();
    let dropped = metric(&text, "flashgate_log_lines_dropped_total");
    assert!(
        dropped > 0.0,
        "{REQUESTS} access lines to an unread pipe, none counted as dropped"
    );
}
