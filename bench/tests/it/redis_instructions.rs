//! `bench/external/redis_instructions.sh` in a short form: every row of its table (the
//! peer's script, claim.lua without and with a request id, a reroute's hold and its take +
//! settle) gets a count in both regimes and its steady-state count split in four parts, or
//! the test fails. No bound on the counts or the time: the figures are docs/BENCHMARKS.md's,
//! taken with the full command.

use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::Duration;

use test_support::{slack, try_wait_until};

const ROWS: [&str; 7] = [
    "peer (bench/peer/seckill.lua)",
    "claim.lua, no request id",
    "claim.lua, request id",
    "reroute, no request id: claim.lua placing the hold",
    "reroute, no request id: take.lua + settle.lua",
    "reroute, request id: claim.lua placing the hold",
    "reroute, request id: take.lua + settle.lua",
];

/// The table of `out` whose header starts with `head`.
fn table<'a>(out: &'a str, head: &str) -> &'a str {
    out.split("\n\n")
        .find(|t| t.starts_with(head))
        .unwrap_or_else(|| panic!("no table {head:?} in\n{out}"))
}

/// The row's thousands of instructions per call, cell by cell.
fn counts(table: &str, row: &str) -> Vec<f64> {
    let line = table
        .lines()
        .find(|l| l.starts_with(&format!("| {row} |")))
        .unwrap_or_else(|| panic!("no row {row:?} in\n{table}"));
    line.split('|')
        .map(str::trim)
        .filter_map(|cell| cell.strip_suffix('k'))
        .map(|k| k.parse().unwrap_or_else(|_| panic!("{row}: {k:?}")))
        .collect()
}

#[test]
fn every_script_gets_a_count_per_call_under_callgrind() {
    let out = tempfile_path("redis-instructions.out");
    let err = tempfile_path("redis-instructions.err");
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/external/redis_instructions.sh"
    );
    let mut child = Command::new(script)
        // Listpacks of 32 users instead of 512: the same paths in fewer calls.
        .envs([
            ("N", "100"),
            ("SMALL", "1"),
            ("WARM", "0"),
            ("IDLE_S", "0.5"),
        ])
        .env("REDIS_ARGS", "--hash-max-listpack-entries 32")
        .env_remove("FORM")
        .env_remove("DUMPS")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).expect("stdout file"))
        .stderr(std::fs::File::create(&err).expect("stderr file"))
        // Its own group, so that a run past the bound is stopped with Redis under valgrind.
        .process_group(0)
        .spawn()
        .expect("start redis_instructions.sh");
    let mut status = None;
    let waited = try_wait_until(
        "redis_instructions.sh",
        slack(Duration::from_secs(600)),
        || {
            status = child.try_wait().expect("wait for the script");
            status.is_some()
        },
    );
    if waited.is_err() {
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", child.id())])
            .status();
        let _ = child.wait();
    }
    let printed = std::fs::read_to_string(&out).unwrap_or_default();
    let stderr = std::fs::read_to_string(&err).unwrap_or_default();
    let _ = (std::fs::remove_file(&out), std::fs::remove_file(&err));
    println!("{printed}");
    waited.unwrap();
    assert!(
        status.is_some_and(|s| s.success()),
        "{status:?}\n{printed}\n{stderr}"
    );
    let per_call = table(&printed, "| script |");
    let parts = table(&printed, "| steady state,");
    for row in ROWS {
        let k = counts(per_call, row);
        assert_eq!(k.len(), 2, "{row}: a count for both regimes: {k:?}");
        assert!(k.iter().all(|&x| x > 0.0), "{row}: {k:?}");
        let p = counts(parts, row);
        assert_eq!(p.len(), 4, "{row}: four parts: {p:?}");
        assert!(p.iter().all(|&x| x > 0.0), "{row}: {p:?}");
    }
    // A request id adds its stored answer's read and write to a claim, a hold and a settle.
    for (without, with) in [(1, 2), (3, 5), (4, 6)] {
        let (a, b) = (
            counts(per_call, ROWS[without]),
            counts(per_call, ROWS[with]),
        );
        assert!(
            a.iter().zip(&b).all(|(a, b)| b >= a),
            "{} {a:?} against {} {b:?}",
            ROWS[without],
            ROWS[with]
        );
    }
}

fn tempfile_path(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("{}-{name}", std::process::id()))
}
