//! The HS256 path (`hs256.rs`) against `jsonwebtoken::decode` with the `Validation` the
//! gateway used before it: for every token below both must accept with the same subject,
//! or both refuse, except the cases marked [`Stricter`](Expect::Stricter), which
//! jsonwebtoken takes and the gateway refuses on purpose: an empty `sub`, a header with
//! `crit`, `jwk` or `x5c` (even null), and `alg` written as the map `{"HS256":null}`
//! (serde's other form of an enum).

use std::time::{Instant, SystemTime};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use hmac::{Hmac, Mac};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sha2::Sha256;

use super::*;

const SECRET: &[u8] = b"0123456789abcdef0123456789abcdef-diff";
const AUD: &str = "flashgate";
const ISS: &str = "https://issuer.test";

#[derive(Clone, Copy, Debug, PartialEq)]
enum Expect {
    /// Both accept with the same subject, or both refuse.
    Same,
    /// jsonwebtoken accepts, the gateway refuses (by design).
    Stricter,
}
use Expect::{Same, Stricter};

fn b64(bytes: impl AsRef<[u8]>) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

fn sign_with(secret: &[u8], signed: &str) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).unwrap();
    mac.update(signed.as_bytes());
    b64(mac.finalize().into_bytes())
}

/// A token over raw header and claims bytes (so that anything can be put in them).
fn raw(header: impl AsRef<[u8]>, claims: impl AsRef<[u8]>) -> String {
    let signed = format!("{}.{}", b64(header), b64(claims));
    let sig = sign_with(SECRET, &signed);
    format!("{signed}.{sig}")
}

fn now() -> u64 {
    seconds(SystemTime::now()).unwrap()
}

const HS: &str = r#"{"typ":"JWT","alg":"HS256"}"#;

fn valid(now: u64) -> String {
    raw(
        HS,
        format!(r#"{{"sub":"u1","aud":"{AUD}","exp":{}}}"#, now + 300),
    )
}

/// Both verifiers over the same secret and settings.
struct Pair {
    ours: TokenVerifier,
    key: DecodingKey,
    validation: Validation,
}

impl Pair {
    fn new(issuer: Option<&str>) -> Self {
        // One file per pair: two tests build a pair at once, and a file rewritten while
        // the other reads it can be read empty.
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let file = std::env::temp_dir().join(format!(
            "fg-diff-secret-{}-{}-{n}",
            std::process::id(),
            issuer.is_some()
        ));
        std::fs::write(&file, SECRET).unwrap();
        let ours = TokenVerifier::load(KeyFile::Secret(&file), AUD, issuer).unwrap();
        assert!(matches!(ours.keys[0].check, Check::Hs256(_)));
        Self {
            ours,
            key: DecodingKey::from_secret(SECRET),
            validation: validation(Algorithm::HS256, AUD, issuer),
        }
    }

    /// Both answers for the token `make` builds for a clock reading, at the same second.
    fn both(&self, make: &dyn Fn(u64) -> String) -> (String, Option<String>, Option<String>) {
        loop {
            let t0 = now();
            let token = make(t0);
            let theirs = jsonwebtoken::decode::<Claims>(&token, &self.key, &self.validation)
                .ok()
                .map(|d| d.claims.sub);
            let ours = self.ours.verify_at(&token, t0).ok();
            if now() == t0 {
                return (token, theirs, ours);
            }
        }
    }

    /// Checks one case: whether jsonwebtoken accepted it, or what is wrong.
    fn check(
        &self,
        label: &str,
        expect: Expect,
        make: &dyn Fn(u64) -> String,
    ) -> Result<bool, String> {
        let (token, theirs, ours) = self.both(make);
        let ok = match expect {
            Same => theirs == ours,
            Stricter => theirs.is_some() && ours.is_none(),
        };
        if !ok {
            return Err(format!(
                "{label} ({expect:?}): jsonwebtoken {theirs:?}, ours {ours:?}: {token}"
            ));
        }
        Ok(theirs.is_some())
    }
}

mod cases;
mod mutations;

use cases::{claims, headers, issuer_claims, with};
use mutations::tokens;

type Case = (&'static str, Expect, Box<dyn Fn(u64) -> String>);

fn claims_case(label: &'static str, expect: Expect, claims: fn(u64) -> String) -> Case {
    (label, expect, Box::new(move |now| raw(HS, claims(now))))
}

fn header_case(label: &'static str, expect: Expect, header: &'static str) -> Case {
    (
        label,
        expect,
        Box::new(move |now| {
            raw(
                header,
                format!(r#"{{"sub":"h","aud":"{AUD}","exp":{}}}"#, now + 300),
            )
        }),
    )
}

#[test]
fn hs256_agrees_with_jsonwebtoken() {
    let plain = Pair::new(None);
    let with_issuer = Pair::new(Some(ISS));
    let mut accepted = 0;
    let mut total = 0;
    let mut wrong = Vec::new();
    for (pair, cases) in [
        (&plain, headers()),
        (&plain, claims()),
        (&plain, tokens()),
        (&with_issuer, issuer_claims()),
    ] {
        for (label, expect, make) in &cases {
            match pair.check(label, *expect, make) {
                Ok(took) => accepted += usize::from(took),
                Err(e) => wrong.push(e),
            }
            total += 1;
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of {total} cases:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
    assert!(
        accepted > 40,
        "only {accepted} of {total} cases were valid tokens"
    );
}

/// Random edits of valid tokens (a character replaced, dropped or added anywhere) and
/// random valid-looking claims around the time edges.
#[test]
fn hs256_agrees_with_jsonwebtoken_on_random_tokens() {
    let pair = Pair::new(None);
    let mut rng = StdRng::seed_from_u64(0x5eed_f1a5);
    const CHARS: &[char] = &[
        'A', 'Z', 'a', 'z', '0', '9', '-', '_', '.', '=', '+', '/', ' ', '"', '{', '}', ':', ',',
    ];
    let (mut accepted, mut refused) = (0, 0);
    for i in 0..3000u32 {
        let seed: u64 = rng.random();
        let make = move |now: u64| {
            let mut rng = StdRng::seed_from_u64(seed);
            if i % 2 == 0 {
                let mut t: Vec<char> = valid(now).chars().collect();
                for _ in 0..rng.random_range(1..=2) {
                    let at = rng.random_range(0..t.len());
                    let c = CHARS[rng.random_range(0..CHARS.len())];
                    match rng.random_range(0..3) {
                        0 => t[at] = c,
                        1 => {
                            t.remove(at);
                        }
                        _ => t.insert(at, c),
                    }
                }
                t.into_iter().collect()
            } else {
                let sub: String = (0..rng.random_range(0..12))
                    .map(|_| CHARS[rng.random_range(0..4)])
                    .collect();
                let exp = (now + 60).wrapping_sub(rng.random_range(0..120));
                let nbf = match rng.random_range(0..3) {
                    0 => String::new(),
                    1 => format!(r#","nbf":{}"#, now + rng.random_range(0..60)),
                    _ => format!(r#","nbf":{}.{}"#, now + 29, rng.random_range(0..10)),
                };
                let aud = match rng.random_range(0..4) {
                    0 => format!(r#""{AUD}""#),
                    1 => format!(r#"["x","{AUD}"]"#),
                    2 => r#""x""#.to_owned(),
                    _ => "[]".to_owned(),
                };
                raw(
                    HS,
                    format!(r#"{{"sub":"{sub}","aud":{aud},"exp":{exp}{nbf}}}"#),
                )
            }
        };
        let (token, theirs, ours) = pair.both(&make);
        let sub_empty = theirs.as_deref() == Some("");
        if sub_empty {
            assert_eq!(ours, None, "empty sub: {token}");
        } else {
            assert_eq!(theirs, ours, "case {i}: {token}");
        }
        if ours.is_some() {
            accepted += 1;
        } else {
            refused += 1;
        }
    }
    assert!(
        accepted > 300 && refused > 300,
        "{accepted} accepted, {refused} refused"
    );
}

/// `oct` keys of a JWKS take the same path, picked by `kid` as before.
#[test]
fn jwks_oct_keys_take_the_hs256_path() {
    let other = b"another secret of at least 32 bytes!!";
    let load = |keys: serde_json::Value| {
        let file = std::env::temp_dir().join(format!("fg-diff-jwks-{}", std::process::id()));
        std::fs::write(&file, serde_json::json!({ "keys": keys }).to_string()).unwrap();
        TokenVerifier::load(KeyFile::Jwks(&file), AUD, None).unwrap()
    };
    let two = load(serde_json::json!([
        {"kty": "oct", "k": b64(SECRET), "kid": "hs-1", "alg": "HS256"},
        {"kty": "oct", "k": b64(other), "kid": "hs-2"},
    ]));
    assert!(two.keys.iter().all(|k| matches!(k.check, Check::Hs256(_))));
    let t = now();
    let kid = |kid: &str| raw(format!(r#"{{"alg":"HS256","kid":"{kid}"}}"#), with(t, ""));
    assert_eq!(two.verify_at(&kid("hs-1"), t).unwrap(), "u1");
    assert!(matches!(
        two.verify_at(&kid("hs-2"), t),
        Err(TokenError::Refused(Reason::Signature))
    ));
    assert!(matches!(
        two.verify_at(&kid("hs-3"), t),
        Err(TokenError::UnknownKey)
    ));
    assert!(matches!(
        two.verify_at(&valid(t), t),
        Err(TokenError::UnknownKey)
    ));
    // One key with a kid: a token without one gets it, a token naming another does not.
    let one = load(serde_json::json!([{"kty": "oct", "k": b64(SECRET), "kid": "hs-1"}]));
    assert_eq!(one.verify_at(&valid(t), t).unwrap(), "u1");
    assert!(matches!(
        one.verify_at(&kid("hs-2"), t),
        Err(TokenError::UnknownKey)
    ));
}

/// User-space instructions for one HS256 token of the bench's shape, `jsonwebtoken`
/// against ours, counted with callgrind (`N` tokens each, inclusive cost of the two loops
/// divided by `N`; the commands are in docs/BENCHMARKS.md "Where the CPU goes"):
/// `cargo test --release -p gateway --lib verify_instructions --no-run`, then
/// `valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.verify <test binary>
/// verify_instructions --ignored` and
/// `callgrind_annotate --inclusive=yes /tmp/cg.verify | grep -E 'loop_(jsonwebtoken|ours)'`.
#[test]
#[ignore]
fn verify_instructions() {
    const N: u32 = 10_000;
    let pair = Pair::new(None);
    let claims = format!(
        r#"{{"sub":"w1764612345-u0-12345","aud":"{AUD}","exp":{}}}"#,
        now() + 3600
    );
    let token = raw(HS, claims);
    let t = Instant::now();
    loop_jsonwebtoken(&pair, &token, N);
    let theirs = t.elapsed();
    let t = Instant::now();
    loop_ours(&pair, &token, N);
    let ours = t.elapsed();
    println!(
        "per token: jsonwebtoken {:.2} µs, ours {:.2} µs (wall clock; count with callgrind)",
        theirs.as_secs_f64() * 1e6 / f64::from(N),
        ours.as_secs_f64() * 1e6 / f64::from(N)
    );
}

#[inline(never)]
fn loop_jsonwebtoken(pair: &Pair, token: &str, n: u32) {
    for _ in 0..n {
        let data = jsonwebtoken::decode::<Claims>(
            std::hint::black_box(token),
            &pair.key,
            &pair.validation,
        );
        assert_eq!(data.unwrap().claims.sub, "w1764612345-u0-12345");
    }
}

#[inline(never)]
fn loop_ours(pair: &Pair, token: &str, n: u32) {
    for _ in 0..n {
        let sub = pair.ours.verify(std::hint::black_box(token));
        assert_eq!(sub.unwrap(), "w1764612345-u0-12345");
    }
}
