//! The report format: stable JSON field names, Markdown and SVG, produced from a real
//! load run against the in-process baseline server (open and closed loop).

use std::net::SocketAddr;
use std::sync::Arc;

use bench::checks::invariants;
use bench::report::verdict::InvariantReport;
use bench::report::{markdown, svg};
use bench::report::{BaselineRatios, Report, SCHEMA};
use bench::scenario::{Mode, Scenario};
use loadgen::http::Target;
use loadgen::outcome::Outcome;
use loadgen::LoadSpec;

fn spec(addr: SocketAddr, s: &Scenario) -> LoadSpec {
    let target = Target::parse(&format!("http://{addr}"), "/v1/claims").unwrap();
    let mut spec = s.load_spec(vec![target], "t-".into());
    spec.progress = false;
    spec
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closed_loop_report_has_the_documented_fields() {
    let addr = crate::common::baseline_server(None).await;
    let s = Scenario {
        requests: 2_000,
        duration_s: 0.0,
        ..Scenario::default()
    };
    let r = loadgen::drive(spec(addr, &s), Arc::new(s.workload())).await;
    assert_eq!(
        r.rec.count(Outcome::Ok),
        2_000,
        "every request answered once"
    );
    let mut rep = Report::from_load("baseline", "t", &r);
    rep.invariants = Some(InvariantReport::new(invariants::client_checks(
        &s,
        &r.rec.claims,
    )));
    rep.baseline = Some(BaselineRatios::of(&rep, &rep.clone()));
    let v = serde_json::to_value(&rep).unwrap();
    for field in [
        "schema",
        "kind",
        "scenario",
        "mode",
        "connections",
        "offered_rps",
        "requests",
        "measured_s",
        "throughput_rps",
        "claims_per_s",
        "latency",
        "latency_by_outcome",
        "outcomes",
        "errors",
        "timeline",
        "invariants",
        "baseline",
    ] {
        assert!(v.get(field).is_some(), "missing {field}: {v}");
    }
    assert_eq!(v["schema"], SCHEMA);
    assert_eq!(v["mode"], "closed");
    assert_eq!(v["outcomes"]["ok"], 2_000);
    for p in [
        "count", "p50_us", "p90_us", "p99_us", "p999_us", "max_us", "mean_us",
    ] {
        assert!(v["latency"].get(p).is_some(), "latency.{p}");
    }
    assert_eq!(v["invariants"]["passed"], true);
    assert_eq!(v["baseline"]["throughput_ratio"], 1.0);
    let back: Report = serde_json::from_value(v).unwrap();
    assert_eq!(back, rep, "the JSON reads back");

    let md = markdown::run_summary(&rep);
    assert!(md.contains("| throughput |"), "{md}");
    assert!(md.contains("| ok | 2000 |"), "{md}");
    assert!(md.contains("**Invariants: PASS**"), "{md}");
    assert!(md.contains("| throughput / baseline | 1.00 |"), "{md}");

    let chart = svg::timeline(&rep);
    assert!(chart.starts_with("<svg") && chart.trim_end().ends_with("</svg>"));
    assert!(chart.contains("all answers") && chart.contains("<polyline"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_loop_keeps_the_schedule_and_measures_from_it() {
    let addr = crate::common::baseline_server(None).await;
    let s = Scenario {
        duration_s: 1.0,
        warmup_s: 0.2,
        load: bench::scenario::Load {
            mode: Mode::Open,
            rate: 500.0,
            connections: 8,
            ..Default::default()
        },
        ..Scenario::default()
    };
    let r = loadgen::drive(spec(addr, &s), Arc::new(s.workload())).await;
    let total = r.rec.total();
    // 1.2 s at 500/s is 600 scheduled requests.
    assert!((590..=600).contains(&total), "sent {total}");
    assert!(
        r.rec.measured_total() < total,
        "warm-up answers are left out of latency"
    );
    let rep = Report::from_load("run", "open", &r);
    assert_eq!(rep.offered_rps, 500.0);
    assert!(
        (400.0..600.0).contains(&rep.throughput_rps),
        "{}",
        rep.throughput_rps
    );
    let chart = svg::latency_vs_rate(&[rep.clone(), rep]);
    assert!(chart.contains("p99.9"));
}

#[test]
fn classifies_gateway_answers() {
    let c = |code, body: &str| Outcome::classify(code, body.as_bytes());
    assert_eq!(c(201, r#"{"status":"claimed"}"#), Outcome::Claimed);
    assert_eq!(c(200, r#"{"status":"claimed"}"#), Outcome::Replay);
    assert_eq!(c(200, r#"{"status":"ok"}"#), Outcome::Ok);
    assert_eq!(c(410, ""), Outcome::SoldOut);
    assert_eq!(c(409, ""), Outcome::LimitReached);
    assert_eq!(c(503, r#"{"status":"unavailable"}"#), Outcome::Unavailable);
    assert_eq!(c(503, r#"{"status":"overloaded"}"#), Outcome::Overloaded);
    assert_eq!(c(418, ""), Outcome::OtherStatus);
    assert!(!Outcome::Overloaded.is_served() && Outcome::SoldOut.is_served());
}
