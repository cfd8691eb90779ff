//! flashgate's verified identity, for the gateway: who is claiming and from where. The
//! crate owns the bearer tokens (HS256 verified here, EdDSA / RS256 / JWKS through
//! `jsonwebtoken`, held to the same answers by differential tests), the trusted user header,
//! the opt-in body user, and the client address behind trusted proxies. It knows nothing of
//! the gateway: [`Identity::load`] takes its settings as [`Sources`] and reports a bad one
//! as a [`LoadError`], and [`Identity::resolve`] refuses with a [`Refusal`] that the gateway
//! turns into its answer.
//!
//! The per-user limit keys on the user resolved here, so it must be one the gateway
//! verified:
//! - a bearer token (`token.rs`), whose subject is the user;
//! - or a header set by an auth layer, accepted only when the peer is a trusted proxy;
//! - or, only with `--insecure-body-user`, the body's `user` field.
//!
//! The client address, for per-client limits, is the socket peer, or the last address in
//! `X-Forwarded-For` that a trusted proxy did not add, when the peer is a trusted proxy.

mod token;

use std::net::IpAddr;
use std::path::Path;

use hyper::header::{HeaderName, AUTHORIZATION};
use hyper::HeaderMap;
use ipnet::IpNet;

pub(crate) use token::TokenVerifier;
use token::{KeyFile, TokenError};

/// The user of a request, as far as headers tell.
#[derive(Debug, PartialEq, Eq)]
pub enum Who {
    /// Verified (token or trusted header); a body `user` must match it.
    Verified(String),
    /// Nothing verified, and the operator allowed the body's `user` field.
    FromBody,
}

/// The settings [`Identity::load`] reads: the gateway's `--token-secret-file`,
/// `--token-public-key`, `--token-jwks` (at most one), `--token-audience`, `--token-issuer`,
/// `--user-header`, `--trusted-proxies` and `--insecure-body-user`.
#[derive(Debug, Clone, Copy)]
pub struct Sources<'a> {
    pub token_secret_file: Option<&'a Path>,
    pub token_public_key: Option<&'a Path>,
    pub token_jwks: Option<&'a Path>,
    pub token_audience: &'a str,
    pub token_issuer: Option<&'a str>,
    pub user_header: Option<&'a str>,
    pub trusted_proxies: &'a [IpNet],
    pub insecure_body_user: bool,
}

/// A setting [`Identity::load`] could not use: which one (its flag), and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadError {
    pub setting: &'static str,
    pub reason: String,
}

/// Why [`Identity::resolve`] refused a request; the gateway answers with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// 401, with `WWW-Authenticate: Bearer`: no verified user, or a token refused.
    Unauthorized(String),
    /// 400: the user header is there but not visible ASCII.
    BadRequest(String),
}

pub struct Identity {
    tokens: Option<TokenVerifier>,
    header: Option<HeaderName>,
    trusted: TrustedProxies,
    body_user: bool,
}

impl Identity {
    /// Loads the key files the configuration names.
    pub fn load(cfg: &Sources<'_>) -> Result<Self, LoadError> {
        let source = [
            (
                "--token-secret-file",
                cfg.token_secret_file.map(KeyFile::Secret),
            ),
            (
                "--token-public-key",
                cfg.token_public_key.map(KeyFile::PublicKey),
            ),
            ("--token-jwks", cfg.token_jwks.map(KeyFile::Jwks)),
        ]
        .into_iter()
        .find_map(|(setting, s)| Some((setting, s?)));
        let tokens = match source {
            Some((setting, s)) => Some(
                TokenVerifier::load(s, cfg.token_audience, cfg.token_issuer)
                    .map_err(|reason| LoadError { setting, reason })?,
            ),
            None => None,
        };
        let header = match cfg.user_header {
            Some(h) => Some(HeaderName::try_from(h).map_err(|_| LoadError {
                setting: "--user-header",
                reason: format!("{h:?} is not a header name"),
            })?),
            None => None,
        };
        Ok(Self {
            tokens,
            header,
            trusted: TrustedProxies(cfg.trusted_proxies.to_vec()),
            body_user: cfg.insecure_body_user,
        })
    }

    pub fn trusted(&self) -> &TrustedProxies {
        &self.trusted
    }

    /// The user of a request from `peer`, or the 401 that says what is missing.
    pub fn resolve(&self, headers: &HeaderMap, peer: IpAddr) -> Result<Who, Refusal> {
        if let Some(tokens) = &self.tokens {
            if let Some(v) = headers.get(AUTHORIZATION) {
                let token = v
                    .to_str()
                    .ok()
                    .and_then(|v| v.strip_prefix("Bearer "))
                    .ok_or_else(|| unauthorized("Authorization must be `Bearer <token>`"))?;
                return match tokens.verify(token.trim()) {
                    Ok(user) => Ok(Who::Verified(user)),
                    Err(TokenError::UnknownKey) => Err(unauthorized("token key id not known")),
                    Err(e) => Err(unauthorized(format!("invalid token: {e}"))),
                };
            }
        }
        if let Some(name) = &self.header {
            if let Some(v) = headers.get(name) {
                if !self.trusted.contains(peer) {
                    return Err(unauthorized(format!(
                        "header {name} is accepted only from a trusted proxy"
                    )));
                }
                return v
                    .to_str()
                    .map(|u| Who::Verified(u.to_owned()))
                    .map_err(|_| {
                        Refusal::BadRequest(format!("header {name} is not visible ASCII"))
                    });
            }
        }
        if self.body_user {
            return Ok(Who::FromBody);
        }
        Err(unauthorized(match (&self.tokens, &self.header) {
            (Some(_), _) => "missing Authorization: Bearer <token>".to_owned(),
            (None, Some(name)) => format!("missing header {name}"),
            (None, None) => "no identity source is configured on this gateway".to_owned(),
        }))
    }
}

fn unauthorized(message: impl Into<String>) -> Refusal {
    Refusal::Unauthorized(message.into())
}

/// `--trusted-proxies`: the peers whose identity and forwarding headers are believed.
#[derive(Debug, Clone, Default)]
pub struct TrustedProxies(Vec<IpNet>);

impl TrustedProxies {
    pub(crate) fn contains(&self, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        self.0.iter().any(|net| net.contains(&ip))
    }

    /// The client's address: the peer's, unless the peer is a trusted proxy, in which case
    /// the right-most `X-Forwarded-For` entry no trusted proxy added (entries further left
    /// were written by the client and prove nothing). An unreadable header from a trusted
    /// proxy leaves the peer's address.
    pub fn client_ip(&self, headers: &HeaderMap, peer: IpAddr) -> IpAddr {
        let peer = canonical(peer);
        if self.0.is_empty() || !self.contains(peer) {
            return peer;
        }
        let mut client = peer;
        for value in headers.get_all("x-forwarded-for").iter().rev() {
            let Ok(list) = value.to_str() else {
                return peer;
            };
            for hop in list.rsplit(',') {
                let Ok(ip) = hop.trim().parse::<IpAddr>() else {
                    return peer;
                };
                client = canonical(ip);
                if !self.contains(client) {
                    return client;
                }
            }
        }
        client
    }
}

/// IPv4 peers on a dual-stack socket arrive as `::ffff:a.b.c.d`.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proxies(list: &[&str]) -> TrustedProxies {
        TrustedProxies(list.iter().map(|s| s.parse().unwrap()).collect())
    }

    fn xff(values: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in values {
            h.append("x-forwarded-for", v.parse().unwrap());
        }
        h
    }

    #[test]
    fn client_address_is_believed_from_trusted_proxies_only() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let t = proxies(&["10.0.0.0/8", "127.0.0.1/32"]);
        // Untrusted peer: its header is ignored.
        assert_eq!(
            t.client_ip(&xff(&["1.2.3.4"]), ip("8.8.8.8")),
            ip("8.8.8.8")
        );
        // Trusted peer: the right-most untrusted hop; a spoofed left part is skipped.
        assert_eq!(
            t.client_ip(&xff(&["6.6.6.6, 1.2.3.4, 10.1.1.1"]), ip("127.0.0.1")),
            ip("1.2.3.4")
        );
        assert_eq!(
            t.client_ip(&xff(&["6.6.6.6", "1.2.3.4"]), ip("10.0.0.2")),
            ip("1.2.3.4")
        );
        assert_eq!(t.client_ip(&xff(&[]), ip("10.0.0.2")), ip("10.0.0.2"));
        assert_eq!(
            t.client_ip(&xff(&["garbage"]), ip("10.0.0.2")),
            ip("10.0.0.2")
        );
        assert_eq!(
            t.client_ip(&xff(&["10.2.2.2"]), ip("10.0.0.2")),
            ip("10.2.2.2")
        );
        assert_eq!(
            t.client_ip(&xff(&["1.2.3.4"]), ip("::ffff:127.0.0.1")),
            ip("1.2.3.4"),
            "mapped IPv4 peers are IPv4"
        );
        assert_eq!(
            proxies(&[]).client_ip(&xff(&["1.2.3.4"]), ip("10.0.0.2")),
            ip("10.0.0.2")
        );
    }
}
