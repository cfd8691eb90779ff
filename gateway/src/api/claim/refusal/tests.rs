//! Every claim end pinned to its metric label, HTTP status, `status` name and body fields
//! as docs/API.md "HTTP API" documents them.

use futures::FutureExt;
use http_body_util::BodyExt;
use hyper::header::RETRY_AFTER;
use serde_json::{json, Value};

use super::*;

/// An answer as the client sees it: HTTP status, `Retry-After`, JSON body.
fn seen(reply: Reply) -> (u16, Option<u64>, Value) {
    let resp = reply.into_response();
    let status = resp.status().as_u16();
    let retry = resp
        .headers()
        .get(RETRY_AFTER)
        .map(|v| v.to_str().unwrap().parse().unwrap());
    let body = resp
        .into_body()
        .collect()
        .now_or_never()
        .expect("a full body is ready")
        .unwrap()
        .to_bytes();
    (status, retry, serde_json::from_slice(&body).unwrap())
}

fn refused(r: Refusal) -> (&'static str, u16, Option<u64>, Value) {
    let label = r.label();
    let (status, retry, body) = seen(Reply::from(r));
    (label, status, retry, body)
}

fn meta() -> SkuMeta {
    SkuMeta {
        sku: 7,
        stock: 10,
        width: 2,
        limit: 2,
        start_ms: 1_000,
        end_ms: 2_000,
        mode: shard_router::SkuMode::Fcfs,
    }
}

/// A refusal and what it must give: metric label, HTTP status, `Retry-After`, `status`
/// name and fields of the body.
type Case = (Refusal, &'static str, u16, Option<u64>, ApiStatus, Value);

#[test]
fn refusals_keep_their_label_status_and_body() {
    let cases: Vec<Case> = vec![
        (
            Refusal::Overloaded,
            "rejected",
            503,
            Some(1),
            ApiStatus::Overloaded,
            json!({}),
        ),
        (
            Refusal::NotConnected,
            "unavailable",
            503,
            Some(1),
            ApiStatus::Unavailable,
            json!({}),
        ),
        (
            Refusal::ClockSkew { max_ms: 250 },
            "unavailable",
            503,
            Some(1),
            ApiStatus::Unavailable,
            json!({}),
        ),
        (
            Refusal::UnknownSku(7),
            "rejected",
            404,
            None,
            ApiStatus::UnknownSku,
            json!({"sku": 7}),
        ),
        (
            Refusal::OverLimit {
                qty: 3,
                sku: 7,
                limit: 2,
            },
            "rejected",
            400,
            None,
            ApiStatus::BadRequest,
            json!({"limit": 2}),
        ),
        (
            Refusal::window(Window::NotStarted, &meta()),
            "rejected",
            403,
            None,
            ApiStatus::NotStarted,
            json!({"sku": 7, "error": "the sale of sku 7 starts at 1000 ms"}),
        ),
        (
            Refusal::window(Window::Ended, &meta()),
            "rejected",
            403,
            None,
            ApiStatus::Ended,
            json!({"sku": 7, "error": "the sale of sku 7 ended at 2000 ms"}),
        ),
        (
            Refusal::SoldOut {
                sku: 7,
                from_cache: true,
            },
            "sold_out_cache",
            410,
            None,
            ApiStatus::SoldOut,
            json!({"sku": 7}),
        ),
        (
            Refusal::SoldOut {
                sku: 7,
                from_cache: false,
            },
            "sold_out_redis",
            410,
            None,
            ApiStatus::SoldOut,
            json!({"sku": 7}),
        ),
        (
            Refusal::RateLimited(Duration::from_millis(1_200)),
            "rejected",
            429,
            Some(2),
            ApiStatus::RateLimited,
            json!({}),
        ),
        (
            Refusal::LimitReached {
                held: 2,
                sku: 7,
                limit: 2,
            },
            "limit_reached",
            409,
            None,
            ApiStatus::LimitReached,
            json!({"held": 2, "limit": 2}),
        ),
        (
            Refusal::InProgress,
            "in_progress",
            409,
            Some(1),
            ApiStatus::InProgress,
            json!({}),
        ),
        (
            Refusal::Unconfirmed {
                claim_id: "c1".into(),
                retry: Retry::SameRequestId,
            },
            "unavailable",
            503,
            Some(1),
            ApiStatus::Unavailable,
            json!({"claim_id": "c1", "unconfirmed": true}),
        ),
        (
            Refusal::BadArgument("qty must be at least 1".into()),
            "rejected",
            400,
            None,
            ApiStatus::BadRequest,
            json!({"error": "qty must be at least 1"}),
        ),
        (
            Refusal::Redis(
                StockError::Timeout {
                    op: "claim",
                    after: Duration::from_secs(1),
                },
                Retry::SameRequestId,
            ),
            "unavailable",
            503,
            Some(1),
            ApiStatus::Unavailable,
            json!({}),
        ),
        (
            Refusal::Redis(
                StockError::Protocol {
                    op: "claim",
                    detail: "?".into(),
                },
                Retry::Blind,
            ),
            "unavailable",
            500,
            None,
            ApiStatus::Internal,
            json!({"error": "internal error"}),
        ),
    ];
    for (refusal, label, status, retry, kind, fields) in cases {
        let what = format!("{refusal:?}");
        let (got_label, got_status, got_retry, body) = refused(refusal);
        assert_eq!(
            (got_label, got_status, got_retry, body["status"].as_str()),
            (label, status, retry, Some(kind.as_str())),
            "{what}: {body}"
        );
        assert!(body["error"].is_string(), "{what}: {body}");
        for (k, v) in fields.as_object().unwrap() {
            assert_eq!(&body[k], v, "{what}: {body}");
        }
    }
}

#[test]
fn claims_are_201_or_200_for_a_replay_with_one_body() {
    let claim = Claim {
        claim_id: "c1".into(),
        sku: 7,
        shard: 1,
        qty: 2,
    };
    let body = json!({"status": "claimed", "claim_id": "c1", "sku": 7, "shard": 1, "qty": 2});
    for (origin, label, status) in [
        (ClaimOrigin::Fresh, "claimed", 201),
        (ClaimOrigin::Rerouted, "rerouted", 201),
        (ClaimOrigin::Replay, "replay", 200),
    ] {
        let c = Claimed::new(claim.clone(), origin);
        assert_eq!(c.label(), label);
        assert_eq!(
            seen(Reply::from(c)),
            (status, None, body.clone()),
            "{origin:?}"
        );
    }
}

#[test]
fn an_unconfirmed_claim_is_refused_not_acknowledged() {
    let claim = Claim {
        claim_id: "c1".into(),
        sku: 7,
        shard: 1,
        qty: 1,
    };
    let meta = meta();
    let acked = Decision::Claimed {
        claim: claim.clone(),
        origin: ClaimOrigin::Fresh,
    };
    assert!(answer(acked, &meta, Retry::Blind).is_ok());
    // A replay's client always has its request id to retry with.
    let refused = answer(
        Decision::Unconfirmed {
            claim,
            origin: ClaimOrigin::Replay,
        },
        &meta,
        Retry::Blind,
    );
    assert!(
        matches!(&refused, Err(Refusal::Unconfirmed { claim_id, retry: Retry::SameRequestId }) if claim_id == "c1"),
        "{refused:?}"
    );
}

/// An answer that leaves the outcome open tells the client to retry with its request_id
/// only when the request had one; without one it says the outcome is unknown. Everything
/// else in the answer is the same either way.
#[test]
fn the_ambiguous_answers_hint_depends_on_the_request_id() {
    let timeout = || StockError::Timeout {
        op: "claim",
        after: Duration::from_secs(1),
    };
    let unconfirmed = |request_id: Option<&str>| Refusal::Unconfirmed {
        claim_id: "c1".into(),
        retry: Retry::for_claim(request_id),
    };
    let timed_out =
        |request_id: Option<&str>| Refusal::Redis(timeout(), Retry::for_claim(request_id));
    for (what, make) in [
        ("timeout", &timed_out as &dyn Fn(Option<&str>) -> Refusal),
        ("unconfirmed", &unconfirmed),
    ] {
        let (label, status, retry, with) = refused(make(Some("r1")));
        let (label_b, status_b, retry_b, without) = refused(make(None));
        assert_eq!(
            (label, status, retry),
            (label_b, status_b, retry_b),
            "{what}"
        );
        let (e_with, e_without) = (
            with["error"].as_str().unwrap(),
            without["error"].as_str().unwrap(),
        );
        assert!(
            e_with.contains("retry with the same request_id"),
            "{what}: {e_with}"
        );
        assert!(
            !e_without.contains("same request_id"),
            "{what}: {e_without}"
        );
        assert!(
            e_without.contains("outcome is unknown"),
            "{what}: {e_without}"
        );
        assert!(
            e_without.contains("send a request_id"),
            "{what}: {e_without}"
        );
        // Only `error` differs.
        let strip = |mut v: Value| {
            v.as_object_mut().unwrap().remove("error");
            v
        };
        assert_eq!(strip(with), strip(without), "{what}");
    }
    // A read, a draw entry or a queue join repeats nothing: no request_id is needed.
    let (_, status, _, safe) = refused(Refusal::Redis(timeout(), Retry::Safe));
    assert_eq!(status, 503);
    let e = safe["error"].as_str().unwrap();
    assert!(!e.contains("request_id") && e.contains("retry"), "{e}");
}

/// The sold-out answer is rendered from a struct; its bytes are those the generic error
/// shape gives (clients and docs/API.md "HTTP API" see no change).
#[test]
fn sold_out_renders_the_bytes_of_the_generic_error_shape() {
    let bytes = |reply: Reply| {
        reply
            .into_response()
            .into_body()
            .collect()
            .now_or_never()
            .expect("a full body is ready")
            .unwrap()
            .to_bytes()
    };
    for sku in [0, 7, u64::MAX] {
        let generic = Reply::error(
            StatusCode::GONE,
            ApiStatus::SoldOut,
            format!("sku {sku} is sold out"),
        )
        .with("sku", sku);
        let rendered = Reply::from(Refusal::SoldOut {
            sku,
            from_cache: true,
        });
        assert_eq!(rendered.status, StatusCode::GONE);
        assert_eq!(bytes(rendered), bytes(generic), "sku {sku}");
    }
}

/// The claim's body is written by hand: its bytes are those serde_json wrote for the
/// struct it replaced, for plain claim ids and for ids that would need escaping.
#[test]
fn the_claim_body_is_serde_jsons_bytes() {
    #[derive(serde::Serialize)]
    struct Body<'a> {
        status: ApiStatus,
        claim_id: &'a str,
        sku: u64,
        shard: u16,
        qty: u32,
    }
    let ids = [
        "3-1700000000000-0",
        "",
        "a\"b\\c",
        "tab\there\u{1}",
        "ü-名\u{7f}",
    ];
    for id in ids {
        for (sku, shard, qty) in [(0, 0, 0), (7, 1, 2), (u64::MAX, u16::MAX, u32::MAX)] {
            let claim = Claim {
                claim_id: id.into(),
                sku,
                shard,
                qty,
            };
            let want = serde_json::to_vec(&Body {
                status: ApiStatus::Claimed,
                claim_id: id,
                sku,
                shard,
                qty,
            })
            .unwrap();
            assert_eq!(
                String::from_utf8(claim_body(&claim)).unwrap(),
                String::from_utf8(want).unwrap()
            );
        }
    }
}
