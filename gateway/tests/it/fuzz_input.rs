//! Drill `hostile_input` (docs/DESIGN.md), fuzz half: property tests over claim parsing.
//!
//! - [`gateway::parse_claim`] (the socket-free part of reading a claim) is fed arbitrary
//!   bytes, arbitrary JSON values, byte-level mutations of a valid claim, and near-valid
//!   claims whose fields are pushed out of range one way or another. It never panics; it
//!   either refuses with a 400 whose body is JSON with `status` and `error`, or returns a
//!   claim inside the documented ranges. For near-valid claims an independent model of the
//!   contract says which of the two it must be, and what the claim must hold.
//! - The same bodies over real HTTP to a real gateway and Redis: every answer is the
//!   rejection the pure parser predicted (status and body), and no stock moves.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::common::*;
use bytes::Bytes;
use gateway::{parse_claim, Rejection};
use http_body_util::{BodyExt, Full};
use hyper::{Request, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{
    Config as PropConfig, FileFailurePersistence, TestCaseError, TestRunner,
};
use serde_json::{Map, Value};
use test_support::RedisServer;

/// docs/API.md "HTTP API": `user` and `request_id` are 1..=64 bytes.
const MAX_ID: usize = 64;
/// The SKU the HTTP property preheats, so a parser that let a bad claim through would
/// take real stock.
const LIVE_SKU: u64 = 7001;

// ---------------------------------------------------------------------------------------
// The model: what a near-valid claim must parse to.

/// What the parser must make of one field.
#[derive(Debug, Clone, PartialEq)]
enum Want<T> {
    /// A valid value.
    Value(T),
    /// Absent or `null`: the default applies (1 for qty, none for the rest).
    Default,
    /// The whole claim must be refused.
    Refused,
}

/// One generated field: its raw JSON value (`None` = key left out) and the model's verdict.
#[derive(Debug, Clone)]
struct Field<T> {
    raw: Option<Vec<u8>>,
    want: Want<T>,
}

fn field<T>(raw: impl Into<Vec<u8>>, want: Want<T>) -> Field<T> {
    Field {
        raw: Some(raw.into()),
        want,
    }
}

fn absent<T>(want: Want<T>) -> Field<T> {
    Field { raw: None, want }
}

/// Values of the wrong JSON type for every field.
const WRONG_TYPES: &[&str] = &[
    "true",
    "false",
    "[]",
    "{}",
    "[1]",
    r#"{"a":1}"#,
    r#""""#,
    r#""1""#,
    "1.5",
    "-1",
    "1e3",
];

fn sku_field() -> impl Strategy<Value = Field<u64>> {
    let bad = prop_oneof![
        Just(absent(Want::Refused)),
        Just(field("null", Want::Refused)),
        prop::sample::select(WRONG_TYPES).prop_map(|v| field(v, Want::Refused)),
        prop::sample::select(vec![
            "-9223372036854775809",
            "18446744073709551616",
            "1e400",
            "5001.0",
            r#""5001""#,
            "0x10",
        ])
        .prop_map(|v| field(v, Want::Refused)),
        (i64::MIN..0).prop_map(|n| field(n.to_string(), Want::Refused)),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| field(format!("{f:?}"), Want::Refused)),
    ];
    prop_oneof![
        4 => prop_oneof![Just(LIVE_SKU), any::<u64>(), Just(0), Just(u64::MAX)]
            .prop_map(|n| field(n.to_string(), Want::Value(n))),
        1 => bad,
    ]
}

/// A valid id: 1..=64 bytes, no control characters (ASCII or any printable Unicode).
fn good_id() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-zA-Z0-9_.:@{}-]{1,64}",
        "\\PC{1,16}".prop_filter("1..=64 bytes", |s| (1..=MAX_ID).contains(&s.len())),
        Just("x".repeat(MAX_ID)),
        Just("€".repeat(21)),
    ]
}

/// A string id that breaks the rules: empty, too long (in bytes, not chars), control chars.
fn bad_id() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        (MAX_ID + 1..=300).prop_map(|n| "u".repeat(n)),
        Just("€".repeat(22)),
        ("[a-z]{0,10}", 0u32..0x20, "[a-z]{0,10}")
            .prop_map(|(a, c, b)| format!("{a}{}{b}", char::from_u32(c).unwrap_or('\0'))),
        prop::sample::select(vec!["\u{7f}", "a\u{85}", "\u{9f}b", "a\nb", "\r", "\t"])
            .prop_map(str::to_owned),
    ]
}

/// Raw bytes that are not valid JSON strings at all.
const BROKEN_STRINGS: &[&[u8]] = &[
    b"\"ab\xff\xfe\"",
    b"\"\xc3\x28\"",
    b"\"\xed\xa0\x80\"",
    b"\"\\ud800\"",
    b"\"\\udc00x\"",
    b"\"\\u12\"",
    b"\"\\x41\"",
    b"\"unterminated",
    b"'single'",
];

fn json_str(s: &str) -> Vec<u8> {
    serde_json::to_vec(s).expect("a string serializes")
}

/// `user` or `request_id` (both are ids; `null` and absence mean "none").
fn id_field() -> impl Strategy<Value = Field<String>> {
    prop_oneof![
        10 => good_id().prop_map(|s| field(json_str(&s), Want::Value(s))),
        1 => Just(absent(Want::Default)),
        1 => Just(field("null", Want::Default)),
        2 => bad_id().prop_map(|s| field(json_str(&s), Want::Refused)),
        1 => prop::sample::select(BROKEN_STRINGS).prop_map(|b| field(b, Want::Refused)),
        1 => prop::sample::select(WRONG_TYPES)
            .prop_filter("not a string", |v| !v.starts_with('"'))
            .prop_map(|v| field(v, Want::Refused)),
    ]
}

fn qty_field() -> impl Strategy<Value = Field<u32>> {
    prop_oneof![
        8 => prop_oneof![1u32..=10, Just(u32::MAX), any::<u32>().prop_filter("> 0", |n| *n > 0)]
            .prop_map(|n| field(n.to_string(), Want::Value(n))),
        1 => Just(absent(Want::Default)),
        1 => Just(field("null", Want::Default)),
        3 => prop_oneof![
            Just("0".to_owned()),
            Just("4294967296".to_owned()),
            Just("1.0".to_owned()),
            Just("1e0".to_owned()),
            Just("99999999999999999999999".to_owned()),
            (i64::MIN..0).prop_map(|n| n.to_string()),
            (4_294_967_296u64..).prop_map(|n| n.to_string()),
            prop::sample::select(WRONG_TYPES).prop_map(str::to_owned),
        ]
        .prop_map(|v| field(v, Want::Refused)),
    ]
}

/// Ways to break the object around otherwise fine fields.
#[derive(Debug, Clone)]
enum Wrapper {
    None,
    /// An extra key the API does not know (typos such as `quantity`).
    Unknown(String),
    /// One of the present keys again (index into the present fields).
    Duplicate(usize),
    /// The object nested this deep inside arrays.
    NestedBody(usize),
    /// An unknown key holding a value nested this deep.
    NestedField(usize),
    /// Bytes after the object.
    Trailing(String),
}

fn wrapper() -> impl Strategy<Value = Wrapper> {
    prop_oneof![
        14 => Just(Wrapper::None),
        1 => prop_oneof![
            Just("quantity".to_owned()),
            Just("Sku".to_owned()),
            Just("user ".to_owned()),
            Just(String::new()),
            "[a-z_]{1,12}",
        ]
        .prop_filter("unknown key", |k| !["sku", "user", "qty", "request_id"].contains(&k.as_str()))
        .prop_map(Wrapper::Unknown),
        1 => any::<usize>().prop_map(Wrapper::Duplicate),
        1 => (1usize..400).prop_map(Wrapper::NestedBody),
        1 => (1usize..400).prop_map(Wrapper::NestedField),
        1 => prop_oneof![Just("x".to_owned()), Just("{}".to_owned()), Just(",".to_owned()), Just("\0".to_owned())]
            .prop_map(Wrapper::Trailing),
    ]
}

/// A claim body one or more steps away from a valid one, with the model's verdict.
#[derive(Debug, Clone)]
struct NearClaim {
    sku: Field<u64>,
    user: Field<String>,
    qty: Field<u32>,
    request_id: Field<String>,
    /// The trusted header's user, when the gateway is configured with one.
    header_user: Option<String>,
    wrapper: Wrapper,
    /// Whitespace between tokens (valid JSON either way).
    pad: &'static str,
    /// Field order: a permutation of 0..4.
    order: Vec<usize>,
}

/// What a valid near-claim must parse to.
#[derive(Debug, PartialEq)]
struct Expected {
    sku: u64,
    user: String,
    qty: u32,
    request_id: Option<String>,
}

impl NearClaim {
    fn body(&self) -> Vec<u8> {
        let p = self.pad.as_bytes();
        let fields: [(&str, &Option<Vec<u8>>); 4] = [
            ("sku", &self.sku.raw),
            ("user", &self.user.raw),
            ("qty", &self.qty.raw),
            ("request_id", &self.request_id.raw),
        ];
        let mut present: Vec<(String, Vec<u8>)> = self
            .order
            .iter()
            .filter_map(|&i| {
                let (k, v) = fields[i];
                v.clone().map(|v| (k.to_owned(), v))
            })
            .collect();
        match &self.wrapper {
            Wrapper::Unknown(k) => present.push((k.clone(), b"1".to_vec())),
            Wrapper::Duplicate(i) if !present.is_empty() => {
                let again = present[i % present.len()].clone();
                present.push(again);
            }
            Wrapper::NestedField(depth) => present.push((
                "nested".into(),
                [b"[".repeat(*depth), b"]".repeat(*depth)].concat(),
            )),
            _ => {}
        }
        let mut out = Vec::new();
        out.extend_from_slice(b"{");
        for (i, (k, v)) in present.iter().enumerate() {
            if i > 0 {
                out.extend_from_slice(b",");
            }
            out.extend_from_slice(p);
            out.extend_from_slice(&json_str(k));
            out.extend_from_slice(p);
            out.extend_from_slice(b":");
            out.extend_from_slice(p);
            out.extend_from_slice(v);
            out.extend_from_slice(p);
        }
        out.extend_from_slice(b"}");
        match &self.wrapper {
            Wrapper::NestedBody(depth) => [b"[".repeat(*depth), out, b"]".repeat(*depth)].concat(),
            Wrapper::Trailing(t) => [out, t.as_bytes().to_vec()].concat(),
            _ => out,
        }
    }

    /// The contract, written independently of the gateway's code.
    fn expected(&self) -> Option<Expected> {
        let wrapped_ok = match &self.wrapper {
            Wrapper::None => true,
            // A duplicate of nothing (every field absent) adds nothing.
            Wrapper::Duplicate(_) => [
                self.sku.raw.is_none(),
                self.user.raw.is_none(),
                self.qty.raw.is_none(),
                self.request_id.raw.is_none(),
            ]
            .iter()
            .all(|absent| *absent),
            _ => false,
        };
        if !wrapped_ok {
            return None;
        }
        let Want::Value(sku) = self.sku.want else {
            return None;
        };
        let user = match (&self.header_user, &self.user.want) {
            (_, Want::Refused) => return None,
            (Some(h), Want::Value(b)) if h != b => return None,
            (Some(h), _) => h.clone(),
            (None, Want::Value(b)) => b.clone(),
            (None, Want::Default) => return None,
        };
        if user.is_empty() || user.len() > MAX_ID || user.chars().any(char::is_control) {
            return None;
        }
        let qty = match self.qty.want {
            Want::Value(n) => n,
            Want::Default => 1,
            Want::Refused => return None,
        };
        let request_id = match &self.request_id.want {
            Want::Value(r) => Some(r.clone()),
            Want::Default => None,
            Want::Refused => return None,
        };
        Some(Expected {
            sku,
            user,
            qty,
            request_id,
        })
    }
}

fn near_claim() -> impl Strategy<Value = NearClaim> {
    (
        sku_field(),
        id_field(),
        qty_field(),
        id_field(),
        prop_oneof![
            4 => Just(None),
            1 => good_id().prop_map(Some),
            1 => bad_id().prop_map(Some),
        ],
        wrapper(),
        prop::sample::select(vec!["", "", " ", "\n\t ", "\r\n"]),
        Just(vec![0usize, 1, 2, 3]).prop_shuffle(),
    )
        .prop_map(
            |(sku, user, qty, request_id, header_user, wrapper, pad, order)| NearClaim {
                sku,
                user,
                qty,
                request_id,
                header_user,
                wrapper,
                pad,
                order,
            },
        )
}

// ---------------------------------------------------------------------------------------
// Shapeless input.

/// Arbitrary JSON, with the claim's own keys over-represented so objects often get past
/// the first field.
fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        "\\PC{0,80}".prop_map(Value::from),
        ".{0,8}".prop_map(Value::from),
    ];
    let key = prop_oneof![
        4 => prop::sample::select(vec!["sku", "user", "qty", "request_id"]).prop_map(str::to_owned),
        1 => ".{0,12}",
    ];
    leaf.prop_recursive(6, 64, 8, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
            prop::collection::vec((key.clone(), inner), 0..8)
                .prop_map(|kv| Value::Object(kv.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// A valid claim with single-byte edits: flips, insertions, deletions, truncation.
fn mutated_claim() -> impl Strategy<Value = Vec<u8>> {
    let base =
        format!(r#"{{"sku":{LIVE_SKU},"user":"alice","qty":1,"request_id":"r-1"}}"#).into_bytes();
    let n = base.len();
    prop::collection::vec((0..n, any::<u8>(), 0u8..4), 1..4).prop_map(move |edits| {
        let mut b = base.clone();
        for (at, byte, op) in edits {
            let at = at % (b.len() + 1);
            match op {
                0 if at < b.len() => b[at] = byte,
                1 => b.insert(at, byte),
                2 if at < b.len() => {
                    b.remove(at);
                }
                _ => b.truncate(at),
            }
        }
        b
    })
}

/// Every shape of hostile body, for the properties that need no model.
fn any_body() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..512),
        any_json().prop_map(|v| serde_json::to_vec(&v).expect("a Value serializes")),
        mutated_claim(),
        near_claim().prop_map(|c| c.body()),
    ]
}

// ---------------------------------------------------------------------------------------
// The properties.

/// A rejection is a 4xx whose body is a JSON object with `status` and a non-empty `error`.
fn check_rejection(r: &Rejection) -> Result<Value, TestCaseError> {
    prop_assert!(r.status.is_client_error(), "not a 4xx: {}", r.status);
    prop_assert_eq!(r.status, StatusCode::BAD_REQUEST);
    let v: Value = serde_json::from_slice(&r.body)
        .map_err(|e| TestCaseError::fail(format!("rejection body is not JSON: {e}")))?;
    prop_assert_eq!(v["status"].as_str(), Some("bad_request"), "{}", v);
    prop_assert!(
        v["error"].as_str().is_some_and(|e| !e.is_empty()),
        "no error text: {}",
        v
    );
    Ok(v)
}

fn valid_id(s: &str) -> bool {
    (1..=MAX_ID).contains(&s.len()) && !s.chars().any(char::is_control)
}

/// Whatever comes in: a clean 400, or a claim inside the documented ranges.
fn check_any(body: &[u8], header_user: Option<&str>) -> Result<(), TestCaseError> {
    match parse_claim(body, header_user) {
        Err(r) => check_rejection(&r).map(|_| ()),
        Ok(c) => {
            prop_assert!(valid_id(&c.user), "user out of range: {:?}", c.user);
            prop_assert!(c.qty >= 1);
            if let Some(rid) = &c.request_id {
                prop_assert!(valid_id(rid), "request_id out of range: {:?}", rid);
            }
            if let Some(h) = header_user {
                prop_assert_eq!(&c.user, h);
            }
            // The library's own check agrees.
            prop_assert!(c.validate().is_ok(), "{:?}", c);
            Ok(())
        }
    }
}

/// Failing cases are kept beside the tests (integration tests have no `lib.rs` for
/// proptest's default location).
fn prop_config(cases: u32) -> PropConfig {
    PropConfig {
        cases,
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
            "proptest-regressions/fuzz_input.txt",
        ))),
        ..PropConfig::default()
    }
}

proptest! {
    #![proptest_config(prop_config(512))]

    #[test]
    fn arbitrary_bytes_never_panic(body in prop::collection::vec(any::<u8>(), 0..2048)) {
        check_any(&body, None)?;
    }

    #[test]
    fn arbitrary_json_is_refused_or_in_range(v in any_json(), header in prop::option::of(good_id())) {
        let body = serde_json::to_vec(&v).expect("a Value serializes");
        check_any(&body, header.as_deref())?;
    }

    #[test]
    fn mutated_claims_are_refused_or_in_range(body in mutated_claim()) {
        check_any(&body, None)?;
    }

    /// The model decides: refused exactly when some field or the shape is out of contract,
    /// and a valid claim carries exactly the fields sent.
    #[test]
    fn near_valid_claims_match_the_contract(c in near_claim()) {
        let body = c.body();
        let got = parse_claim(&body, c.header_user.as_deref());
        let text = String::from_utf8_lossy(&body);
        match (c.expected(), got) {
            (None, Err(r)) => { check_rejection(&r)?; }
            (Some(want), Ok(got)) => {
                prop_assert_eq!(
                    Expected { sku: got.sku, user: got.user, qty: got.qty, request_id: got.request_id },
                    want,
                    "body {}", text
                );
            }
            (None, Ok(got)) => prop_assert!(false, "accepted out-of-contract body {text}: {got:?}"),
            (Some(want), Err(r)) => prop_assert!(
                false,
                "refused valid body {text} (want {want:?}): {}",
                String::from_utf8_lossy(&r.body)
            ),
        }
    }
}

/// The model is not vacuous: near-valid claims land on both sides of the contract often.
#[test]
fn near_claims_cover_both_verdicts() {
    let mut runner = TestRunner::deterministic();
    let strategy = near_claim();
    let (mut valid, total) = (0u32, 2_000u32);
    for _ in 0..total {
        let c = strategy
            .new_tree(&mut runner)
            .expect("a near claim")
            .current();
        valid += u32::from(c.expected().is_some());
    }
    println!("drill=fuzz_model near_claims={total} valid={valid}");
    assert!(
        valid > total / 20 && valid < total * 19 / 20,
        "{valid} of {total} valid"
    );
}

/// Nesting far past serde_json's recursion limit is a plain 400, not a stack overflow.
#[test]
fn very_deep_nesting_is_refused() {
    for depth in [127, 128, 129, 1_000, 100_000] {
        for body in [
            [b"[".repeat(depth), b"]".repeat(depth)].concat(),
            [
                br#"{"sku":1,"user":"u","x":"#.to_vec(),
                b"{\"a\":".repeat(depth),
                b"1".to_vec(),
                b"}".repeat(depth),
                b"}".to_vec(),
            ]
            .concat(),
        ] {
            let r = parse_claim(&body, None).expect_err("nested body refused");
            assert_eq!(r.status, StatusCode::BAD_REQUEST, "depth {depth}");
        }
    }
}

// ---------------------------------------------------------------------------------------
// The same bodies over HTTP.

/// 64 hostile bodies through a real gateway and Redis: each answer is the rejection the
/// pure parser gave (a bad body never reaches the claim logic), and no stock moves.
#[test]
fn fuzzed_bodies_over_http_take_nothing() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let redis = RedisServer::start();
    let (gw, stock, meta) = rt.block_on(async {
        let stock = stock_client(&redis.url(), false).await;
        let meta = preheat(&stock, LIVE_SKU, 50, 4, 3).await;
        let gw = Gateway::start(config(&redis.url(), false)).await;
        (gw, stock, meta)
    });
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let calls_before = script_calls(&redis);

    // Refused bodies only: a valid claim for the live SKU would rightly take stock.
    // Refused bodies only: a valid claim for the live SKU would rightly take stock. Some
    // pass the body cap (4096 by default), which the HTTP path refuses with 413 first.
    let max_body = config(&redis.url(), false).max_body_bytes;
    let refused = prop_oneof![
        8 => any_body(),
        1 => prop::collection::vec(any::<u8>(), max_body - 8..max_body + 2_000),
    ]
    .prop_filter("refused", move |b| {
        b.len() > max_body || parse_claim(b, None).is_err()
    });
    let mut runner = TestRunner::new(prop_config(64));
    let started = Instant::now();
    // `TestRunner::run` takes an `Fn`, so the tallies live in cells.
    let sent = Cell::new(0u32);
    let statuses = RefCell::new(BTreeMap::<u16, u32>::new());
    let result = runner.run(&refused, |body| {
        let too_large = body.len() > max_body;
        let want =
            (!too_large).then(|| parse_claim(&body, None).expect_err("filtered to refusals"));
        let (status, bytes) = rt.block_on(async {
            let req = Request::post(format!("http://{}/v1/claims", gw.api))
                .header("content-type", "application/json")
                .body(Full::new(Bytes::from(body.clone())))
                .expect("request");
            let resp = tokio::time::timeout(Duration::from_secs(5), client.request(req))
                .await
                .map_err(|_| TestCaseError::fail("no answer within 5 s"))?
                .map_err(|e| TestCaseError::fail(format!("request failed: {e}")))?;
            let status = resp.status();
            let bytes = resp
                .into_body()
                .collect()
                .await
                .map_err(|e| TestCaseError::fail(format!("reading answer: {e}")))?
                .to_bytes();
            Ok::<_, TestCaseError>((status, bytes))
        })?;
        sent.set(sent.get() + 1);
        *statuses.borrow_mut().entry(status.as_u16()).or_default() += 1;
        let got: Value = serde_json::from_slice(&bytes)
            .map_err(|e| TestCaseError::fail(format!("answer is not JSON: {e}")))?;
        prop_assert!(status.is_client_error(), "{} {}", status, got);
        prop_assert_eq!(got["status"].as_str(), Some("bad_request"), "{}", got);
        match want {
            None => prop_assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE),
            Some(want) => {
                let want_json: Value = serde_json::from_slice(&want.body).expect("JSON rejection");
                prop_assert_eq!(status, want.status);
                prop_assert_eq!(&got, &want_json);
            }
        }
        Ok(())
    });
    let (left, calls_after) =
        rt.block_on(async { (slices_left(&stock, &meta).await, script_calls(&redis)) });
    println!(
        "drill=fuzz_http cases={} statuses={:?} script_calls={} stock_before={} stock_after={left} elapsed_ms={}",
        sent.get(),
        statuses.borrow(),
        calls_after - calls_before,
        meta.stock,
        started.elapsed().as_millis()
    );
    if let Err(e) = result {
        panic!("{e}");
    }
    assert_eq!(left, meta.stock as i64, "a refused body took stock");
    assert_eq!(calls_after, calls_before, "a refused body reached a script");
    rt.block_on(gw.stop());
}
