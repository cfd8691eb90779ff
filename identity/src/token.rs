//! Bearer tokens: a JWT signed with HS256 (shared secret file, or an `oct` key of a JWKS),
//! EdDSA or RS256 (a PEM public key file, or a JWKS file whose keys are picked by `kid`).
//! `exp`, `aud` and `sub` are required (`iss` too when configured), `nbf` is checked when
//! present, and the token's `alg` must be the key's (no algorithm confusion). The subject
//! is the user.
//!
//! Layout: `compact.rs` cuts a token into its three parts and reads the header (every
//! token, so the key can be picked by `kid`); `hs256.rs` verifies HS256 tokens itself, with
//! the HMAC keyed once at load, the signature checked before the claims are read, and the
//! claims (`claims.rs`) parsed once; EdDSA and RS256 go through `jsonwebtoken`, whose
//! checks `claims.rs` matches (`differential.rs` holds the two to the same answers).
//!
//! Cost, counted with callgrind (`verify_instructions` in `differential.rs`, release
//! build): one HS256 token of the bench's shape (`{"typ":"JWT","alg":"HS256"}`, a 21-byte
//! `sub`, `aud`, `exp`) takes 37.8k instructions with `jsonwebtoken` and 21.1k here. Of
//! those, SHA-256 compression is 20.5k vs 13.7k (six blocks vs four: the key's two pad
//! blocks are compressed once at load), in software because valgrind hides SHA-NI
//! (natively a few hundred instructions); the rest, base64, JSON and copies, is 17.3k vs
//! 7.5k.

mod claims;
mod compact;
#[cfg(test)]
mod differential;
mod hs256;
#[cfg(test)]
mod review;

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use jsonwebtoken::jwk::{AlgorithmParameters, JwkSet, KeyAlgorithm};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;

use claims::Rules;
use compact::Compact;
use hs256::Hs256;

/// Shortest HS256 secret accepted: the hash's own size (RFC 7518 §3.2).
pub(crate) const MIN_SECRET_BYTES: usize = 32;
/// Longest token read, in bytes: checked before the token is cut, decoded or hashed, so a
/// client without a key cannot make each request cost a pass over hyper's whole header
/// buffer (about 400 KiB on HTTP/1). The subject is at most 64 bytes; 8 KiB leaves room
/// for many more claims, and is the common proxy limit for one header line.
pub(crate) const MAX_TOKEN_BYTES: usize = 8192;
/// Clock skew allowed on `exp` / `nbf`, seconds.
const LEEWAY_S: u64 = 30;

/// Where the verification keys come from (exactly one).
#[derive(Debug, Clone)]
pub(crate) enum KeyFile<'a> {
    Secret(&'a Path),
    PublicKey(&'a Path),
    Jwks(&'a Path),
}

/// One key and the only algorithm accepted with it.
struct Key {
    kid: Option<String>,
    check: Check,
}

enum Check {
    /// Ours (`hs256.rs`).
    Hs256(Hs256),
    /// `jsonwebtoken`'s: EdDSA, RS256 (and a JWK whose `alg` and key type disagree, which
    /// refuses every token as it always did).
    Jwt {
        key: DecodingKey,
        validation: Validation,
    },
}

pub(crate) struct TokenVerifier {
    keys: Vec<Key>,
    rules: Rules,
}

/// Why a token was refused (the client's answer says this, nothing more).
#[derive(Debug, thiserror::Error)]
pub(crate) enum TokenError {
    #[error("the token has no usable key id")]
    UnknownKey,
    #[error("{0}")]
    Invalid(#[from] jsonwebtoken::errors::Error),
    #[error("{0}")]
    Refused(#[from] Reason),
}

/// Why the gateway's own checks refused a token.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Reason {
    #[error("not three dot-separated parts")]
    Malformed,
    #[error("the {0} is not unpadded base64url")]
    Base64(&'static str),
    #[error("header: {0}")]
    Header(serde_json::Error),
    #[error("the token's alg is not its key's")]
    Algorithm,
    #[error("bad signature")]
    Signature,
    #[error("the claims are not a JSON object")]
    ClaimsNotObject,
    #[error("claims: {0}")]
    Claims(serde_json::Error),
    #[error("missing required claim: {0}")]
    Missing(&'static str),
    #[error("expired")]
    Expired,
    #[error("not valid yet (nbf)")]
    NotYetValid,
    #[error("wrong issuer")]
    Issuer,
    #[error("wrong audience")]
    Audience,
    #[error("empty subject")]
    EmptySubject,
    #[error("longer than {MAX_TOKEN_BYTES} bytes")]
    TooLong,
    #[error("the gateway's clock is before 1970")]
    Clock,
}

#[derive(Deserialize)]
struct Claims {
    sub: String,
}

/// `jsonwebtoken`'s checks for `alg`, the same as `claims.rs` applies to HS256.
fn validation(alg: Algorithm, audience: &str, issuer: Option<&str>) -> Validation {
    let mut v = Validation::new(alg);
    v.leeway = LEEWAY_S;
    v.validate_nbf = true;
    v.set_audience(&[audience]);
    v.set_required_spec_claims(&["exp", "aud", "sub"]);
    if let Some(iss) = issuer {
        // A configured issuer must be present, not only right when present.
        v.set_required_spec_claims(&["exp", "aud", "sub", "iss"]);
        v.set_issuer(&[iss]);
    }
    v
}

fn read(p: &Path) -> Result<Vec<u8>, String> {
    std::fs::read(p).map_err(|e| format!("{}: {e}", p.display()))
}

/// The HS256 secret of a secret file (trimmed, at least [`MIN_SECRET_BYTES`]).
fn secret_file(p: &Path) -> Result<Hs256, String> {
    let raw = read(p)?;
    let secret = raw.trim_ascii();
    if secret.len() < MIN_SECRET_BYTES {
        return Err(format!(
            "{}: an HS256 secret needs at least {MIN_SECRET_BYTES} bytes",
            p.display()
        ));
    }
    Hs256::new(secret).map_err(|e| format!("{}: {e}", p.display()))
}

/// The key of a PEM public key file, Ed25519 or RSA, and the algorithm it takes.
fn public_key_file(p: &Path) -> Result<(DecodingKey, Algorithm), String> {
    let pem = read(p)?;
    DecodingKey::from_ed_pem(&pem)
        .map(|k| (k, Algorithm::EdDSA))
        .or_else(|_| DecodingKey::from_rsa_pem(&pem).map(|k| (k, Algorithm::RS256)))
        .map_err(|_| format!("{}: not an Ed25519 or RSA public key in PEM", p.display()))
}

/// Every key of a JWKS file, by `kid` (at least one); `jwt` makes the check of a key
/// `jsonwebtoken` verifies.
fn jwks_file(p: &Path, jwt: impl Fn(DecodingKey, Algorithm) -> Check) -> Result<Vec<Key>, String> {
    let set: JwkSet = serde_json::from_slice(&read(p)?)
        .map_err(|e| format!("{}: not a JWKS: {e}", p.display()))?;
    let mut keys = Vec::new();
    for jwk in &set.keys {
        let name = &jwk.common.key_id;
        let alg = jwk_algorithm(jwk)
            .ok_or_else(|| format!("{}: key {name:?} is not HS256, EdDSA or RS256", p.display()))?;
        let key = DecodingKey::from_jwk(jwk)
            .map_err(|e| format!("{}: key {name:?}: {e}", p.display()))?;
        // The secret file's rule holds for an `oct` key too (an empty `k`
        // would let anyone sign).
        if key
            .try_get_hmac_secret()
            .is_ok_and(|k| k.len() < MIN_SECRET_BYTES)
        {
            return Err(format!(
                "{}: key {name:?}: an HS256 secret needs at least \
                 {MIN_SECRET_BYTES} bytes",
                p.display()
            ));
        }
        let check = match (alg, key.try_get_hmac_secret()) {
            (Algorithm::HS256, Ok(secret)) => Check::Hs256(
                Hs256::new(secret).map_err(|e| format!("{}: key {name:?}: {e}", p.display()))?,
            ),
            _ => jwt(key, alg),
        };
        keys.push(Key {
            kid: name.clone(),
            check,
        });
    }
    if keys.is_empty() {
        return Err(format!("{}: the JWKS has no keys", p.display()));
    }
    Ok(keys)
}

/// Seconds since the epoch on `clock`; a clock before 1970 is an error, not 0 (which
/// would pass every `exp`).
fn seconds(clock: SystemTime) -> Result<u64, Reason> {
    clock
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .map_err(|_| Reason::Clock)
}

impl TokenVerifier {
    /// Reads the key file(s). The error is one line naming the file and what is wrong.
    pub(crate) fn load(
        source: KeyFile<'_>,
        audience: &str,
        issuer: Option<&str>,
    ) -> Result<Self, String> {
        let jwt = |key, alg| Check::Jwt {
            key,
            validation: validation(alg, audience, issuer),
        };
        let keys = match source {
            KeyFile::Secret(p) => vec![Key {
                kid: None,
                check: Check::Hs256(secret_file(p)?),
            }],
            KeyFile::PublicKey(p) => {
                let (key, alg) = public_key_file(p)?;
                vec![Key {
                    kid: None,
                    check: jwt(key, alg),
                }]
            }
            KeyFile::Jwks(p) => jwks_file(p, jwt)?,
        };
        let rules = Rules {
            audience: audience.to_owned(),
            issuer: issuer.map(str::to_owned),
        };
        Ok(Self { keys, rules })
    }

    /// The verified subject of `token` (the part after `Bearer `).
    pub(crate) fn verify(&self, token: &str) -> Result<String, TokenError> {
        self.verify_at_clock(token, SystemTime::now())
    }

    /// [`verify`](Self::verify) with the clock reading `clock`: one before the epoch refuses
    /// every token (for every algorithm: jsonwebtoken would panic on it).
    fn verify_at_clock(&self, token: &str, clock: SystemTime) -> Result<String, TokenError> {
        self.verify_at(token, seconds(clock)?)
    }

    /// [`verify`](Self::verify) at `now` (seconds since the epoch) for our own checks;
    /// `jsonwebtoken` reads its clock itself.
    fn verify_at(&self, token: &str, now: u64) -> Result<String, TokenError> {
        if token.len() > MAX_TOKEN_BYTES {
            return Err(Reason::TooLong.into());
        }
        let parts = Compact::parse(token)?;
        let key = match &self.keys[..] {
            [only] if only.kid.is_none() => only,
            keys => match &parts.header.kid {
                Some(kid) => keys.iter().find(|k| k.kid.as_ref() == Some(kid)),
                None if keys.len() == 1 => keys.first(),
                None => None,
            }
            .ok_or(TokenError::UnknownKey)?,
        };
        let sub = match &key.check {
            Check::Hs256(hs) => hs.verify(&parts, &self.rules, now)?,
            Check::Jwt { key, validation } => {
                jsonwebtoken::decode::<Claims>(token, key, validation)?
                    .claims
                    .sub
            }
        };
        if sub.is_empty() {
            return Err(Reason::EmptySubject.into());
        }
        Ok(sub)
    }
}

/// The algorithm a JWK is for: its `alg` when it has one, else the one its type implies.
fn jwk_algorithm(jwk: &jsonwebtoken::jwk::Jwk) -> Option<Algorithm> {
    match jwk.common.key_algorithm {
        Some(KeyAlgorithm::HS256) => Some(Algorithm::HS256),
        Some(KeyAlgorithm::EdDSA) => Some(Algorithm::EdDSA),
        Some(KeyAlgorithm::RS256) => Some(Algorithm::RS256),
        Some(_) => None,
        None => match &jwk.algorithm {
            AlgorithmParameters::OctetKey(_) => Some(Algorithm::HS256),
            AlgorithmParameters::OctetKeyPair(_) => Some(Algorithm::EdDSA),
            AlgorithmParameters::RSA(_) => Some(Algorithm::RS256),
            AlgorithmParameters::EllipticCurve(_) => None,
        },
    }
}

#[cfg(test)]
mod tests;
