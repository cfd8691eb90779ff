//! `bench` stopped by SIGTERM (a `timeout`, a cancelled CI job) stops the servers it
//! started, instead of dying where it stands and leaving them on their ports.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Processes whose parent is `pid`, from `/proc/<p>/stat` (field 4, counted after the
/// command name's closing parenthesis).
fn children_of(pid: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|p| {
            std::fs::read_to_string(format!("/proc/{p}/stat"))
                .ok()
                .and_then(|s| {
                    let rest = &s[s.rfind(')')? + 1..];
                    rest.split_whitespace().nth(1)?.parse::<u32>().ok()
                })
                == Some(pid)
        })
        .collect()
}

/// True while `pid` exists and is not a zombie.
fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| Some(s[s.rfind(')')? + 1..].trim_start().starts_with('Z')))
        .is_some_and(|zombie| !zombie)
}

fn until(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !done() {
        assert!(Instant::now() < deadline, "{what} within {limit:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn sigterm_stops_the_servers_bench_started() {
    // The baseline run starts one server, a child process (`bench serve-baseline`), and
    // needs neither Redis nor a database.
    let mut bench = Command::new(env!("CARGO_BIN_EXE_bench"))
        .args([
            "baseline",
            "--duration",
            "120",
            "--connections",
            "1",
            "--quiet",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start bench");
    let pid = bench.id();
    let mut server = None;
    until(
        "the baseline server starts",
        Duration::from_secs(60),
        || {
            server = children_of(pid).into_iter().find(|c| {
                std::fs::read(format!("/proc/{c}/cmdline"))
                    .is_ok_and(|cmd| String::from_utf8_lossy(&cmd).contains("serve-baseline"))
            });
            server.is_some()
        },
    );
    let server = server.expect("found above");
    // Let the run get going, so the signal lands mid-load.
    std::thread::sleep(Duration::from_millis(500));

    let sent = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .expect("run kill");
    assert!(sent.success());
    let mut status = None;
    until("bench exits", Duration::from_secs(30), || {
        status = bench.try_wait().expect("wait for bench");
        status.is_some()
    });
    // The server goes with it (reaped by bench, or by init once bench is gone). One left
    // running is stopped here, so a failure leaves nothing behind.
    let deadline = Instant::now() + Duration::from_secs(10);
    while running(server) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let orphaned = running(server);
    if orphaned {
        let _ = Command::new("kill")
            .args(["-KILL", &server.to_string()])
            .status();
    }
    assert!(!orphaned, "the baseline server outlived bench");
    // Only now: the server shared bench's stderr, so reading it waits for both to end.
    let mut stderr = String::new();
    if let Some(mut e) = bench.stderr.take() {
        let _ = e.read_to_string(&mut stderr);
    }
    let status = status.expect("exited above");
    assert!(!status.success(), "an interrupted run is a failure");
    assert!(stderr.contains("interrupted"), "{stderr}");
}
