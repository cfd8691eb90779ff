//! Whole-token cases of the differential test: parts, dots, padding, alphabets, bits,
//! other keys and algorithms, invalid UTF-8.

use jsonwebtoken::{encode, EncodingKey, Header};

use super::{b64, raw, sign_with, valid, with, Algorithm, Case, Expect::Same, AUD, HS, SECRET};

/// Whole-token mutations of a valid token.
pub(super) fn tokens() -> Vec<Case> {
    [edits(), other_keys(), invalid_utf8()]
        .into_iter()
        .flatten()
        .collect()
}

/// A valid token edited: its parts and dots, padding, alphabet, and bits.
fn edits() -> Vec<Case> {
    let edit = |label, f: fn(String) -> String| -> Case {
        (label, Same, Box::new(move |now| f(valid(now))))
    };
    vec![
        edit("as minted", |t| t),
        edit("extra dot at the end", |t| t + "."),
        edit("extra part", |t| t + ".e30"),
        edit("extra dot at the start", |t| format!(".{t}")),
        edit("doubled dot", |t| t.replacen('.', "..", 1)),
        edit("two parts", |t| t[..t.rfind('.').unwrap()].to_owned()),
        edit("one part", |t| t[..t.find('.').unwrap()].to_owned()),
        edit("empty signature", |t| {
            t[..=t.rfind('.').unwrap()].to_owned()
        }),
        edit("empty header", |t| t[t.find('.').unwrap()..].to_owned()),
        edit("only dots", |_| "..".to_owned()),
        edit("empty", |_| String::new()),
        edit("signature truncated", |t| t[..t.len() - 1].to_owned()),
        edit("signature longer", |t| t + "AAAA"),
        edit("signature padded", |t| t + "="),
        edit("header padded", |t| t.replacen('.', "=.", 1)),
        edit("payload padded", |t| {
            let i = t.rfind('.').unwrap();
            format!("{}=={}", &t[..i], &t[i..])
        }),
        edit("space inside", |t| t.replacen('.', ". ", 1)),
        edit("trailing newline", |t| t + "\n"),
        edit("standard alphabet", |t| {
            t.replace('-', "+").replace('_', "/")
        }),
        edit("signature last bit", |t| {
            // The last of 43 characters carries 4 bits and 2 bits of zero padding.
            let mut b = t.into_bytes();
            let last = b.len() - 1;
            b[last] ^= 1;
            String::from_utf8(b).unwrap()
        }),
        (
            "payload with trailing bits set",
            Same,
            Box::new(|now| {
                // 4 bytes of JSON end in a 2-character group whose low bits must be zero.
                let claims = format!(r#"{{"sub":"u1","aud":"{AUD}","exp":{}, "x":0}}"#, now + 300);
                let p = b64(&claims);
                let last = p.chars().last().unwrap();
                let alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
                let i = alphabet.find(last).unwrap();
                let bumped = &alphabet[(i | 1)..=(i | 1)];
                let signed = format!("{}.{}{bumped}", b64(HS), &p[..p.len() - 1]);
                let sig = sign_with(SECRET, &signed);
                format!("{signed}.{sig}")
            }),
        ),
    ]
}

/// Tokens signed with another key or algorithm, or with none.
fn other_keys() -> Vec<Case> {
    vec![
        (
            "other secret",
            Same,
            Box::new(|now| {
                let signed = format!("{}.{}", b64(HS), b64(with(now, "")));
                let sig = sign_with(b"another secret of at least 32 bytes!!", &signed);
                format!("{signed}.{sig}")
            }),
        ),
        (
            "header swapped after signing",
            Same,
            Box::new(|now| {
                let t = valid(now);
                format!(
                    "{}{}",
                    b64(r#"{"alg":"HS256"}"#),
                    &t[t.find('.').unwrap()..]
                )
            }),
        ),
        (
            "alg none, no signature",
            Same,
            Box::new(|now| format!("{}.{}.", b64(r#"{"alg":"none"}"#), b64(with(now, "")))),
        ),
        (
            "HS384 signed with the secret",
            Same,
            Box::new(|now| {
                let claims: serde_json::Value = serde_json::from_str(&with(now, "")).unwrap();
                let key = EncodingKey::from_secret(SECRET);
                encode(&Header::new(Algorithm::HS384), &claims, &key).unwrap()
            }),
        ),
        (
            "RS256 signed with a real key",
            Same,
            Box::new(|now| {
                let claims: serde_json::Value = serde_json::from_str(&with(now, "")).unwrap();
                let pem = std::fs::read(
                    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/keys/rsa.pem"),
                )
                .unwrap();
                let key = EncodingKey::from_rsa_pem(&pem).unwrap();
                encode(&Header::new(Algorithm::RS256), &claims, &key).unwrap()
            }),
        ),
        (
            "HS256 minted by jsonwebtoken",
            Same,
            Box::new(|now| {
                let claims: serde_json::Value = serde_json::from_str(&with(now, "")).unwrap();
                encode(
                    &Header::default(),
                    &claims,
                    &EncodingKey::from_secret(SECRET),
                )
                .unwrap()
            }),
        ),
    ]
}

/// Invalid UTF-8 in the subject, in an unknown member, in the header.
fn invalid_utf8() -> Vec<Case> {
    vec![
        (
            "invalid UTF-8 in the subject",
            Same,
            Box::new(|now| {
                raw(
                    HS,
                    [
                        &b"{\"sub\":\"u\xff\",\"aud\":\"flashgate\",\"exp\":"[..],
                        (now + 300).to_string().as_bytes(),
                        b"}",
                    ]
                    .concat(),
                )
            }),
        ),
        (
            "invalid UTF-8 in an unknown member",
            Same,
            Box::new(|now| {
                raw(
                    HS,
                    [
                        &b"{\"x\":\"\xff\",\"sub\":\"u\",\"aud\":\"flashgate\",\"exp\":"[..],
                        (now + 300).to_string().as_bytes(),
                        b"}",
                    ]
                    .concat(),
                )
            }),
        ),
        (
            "invalid UTF-8 in the header",
            Same,
            Box::new(|now| raw(&b"{\"alg\":\"HS256\",\"x\":\"\xff\"}"[..], with(now, ""))),
        ),
    ]
}
