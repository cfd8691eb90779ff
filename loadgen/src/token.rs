//! Bearer tokens for the load: the gateways verify a signed token per claim (HS256 with
//! the secret in `--token-secret-file`), so the load generator mints one per user, the
//! way a login service would hand them out before the sale.
//!
//! Minting costs a few µs (JSON, base64, HMAC), which would show in the load generator's
//! CPU per answer; each user's token is minted once and kept, up to [`CACHE_USERS`] users.
//! Past that (the multi-million-user capacity runs) a token is minted per request: a
//! cache that size would take gigabytes.

use std::path::Path;
use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Context;
use hyper::header::HeaderValue;
use jsonwebtoken::{encode, EncodingKey, Header};

/// Users whose tokens are kept after the first mint.
pub const CACHE_USERS: u64 = 1_000_000;
/// The audience gateways expect by default (`--token-audience`).
pub const AUDIENCE: &str = "flashgate";
/// Token lifetime: longer than any run.
const TTL_S: u64 = 6 * 3600;

pub struct Tokens {
    key: EncodingKey,
    exp: u64,
    cache: Vec<OnceLock<HeaderValue>>,
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokens")
            .field("cached", &self.cache.len())
            .finish()
    }
}

impl Tokens {
    /// Tokens signed with the secret in `path` for a run with `users` users.
    pub fn load(path: &Path, users: u64) -> anyhow::Result<Self> {
        let raw = std::fs::read(path)
            .with_context(|| format!("--token-secret-file {}", path.display()))?;
        Ok(Self::new(raw.trim_ascii(), users))
    }

    pub fn new(secret: &[u8], users: u64) -> Self {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        Self {
            key: EncodingKey::from_secret(secret),
            exp: now + TTL_S,
            cache: (0..users.min(CACHE_USERS))
                .map(|_| OnceLock::new())
                .collect(),
        }
    }

    /// The `Authorization` value for user number `index`, whose name `name` gives (only
    /// called when a token is minted).
    pub fn authorization(&self, index: u64, name: impl FnOnce() -> String) -> HeaderValue {
        match usize::try_from(index).ok().and_then(|i| self.cache.get(i)) {
            Some(slot) => slot.get_or_init(|| self.mint(&name())).clone(),
            None => self.mint(&name()),
        }
    }

    fn mint(&self, name: &str) -> HeaderValue {
        #[derive(serde::Serialize)]
        struct Claims<'a> {
            sub: &'a str,
            aud: &'a str,
            exp: u64,
        }
        let claims = Claims {
            sub: name,
            aud: AUDIENCE,
            exp: self.exp,
        };
        // HS256 over a small struct cannot fail; an empty value would be refused (401)
        // and counted, never panic the load generator.
        let token = encode(&Header::default(), &claims, &self.key).unwrap_or_default();
        HeaderValue::try_from(format!("Bearer {token}"))
            .unwrap_or_else(|_| HeaderValue::from_static(""))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_kept_per_user_and_minted_past_the_cache() {
        let t = Tokens::new(b"0123456789abcdef0123456789abcdef", 2);
        let name = |n: &'static str| move || n.to_owned();
        let a = t.authorization(0, name("u0"));
        assert_eq!(
            a,
            t.authorization(0, || unreachable!("kept, not minted again"))
        );
        assert!(a.to_str().unwrap().starts_with("Bearer ey"));
        assert_ne!(a, t.authorization(1, name("u1")));
        assert!(t
            .authorization(5, name("u5"))
            .to_str()
            .unwrap()
            .starts_with("Bearer ey"));
    }
}
