//! The `status` field of every gateway answer (docs/API.md): one enum for the gateway that
//! writes it, and the bench and tests that read it back, so a name cannot drift between
//! writer and reader. Each name is spelled once, in the `api_statuses!` table below, with
//! the HTTP codes it goes with; `as_str`, `codes`, `FromStr` and serde all go through it.

use std::fmt;
use std::str::FromStr;

macro_rules! api_statuses {
    ($($(#[$doc:meta])* $variant:ident => $name:literal $codes:expr,)*) => {
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

            /// The HTTP codes an answer with this status may carry: the gateway checks
            /// every answer against them in debug builds (gateway/src/reply.rs), and
            /// gateway/tests/docs.rs holds docs/API.md's status tables to them.
            pub const fn codes(self) -> &'static [u16] {
                match self {
                    $(ApiStatus::$variant => &$codes,)*
                }
            }
        }
    };
}

api_statuses! {
    /// A fresh claim (201), or its replay (200).
    Claimed => "claimed" [201, 200],
    /// No stock on any shard.
    SoldOut => "sold_out" [410],
    /// The user already holds the SKU's limit.
    LimitReached => "limit_reached" [409],
    /// The same request id is being served right now.
    InProgress => "in_progress" [409],
    /// Before the sale window.
    NotStarted => "not_started" [403],
    /// After the sale window.
    Ended => "ended" [403],
    /// No such campaign, or not preheated.
    UnknownSku => "unknown_sku" [404],
    /// The request itself is wrong.
    BadRequest => "bad_request" [400, 408, 413, 415],
    /// No identity, or one the gateway does not believe.
    Unauthorized => "unauthorized" [401],
    /// Per-client-address or per-user rate limit.
    RateLimited => "rate_limited" [429],
    /// Shed past the in-flight cap; nothing was taken.
    Overloaded => "overloaded" [503],
    /// Redis trouble, clock skew, or (replica mode) not yet replicated.
    Unavailable => "unavailable" [503],
    /// A bug (a script reply this build does not understand).
    Internal => "internal" [500],
    /// No route for the path.
    NotFound => "not_found" [404],
    /// Wrong method for the route.
    MethodNotAllowed => "method_not_allowed" [405],
    /// `/healthz`, `GET /v1/skus/{sku}`.
    Ok => "ok" [200],
    /// `/readyz`.
    Ready => "ready" [200],
    /// `/readyz` while not ready.
    NotReady => "not_ready" [503],
    /// A draw's entry is in (docs/DESIGN.md "The draw").
    Entered => "entered" [202],
    /// Entered; entries are closed and the draw is running.
    Drawing => "drawing" [202],
    /// Drawn a winner, and the unit is claimed.
    Won => "won" [201],
    /// Drawn a winner; the claim is being made.
    WonPending => "won_pending" [202],
    Waitlisted => "waitlisted" [200],
    Lost => "lost" [410],
    /// Entries are closed and this user did not enter.
    EntriesClosed => "entries_closed" [403],
    /// Waiting in a queue SKU's waiting room.
    Queued => "queued" [202],
    /// A queue token that is not this gateway's, this user's or this SKU's.
    InvalidQueueToken => "invalid_queue_token" [403],
    /// The shard's Redis restarted or failed over and is being checked against the
    /// Ledger (`lua/guard.lua`); nothing was taken, retry shortly.
    Restoring => "restoring" [503],
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
        // docs/API.md documents these; clients match on them.
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
