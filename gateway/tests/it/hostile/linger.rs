//! Lingering close (see `mod.rs`): a client that writes a whole oversized body before it
//! reads (Python's `http.client`, most SDKs) must still read its 413, and a client that
//! keeps sending, fast or slowly, is cut off within the linger's byte and time bounds.
//!
//! The clients are blocking `std::net` sockets on threads of their own, the way such a
//! client behaves: every write completes (or fails) before the first read.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream as StdStream;
use std::sync::atomic::AtomicBool;

use gateway::{LINGER_MAX_BYTES, LINGER_TIME};

use super::*;

const POSTS: usize = 40;

fn head(framing: &str) -> String {
    format!(
        "POST /v1/claims HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n{framing}\r\n"
    )
}

/// How one post written whole before reading ended.
enum Post {
    Answered(RawAnswer),
    WriteFailed(ErrorKind),
    ReadFailed(ErrorKind),
}

/// Writes `request` whole, then reads the answer until it is complete or the server closes.
fn post_whole(addr: SocketAddr, request: &[u8]) -> Post {
    let mut s = StdStream::connect(addr).expect("connect");
    s.set_write_timeout(Some(EXCHANGE_LIMIT)).expect("timeout");
    s.set_read_timeout(Some(EXCHANGE_LIMIT)).expect("timeout");
    if let Err(e) = s.write_all(request) {
        return Post::WriteFailed(e.kind());
    }
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        match s.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => {
                buf.extend_from_slice(&chunk[..n]);
                if complete(&buf) {
                    break;
                }
            }
            Err(e) => return Post::ReadFailed(e.kind()),
        }
    }
    Post::Answered(parse_answer(&buf))
}

fn declared(len: usize) -> Vec<u8> {
    let mut r = head(&format!("content-length: {len}\r\n")).into_bytes();
    r.resize(r.len() + len, b'x');
    r
}

/// One chunk of `len` bytes and the last chunk.
fn chunked(len: usize) -> Vec<u8> {
    let mut r = head("transfer-encoding: chunked\r\n").into_bytes();
    r.extend_from_slice(format!("{len:x}\r\n").as_bytes());
    r.resize(r.len() + len, b'x');
    r.extend_from_slice(b"\r\n0\r\n\r\n");
    r
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn whole_oversized_bodies_written_before_reading_get_their_413() {
    let s = setup(8007, 100, |_| {}).await;
    let addr = s.gw.api;
    let calls = script_calls(&s.redis);
    let shapes: Vec<(&str, Vec<u8>)> = vec![
        ("declared_1MiB", declared(1 << 20)),
        ("declared_8MiB", declared(8 << 20)),
        ("chunked_8MiB", chunked(8 << 20)),
    ];
    let mut figures = Vec::new();
    let mut all_answered = true;
    for (name, request) in shapes {
        let outcomes = tokio::task::spawn_blocking(move || {
            (0..POSTS)
                .map(|_| post_whole(addr, &request))
                .collect::<Vec<_>>()
        })
        .await
        .expect("posting thread");
        let answered = outcomes
            .iter()
            .filter(|p| {
                matches!(p, Post::Answered(a)
                    if a.status == Some(413) && a.kind() == Some(ApiStatus::BadRequest))
            })
            .count();
        let write_failed = outcomes
            .iter()
            .filter(|p| matches!(p, Post::WriteFailed(_)))
            .count();
        let read_failed = outcomes
            .iter()
            .filter(|p| matches!(p, Post::ReadFailed(_)))
            .count();
        let first_failure = outcomes.iter().find_map(|p| match p {
            Post::WriteFailed(k) => Some(format!("write:{k:?}")),
            Post::ReadFailed(k) => Some(format!("read:{k:?}")),
            Post::Answered(a) if a.status != Some(413) => Some(format!("status:{:?}", a.status)),
            Post::Answered(_) => None,
        });
        figures.push(format!(
            "{name}: answered_413={answered}/{POSTS} write_failed={write_failed} read_failed={read_failed} first_failure={first_failure:?}"
        ));
        all_answered &= answered == POSTS;
    }
    println!("drill=oversized_written_whole {}", figures.join("; "));
    assert!(all_answered, "{figures:#?}");
    assert_eq!(
        script_calls(&s.redis),
        calls,
        "a refused body reached a script"
    );
    let (a, _) = normal_claim(addr, s.meta.sku, "after-linger").await;
    assert_eq!(a.status, Some(201), "{:?}", a.body);
    s.gw.stop().await;
}

/// What a sender that never stops saw: whether it read the 413, how much it wrote, and how
/// long the server kept the connection.
#[derive(Debug)]
struct Cut {
    answered_413: bool,
    written: u64,
    held: Duration,
}

/// Sends `head`, then `piece` every `every` until a write fails or the connection is
/// closed, while a second thread reads; gives up after `give_up`.
fn send_until_cut(
    addr: SocketAddr,
    head: String,
    piece: Vec<u8>,
    every: Duration,
    give_up: Duration,
) -> Cut {
    let mut w = StdStream::connect(addr).expect("connect");
    w.set_write_timeout(Some(give_up)).expect("timeout");
    let mut r = w.try_clone().expect("clone");
    r.set_read_timeout(Some(give_up)).expect("timeout");
    let started = Instant::now();
    let closed = Arc::new(AtomicBool::new(false));
    let reader = std::thread::spawn({
        let closed = closed.clone();
        move || {
            let mut buf = Vec::new();
            let mut chunk = [0u8; 4096];
            // Until EOF, a reset or the read timeout: all of them end the exchange.
            while let Ok(n @ 1..) = r.read(&mut chunk) {
                buf.extend_from_slice(&chunk[..n]);
            }
            closed.store(true, Ordering::Relaxed);
            (parse_answer(&buf), started.elapsed())
        }
    });
    let mut written = 0u64;
    if w.write_all(head.as_bytes()).is_ok() {
        while started.elapsed() < give_up && !closed.load(Ordering::Relaxed) {
            if w.write_all(&piece).is_err() {
                break;
            }
            written += piece.len() as u64;
            std::thread::sleep(every);
        }
    }
    let wrote_until = started.elapsed();
    let _ = w.shutdown(std::net::Shutdown::Both);
    let (answer, read_until) = reader.join().expect("reader thread");
    Cut {
        answered_413: answer.status == Some(413),
        written,
        held: wrote_until.min(read_until),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn senders_that_do_not_stop_are_cut_within_the_linger_bounds() {
    let s = setup(8008, 100, |_| {}).await;
    let addr = s.gw.api;
    let give_up = LINGER_TIME * 4;
    // Chunked and never ending, as fast as the socket takes it: cut by bytes.
    let flood = tokio::task::spawn_blocking(move || {
        send_until_cut(
            addr,
            head("transfer-encoding: chunked\r\n"),
            {
                let mut c = format!("{:x}\r\n", 64 * 1024).into_bytes();
                c.resize(c.len() + 64 * 1024, b'x');
                c.extend_from_slice(b"\r\n");
                c
            },
            Duration::ZERO,
            give_up,
        )
    });
    // Declared within the drain's bound, sent at 10 KiB/s: cut by time.
    let trickle = tokio::task::spawn_blocking(move || {
        send_until_cut(
            addr,
            head(&format!("content-length: {}\r\n", 1 << 20)),
            vec![b'x'; 512],
            Duration::from_millis(50),
            give_up,
        )
    });
    let flood = flood.await.expect("flood thread");
    let trickle = trickle.await.expect("trickle thread");
    println!(
        "drill=linger_bounds linger_ms={} linger_max_bytes={LINGER_MAX_BYTES} flood={flood:?} trickle={trickle:?}",
        LINGER_TIME.as_millis()
    );
    let bound = LINGER_TIME + test_support::slack(Duration::from_millis(1_500));
    for (name, cut) in [("flood", &flood), ("trickle", &trickle)] {
        assert!(cut.answered_413, "{name} never read its 413: {cut:?}");
        assert!(cut.held < bound, "{name} held its connection: {cut:?}");
    }
    // The drain's bound plus what the two socket buffers hold (a few MiB on loopback).
    assert!(
        flood.written < LINGER_MAX_BYTES + (16 << 20),
        "flood wrote {} bytes",
        flood.written
    );
    let (a, _) = normal_claim(addr, s.meta.sku, "after-bounds").await;
    assert_eq!(a.status, Some(201), "{:?}", a.body);
    s.gw.stop().await;
}

/// A linger in progress ends when the gateway stops, not at its own time bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lingering_stops_on_shutdown() {
    let mut s = setup(8009, 100, |c| c.drain_delay_ms = 0).await;
    let addr = s.gw.api;
    let trickle = tokio::task::spawn_blocking(move || {
        send_until_cut(
            addr,
            head(&format!("content-length: {}\r\n", 1 << 20)),
            vec![b'x'; 512],
            Duration::from_millis(50),
            LINGER_TIME * 4,
        )
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let stopping = Instant::now();
    s.gw.signal_stop();
    let stopped = tokio::time::timeout(LINGER_TIME * 4, s.gw.task())
        .await
        .map(|_| stopping.elapsed());
    let cut = trickle.await.expect("trickle thread");
    println!("drill=linger_shutdown stopped_after={stopped:?} trickle={cut:?}");
    assert!(cut.answered_413, "{cut:?}");
    let stopped = stopped.expect("the gateway stopped");
    assert!(
        stopped < LINGER_TIME / 2,
        "a lingering connection held the stop for {stopped:?}"
    );
}
