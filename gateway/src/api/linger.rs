//! Lingering close: a body refused before it was read in full (413) is read and thrown
//! away after the answer, so the client gets to read that answer.
//!
//! Most HTTP clients (Python's `http.client`, most SDKs) write the whole body before they
//! read. Left to itself, hyper reads only what is already buffered of a body nobody wants,
//! then closes the socket with the rest unread; the kernel answers the next segment with
//! a reset, and the client's write fails before it reads the 413 waiting for it. So the
//! refused body goes to a task of its own, which reads it to its end while hyper writes
//! the answer (with `Connection: close`), and the connection closes cleanly after both.
//!
//! Every linger is bounded: at most [`LINGER_MAX_BYTES`] (a body declaring more is not
//! drained at all, the client would be cut anyway), at most [`LINGER_TIME`] (a trickling
//! sender does not hold its connection longer), and it ends when the listener stops. When
//! it gives up, hyper closes the connection as it would have without it.

use std::time::Duration;

use http_body_util::BodyExt;
use hyper::body::{Body, Incoming};
use tokio::sync::watch;

use crate::stopped;

/// Bytes read past a refusal at most: an 8 MiB upload (a typical SDK's mistake) still gets
/// its answer, and a flood costs its connection no more than this.
pub const LINGER_MAX_BYTES: u64 = 16 << 20;

/// How long a refused body may take to arrive: a trickling sender is cut after this.
pub const LINGER_TIME: Duration = Duration::from_secs(2);

/// Why a linger ended, for the debug log.
#[derive(Debug, PartialEq, Eq)]
enum End {
    /// The body arrived whole: the connection closes cleanly after the answer.
    Read,
    TooLong,
    TooSlow,
    Stopped,
    /// The client went away or sent a malformed body.
    Failed,
}

/// Reads what is left of `body` in a task of its own, within the bounds above; returns
/// false when the body declares more than the byte bound (the caller answers anyway and
/// hyper closes the connection at once).
pub(crate) fn linger(body: Incoming, stop: &watch::Receiver<bool>) -> bool {
    // The bytes still to come when the length is declared (hyper counts down as it
    // reads), else nothing known: a chunked body is read up to the bound.
    let left = body.size_hint().upper().unwrap_or(LINGER_MAX_BYTES);
    if left > LINGER_MAX_BYTES {
        return false;
    }
    let stop = stop.clone();
    tokio::spawn(async move {
        let end = drain(body, left, LINGER_TIME, stop).await;
        tracing::debug!(end = ?end, "lingering close ended");
    });
    true
}

async fn drain(
    mut body: Incoming,
    max: u64,
    time: Duration,
    mut stop: watch::Receiver<bool>,
) -> End {
    let deadline = tokio::time::sleep(time);
    let mut deadline = std::pin::pin!(deadline);
    let mut read = 0u64;
    loop {
        let frame = tokio::select! {
            frame = body.frame() => frame,
            _ = &mut deadline => return End::TooSlow,
            _ = stopped(&mut stop) => return End::Stopped,
        };
        match frame {
            None => return End::Read,
            Some(Err(_)) => return End::Failed,
            Some(Ok(frame)) => {
                read += frame.data_ref().map_or(0, |d| d.len() as u64);
                if read > max {
                    return End::TooLong;
                }
            }
        }
    }
}
