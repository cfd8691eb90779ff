//! Parsing and validation of the gateway's settings, one rule per test.

use super::*;

/// Parses `args` after a loopback listener, so only the setting under test can fail.
fn parse(args: &[&str]) -> Config {
    let mut all = vec!["gw", "--listen", "127.0.0.1:8080"];
    all.extend_from_slice(args);
    Config::parse_from(all)
}

#[test]
fn defaults_are_valid_on_loopback_only() {
    parse(&[]).validate().unwrap();
    let public = |args: &[&str]| {
        let mut all = vec!["gw"];
        all.extend_from_slice(args);
        Config::parse_from(all).validate()
    };
    let err = public(&[]).unwrap_err();
    assert_eq!(err.setting, "--listen", "{err}");
    assert!(err.to_string().contains("no identity source"), "{err}");
    assert!(!err.to_string().contains('\n'), "one line: {err}");
    public(&["--insecure-body-user"]).unwrap();
    public(&["--token-secret-file", "/x"]).unwrap();
    public(&[
        "--user-header",
        "x-user",
        "--trusted-proxies",
        "10.0.0.0/8,127.0.0.1/32",
    ])
    .unwrap();
}

/// haproxy takes a gateway out after `fall` failed checks `inter` apart; a drain delay
/// shorter than that would close the listener while claims still arrive.
#[test]
fn drain_delay_default_outlasts_the_balancer_check() {
    let cfg = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../deploy/haproxy/haproxy.cfg"
    ))
    .unwrap();
    let server = cfg
        .lines()
        .find(|l| l.contains("default-server") || l.trim_start().starts_with("server "))
        .expect("a server line");
    let word = |key: &str| -> u64 {
        let mut it = server.split_whitespace();
        while let Some(w) = it.next() {
            if w == key {
                let v = it.next().expect("value");
                // `inter 1s` / `inter 500ms` in ms; `fall 3` as the count it is.
                return match (v.strip_suffix("ms"), v.strip_suffix('s')) {
                    (Some(ms), _) => ms.parse().unwrap(),
                    (None, Some(s)) => s.parse::<u64>().unwrap() * 1000,
                    (None, None) => v.parse().unwrap(),
                };
            }
        }
        panic!("{key} not on {server:?}");
    };
    let removal_ms = word("inter") * word("fall");
    assert!(
        parse(&[]).drain_delay_ms > removal_ms,
        "drain delay {} ms does not outlast {removal_ms} ms of failed checks",
        parse(&[]).drain_delay_ms
    );
}

/// haproxy's `timeout server` must outlast the gateway's own worst case for a claim, or a
/// claim that may still succeed reaches the client as a bare 504. With no overall request
/// deadline, that worst case is the Redis calls a claim can make, each under
/// `--redis-timeout-ms`: a queue SKU's state read, the metadata load, and the script
/// calls (claim on the home shard, a take on each other shard, settle), each of which
/// carries `--wait-ms` more in replica mode.
#[test]
fn balancer_server_timeout_outlasts_a_claim() {
    let cfg = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../deploy/haproxy/haproxy.cfg"
    ))
    .unwrap();
    let line = cfg
        .lines()
        .find(|l| l.trim_start().starts_with("timeout server "))
        .expect("a `timeout server` line");
    let v = line.split_whitespace().nth(2).expect("a value");
    let haproxy_ms: u64 = match (v.strip_suffix("ms"), v.strip_suffix('s')) {
        (Some(ms), _) => ms.parse().unwrap(),
        (None, Some(s)) => s.parse::<u64>().unwrap() * 1000,
        (None, None) => v.parse().unwrap(),
    };
    let gw = parse(&[]);
    let script_calls = u64::from(gw.redis.shards) + 1;
    let worst_ms = (2 + script_calls) * gw.redis_timeout_ms + script_calls * gw.wait_ms;
    assert!(
        haproxy_ms > worst_ms,
        "timeout server {haproxy_ms} ms is not above a claim's worst case, {worst_ms} ms"
    );
}

#[test]
fn log_format_parses() {
    assert_eq!(parse(&[]).log_format, LogFormat::Text);
    assert_eq!(parse(&["--log-format", "json"]).log_format, LogFormat::Json);
    assert!(Config::try_parse_from(["gw", "--log-format", "xml"]).is_err());
}

#[test]
fn bad_settings_name_themselves() {
    let cases: &[(&[&str], &str)] = &[
        (&["--shards", "0"], "--shards"),
        (&["--max-in-flight", "0"], "--max-in-flight"),
        (&["--write-timeout-ms", "0"], "--write-timeout-ms"),
        (&["--max-connection-age-ms", "0"], "--max-connection-age-ms"),
        (&["--max-body-bytes", "10"], "--max-body-bytes"),
        (&["--max-header-bytes", "4096"], "--max-header-bytes"),
        (&["--max-header-bytes", "2000000"], "--max-header-bytes"),
        (&["--user-header", "bad header"], "--user-header"),
        (&["--user-header", "x-user"], "--user-header"),
        (
            &["--token-secret-file", "/a", "--token-jwks", "/b"],
            "--token-secret-file",
        ),
        (&["--client-burst", "0"], "--client-burst"),
        (&["--client-slots", "0"], "--client-slots"),
        (&["--worker-threads", "5000"], "--worker-threads"),
        (&["--access-log-rate", "1000000"], "--access-log-rate"),
        (&["--redis", "a:1,b:2"], "--redis"),
        (&["--redis", ","], "--redis"),
        (&["--redis", "", "--redis-cluster"], "--redis"),
        (&["--shards", "5000"], "--shards"),
        (
            &["--durability", "replica", "--wait-ms", "900"],
            "--wait-ms",
        ),
    ];
    for (args, setting) in cases {
        let err = parse(args).validate().unwrap_err();
        assert_eq!(err.setting, *setting, "{args:?}: {err}");
        assert!(!err.to_string().contains('\n'), "one line: {err}");
    }
}
