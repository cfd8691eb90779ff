//! HS256 verified without `jsonwebtoken`: the HMAC is keyed once at load (the key's inner
//! and outer pad blocks compressed once, cloned per token), and a token is read in one
//! pass: `alg` exactly `HS256`, the tag compared in constant time over `header.payload`,
//! and only then the claims parsed, once.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::{DecodeSliceError, Engine};
use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::claims::Rules;
use super::compact::{self, Compact};
use super::Reason;

/// A shared secret, keyed.
#[derive(Clone)]
pub(super) struct Hs256 {
    mac: Hmac<Sha256>,
}

/// Bytes of an HS256 tag.
const TAG: usize = 32;

impl Hs256 {
    pub(super) fn new(secret: &[u8]) -> Result<Self, String> {
        Hmac::new_from_slice(secret)
            .map(|mac| Self { mac })
            .map_err(|e| format!("HMAC key: {e}"))
    }

    /// The subject of `token`, whose header is already parsed.
    pub(super) fn verify(
        &self,
        token: &Compact<'_>,
        rules: &Rules,
        now: u64,
    ) -> Result<String, Reason> {
        if !token.header.hs256 {
            return Err(Reason::Algorithm);
        }
        // One byte more than a tag, so that a longer signature decodes and then fails the
        // length check below rather than passing a truncated compare.
        let mut tag = [0u8; TAG + 1];
        let n = URL_SAFE_NO_PAD
            .decode_slice(token.signature, &mut tag)
            .map_err(|e| match e {
                DecodeSliceError::DecodeError(_) => Reason::Base64("signature"),
                DecodeSliceError::OutputSliceTooSmall => Reason::Signature,
            })?;
        let mut mac = self.mac.clone();
        mac.update(token.signed.as_bytes());
        // `verify_slice` refuses any length but 32 and compares in constant time.
        mac.verify_slice(&tag[..n]).map_err(|_| Reason::Signature)?;
        compact::decode(token.payload, "payload", |json| rules.check(json, now))?
    }
}
