//! Scenario parsing: TOML, flag overrides, presets, and the errors that name the field.

use bench::scenario::cli::{parse_sku, ScenarioArgs};
use bench::scenario::{Mode, Scenario};

const HOT_DROP: &str = r#"
name = "hot-drop"
users = 5000
limit = 2
qty = 1
repeat_ratio = 0.01
zipf_s = 1.1
duration_s = 10
warmup_s = 1

[load]
mode = "open"
connections = 500
rate = 2000

[[skus]]
id = 1
stock = 100
width = 8

[[skus]]
id = 2
stock = 50
"#;

#[test]
fn parses_a_full_file() {
    let s = Scenario::from_toml(HOT_DROP, "hot-drop.toml").unwrap();
    assert_eq!(s.name, "hot-drop");
    assert_eq!(s.users, 5000);
    assert_eq!(s.limit, 2);
    assert_eq!(s.load.mode, Mode::Open);
    assert_eq!(s.load.connections, 500);
    assert_eq!(s.load.rate, 2000.0);
    assert_eq!(s.skus.len(), 2);
    assert_eq!(s.skus[1].width, 8, "width defaults to 8");
    assert_eq!(s.total_stock(), 150);
    assert_eq!(s.load.timeout_ms, 5000, "unset load fields keep defaults");
}

#[test]
fn round_trips_through_toml() {
    let s = Scenario::from_toml(HOT_DROP, "x").unwrap();
    let again = Scenario::from_toml(&s.to_toml(), "y").unwrap();
    assert_eq!(s, again);
}

#[test]
fn errors_name_the_field() {
    let cases = [
        ("users = 0", "users"),
        ("repeat_ratio = 1.5", "repeat_ratio"),
        ("qty = 3\nlimit = 2", "qty"),
        ("skus = []", "skus"),
        ("duration_s = 0\nrequests = 0", "duration_s"),
        ("[load]\nmode = \"open\"\nrate = 0", "load.rate"),
        (
            "[[skus]]\nid = 1\nstock = 1\n[[skus]]\nid = 1\nstock = 2",
            "skus",
        ),
    ];
    for (text, field) in cases {
        let err = Scenario::from_toml(text, "t.toml").unwrap_err().to_string();
        assert!(err.contains(field), "{text:?}: {err}");
    }
    let err = Scenario::from_toml("userz = 3", "t.toml")
        .unwrap_err()
        .to_string();
    assert!(err.contains("userz"), "unknown fields are rejected: {err}");
}

#[test]
fn flags_override_the_file_and_presets() {
    let dir = std::env::temp_dir().join(format!("bench-scn-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("s.toml");
    std::fs::write(&path, HOT_DROP).unwrap();
    let args = ScenarioArgs {
        scenario: Some(path),
        connections: Some(7),
        mode: Some(Mode::Closed),
        skus: vec![parse_sku("9:1000:4").unwrap()],
        ..Default::default()
    };
    let s = args.scenario().unwrap();
    assert_eq!(s.load.connections, 7);
    assert_eq!(s.load.mode, Mode::Closed);
    assert_eq!(
        (s.skus[0].id, s.skus[0].stock, s.skus[0].width),
        (9, 1000, 4)
    );
    assert_eq!(s.users, 5000, "the file's other fields stay");
    std::fs::remove_dir_all(&dir).unwrap();

    let p = ScenarioArgs {
        preset: Some("users-5k".into()),
        ..Default::default()
    }
    .scenario()
    .unwrap();
    assert_eq!(
        (p.users, p.total_stock(), p.repeat_ratio),
        (5000, 100, 0.01)
    );
    let short = ScenarioArgs {
        preset: Some("conn-500".into()),
        short: true,
        ..Default::default()
    }
    .scenario()
    .unwrap();
    assert!(short.duration_s <= 20.0 && short.load.connections == 500);
    assert!(ScenarioArgs {
        preset: Some("nope".into()),
        ..Default::default()
    }
    .scenario()
    .is_err());
    assert!(parse_sku("1").is_err() && parse_sku("a:b").is_err());
}

#[test]
fn workload_is_deterministic_with_repeats_and_skew() {
    let s = Scenario::from_toml(HOT_DROP, "x").unwrap();
    let w = s.workload();
    let n = 100_000u64;
    let (mut repeats, mut sku1) = (0, 0);
    for k in 0..n {
        let r = w.request(k);
        assert_eq!(r, w.request(k), "request k is a pure function of k");
        if r.is_repeat(k) {
            repeats += 1;
            assert!(r.origin < k);
            assert!(
                !w.request(r.origin).is_repeat(r.origin),
                "repeats resend a fresh request"
            );
            assert_eq!(w.request(r.origin), r, "a repeat is the same request");
        }
        if r.sku == 1 {
            sku1 += 1;
        }
    }
    let ratio = repeats as f64 / n as f64;
    assert!((0.007..0.013).contains(&ratio), "repeat ratio {ratio}");
    // Zipf s=1.1 over 2 SKUs: weights 1 and 2^-1.1 ≈ 0.467 → SKU 1 gets ≈ 68%.
    let share = sku1 as f64 / n as f64;
    assert!((0.65..0.71).contains(&share), "sku 1 share {share}");
    let body = String::from_utf8(w.request(3).body("t1-").to_vec()).unwrap();
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["user"], "t1-u3");
    assert_eq!(v["qty"], 1);
}

#[test]
fn the_shipped_example_parses() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/scenarios/hot-drop.toml");
    let s = Scenario::from_file(std::path::Path::new(path)).unwrap();
    assert_eq!(s.name, "hot-drop");
    assert_eq!(s.skus.len(), 2);
}
