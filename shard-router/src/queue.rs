//! The waiting room (campaign mode `queue`): the signed queue token a gateway hands each
//! user, and where a token stands in the queue. The scripts are `lua/queue_join.lua` and
//! `lua/queue_admit.lua`; the gateway's side is `gateway/src/api/claim/queue.rs`, the
//! admission step `campaign-ops/src/queue.rs`.
//!
//! Users who come before the start are shuffled: each one's place is a keyed hash of the
//! user (HMAC-SHA256 under the gateways' queue secret), scaled to the pre-queue's length,
//! which Redis fixes at the start. So arriving first, or sending more requests, earns
//! nothing before the start. From the start on, places are handed out in arrival order,
//! one per user. A token binds the place to the verified user and the SKU and is signed,
//! so it is checked in memory: a waiting client's refresh costs no Redis call.

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// Bits of the shuffle key (as the draw's priority).
const SHUFFLE_BITS: u32 = 52;
/// Bytes of the tag kept (128 bits).
const TAG_LEN: usize = 16;
/// The bounds of the `refresh_ms` a waiting client is told (a quarter of its estimated
/// wait between them); the admission step gives an admitted position the longest of them
/// to come back before it counts as one that did not claim.
pub const MIN_REFRESH_MS: u64 = 1_000;
pub const MAX_REFRESH_MS: u64 = 10_000;

/// Where a user joined.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// Before the start: the shuffle key, in `0..2^52`.
    Pre(u64),
    /// From the start: the n-th user to join after it (1-based).
    Ticket(u64),
}

/// A signed place in a SKU's queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueToken {
    pub sku: u64,
    pub user: String,
    pub place: Place,
    pub issued_ms: i64,
}

/// The gateways' shared queue secret (`--queue-secret-file`).
#[derive(Clone)]
pub struct QueueKey(Hmac<Sha256>);

impl std::fmt::Debug for QueueKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("QueueKey(..)")
    }
}

impl QueueKey {
    /// At least 16 bytes: the tokens' forgery resistance rests on it.
    pub fn new(secret: &[u8]) -> Result<Self, String> {
        if secret.len() < 16 {
            return Err("the queue secret must be at least 16 bytes".into());
        }
        Ok(Self(
            Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes any key length"),
        ))
    }

    fn mac(&self, parts: &[&[u8]]) -> [u8; 32] {
        let mut m = self.0.clone();
        for p in parts {
            m.update(p);
        }
        m.finalize().into_bytes().into()
    }

    /// A pre-queue user's shuffle key (domain-separated from the token tags).
    pub fn shuffle(&self, sku: u64, user: &str) -> u64 {
        let out = self.mac(&[
            b"shuffle:",
            sku.to_string().as_bytes(),
            b":",
            user.as_bytes(),
        ]);
        u64::from_be_bytes(out[..8].try_into().expect("32 bytes")) >> (64 - SHUFFLE_BITS)
    }

    /// The token's text: `v1.<sku>.<P|T><n>.<issued ms>.<user hex>.<tag hex>`.
    pub fn sign(&self, t: &QueueToken) -> String {
        let payload = payload(t);
        let tag = self.mac(&[b"token:", payload.as_bytes()]);
        format!("{payload}.{}", hex::encode(&tag[..TAG_LEN]))
    }

    /// The token in `text` when its tag is this key's (compared in constant time).
    pub fn verify(&self, text: &str) -> Option<QueueToken> {
        let (payload, tag) = text.rsplit_once('.')?;
        let tag = hex::decode(tag).ok()?;
        let mut m = self.0.clone();
        m.update(b"token:");
        m.update(payload.as_bytes());
        m.verify_truncated_left(&tag).ok()?;
        if tag.len() != TAG_LEN {
            return None;
        }
        let mut it = payload.split('.');
        if it.next()? != "v1" {
            return None;
        }
        let sku = it.next()?.parse().ok()?;
        let place = it.next()?;
        let n: u64 = place.get(1..)?.parse().ok()?;
        let place = match place.as_bytes().first()? {
            b'P' => Place::Pre(n),
            b'T' => Place::Ticket(n),
            _ => return None,
        };
        let issued_ms = it.next()?.parse().ok()?;
        let user = String::from_utf8(hex::decode(it.next()?).ok()?).ok()?;
        if it.next().is_some() {
            return None;
        }
        Some(QueueToken {
            sku,
            user,
            place,
            issued_ms,
        })
    }
}

fn payload(t: &QueueToken) -> String {
    let (kind, n) = match t.place {
        Place::Pre(p) => ('P', p),
        Place::Ticket(n) => ('T', n),
    };
    format!(
        "v1.{}.{kind}{n}.{}.{}",
        t.sku,
        t.issued_ms,
        hex::encode(t.user.as_bytes())
    )
}

/// A queue as Redis holds it (`queue_admit.lua`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QueueState {
    /// The pre-queue's length, fixed at the start (`None` before).
    pub pre: Option<u64>,
    /// Every position at or below this may claim.
    pub admitted: u64,
    /// Tickets handed out since the start.
    pub next: u64,
    /// Positions admitted per second lately (the admission step's estimate).
    pub rate: u64,
}

impl QueueState {
    /// A place's position in the whole queue (1-based); `None` for a pre-queue place
    /// while the pre-queue's length is not fixed yet.
    pub fn position(&self, place: Place) -> Option<u64> {
        let pre = self.pre?;
        Some(match place {
            // The shuffle key scaled to 1..=pre (two users may share a position).
            Place::Pre(k) => ((u128::from(k) * u128::from(pre)) >> SHUFFLE_BITS) as u64 + 1,
            Place::Ticket(n) => pre + n,
        })
    }

    /// Positions still ahead of `place` (0: admitted).
    pub fn ahead(&self, place: Place) -> Option<u64> {
        self.position(place)
            .map(|p| p.saturating_sub(self.admitted))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> QueueKey {
        QueueKey::new(b"0123456789abcdef").unwrap()
    }

    #[test]
    fn a_token_round_trips_and_any_change_breaks_it() {
        let t = QueueToken {
            sku: 9,
            user: "al.ice|é".into(),
            place: Place::Ticket(42),
            issued_ms: 1_700_000_000_000,
        };
        let text = key().sign(&t);
        assert_eq!(key().verify(&text), Some(t.clone()));
        for (i, _) in text.char_indices() {
            let mut bad: Vec<u8> = text.clone().into_bytes();
            bad[i] ^= 1;
            if let Ok(bad) = String::from_utf8(bad) {
                assert_eq!(key().verify(&bad), None, "byte {i} changed");
            }
        }
        let other = QueueKey::new(b"fedcba9876543210").unwrap();
        assert_eq!(other.verify(&text), None);
        assert!(QueueKey::new(b"short").is_err());
    }

    #[test]
    fn pre_queue_places_spread_over_the_pre_queue() {
        let k = key();
        let s = QueueState {
            pre: Some(1000),
            admitted: 0,
            next: 0,
            rate: 0,
        };
        let mut seen = vec![0u32; 1000];
        for i in 0..10_000 {
            let p = s
                .position(Place::Pre(k.shuffle(7, &format!("u{i}"))))
                .unwrap();
            assert!((1..=1000).contains(&p));
            seen[p as usize - 1] += 1;
        }
        // Uniform: every tenth of the queue holds about a tenth of the users.
        for tenth in seen.chunks(100) {
            let n: u32 = tenth.iter().sum();
            assert!((800..1200).contains(&n), "{n}");
        }
        assert_eq!(s.position(Place::Ticket(3)), Some(1003));
        assert_eq!(QueueState::default().position(Place::Ticket(1)), None);
    }
}
