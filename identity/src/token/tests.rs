use std::path::PathBuf;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use jsonwebtoken::{encode, EncodingKey, Header};
use serde_json::{json, Value};

use super::*;

fn keys_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/keys")
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn claims(sub: &str) -> Value {
    json!({"sub": sub, "aud": "flashgate", "exp": now() + 300})
}

const SECRET: &str = "0123456789abcdef0123456789abcdef-test";

fn secret_file() -> PathBuf {
    let p = std::env::temp_dir().join(format!("fg-token-secret-{}", std::process::id()));
    std::fs::write(&p, format!("{SECRET}\n")).unwrap();
    p
}

fn hs(claims: &Value) -> String {
    encode(
        &Header::default(),
        claims,
        &EncodingKey::from_secret(SECRET.as_bytes()),
    )
    .unwrap()
}

fn signed(alg: Algorithm, kid: Option<&str>, pem: &str, claims: &Value) -> String {
    let pem = std::fs::read(keys_dir().join(pem)).unwrap();
    let key = match alg {
        Algorithm::EdDSA => EncodingKey::from_ed_pem(&pem).unwrap(),
        _ => EncodingKey::from_rsa_pem(&pem).unwrap(),
    };
    let mut h = Header::new(alg);
    h.kid = kid.map(str::to_owned);
    encode(&h, claims, &key).unwrap()
}

#[test]
fn hs256_checks_signature_audience_and_time() {
    let f = secret_file();
    let v = TokenVerifier::load(KeyFile::Secret(&f), "flashgate", None).unwrap();
    assert_eq!(v.verify(&hs(&claims("alice"))).unwrap(), "alice");

    let refused = |c: Value| v.verify(&hs(&c)).is_err();
    assert!(refused(
        json!({"sub": "a", "aud": "other", "exp": now() + 300})
    ));
    assert!(refused(
        json!({"sub": "a", "aud": "flashgate", "exp": now() - 120})
    ));
    assert!(refused(
        json!({"sub": "a", "aud": "flashgate", "exp": now() + 300, "nbf": now() + 120})
    ));
    assert!(
        refused(json!({"sub": "a", "aud": "flashgate"})),
        "exp is required"
    );
    assert!(
        refused(json!({"aud": "flashgate", "exp": now() + 300})),
        "sub is required"
    );
    assert!(
        refused(json!({"sub": "a", "exp": now() + 300})),
        "aud is required"
    );
    let other = encode(
        &Header::default(),
        &claims("alice"),
        &EncodingKey::from_secret(b"another secret of at least 32 bytes!!"),
    )
    .unwrap();
    assert!(v.verify(&other).is_err(), "wrong secret");
    let mut tampered = hs(&claims("alice"));
    tampered.insert(tampered.len() - 2, 'x');
    assert!(v.verify(&tampered).is_err());
    assert!(v.verify("not a token").is_err());

    let short = std::env::temp_dir().join(format!("fg-short-{}", std::process::id()));
    std::fs::write(&short, "short").unwrap();
    let err = TokenVerifier::load(KeyFile::Secret(&short), "flashgate", None)
        .err()
        .unwrap();
    assert!(err.contains("at least 32 bytes"), "{err}");
}

#[test]
fn pem_keys_pick_their_algorithm_and_refuse_others() {
    let ed = TokenVerifier::load(
        KeyFile::PublicKey(&keys_dir().join("ed25519.pub.pem")),
        "flashgate",
        None,
    )
    .unwrap();
    let t = signed(Algorithm::EdDSA, None, "ed25519.pem", &claims("bob"));
    assert_eq!(ed.verify(&t).unwrap(), "bob");
    let rs = TokenVerifier::load(
        KeyFile::PublicKey(&keys_dir().join("rsa.pub.pem")),
        "flashgate",
        None,
    )
    .unwrap();
    let t = signed(Algorithm::RS256, None, "rsa.pem", &claims("carol"));
    assert_eq!(rs.verify(&t).unwrap(), "carol");
    assert!(
        ed.verify(&t).is_err(),
        "an RS256 token against the Ed25519 key"
    );
    // Algorithm confusion: an HS256 token keyed with the public key's bytes.
    let pem = std::fs::read(keys_dir().join("rsa.pub.pem")).unwrap();
    let forged = encode(
        &Header::default(),
        &claims("mallory"),
        &EncodingKey::from_secret(&pem),
    )
    .unwrap();
    assert!(rs.verify(&forged).is_err());
    let err = TokenVerifier::load(
        KeyFile::PublicKey(&keys_dir().join("README.md")),
        "flashgate",
        None,
    )
    .err()
    .unwrap();
    assert!(err.contains("not an Ed25519 or RSA public key"), "{err}");
}

#[test]
fn jwks_keys_are_picked_by_kid() {
    let v = TokenVerifier::load(
        KeyFile::Jwks(&keys_dir().join("jwks.json")),
        "flashgate",
        Some("https://issuer.test"),
    )
    .unwrap();
    let mut c = claims("dora");
    c["iss"] = "https://issuer.test".into();
    let ed = signed(Algorithm::EdDSA, Some("ed-1"), "ed25519.pem", &c);
    let rs = signed(Algorithm::RS256, Some("rsa-1"), "rsa.pem", &c);
    assert_eq!(v.verify(&ed).unwrap(), "dora");
    assert_eq!(v.verify(&rs).unwrap(), "dora");
    let wrong_kid = signed(Algorithm::EdDSA, Some("rsa-1"), "ed25519.pem", &c);
    assert!(v.verify(&wrong_kid).is_err());
    let no_kid = signed(Algorithm::EdDSA, None, "ed25519.pem", &c);
    assert!(matches!(v.verify(&no_kid), Err(TokenError::UnknownKey)));
    let wrong_issuer = signed(
        Algorithm::EdDSA,
        Some("ed-1"),
        "ed25519.pem",
        &claims("dora"),
    );
    assert!(
        v.verify(&wrong_issuer).is_err(),
        "iss is checked when configured"
    );
}

/// CPU cost of one verification, per algorithm (single thread, so wall time is CPU time):
/// `cargo test --release -p gateway --lib verify_cost -- --ignored --nocapture`
#[test]
#[ignore]
fn verify_cost() {
    let f = secret_file();
    let cases = [
        (
            "HS256",
            TokenVerifier::load(KeyFile::Secret(&f), "flashgate", None).unwrap(),
            hs(&claims("u12345")),
        ),
        (
            "EdDSA",
            TokenVerifier::load(
                KeyFile::PublicKey(&keys_dir().join("ed25519.pub.pem")),
                "flashgate",
                None,
            )
            .unwrap(),
            signed(Algorithm::EdDSA, None, "ed25519.pem", &claims("u12345")),
        ),
        (
            "RS256",
            TokenVerifier::load(
                KeyFile::PublicKey(&keys_dir().join("rsa.pub.pem")),
                "flashgate",
                None,
            )
            .unwrap(),
            signed(Algorithm::RS256, None, "rsa.pem", &claims("u12345")),
        ),
    ];
    for (name, v, token) in cases {
        let n = 20_000;
        let t = Instant::now();
        for _ in 0..n {
            assert_eq!(v.verify(std::hint::black_box(&token)).unwrap(), "u12345");
        }
        let us = t.elapsed().as_secs_f64() * 1e6 / f64::from(n);
        println!("verify {name}: {us:.2} µs per token");
    }
}
