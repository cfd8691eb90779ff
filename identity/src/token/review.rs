//! Adversarial cases for the HS256 path: each is a way a token could be taken that must be
//! refused, or a load that must fail.

use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::*;

const SECRET: &[u8] = b"0123456789abcdef0123456789abcdef-review";
const AUD: &str = "flashgate";

fn b64(bytes: impl AsRef<[u8]>) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

fn mac(secret: &[u8], signed: &str) -> Vec<u8> {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).unwrap();
    mac.update(signed.as_bytes());
    mac.finalize().into_bytes().to_vec()
}

fn token_with(secret: &[u8], header: &str, claims: &str) -> String {
    let signed = format!("{}.{}", b64(header), b64(claims));
    let sig = b64(mac(secret, &signed));
    format!("{signed}.{sig}")
}

fn claims_at(now: u64) -> String {
    format!(r#"{{"sub":"u1","aud":"{AUD}","exp":{}}}"#, now + 300)
}

fn temp(name: &str, contents: &[u8]) -> std::path::PathBuf {
    // One file per call: tests run in parallel, and a file rewritten while another test
    // reads it can be read empty.
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let p = std::env::temp_dir().join(format!("fg-review-{name}-{}-{n}", std::process::id()));
    std::fs::write(&p, contents).unwrap();
    p
}

fn secret_verifier() -> TokenVerifier {
    TokenVerifier::load(KeyFile::Secret(&temp("secret", SECRET)), AUD, None).unwrap()
}

fn jwks(name: &str, keys: serde_json::Value) -> Result<TokenVerifier, String> {
    let f = temp(
        name,
        serde_json::json!({ "keys": keys }).to_string().as_bytes(),
    );
    TokenVerifier::load(KeyFile::Jwks(&f), AUD, None)
}

fn keys_dir() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/keys")
}

const NOW: u64 = 1_800_000_000;

#[test]
fn signature_encodings_other_than_the_canonical_one_are_refused() {
    let v = secret_verifier();
    let good = token_with(SECRET, r#"{"alg":"HS256"}"#, &claims_at(NOW));
    assert_eq!(v.verify_at(&good, NOW).unwrap(), "u1");
    let (signed, sig) = good.rsplit_once('.').unwrap();
    let raw = URL_SAFE_NO_PAD.decode(sig).unwrap();
    let bad = [
        format!("{signed}.{}", STANDARD.encode(&raw)),
        format!("{signed}.{sig}="),
        format!("{signed}.{sig}\0"),
        format!("{signed}.\0{sig}"),
        format!("{signed}.{sig} "),
        format!("{signed}. {sig}"),
        format!("{signed}.{}é", &sig[..sig.len() - 1]),
        format!("{signed}."),
        format!("{signed}.{}", &sig[..sig.len() - 1]),
        format!("{signed}.{sig}AA"),
        format!("{signed}.{sig}.{sig}"),
        format!("{signed}\0.{sig}"),
        format!(" {signed}.{sig}"),
        format!("{signed}.{}", b64(&raw[..31])),
        format!("{signed}.{}", b64([&raw[..], &[0]].concat())),
    ];
    for t in &bad {
        assert!(v.verify_at(t, NOW).is_err(), "accepted {t:?}");
    }
    // The last character of a 43-character signature carries 2 spare bits: setting them
    // is refused, not ignored.
    let last = sig.as_bytes()[sig.len() - 1];
    let idx = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
        .iter()
        .position(|c| *c == last)
        .unwrap();
    for spare in 1..4 {
        let c = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"[idx ^ spare];
        let t = format!("{signed}.{}{}", &sig[..sig.len() - 1], c as char);
        assert!(v.verify_at(&t, NOW).is_err(), "accepted {t:?}");
    }
}

#[test]
fn alg_spellings() {
    let v = secret_verifier();
    let c = claims_at(NOW);
    assert_eq!(
        v.verify_at(
            &token_with(SECRET, r#"{"alg":"HS\u0032\u0035\u0036"}"#, &c),
            NOW
        )
        .unwrap(),
        "u1"
    );
    for h in [
        r#"{"alg":"none"}"#,
        r#"{"alg":"HS256 "}"#,
        r#"{"alg":" HS256"}"#,
        r#"{"alg":"hs256"}"#,
        r#"{"alg":"HS256\u0000"}"#,
        r#"{"alg":["HS256"]}"#,
        r#"{"alg":{"HS256":null}}"#,
        r#"{"alg":"HS256","alg":"none"}"#,
        r#"{"alg":"none","\u0061lg":"HS256"}"#,
        r#"{}"#,
    ] {
        assert!(v.verify_at(&token_with(SECRET, h, &c), NOW).is_err(), "{h}");
    }
}

/// An RSA key of a JWKS never becomes an HMAC secret, whatever the token or the JWK's
/// `alg` says.
#[test]
fn rsa_key_material_is_never_an_hmac_secret() {
    let file: serde_json::Value =
        serde_json::from_slice(&std::fs::read(keys_dir().join("jwks.json")).unwrap()).unwrap();
    let rsa = file["keys"][1].clone();
    let n = URL_SAFE_NO_PAD.decode(rsa["n"].as_str().unwrap()).unwrap();
    let pem = std::fs::read(keys_dir().join("rsa.pub.pem")).unwrap();
    let mut rsa_as_hs = rsa.clone();
    rsa_as_hs["alg"] = "HS256".into();
    let mut rsa_no_alg = rsa.clone();
    rsa_no_alg.as_object_mut().unwrap().remove("alg");
    let mixed = jwks(
        "mixed",
        serde_json::json!([
            {"kty": "oct", "k": b64(SECRET), "kid": "hs-1"},
            rsa,
            file["keys"][0].clone(),
        ]),
    )
    .unwrap();
    let alt = jwks("rsa-hs", serde_json::json!([rsa_as_hs])).unwrap();
    let alt2 = jwks("rsa-noalg", serde_json::json!([rsa_no_alg])).unwrap();
    let c = claims_at(NOW);
    let t = |kid: Option<&str>, secret: &[u8]| {
        let h = match kid {
            Some(k) => format!(r#"{{"alg":"HS256","kid":"{k}"}}"#),
            None => r#"{"alg":"HS256"}"#.to_owned(),
        };
        token_with(secret, &h, &c)
    };
    assert_eq!(
        mixed.verify_at(&t(Some("hs-1"), SECRET), NOW).unwrap(),
        "u1"
    );
    for secret in [&n[..], &pem[..], rsa_n_text(&file).as_bytes(), b""] {
        for v in [&mixed, &alt, &alt2] {
            for kid in [Some("rsa-1"), None, Some("ed-1")] {
                assert!(v.verify_at(&t(kid, secret), NOW).is_err(), "{kid:?}");
            }
        }
    }
    // Several keys, no kid: no key is picked, none tried in turn.
    assert!(matches!(
        mixed.verify_at(&t(None, SECRET), NOW),
        Err(TokenError::UnknownKey)
    ));
}

/// The JWK's `n` as it is written (base64url text).
fn rsa_n_text(file: &serde_json::Value) -> String {
    file["keys"][1]["n"].as_str().unwrap().to_owned()
}

#[test]
fn a_clock_before_the_epoch_refuses_every_token() {
    let v = secret_verifier();
    let before = UNIX_EPOCH - std::time::Duration::from_secs(10);
    let expired = token_with(
        SECRET,
        r#"{"alg":"HS256"}"#,
        &format!(r#"{{"sub":"u1","aud":"{AUD}","exp":1}}"#),
    );
    assert!(matches!(
        v.verify_at_clock(&expired, before),
        Err(TokenError::Refused(Reason::Clock))
    ));
    let good = token_with(SECRET, r#"{"alg":"HS256"}"#, &claims_at(NOW));
    assert!(v.verify_at_clock(&good, before).is_err());
}

/// Refusals say what is wrong without the key: nothing of the secret in any message.
#[test]
fn error_messages_hold_no_secret() {
    let v = secret_verifier();
    let secret = String::from_utf8_lossy(SECRET).into_owned();
    let b64_secret = b64(SECRET);
    for t in [
        token_with(
            b"another secret of at least 32 bytes!!",
            r#"{"alg":"HS256"}"#,
            &claims_at(NOW),
        ),
        token_with(SECRET, r#"{"alg":"HS256"}"#, r#"{"sub":1}"#),
        token_with(SECRET, r#"{"alg":"HS256","x":1}"#, &claims_at(NOW)),
        "a.b.c".to_owned(),
    ] {
        let e = v.verify_at(&t, NOW).err().unwrap().to_string();
        assert!(!e.contains(&secret) && !e.contains(&b64_secret), "{e}");
    }
}

/// The verifier hands a signed subject over as it is, odd or not (decoded from its JSON
/// escapes): the body `user` rules (length, control characters) hold it after verification,
/// so a signed but odd `sub` never reaches a Redis key. That half is
/// `odd_verified_users_stop_at_the_claim_checks` in `api/input.rs`, which takes these
/// subjects as this test finds them (the claim checks sit above identity, so the two halves
/// are tested where each lives).
#[test]
fn odd_subjects_are_verified_as_they_are() {
    let v = secret_verifier();
    let long = "u".repeat(65);
    for (sub, user) in [
        (r#"a|b"#, "a|b"),
        (r#"a\u0000b"#, "a\0b"),
        (r#"a\nb"#, "a\nb"),
        (r#"a\u007fb"#, "a\u{7f}b"),
        (long.as_str(), long.as_str()),
    ] {
        let c = format!(r#"{{"sub":"{sub}","aud":"{AUD}","exp":{}}}"#, NOW + 300);
        let verified = v
            .verify_at(&token_with(SECRET, r#"{"alg":"HS256"}"#, &c), NOW)
            .unwrap();
        assert_eq!(verified, user, "{sub}");
    }
}

/// The token is bounded before it is cut or hashed: an unauthenticated client cannot
/// make the gateway decode and HMAC hundreds of kilobytes (hyper's HTTP/1 header buffer).
#[test]
fn huge_tokens_are_refused_before_any_work() {
    let v = secret_verifier();
    let pad = "a".repeat(MAX_TOKEN_BYTES);
    let big = token_with(
        SECRET,
        r#"{"alg":"HS256"}"#,
        &format!(
            r#"{{"sub":"u1","aud":"{AUD}","exp":{},"x":"{pad}"}}"#,
            NOW + 300
        ),
    );
    assert!(matches!(
        v.verify_at(&big, NOW),
        Err(TokenError::Refused(Reason::TooLong))
    ));
    // A token of ordinary size with a long but legal claim still passes.
    let ok = token_with(
        SECRET,
        r#"{"alg":"HS256"}"#,
        &format!(
            r#"{{"sub":"u1","aud":"{AUD}","exp":{},"x":"{}"}}"#,
            NOW + 300,
            "a".repeat(2000)
        ),
    );
    assert_eq!(v.verify_at(&ok, NOW).unwrap(), "u1");
}

/// The secret-file rule (at least the hash's size) holds for `oct` keys of a JWKS too: an
/// empty `k` would let anyone mint tokens.
#[test]
fn short_oct_keys_of_a_jwks_are_refused_at_load() {
    for k in [&b""[..], b"x", &SECRET[..MIN_SECRET_BYTES - 1]] {
        let err = jwks(
            "short",
            serde_json::json!([{"kty": "oct", "k": b64(k), "kid": "a"}]),
        )
        .err()
        .unwrap_or_else(|| panic!("a {}-byte oct key was loaded", k.len()));
        assert!(err.contains("at least 32 bytes"), "{err}");
    }
    assert!(jwks(
        "long",
        serde_json::json!([{"kty": "oct", "k": b64(&SECRET[..MIN_SECRET_BYTES]), "kid": "a"}])
    )
    .is_ok());
}

/// Claims whose meaning is ambiguous (a member twice, one spelled with escapes) or that are
/// not plain JSON (BOM, NUL, trailing bytes): refused here, and by jsonwebtoken.
#[test]
fn ambiguous_claims_are_refused_by_both() {
    let v = secret_verifier();
    let key = DecodingKey::from_secret(SECRET);
    let rules = validation(Algorithm::HS256, AUD, None);
    let far = 4_000_000_000u64;
    for c in [
        format!(r#"{{"sub":"a","\u0073ub":"b","aud":"{AUD}","exp":{far}}}"#),
        format!(r#"{{"sub":"a","aud":"{AUD}","exp":1,"\u0065xp":{far}}}"#),
        format!(r#"{{"sub":"a","aud":"x","\u0061ud":"{AUD}","exp":{far}}}"#),
        format!(r#"{{"sub":"a","aud":"{AUD}","exp":{far},"nbf":0,"nb\u0066":{far}}}"#),
        format!("\u{feff}{{\"sub\":\"a\",\"aud\":\"{AUD}\",\"exp\":{far}}}"),
        format!("{{\"sub\":\"a\",\"aud\":\"{AUD}\",\"exp\":{far}}}\0"),
        format!("{{\"sub\":\"a\",\"aud\":\"{AUD}\",\"exp\":{far}}}x"),
        format!("{{\"sub\":\"a\",\"aud\":\"{AUD}\",\"exp\":{far}}},{{\"sub\":\"b\"}}"),
        format!(r#"{{"sub":"a","aud":"{AUD}","exp":NaN}}"#),
        format!(r#"{{"sub":"a","aud":"{AUD}","exp":Infinity}}"#),
        format!(r#"{{"sub":"a","aud":"{AUD}","exp":"{far}"}}"#),
        format!(r#"{{"sub":"a","aud":[["{AUD}"]],"exp":{far}}}"#),
        format!(r#"{{"sub":"a","aud":[],"exp":{far}}}"#),
    ] {
        let t = token_with(SECRET, r#"{"alg":"HS256"}"#, &c);
        assert!(v.verify(&t).is_err(), "ours took {c:?}");
        assert!(
            jsonwebtoken::decode::<Claims>(&t, &key, &rules).is_err(),
            "jsonwebtoken took {c:?}"
        );
    }
    for h in ["\u{feff}{\"alg\":\"HS256\"}", "{\"alg\":\"HS256\"}\0"] {
        let t = token_with(SECRET, h, &claims_at(far - 300));
        assert!(v.verify(&t).is_err(), "ours took header {h:?}");
    }
    // The audience among others, and nbf within the leeway, are taken.
    let c = format!(r#"{{"sub":"a","aud":["x","{AUD}"],"exp":{far},"nbf":0}}"#);
    assert_eq!(
        v.verify(&token_with(SECRET, r#"{"alg":"HS256"}"#, &c))
            .unwrap(),
        "a"
    );
}
