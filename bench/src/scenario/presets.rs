//! The published flash-sale scenarios, reproducible by name.
//!
//! | preset | what it reproduces |
//! | --- | --- |
//! | `users-5k` | 5 000 concurrent users rush 100 units, 1% of requests are client retries |
//! | `requests-50k` | 50 000 requests for 10 000 units |
//! | `conn-500` | 500 connections for 3 minutes on 10 000 units (`--short`: 15 s) |

use crate::scenario::{Load, Mode, Scenario, SkuSpec};

pub const NAMES: [&str; 3] = ["users-5k", "requests-50k", "conn-500"];

/// The preset `name`, shortened for CI when `short`.
pub fn preset(name: &str, short: bool) -> Option<Scenario> {
    let sku = |stock| {
        vec![SkuSpec {
            id: 1,
            stock,
            width: 8,
        }]
    };
    Some(match name {
        "users-5k" => Scenario {
            name: name.into(),
            skus: sku(100),
            users: 5_000,
            limit: 1,
            repeat_ratio: 0.01,
            // Every user once, plus the 1% retries.
            requests: 5_050,
            duration_s: 0.0,
            warmup_s: 0.0,
            // 1 000 sockets carry the 5 000 users: enough to have every user's request
            // in flight within the first few milliseconds, as in a real rush.
            load: Load {
                mode: Mode::Closed,
                connections: 1_000,
                ..Load::default()
            },
            ..Scenario::default()
        },
        "requests-50k" => Scenario {
            name: name.into(),
            skus: sku(10_000),
            users: 50_000,
            limit: 1,
            requests: 50_000,
            duration_s: 0.0,
            warmup_s: 0.0,
            load: Load {
                mode: Mode::Closed,
                connections: 256,
                ..Load::default()
            },
            ..Scenario::default()
        },
        "conn-500" => Scenario {
            name: if short { "conn-500-short" } else { name }.into(),
            skus: sku(10_000),
            users: 10_000_000,
            limit: 1,
            duration_s: if short { 15.0 } else { 180.0 },
            warmup_s: if short { 1.0 } else { 5.0 },
            load: Load {
                mode: Mode::Closed,
                connections: 500,
                ..Load::default()
            },
            ..Scenario::default()
        },
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_preset_is_valid() {
        for n in NAMES {
            for short in [false, true] {
                preset(n, short).unwrap().validate().unwrap();
            }
        }
        assert!(preset("nope", false).is_none());
    }
}
