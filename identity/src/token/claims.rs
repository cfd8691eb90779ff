//! The claims an HS256 token must carry, read once (borrowed from the decoded payload) and
//! checked as `jsonwebtoken` 10's `validate` checks them for the gateway's `Validation`:
//! `exp`, `aud` and `sub` required (`iss` too when an issuer is configured), `nbf` checked
//! when present, both within [`LEEWAY_S`](super::LEEWAY_S).
//!
//! Matching it member by member: `exp` / `nbf` are a non-negative integer, or a finite
//! non-negative float below 2^64 (rounded); anything else (a string, null, a negative
//! number) refuses the token. `aud` and `iss` are a string or an array of strings, of which
//! one must be the configured value; another type counts as missing. An `iss` that is not
//! checked may be anything. `sub` is a string. One of these members twice is an error;
//! other members are skipped, duplicates included. (An empty `sub`, which jsonwebtoken
//! takes, is refused for every algorithm in `token.rs`.)

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;

use super::compact::Text;
use super::{Reason, LEEWAY_S};

/// What a token's claims must say, fixed at load.
pub(super) struct Rules {
    pub(super) audience: String,
    pub(super) issuer: Option<String>,
}

#[derive(Deserialize)]
struct Claims<'a> {
    #[serde(default, deserialize_with = "numeric_date")]
    exp: Option<u64>,
    #[serde(default, deserialize_with = "numeric_date")]
    nbf: Option<u64>,
    #[serde(borrow)]
    sub: Option<Text<'a>>,
    #[serde(borrow, default)]
    iss: Names<'a>,
    #[serde(borrow, default)]
    aud: Names<'a>,
}

impl Rules {
    /// The subject of a payload whose signature is already verified, if the claims pass.
    pub(super) fn check(&self, json: &[u8], now: u64) -> Result<String, Reason> {
        // A struct also deserializes from a JSON array (members by position); jsonwebtoken
        // refuses those (its two readers disagree on the first member's type), so do we.
        let first = json
            .iter()
            .find(|b| !matches!(b, b' ' | b'\t' | b'\n' | b'\r'));
        if first != Some(&b'{') {
            return Err(Reason::ClaimsNotObject);
        }
        let claims: Claims<'_> = serde_json::from_slice(json).map_err(Reason::Claims)?;
        let sub = claims.sub.ok_or(Reason::Missing("sub"))?.0;
        let exp = claims.exp.ok_or(Reason::Missing("exp"))?;
        if matches!(claims.aud, Names::Absent | Names::Other) {
            return Err(Reason::Missing("aud"));
        }
        if exp < now.saturating_sub(LEEWAY_S) {
            return Err(Reason::Expired);
        }
        if claims
            .nbf
            .is_some_and(|nbf| nbf > now.saturating_add(LEEWAY_S))
        {
            return Err(Reason::NotYetValid);
        }
        if let Some(issuer) = &self.issuer {
            match claims.iss {
                Names::Absent | Names::Other => return Err(Reason::Missing("iss")),
                iss if !iss.contains(issuer) => return Err(Reason::Issuer),
                _ => {}
            }
        }
        if !claims.aud.contains(&self.audience) {
            return Err(Reason::Audience);
        }
        Ok(sub.into_owned())
    }
}

/// `exp` / `nbf` as jsonwebtoken's `numeric_type` reads them.
fn numeric_date<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    struct V;
    impl Visitor<'_> for V {
        type Value = u64;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a NumericDate (seconds since the epoch, not negative)")
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<u64, E> {
            Ok(v)
        }
        fn visit_f64<E: de::Error>(self, v: f64) -> Result<u64, E> {
            if v.is_finite() && v >= 0.0 && v < u64::MAX as f64 {
                Ok(v.round() as u64)
            } else {
                Err(E::invalid_value(de::Unexpected::Float(v), &self))
            }
        }
    }
    d.deserialize_any(V).map(Some)
}

/// `aud` / `iss`: a string, or a list of which one entry must match.
#[derive(Default)]
enum Names<'a> {
    /// Missing, or null.
    #[default]
    Absent,
    One(Cow<'a, str>),
    Many(Vec<Cow<'a, str>>),
    /// Present, but neither a string nor an array of strings.
    Other,
}

impl Names<'_> {
    fn contains(&self, want: &str) -> bool {
        match self {
            Names::One(s) => s == want,
            Names::Many(list) => list.iter().any(|s| s == want),
            Names::Absent | Names::Other => false,
        }
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Names<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(NamesVisitor)
    }
}

struct NamesVisitor;

impl<'de> Visitor<'de> for NamesVisitor {
    type Value = Names<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string or an array of strings")
    }
    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Names::One(Cow::Borrowed(v)))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Names::One(Cow::Owned(v.to_owned())))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(Names::Absent)
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
        Ok(Names::Other)
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
        Ok(Names::Other)
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
        Ok(Names::Other)
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
        Ok(Names::Other)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut list = Vec::new();
        while let Some(entry) = seq.next_element::<Entry<'de>>()? {
            match entry {
                Entry::Text(s) => list.push(s),
                Entry::Other => {
                    while seq.next_element::<IgnoredAny>()?.is_some() {}
                    return Ok(Names::Other);
                }
            }
        }
        Ok(Names::Many(list))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Names::Other)
    }
}

/// One entry of an `aud` / `iss` array: a string, or anything else (skipped whole).
enum Entry<'a> {
    Text(Cow<'a, str>),
    Other,
}

impl<'de: 'a, 'a> Deserialize<'de> for Entry<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(match d.deserialize_any(NamesVisitor)? {
            Names::One(s) => Entry::Text(s),
            _ => Entry::Other,
        })
    }
}
