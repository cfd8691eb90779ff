//! The fixed cases of the differential test: headers, claims, and claims with an issuer.

use super::{claims_case, header_case, Case, Expect::*, AUD, HS, ISS};

pub(super) fn headers() -> Vec<Case> {
    vec![
        header_case("typ and alg", Same, HS),
        header_case("alg only", Same, r#"{"alg":"HS256"}"#),
        header_case("kid, one key", Same, r#"{"alg":"HS256","kid":"k9"}"#),
        header_case("whitespace", Same, " {\n\t\"alg\" : \"HS256\" }\r\n"),
        header_case("escaped alg", Same, r#"{"alg":"HS\u0032\u00356"}"#),
        header_case("escaped key", Same, r#"{"\u0061lg":"HS256"}"#),
        header_case("typ null", Same, r#"{"alg":"HS256","typ":null}"#),
        header_case(
            "named members",
            Same,
            r#"{"alg":"HS256","cty":"x","jku":"u","x5u":"u","x5t":"t","x5t#S256":"t","url":"u","nonce":"n","enc":"A128GCM","zip":"DEF"}"#,
        ),
        header_case("unknown string", Same, r#"{"alg":"HS256","trace":"abc"}"#),
        header_case("unknown twice", Same, r#"{"alg":"HS256","x":"a","x":"b"}"#),
        header_case("unknown number", Same, r#"{"alg":"HS256","x":1}"#),
        header_case("unknown null", Same, r#"{"alg":"HS256","x":null}"#),
        header_case("unknown object", Same, r#"{"alg":"HS256","x":{}}"#),
        header_case("typ number", Same, r#"{"alg":"HS256","typ":1}"#),
        header_case("kid number", Same, r#"{"alg":"HS256","kid":1}"#),
        header_case("alg twice", Same, r#"{"alg":"HS256","alg":"HS256"}"#),
        header_case(
            "typ twice",
            Same,
            r#"{"alg":"HS256","typ":"JWT","typ":"JWT"}"#,
        ),
        header_case("kid twice", Same, r#"{"alg":"HS256","kid":"a","kid":"a"}"#),
        header_case("alg none", Same, r#"{"alg":"none"}"#),
        header_case("alg None", Same, r#"{"alg":"None"}"#),
        header_case("alg HS384", Same, r#"{"alg":"HS384"}"#),
        header_case("alg HS512", Same, r#"{"alg":"HS512"}"#),
        header_case("alg RS256", Same, r#"{"alg":"RS256"}"#),
        header_case("alg EdDSA", Same, r#"{"alg":"EdDSA"}"#),
        header_case("alg lower case", Same, r#"{"alg":"hs256"}"#),
        header_case("alg padded", Same, r#"{"alg":"HS256 "}"#),
        header_case("alg empty", Same, r#"{"alg":""}"#),
        header_case("alg null", Same, r#"{"alg":null}"#),
        header_case("alg number", Same, r#"{"alg":256}"#),
        header_case("alg array", Same, r#"{"alg":["HS256"]}"#),
        header_case("no alg", Same, r#"{"typ":"JWT"}"#),
        header_case("empty object", Same, "{}"),
        header_case("array", Same, r#"["HS256"]"#),
        header_case("string", Same, r#""HS256""#),
        header_case("not JSON", Same, r#"{"alg":"HS256""#),
        header_case("trailing bytes", Same, r#"{"alg":"HS256"}x"#),
        header_case("two objects", Same, r#"{"alg":"HS256"}{}"#),
        header_case("empty", Same, ""),
        // jsonwebtoken reads `alg` as a serde enum, which also takes the map form.
        header_case("alg as a map", Stricter, r#"{"alg":{"HS256":null}}"#),
        header_case("crit", Stricter, r#"{"alg":"HS256","crit":["exp"]}"#),
        header_case("crit null", Stricter, r#"{"alg":"HS256","crit":null}"#),
        header_case(
            "jwk",
            Stricter,
            r#"{"alg":"HS256","jwk":{"kty":"oct","k":"c2VjcmV0"}}"#,
        ),
        header_case("jwk null", Stricter, r#"{"alg":"HS256","jwk":null}"#),
        header_case("x5c", Stricter, r#"{"alg":"HS256","x5c":["MIIB"]}"#),
        header_case("x5c null", Stricter, r#"{"alg":"HS256","x5c":null}"#),
    ]
}

/// `{"sub":"u1","aud":AUD,"exp":now+300, <extra>}` with `extra` spliced in.
pub(super) fn with(now: u64, extra: &str) -> String {
    format!(r#"{{"sub":"u1","aud":"{AUD}","exp":{}{extra}}}"#, now + 300)
}

pub(super) fn claims() -> Vec<Case> {
    [audience(), subject(), expiry(), not_before(), shape()]
        .into_iter()
        .flatten()
        .collect()
}

/// A valid token's claims, and the audience's.
fn audience() -> Vec<Case> {
    vec![
        claims_case("valid", Same, |n| with(n, "")),
        claims_case("whitespace", Same, |n| {
            format!(
                " \n{{ \"sub\" : \"u1\" ,\t\"aud\":\"{AUD}\", \"exp\":{} }}\r\n",
                n + 300
            )
        }),
        claims_case("aud array", Same, |n| {
            format!(r#"{{"sub":"u","aud":["x","{AUD}"],"exp":{}}}"#, n + 300)
        }),
        claims_case("aud array twice", Same, |n| {
            format!(r#"{{"sub":"u","aud":["{AUD}","{AUD}"],"exp":{}}}"#, n + 300)
        }),
        claims_case("aud escaped", Same, |n| {
            format!(r#"{{"sub":"u","aud":"fl\u0061shgate","exp":{}}}"#, n + 300)
        }),
        claims_case("aud missing", Same, |n| {
            format!(r#"{{"sub":"u","exp":{}}}"#, n + 300)
        }),
        claims_case("aud null", Same, |n| {
            format!(r#"{{"sub":"u","aud":null,"exp":{}}}"#, n + 300)
        }),
        claims_case("aud wrong", Same, |n| {
            format!(r#"{{"sub":"u","aud":"other","exp":{}}}"#, n + 300)
        }),
        claims_case("aud case", Same, |n| {
            format!(r#"{{"sub":"u","aud":"FLASHGATE","exp":{}}}"#, n + 300)
        }),
        claims_case("aud empty array", Same, |n| {
            format!(r#"{{"sub":"u","aud":[],"exp":{}}}"#, n + 300)
        }),
        claims_case("aud array wrong", Same, |n| {
            format!(r#"{{"sub":"u","aud":["a","b"],"exp":{}}}"#, n + 300)
        }),
        claims_case("aud array with a number", Same, |n| {
            format!(r#"{{"sub":"u","aud":["{AUD}",1],"exp":{}}}"#, n + 300)
        }),
        claims_case("aud nested array", Same, |n| {
            format!(r#"{{"sub":"u","aud":[["{AUD}"]],"exp":{}}}"#, n + 300)
        }),
        claims_case("aud object", Same, |n| {
            format!(r#"{{"sub":"u","aud":{{"a":"{AUD}"}},"exp":{}}}"#, n + 300)
        }),
        claims_case("aud number", Same, |n| {
            format!(r#"{{"sub":"u","aud":5,"exp":{}}}"#, n + 300)
        }),
        claims_case("aud twice", Same, |n| {
            with(n, &format!(r#","aud":"{AUD}""#))
        }),
    ]
}

/// The subject's.
fn subject() -> Vec<Case> {
    vec![
        claims_case("sub missing", Same, |n| {
            format!(r#"{{"aud":"{AUD}","exp":{}}}"#, n + 300)
        }),
        claims_case("sub null", Same, |n| {
            format!(r#"{{"sub":null,"aud":"{AUD}","exp":{}}}"#, n + 300)
        }),
        claims_case("sub number", Same, |n| {
            format!(r#"{{"sub":5,"aud":"{AUD}","exp":{}}}"#, n + 300)
        }),
        claims_case("sub array", Same, |n| {
            format!(r#"{{"sub":["u"],"aud":"{AUD}","exp":{}}}"#, n + 300)
        }),
        claims_case("sub object", Same, |n| {
            format!(r#"{{"sub":{{}},"aud":"{AUD}","exp":{}}}"#, n + 300)
        }),
        claims_case("sub escaped", Same, |n| {
            format!(
                r#"{{"sub":"\u0041lice\/x","aud":"{AUD}","exp":{}}}"#,
                n + 300
            )
        }),
        claims_case("sub unicode", Same, |n| {
            format!(r#"{{"sub":"jürgen","aud":"{AUD}","exp":{}}}"#, n + 300)
        }),
        claims_case("sub twice", Same, |n| with(n, r#","sub":"u2""#)),
        claims_case("sub empty", Stricter, |n| {
            format!(r#"{{"sub":"","aud":"{AUD}","exp":{}}}"#, n + 300)
        }),
    ]
}

/// `exp`'s: its type, its range, the leeway.
fn expiry() -> Vec<Case> {
    vec![
        claims_case("exp missing", Same, |_| {
            format!(r#"{{"sub":"u","aud":"{AUD}"}}"#)
        }),
        claims_case("exp null", Same, |_| {
            format!(r#"{{"sub":"u","aud":"{AUD}","exp":null}}"#)
        }),
        claims_case("exp string", Same, |n| {
            format!(r#"{{"sub":"u","aud":"{AUD}","exp":"{}"}}"#, n + 300)
        }),
        claims_case("exp bool", Same, |_| {
            format!(r#"{{"sub":"u","aud":"{AUD}","exp":true}}"#)
        }),
        claims_case("exp empty array", Same, |_| {
            format!(r#"{{"sub":"u","aud":"{AUD}","exp":[]}}"#)
        }),
        claims_case("exp array", Same, |n| {
            format!(r#"{{"sub":"u","aud":"{AUD}","exp":[{}]}}"#, n + 300)
        }),
        claims_case("exp object", Same, |_| {
            format!(r#"{{"sub":"u","aud":"{AUD}","exp":{{}}}}"#)
        }),
        claims_case("exp negative", Same, |_| {
            format!(r#"{{"sub":"u","aud":"{AUD}","exp":-1}}"#)
        }),
        claims_case("exp minus zero", Same, |_| {
            format!(r#"{{"sub":"u","aud":"{AUD}","exp":-0}}"#)
        }),
        claims_case("exp float", Same, |n| {
            format!(r#"{{"sub":"u","aud":"{AUD}","exp":{}.5}}"#, n + 300)
        }),
        claims_case("exp exponent", Same, |n| {
            format!(r#"{{"sub":"u","aud":"{AUD}","exp":{}e0}}"#, n + 300)
        }),
        claims_case("exp u64 max", Same, |_| {
            format!(r#"{{"sub":"u","aud":"{AUD}","exp":18446744073709551615}}"#)
        }),
        claims_case("exp u64 max + 1", Same, |_| {
            format!(r#"{{"sub":"u","aud":"{AUD}","exp":18446744073709551616}}"#)
        }),
        claims_case("exp 1e19", Same, |_| {
            format!(r#"{{"sub":"u","aud":"{AUD}","exp":1e19}}"#)
        }),
        claims_case("exp 1e20", Same, |_| {
            format!(r#"{{"sub":"u","aud":"{AUD}","exp":1e20}}"#)
        }),
        claims_case("exp 1e400", Same, |_| {
            format!(r#"{{"sub":"u","aud":"{AUD}","exp":1e400}}"#)
        }),
        claims_case("exp huge digits", Same, |_| {
            format!(r#"{{"sub":"u","aud":"{AUD}","exp":{}}}"#, "9".repeat(400))
        }),
        claims_case("exp twice", Same, |n| {
            with(n, &format!(r#","exp":{}"#, n + 300))
        }),
        claims_case("exp at the leeway", Same, |n| {
            format!(r#"{{"sub":"u","aud":"{AUD}","exp":{}}}"#, n - 30)
        }),
        claims_case("exp past the leeway", Same, |n| {
            format!(r#"{{"sub":"u","aud":"{AUD}","exp":{}}}"#, n - 31)
        }),
        claims_case("exp float rounds in", Same, |n| {
            format!(r#"{{"sub":"u","aud":"{AUD}","exp":{}.5}}"#, n - 31)
        }),
        claims_case("exp float rounds out", Same, |n| {
            format!(r#"{{"sub":"u","aud":"{AUD}","exp":{}.6}}"#, n - 32)
        }),
        claims_case("exp long ago", Same, |_| {
            format!(r#"{{"sub":"u","aud":"{AUD}","exp":0}}"#)
        }),
    ]
}

/// `nbf`'s, checked when present.
fn not_before() -> Vec<Case> {
    vec![
        claims_case("nbf now", Same, |n| with(n, &format!(r#","nbf":{n}"#))),
        claims_case("nbf at the leeway", Same, |n| {
            with(n, &format!(r#","nbf":{}"#, n + 30))
        }),
        claims_case("nbf past the leeway", Same, |n| {
            with(n, &format!(r#","nbf":{}"#, n + 31))
        }),
        claims_case("nbf float rounds in", Same, |n| {
            with(n, &format!(r#","nbf":{}.5"#, n + 29))
        }),
        claims_case("nbf float rounds out", Same, |n| {
            with(n, &format!(r#","nbf":{}.5"#, n + 30))
        }),
        claims_case("nbf null", Same, |n| with(n, r#","nbf":null"#)),
        claims_case("nbf string", Same, |n| with(n, r#","nbf":"0""#)),
        claims_case("nbf negative", Same, |n| with(n, r#","nbf":-5"#)),
        claims_case("nbf minus zero", Same, |n| with(n, r#","nbf":-0.0"#)),
        claims_case("nbf empty array", Same, |n| with(n, r#","nbf":[]"#)),
        claims_case("nbf huge", Same, |n| with(n, r#","nbf":1e300"#)),
        claims_case("nbf twice", Same, |n| with(n, r#","nbf":0,"nbf":0"#)),
    ]
}

/// An unconfigured issuer, unknown members, and claims that are not one JSON object.
fn shape() -> Vec<Case> {
    vec![
        claims_case("iss unchecked: string", Same, |n| {
            with(n, r#","iss":"anyone""#)
        }),
        claims_case("iss unchecked: number", Same, |n| with(n, r#","iss":5"#)),
        claims_case("iss unchecked: odd array", Same, |n| {
            with(n, r#","iss":[1,{"a":[]}]"#)
        }),
        claims_case("iss twice", Same, |n| with(n, r#","iss":"a","iss":"a""#)),
        claims_case("unknown members", Same, |n| {
            with(n, r#","x":{"a":[1,2.5,{"b":null}],"c":true},"y":-1e9"#)
        }),
        claims_case("unknown twice", Same, |n| with(n, r#","x":1,"x":"2""#)),
        claims_case("escaped member name", Same, |n| {
            format!(r#"{{"s\u0075b":"u","aud":"{AUD}","exp":{}}}"#, n + 300)
        }),
        claims_case("as an array", Same, |n| {
            format!(r#"["u1","{AUD}",{}]"#, n + 300)
        }),
        claims_case("as an array, by position", Same, |n| {
            format!(r#"[{},null,"u1",null,"{AUD}"]"#, n + 300)
        }),
        claims_case("a string", Same, |_| r#""u1""#.to_owned()),
        claims_case("null", Same, |_| "null".to_owned()),
        claims_case("empty object", Same, |_| "{}".to_owned()),
        claims_case("empty", Same, |_| String::new()),
        claims_case("trailing bytes", Same, |n| with(n, "") + "x"),
        claims_case("two objects", Same, |n| with(n, "") + "{}"),
        claims_case("form feed before", Same, |n| format!("\x0c{}", with(n, ""))),
        claims_case("deep nesting", Same, |n| {
            with(
                n,
                &format!(r#","x":{}1{}"#, "[".repeat(200), "]".repeat(200)),
            )
        }),
    ]
}

/// Cases with an issuer configured.
pub(super) fn issuer_claims() -> Vec<Case> {
    vec![
        claims_case("iss right", Same, |n| {
            with(n, &format!(r#","iss":"{ISS}""#))
        }),
        claims_case("iss missing", Same, |n| with(n, "")),
        claims_case("iss null", Same, |n| with(n, r#","iss":null"#)),
        claims_case("iss wrong", Same, |n| {
            with(n, r#","iss":"https://evil.test""#)
        }),
        claims_case("iss number", Same, |n| with(n, r#","iss":5"#)),
        claims_case("iss array with it", Same, |n| {
            with(n, &format!(r#","iss":["a","{ISS}"]"#))
        }),
        claims_case("iss array without it", Same, |n| with(n, r#","iss":["a"]"#)),
        claims_case("iss empty array", Same, |n| with(n, r#","iss":[]"#)),
        claims_case("iss twice", Same, |n| {
            with(n, &format!(r#","iss":"{ISS}","iss":"{ISS}""#))
        }),
    ]
}
