//! Bearer tokens: a JWT signed with HS256 (shared secret file), EdDSA or RS256 (a PEM
//! public key file, or a JWKS file whose keys are picked by `kid`). Verified with
//! `jsonwebtoken`; `exp`, `aud` and `sub` are required (`iss` too when configured), `nbf`
//! is checked when present, and the token's `alg` must be the key's (no algorithm
//! confusion). The subject is the user.

use std::path::Path;

use jsonwebtoken::jwk::{AlgorithmParameters, JwkSet, KeyAlgorithm};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;

/// Shortest HS256 secret accepted: the hash's own size (RFC 7518 §3.2).
pub(crate) const MIN_SECRET_BYTES: usize = 32;
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
    key: DecodingKey,
    validation: Validation,
}

pub(crate) struct TokenVerifier {
    keys: Vec<Key>,
}

/// Why a token was refused (the client's answer says this, nothing more).
#[derive(Debug, thiserror::Error)]
pub(crate) enum TokenError {
    #[error("the token has no usable key id")]
    UnknownKey,
    #[error("{0}")]
    Invalid(#[from] jsonwebtoken::errors::Error),
}

#[derive(Deserialize)]
struct Claims {
    sub: String,
}

impl TokenVerifier {
    /// Reads the key file(s). The error is one line naming the file and what is wrong.
    pub(crate) fn load(
        source: KeyFile<'_>,
        audience: &str,
        issuer: Option<&str>,
    ) -> Result<Self, String> {
        let read = |p: &Path| std::fs::read(p).map_err(|e| format!("{}: {e}", p.display()));
        let validation = |alg| {
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
        };
        let keys = match source {
            KeyFile::Secret(p) => {
                let raw = read(p)?;
                let secret = raw.trim_ascii();
                if secret.len() < MIN_SECRET_BYTES {
                    return Err(format!(
                        "{}: an HS256 secret needs at least {MIN_SECRET_BYTES} bytes",
                        p.display()
                    ));
                }
                vec![Key {
                    kid: None,
                    key: DecodingKey::from_secret(secret),
                    validation: validation(Algorithm::HS256),
                }]
            }
            KeyFile::PublicKey(p) => {
                let pem = read(p)?;
                let (key, alg) = DecodingKey::from_ed_pem(&pem)
                    .map(|k| (k, Algorithm::EdDSA))
                    .or_else(|_| DecodingKey::from_rsa_pem(&pem).map(|k| (k, Algorithm::RS256)))
                    .map_err(|_| {
                        format!("{}: not an Ed25519 or RSA public key in PEM", p.display())
                    })?;
                vec![Key {
                    kid: None,
                    key,
                    validation: validation(alg),
                }]
            }
            KeyFile::Jwks(p) => {
                let set: JwkSet = serde_json::from_slice(&read(p)?)
                    .map_err(|e| format!("{}: not a JWKS: {e}", p.display()))?;
                let mut keys = Vec::new();
                for jwk in &set.keys {
                    let alg = jwk_algorithm(jwk).ok_or_else(|| {
                        format!(
                            "{}: key {:?} is not HS256, EdDSA or RS256",
                            p.display(),
                            jwk.common.key_id
                        )
                    })?;
                    let key = DecodingKey::from_jwk(jwk).map_err(|e| {
                        format!("{}: key {:?}: {e}", p.display(), jwk.common.key_id)
                    })?;
                    keys.push(Key {
                        kid: jwk.common.key_id.clone(),
                        key,
                        validation: validation(alg),
                    });
                }
                if keys.is_empty() {
                    return Err(format!("{}: the JWKS has no keys", p.display()));
                }
                keys
            }
        };
        Ok(Self { keys })
    }

    /// The verified subject of `token` (the part after `Bearer `).
    pub(crate) fn verify(&self, token: &str) -> Result<String, TokenError> {
        let key = match &self.keys[..] {
            [only] if only.kid.is_none() => only,
            keys => {
                let kid = jsonwebtoken::decode_header(token)?.kid;
                match kid {
                    Some(kid) => keys.iter().find(|k| k.kid.as_deref() == Some(&kid)),
                    None if keys.len() == 1 => keys.first(),
                    None => None,
                }
                .ok_or(TokenError::UnknownKey)?
            }
        };
        let data = jsonwebtoken::decode::<Claims>(token, &key.key, &key.validation)?;
        Ok(data.claims.sub)
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
