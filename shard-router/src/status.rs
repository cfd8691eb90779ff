//! The `status` field of every gateway answer (README.md "HTTP API"): one enum for the
//! gateway that writes it, and the bench and tests that read it back, so a name cannot
//! drift between writer and reader. Each name is spelled once, in the `api_statuses!` table
//! below; `as_str`, `FromStr` and serde all go through it.

use std::fmt;
use std::str::FromStr;

macro_rules! api_statuses {
    ($($(#[$doc:meta])* $variant:ident => $name:literal,)*) => {
        /// A value of the `status` field of a gateway answer.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum ApiStatus {
            $($(#[$doc])* $variant,)*
        }

        impl ApiStatus {
            /// Every status, in the order of the table above.
            pub const ALL: &'static [ApiStatus] = &[$(ApiStatus::$variant,)*];

            /// The name on the wire.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $(ApiStatus::$variant => $name,)*
                }
            }
        }
    };
}

api_statuses! {
    /// 201 a fresh claim, 200 its replay.
    Claimed => "claimed",
    /// 410: no stock on any shard.
    SoldOut => "sold_out",
    /// 409: the user already holds the SKU's limit.
    LimitReached => "limit_reached",
    /// 409: the same request id is being served right now.
    InProgress => "in_progress",
    /// 403: before the sale window.
    NotStarted => "not_started",
    /// 403: after the sale window.
    Ended => "ended",
    /// 404: no such campaign, or not preheated.
    UnknownSku => "unknown_sku",
    /// 400 / 408 / 413 / 415: the request itself is wrong.
    BadRequest => "bad_request",
    /// 401: no identity, or one the gateway does not believe.
    Unauthorized => "unauthorized",
    /// 429: per-client-address or per-user rate limit.
    RateLimited => "rate_limited",
    /// 503: shed past the in-flight cap; nothing was taken.
    Overloaded => "overloaded",
    /// 503: Redis trouble, clock skew, or (replica mode) not yet replicated.
    Unavailable => "unavailable",
    /// 500: a bug (a script reply this build does not understand).
    Internal => "internal",
    /// 404: no route for the path.
    NotFound => "not_found",
    /// 405: wrong method for the route.
    MethodNotAllowed => "method_not_allowed",
    /// 200: `/healthz`, `GET /v1/skus/{sku}`.
    Ok => "ok",
    /// 200: `/readyz`.
    Ready => "ready",
    /// 503: `/readyz` while not ready.
    NotReady => "not_ready",
    /// A draw's entry is in (docs/DESIGN.md "The draw").
    Entered => "entered",
    /// Entered; entries are closed and the draw is running.
    Drawing => "drawing",
    /// Drawn a winner, and the unit is claimed.
    Won => "won",
    /// Drawn a winner; the claim is being made.
    WonPending => "won_pending",
    Waitlisted => "waitlisted",
    Lost => "lost",
    /// Entries are closed and this user did not enter.
    EntriesClosed => "entries_closed",
    /// Waiting in a queue SKU's waiting room.
    Queued => "queued",
    /// A queue token that is not this gateway's, this user's or this SKU's.
    InvalidQueueToken => "invalid_queue_token",
    /// 503: the shard's Redis restarted or failed over and is being checked against the
    /// ledger (`lua/guard.lua`); nothing was taken, retry shortly.
    Restoring => "restoring",
}

impl fmt::Display for ApiStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A `status` value this build does not know.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown API status {0:?}")]
pub struct UnknownStatus(pub String);

impl FromStr for ApiStatus {
    type Err = UnknownStatus;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .iter()
            .copied()
            .find(|a| a.as_str() == s)
            .ok_or_else(|| UnknownStatus(s.to_owned()))
    }
}

impl serde::Serialize for ApiStatus {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> serde::Deserialize<'de> for ApiStatus {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_are_distinct() {
        for &a in ApiStatus::ALL {
            assert_eq!(a.as_str().parse::<ApiStatus>(), Ok(a));
            let json = serde_json::to_string(&a).unwrap();
            assert_eq!(json, format!("\"{a}\""));
            assert_eq!(serde_json::from_str::<ApiStatus>(&json).unwrap(), a);
            let same = ApiStatus::ALL.iter().filter(|b| b.as_str() == a.as_str());
            assert_eq!(same.count(), 1, "{a}");
        }
        assert!("Claimed".parse::<ApiStatus>().is_err());
        assert!(serde_json::from_str::<ApiStatus>("\"nope\"").is_err());
    }

    #[test]
    fn wire_names_are_pinned() {
        // README.md "HTTP API" documents these; clients match on them.
        let names: Vec<_> = ApiStatus::ALL.iter().map(|a| a.as_str()).collect();
        assert_eq!(
            names,
            [
                "claimed",
                "sold_out",
                "limit_reached",
                "in_progress",
                "not_started",
                "ended",
                "unknown_sku",
                "bad_request",
                "unauthorized",
                "rate_limited",
                "overloaded",
                "unavailable",
                "internal",
                "not_found",
                "method_not_allowed",
                "ok",
                "ready",
                "not_ready",
                "entered",
                "drawing",
                "won",
                "won_pending",
                "waitlisted",
                "lost",
                "entries_closed",
                "queued",
                "invalid_queue_token",
                "restoring",
            ]
        );
    }
}
