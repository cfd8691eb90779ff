//! What one request ended as. The gateway's answers are classified by HTTP status and the
//! `status` field of the JSON body (docs/API.md "HTTP API"); transport trouble gets its own
//! buckets so it is never mistaken for a business answer.

use serde::Serialize;
use shard_router::ApiStatus;

/// The outcome buckets of every report, in a fixed order (the index is used for arrays).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// 201 `claimed`.
    Claimed,
    /// 200 `claimed` for a request id seen before.
    Replay,
    /// 410 `sold_out`.
    SoldOut,
    /// 409 `limit_reached`.
    LimitReached,
    /// 403 `not_started` / `ended`.
    Window,
    /// 404 `unknown_sku`.
    UnknownSku,
    /// 400 / 413 / 415.
    BadRequest,
    /// 429.
    RateLimited,
    /// 503 `overloaded`.
    Overloaded,
    /// 503 `unavailable`.
    Unavailable,
    /// 200 from the bare baseline server.
    Ok,
    /// Any other HTTP status.
    OtherStatus,
    /// Connect, write or read failure.
    TransportError,
    /// No answer within the request timeout.
    Timeout,
}

impl Outcome {
    pub const ALL: [Outcome; 14] = [
        Outcome::Claimed,
        Outcome::Replay,
        Outcome::SoldOut,
        Outcome::LimitReached,
        Outcome::Window,
        Outcome::UnknownSku,
        Outcome::BadRequest,
        Outcome::RateLimited,
        Outcome::Overloaded,
        Outcome::Unavailable,
        Outcome::Ok,
        Outcome::OtherStatus,
        Outcome::TransportError,
        Outcome::Timeout,
    ];
    pub const COUNT: usize = Self::ALL.len();

    pub fn index(self) -> usize {
        self as usize
    }

    /// The stable name used in JSON and tables.
    pub fn name(self) -> &'static str {
        match self {
            Outcome::Claimed => "claimed",
            Outcome::Replay => "replay",
            Outcome::SoldOut => "sold_out",
            Outcome::LimitReached => "limit_reached",
            Outcome::Window => "window",
            Outcome::UnknownSku => "unknown_sku",
            Outcome::BadRequest => "bad_request",
            Outcome::RateLimited => "rate_limited",
            Outcome::Overloaded => "overloaded",
            Outcome::Unavailable => "unavailable",
            Outcome::Ok => "ok",
            Outcome::OtherStatus => "other_status",
            Outcome::TransportError => "transport_error",
            Outcome::Timeout => "timeout",
        }
    }

    /// An answer the system meant to give (a sold-out is a success of the system);
    /// `false` for sheds, failures and surprises, which a sweep counts as errors.
    pub fn is_served(self) -> bool {
        matches!(
            self,
            Outcome::Claimed
                | Outcome::Replay
                | Outcome::SoldOut
                | Outcome::LimitReached
                | Outcome::Window
                | Outcome::Ok
        )
    }

    /// True when the claim may or may not have been made: the client got no definite answer
    /// (the gateway lost Redis after sending the script, or the answer never arrived). Such a
    /// claim can be in the ledger without having been acknowledged.
    pub fn is_ambiguous(self) -> bool {
        matches!(
            self,
            Outcome::Unavailable
                | Outcome::OtherStatus
                | Outcome::TransportError
                | Outcome::Timeout
        )
    }

    /// Classifies an HTTP answer. The status code decides; the body's `status` only splits
    /// codes the API shares (503 overloaded vs unavailable).
    pub fn classify(http: u16, body: &[u8]) -> Outcome {
        match http {
            201 => Outcome::Claimed,
            200 => {
                if body_status(body) == Some(ApiStatus::Claimed) {
                    Outcome::Replay
                } else {
                    Outcome::Ok
                }
            }
            410 => Outcome::SoldOut,
            409 => Outcome::LimitReached,
            403 => Outcome::Window,
            404 => Outcome::UnknownSku,
            400 | 413 | 415 => Outcome::BadRequest,
            429 => Outcome::RateLimited,
            503 => match body_status(body) {
                Some(ApiStatus::Unavailable) => Outcome::Unavailable,
                _ => Outcome::Overloaded,
            },
            _ => Outcome::OtherStatus,
        }
    }
}

/// The `status` field of a JSON body, if any and known.
fn body_status(body: &[u8]) -> Option<ApiStatus> {
    #[derive(serde::Deserialize)]
    struct S {
        status: ApiStatus,
    }
    serde_json::from_slice::<S>(body).ok().map(|s| s.status)
}

/// The fields of a successful claim answer the invariant check needs.
#[derive(Debug, Clone, serde::Deserialize)]
pub struct ClaimAnswer {
    pub claim_id: String,
    #[serde(default)]
    pub qty: Option<u32>,
}

impl ClaimAnswer {
    pub fn parse(body: &[u8]) -> Option<Self> {
        serde_json::from_slice(body).ok()
    }
}
