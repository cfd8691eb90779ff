//! Who may claim and how often: the identity source and the per-client limit. Secure by
//! default: with no identity source every claim is refused (401), and a gateway listening
//! beyond loopback without one refuses to start.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Args;
use hyper::header::HeaderName;
use ipnet::IpNet;

use super::{bad, ConfigError};

/// Most slots of the per-client limiter table (8 bytes each).
pub const MAX_CLIENT_SLOTS: usize = 1 << 26;

#[derive(Debug, Clone, Args)]
pub struct AccessConfig {
    /// File holding the HS256 secret (at least 32 bytes) that signs bearer tokens.
    #[arg(long, env = "FLASHGATE_TOKEN_SECRET_FILE")]
    pub token_secret_file: Option<PathBuf>,
    /// PEM public key (Ed25519 for EdDSA, or RSA for RS256) that signs bearer tokens.
    #[arg(long, env = "FLASHGATE_TOKEN_PUBLIC_KEY")]
    pub token_public_key: Option<PathBuf>,
    /// JWKS file of token keys (HS256, EdDSA, RS256), picked by the token's `kid`.
    #[arg(long, env = "FLASHGATE_TOKEN_JWKS")]
    pub token_jwks: Option<PathBuf>,
    /// The `aud` every token must carry.
    #[arg(long, env = "FLASHGATE_TOKEN_AUDIENCE", default_value = "flashgate")]
    pub token_audience: String,
    /// The `iss` every token must carry (not checked when unset).
    #[arg(long, env = "FLASHGATE_TOKEN_ISSUER")]
    pub token_issuer: Option<String>,
    /// Header carrying the user, set by an auth layer in front; believed only from
    /// `--trusted-proxies`, refused (401) from anyone else.
    #[arg(long, env = "FLASHGATE_USER_HEADER")]
    pub user_header: Option<String>,
    /// Peers (CIDRs, comma-separated) whose `--user-header` and `X-Forwarded-For` are
    /// believed, e.g. the load balancer's addresses.
    #[arg(long, env = "FLASHGATE_TRUSTED_PROXIES", value_delimiter = ',')]
    pub trusted_proxies: Vec<IpNet>,
    /// Take the user from the body's `user` field when nothing verified it. Anyone can
    /// then claim as anyone: for demos and tests only.
    #[arg(long, env = "FLASHGATE_INSECURE_BODY_USER")]
    pub insecure_body_user: bool,
    /// Requests per second per client address (IPv4 address, IPv6 /64) on the claim and
    /// SKU routes; 0 = no limit. Past it: 429 with Retry-After.
    #[arg(long, env = "FLASHGATE_CLIENT_RATE", default_value_t = 50)]
    pub client_rate: u32,
    /// Burst allowance of the per-client limit.
    #[arg(long, env = "FLASHGATE_CLIENT_BURST", default_value_t = 100)]
    pub client_burst: u32,
    /// File holding the secret (at least 16 bytes) that signs queue tokens and keys the
    /// pre-queue's shuffle; every gateway of a deployment needs the same one. Without it,
    /// a SKU in campaign mode `queue` answers 503.
    #[arg(long, env = "FLASHGATE_QUEUE_SECRET_FILE")]
    pub queue_secret_file: Option<PathBuf>,
    /// Slots of the per-client limiter (rounded up to a power of two, 8 bytes each). Its
    /// memory is fixed whatever the number of clients; clients that hash to one slot share
    /// a budget, so keep it well above the number of clients active at once.
    #[arg(long, env = "FLASHGATE_CLIENT_SLOTS", default_value_t = 1 << 20)]
    pub client_slots: usize,
}

impl AccessConfig {
    /// True when some identity source is configured.
    pub fn has_identity_source(&self) -> bool {
        self.token_secret_file.is_some()
            || self.token_public_key.is_some()
            || self.token_jwks.is_some()
            || self.user_header.is_some()
            || self.insecure_body_user
    }

    /// What the `identity` crate loads its sources from.
    pub(crate) fn identity_sources(&self) -> identity::Sources<'_> {
        identity::Sources {
            token_secret_file: self.token_secret_file.as_deref(),
            token_public_key: self.token_public_key.as_deref(),
            token_jwks: self.token_jwks.as_deref(),
            token_audience: &self.token_audience,
            token_issuer: self.token_issuer.as_deref(),
            user_header: self.user_header.as_deref(),
            trusted_proxies: &self.trusted_proxies,
            insecure_body_user: self.insecure_body_user,
        }
    }

    pub(super) fn validate(&self, listen: SocketAddr) -> Result<(), ConfigError> {
        let sources = [
            self.token_secret_file.is_some(),
            self.token_public_key.is_some(),
            self.token_jwks.is_some(),
        ];
        if sources.iter().filter(|s| **s).count() > 1 {
            return Err(bad(
                "--token-secret-file",
                "give one of --token-secret-file, --token-public-key, --token-jwks",
            ));
        }
        if self.token_audience.is_empty() {
            return Err(bad("--token-audience", "must not be empty"));
        }
        if let Some(h) = &self.user_header {
            HeaderName::try_from(h.as_str())
                .map_err(|_| bad("--user-header", format!("{h:?} is not a header name")))?;
            if self.trusted_proxies.is_empty() {
                return Err(bad(
                    "--user-header",
                    "needs --trusted-proxies (the header is believed from those peers only)",
                ));
            }
        }
        if !self.has_identity_source() && !listen.ip().is_loopback() {
            return Err(bad(
                "--listen",
                format!(
                    "{listen} is not loopback and no identity source is set \
                     (--token-secret-file, --token-public-key, --token-jwks, \
                     --user-header with --trusted-proxies, or --insecure-body-user)"
                ),
            ));
        }
        if self.client_rate > 0 && self.client_burst == 0 {
            return Err(bad(
                "--client-burst",
                "must be at least 1 when --client-rate is set",
            ));
        }
        if self.client_slots == 0 || self.client_slots > MAX_CLIENT_SLOTS {
            return Err(bad(
                "--client-slots",
                format!("{} is outside 1..={MAX_CLIENT_SLOTS}", self.client_slots),
            ));
        }
        Ok(())
    }
}
