//! The JWS compact form (RFC 7515 §7.1) as the gateway reads it: exactly three unpadded
//! base64url parts, and a JOSE header of which only `alg` and `kid` matter.
//!
//! The header is the only attacker JSON read before a signature is checked, so it is read
//! into nothing but an algorithm flag and the key id. Its other members are held to what
//! `jsonwebtoken`'s `Header` accepts (named members a string or null, each at most once;
//! unknown members strings; `alg` a string, where jsonwebtoken also takes serde's map form
//! `{"HS256":null}`), except `crit`, `jwk` and `x5c`, which are refused outright:
//! no header extension is understood here (RFC 7515 §4.1.11 says to reject the token
//! then), and keys or certificates carried by the token itself are never used.

use std::borrow::Cow;
use std::fmt;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::Deserialize;

use super::Reason;

/// A token cut into its parts, header parsed, signature not yet checked.
pub(super) struct Compact<'t> {
    /// `header.payload`: the bytes the signature covers.
    pub(super) signed: &'t str,
    pub(super) payload: &'t str,
    pub(super) signature: &'t str,
    pub(super) header: Header,
}

/// What the header says that the gateway uses.
pub(super) struct Header {
    /// `alg` is exactly `HS256` (the only algorithm whose check is ours).
    pub(super) hs256: bool,
    pub(super) kid: Option<String>,
}

impl<'t> Compact<'t> {
    pub(super) fn parse(token: &'t str) -> Result<Self, Reason> {
        let mut parts = token.splitn(3, '.');
        let (Some(header), Some(payload), Some(signature)) =
            (parts.next(), parts.next(), parts.next())
        else {
            return Err(Reason::Malformed);
        };
        // A fourth part shows as a dot in the signature, which base64url would refuse too.
        if signature.contains('.') {
            return Err(Reason::Malformed);
        }
        let header = decode(header, "header", Header::from_json)?.map_err(Reason::Header)?;
        Ok(Self {
            signed: &token[..token.len() - signature.len() - 1],
            payload,
            signature,
            header,
        })
    }
}

/// Decodes one unpadded base64url part into a buffer on the stack (on the heap past 512
/// bytes) and hands it to `f`; `part` names it in the error.
pub(super) fn decode<R>(
    b64: &str,
    part: &'static str,
    f: impl FnOnce(&[u8]) -> R,
) -> Result<R, Reason> {
    const STACK: usize = 512;
    // Unpadded: every 4 characters are 3 bytes, a partial group at most 2 more.
    let room = b64.len() / 4 * 3 + 3;
    let mut stack = [0u8; STACK];
    let mut heap = Vec::new();
    let buf = if room <= STACK {
        &mut stack[..]
    } else {
        heap.resize(room, 0);
        &mut heap[..]
    };
    let n = URL_SAFE_NO_PAD
        .decode_slice(b64, buf)
        .map_err(|_| Reason::Base64(part))?;
    Ok(f(&buf[..n]))
}

impl Header {
    fn from_json(json: &[u8]) -> Result<Self, serde_json::Error> {
        let mut de = serde_json::Deserializer::from_slice(json);
        let header = de.deserialize_map(HeaderVisitor)?;
        de.end()?;
        Ok(header)
    }
}

/// Header members that `jsonwebtoken` names, each a string or null, at most once.
const NAMED: [&str; 11] = [
    "kid", "typ", "cty", "jku", "x5u", "x5t", "x5t#S256", "url", "nonce", "enc", "zip",
];

struct HeaderVisitor;

impl<'de> Visitor<'de> for HeaderVisitor {
    type Value = Header;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JOSE header object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Header, A::Error> {
        let mut alg = None;
        let mut kid = None;
        let mut seen = 0u16;
        while let Some(Text(key)) = map.next_key()? {
            if key == "alg" {
                if alg.is_some() {
                    return Err(de::Error::duplicate_field("alg"));
                }
                let Text(value) = map.next_value()?;
                alg = Some(value == "HS256");
            } else if let Some(i) = NAMED.iter().position(|n| *n == key) {
                if seen & (1 << i) != 0 {
                    return Err(de::Error::duplicate_field(NAMED[i]));
                }
                seen |= 1 << i;
                if i == 0 {
                    kid = map.next_value::<Option<String>>()?;
                } else {
                    map.next_value::<Option<AnyText>>()?;
                }
            } else if matches!(&*key, "crit" | "jwk" | "x5c") {
                return Err(de::Error::custom(format_args!(
                    "header member `{key}` is not accepted"
                )));
            } else {
                map.next_value::<AnyText>()?;
            }
        }
        let hs256 = alg.ok_or_else(|| de::Error::missing_field("alg"))?;
        Ok(Header { hs256, kid })
    }
}

/// A JSON string, borrowed from the input unless it has escapes.
pub(super) struct Text<'a>(pub(super) Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for Text<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Text<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Text(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Text(Cow::Owned(v.to_owned())))
            }
        }
        d.deserialize_str(V)
    }
}

/// Any JSON string, kept nowhere.
struct AnyText;

impl<'de> Deserialize<'de> for AnyText {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = AnyText;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<AnyText, E> {
                Ok(AnyText)
            }
        }
        d.deserialize_str(V)
    }
}
