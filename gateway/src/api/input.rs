//! Reading and checking a claim request: content type, body size and time, JSON shape,
//! field ranges, and the user (verified by the `identity` crate, or the body field where the
//! operator allowed it). Everything here runs before
//! any Redis call, and every failure is a [`Reply`] saying what was wrong.

use std::net::IpAddr;
use std::task::Poll;
use std::time::Duration;

use bytes::Bytes;
use futures::FutureExt;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use hyper::body::Incoming;
use hyper::header::{CONTENT_LENGTH, CONTENT_TYPE, EXPECT};
use hyper::{Request, StatusCode};
use identity::{Identity, Who};
use serde::Deserialize;
use shard_router::outcome::MAX_ID_LEN;
use shard_router::{ApiStatus, ClaimRequest};
use tokio::sync::watch;

use super::linger::linger;
use crate::reply::Reply;

/// The JSON body of `POST /v1/claims`. Unknown fields are refused so a typo
/// (`"quantity"`) is an error instead of a silent default.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ClaimBody {
    sku: u64,
    user: Option<String>,
    qty: Option<u32>,
    request_id: Option<String>,
}

/// What the claim handler needs to read a request.
pub(crate) struct InputRules<'a> {
    pub(crate) max_body: usize,
    pub(crate) body_timeout: Duration,
    pub(crate) identity: &'a Identity,
    /// The socket peer (a trusted proxy may vouch for the user).
    pub(crate) peer: IpAddr,
    /// The listener's stop signal, which ends the lingering close of a refused body.
    pub(crate) stop: &'a watch::Receiver<bool>,
}

/// Reads and validates the request into a [`ClaimRequest`] (qty defaults to 1; the
/// per-SKU limit is checked later against the cached metadata).
pub(crate) async fn read_claim(
    req: Request<Incoming>,
    rules: &InputRules<'_>,
) -> Result<ClaimRequest, Reply> {
    let (parts, mut body) = req.into_parts();
    check_content_type(parts.headers.get(CONTENT_TYPE))?;
    let declared = parts
        .headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    // A client that asked `Expect: 100-continue` has sent no body and sends none after a
    // final answer: nothing to linger for (reading would even invite the upload).
    let expects = parts.headers.contains_key(EXPECT);
    if declared.is_some_and(|n| n > rules.max_body as u64) {
        return Err(too_large_lingering(rules, body, expects));
    }
    // Before the body is read: an unauthenticated client costs no body read.
    let verified = match rules.identity.resolve(&parts.headers, rules.peer)? {
        Who::Verified(user) => Some(user),
        Who::FromBody => None,
    };

    // A claim's body nearly always arrives with its head, so one poll takes it whole; the
    // timer (a clock read, and a timer-wheel entry while the body trickles) is armed only
    // when it does not.
    // Limited over `&mut body`: a body found too large is still ours to linger on.
    let collected = {
        let mut collect = std::pin::pin!(Limited::new(&mut body, rules.max_body).collect());
        match futures::poll!(collect.as_mut()) {
            Poll::Ready(collected) => collected,
            Poll::Pending => tokio::time::timeout(rules.body_timeout, collect)
                .await
                .map_err(|_| {
                    Reply::error(
                        StatusCode::REQUEST_TIMEOUT,
                        ApiStatus::BadRequest,
                        format!("body not received within {:?}", rules.body_timeout),
                    )
                })?,
        }
    };
    let bytes = match collected {
        Ok(c) => c.to_bytes(),
        Err(e) if e.downcast_ref::<LengthLimitError>().is_some() => {
            return Err(too_large_lingering(rules, body, expects))
        }
        Err(e) => return Err(Reply::bad_request(format!("reading body: {e}"))),
    };

    parse_body(&bytes, verified)
}

/// A claim body refused before any Redis call, as the client receives it: the HTTP status
/// and the JSON body (`{"status": "bad_request", "error": ...}`).
#[derive(Debug, Clone)]
pub struct Rejection {
    pub status: StatusCode,
    pub body: Bytes,
}

/// The pure part of reading a claim: JSON shape and field ranges of `body`, with the
/// verified user when there is one (else the body's `user`). No I/O, so it can be fuzzed without a socket;
/// [`read_claim`] runs exactly this after the content type, size and header checks.
pub fn parse_claim(body: &[u8], header_user: Option<&str>) -> Result<ClaimRequest, Rejection> {
    parse_body(body, header_user.map(str::to_owned)).map_err(|reply| {
        let status = reply.status;
        // A `Full` body is ready at once; nothing here waits.
        let body = reply
            .into_response()
            .into_body()
            .collect()
            .now_or_never()
            .and_then(Result::ok)
            .map(|c| c.to_bytes())
            .unwrap_or_default();
        Rejection { status, body }
    })
}

/// `header_user` by value: the verified user becomes the request's without another copy.
fn parse_body(bytes: &[u8], header_user: Option<String>) -> Result<ClaimRequest, Reply> {
    let body: ClaimBody = serde_json::from_slice(bytes)
        .map_err(|e| Reply::bad_request(format!("invalid JSON body: {e}")))?;
    let user = match (header_user, body.user) {
        (Some(h), Some(b)) if h != b => {
            return Err(Reply::bad_request(
                "field `user` differs from the authenticated user",
            ))
        }
        (Some(h), _) => h,
        (None, Some(b)) => b,
        (None, None) => return Err(Reply::bad_request("missing field `user`")),
    };
    check_id("user", &user)?;
    if let Some(rid) = &body.request_id {
        check_id("request_id", rid)?;
    }
    let qty = body.qty.unwrap_or(1);
    if qty == 0 {
        return Err(Reply::bad_request("field `qty` must be at least 1"));
    }
    Ok(ClaimRequest {
        sku: body.sku,
        user,
        qty,
        request_id: body.request_id,
    })
}

/// The 413, with the rest of `body` read and thrown away after it (`linger.rs`) so a
/// client still writing gets to read it. Always `Connection: close`: the body is not read
/// by the time the answer goes out, and may never be.
fn too_large_lingering(rules: &InputRules<'_>, body: Incoming, expects: bool) -> Reply {
    if !expects {
        linger(body, rules.stop);
    }
    Reply::error(
        StatusCode::PAYLOAD_TOO_LARGE,
        ApiStatus::BadRequest,
        format!("body larger than {} bytes", rules.max_body),
    )
    .close()
}

/// Accepts `application/json` with any parameters (`; charset=utf-8`).
fn check_content_type(v: Option<&hyper::header::HeaderValue>) -> Result<(), Reply> {
    let ok = v
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json"));
    if ok {
        Ok(())
    } else {
        Err(Reply::error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiStatus::BadRequest,
            "content type must be application/json",
        ))
    }
}

/// Ids become parts of Redis keys and stream records: 1..=64 bytes, no control characters.
fn check_id(field: &str, v: &str) -> Result<(), Reply> {
    if v.is_empty() || v.len() > MAX_ID_LEN {
        return Err(Reply::bad_request(format!(
            "field `{field}` must be 1..={MAX_ID_LEN} bytes, got {}",
            v.len()
        )));
    }
    if v.chars().any(char::is_control) {
        return Err(Reply::bad_request(format!(
            "field `{field}` must not contain control characters"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_types() {
        let ok = |s: &'static str| {
            check_content_type(Some(&hyper::header::HeaderValue::from_static(s))).is_ok()
        };
        assert!(ok("application/json"));
        assert!(ok("Application/JSON; charset=utf-8"));
        assert!(!ok("text/plain"));
        assert!(!ok("application/jsonx"));
        assert!(check_content_type(None).is_err());
    }

    #[test]
    fn ids() {
        assert!(check_id("user", "alice").is_ok());
        assert!(check_id("user", "").is_err());
        assert!(check_id("user", &"x".repeat(65)).is_err());
        assert!(check_id("user", &"x".repeat(64)).is_ok());
        assert!(check_id("user", "a\nb").is_err());
    }

    /// A verified user (a token's subject, which the verifier passes on as it is:
    /// `odd_subjects_are_verified_as_they_are` in `identity/src/token/review.rs`) is held to the
    /// body `user` rules, so a signed but odd `sub` never reaches a Redis key.
    #[test]
    fn odd_verified_users_stop_at_the_claim_checks() {
        let long = "u".repeat(65);
        for (user, ok) in [
            ("a|b", true),
            ("a\0b", false),
            ("a\nb", false),
            ("a\u{7f}b", false),
            (long.as_str(), false),
        ] {
            let r = parse_claim(br#"{"sku":1}"#, Some(user));
            assert_eq!(r.is_ok(), ok, "{user:?}");
        }
    }
}
