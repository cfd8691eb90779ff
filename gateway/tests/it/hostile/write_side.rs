//! A pipelining client that never reads, and connections past their maximum age (see
//! `mod.rs`).

use super::*;

/// A connection that pipelines requests as fast as it can and never reads an answer, from
/// a socket with a tiny receive buffer: the answers fill the buffers, the server's write
/// stalls, and from then on the server reads nothing more from it either. Each request is
/// for a 12 KB unknown path, whose 404 answer echoes it: the server's send buffer (which
/// the kernel grows to a few MB) fills after a few hundred requests instead of after tens
/// of thousands. Returns the stream (still open, still unread) and the bytes sent.
async fn pipelining_non_reader(addr: SocketAddr) -> (TcpStream, usize) {
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket.set_recv_buffer_size(4096).expect("SO_RCVBUF");
    let mut stream = socket.connect(addr).await.expect("connect");
    let path = "x".repeat(12_000);
    let chunk = format!("GET /{path} HTTP/1.1\r\nhost: x\r\n\r\n").repeat(4);
    let chunk = chunk.as_bytes();
    let mut sent = 0;
    // Until a write blocks (every buffer on the way is full) or 64 MiB, whichever first.
    while sent < 64 << 20 {
        match tokio::time::timeout(Duration::from_millis(300), stream.write_all(chunk)).await {
            Ok(Ok(())) => sent += chunk.len(),
            Ok(Err(_)) | Err(_) => break,
        }
    }
    (stream, sent)
}

/// Connections that never read. With one connection slot, a client that pipelines
/// requests and never reads its answers holds the slot until the write timeout cuts it;
/// the next client is then served. Without a write timeout the slot is held for good (the
/// header timeout never runs: the server is stuck writing, not reading) and the next
/// client waits forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_reading_pipeliner_is_cut_by_the_write_timeout() {
    let write_timeout = Duration::from_millis(500);
    let s = setup(8007, 100, |c| {
        c.max_connections = 1;
        c.write_timeout_ms = write_timeout.as_millis() as u64;
        // Far past the test, so only the write timeout can free the slot.
        c.max_connection_age_ms = 600_000;
        // Closes the test client's idle keep-alive connection (from the readiness wait),
        // which would hold the only slot. It never cuts the hog: a server stuck writing
        // reads no request head.
        c.header_timeout_ms = 200;
    })
    .await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    let addr = s.gw.api;
    let (mut hog, sent) = pipelining_non_reader(addr).await;
    let stalled = Instant::now();
    let (a, waited) = normal_claim(addr, s.meta.sku, "behind-pipeliner").await;
    // The hog was cut: what it can still read ends (EOF or reset) instead of waiting.
    let mut sink = vec![0u8; 64 * 1024];
    let mut unread = 0usize;
    let closed = loop {
        match tokio::time::timeout(EXCHANGE_LIMIT, hog.read(&mut sink)).await {
            Ok(Ok(0)) | Ok(Err(_)) => break true,
            Ok(Ok(n)) => unread += n,
            Err(_) => break false,
        }
    };
    println!(
        "drill=non_reader write_timeout_ms={} pipelined_bytes={sent} answer_bytes_left={unread} normal_status={} normal_waited_ms={} since_stall_ms={} hog_closed={closed}",
        write_timeout.as_millis(),
        a.status.unwrap_or(0),
        waited.as_millis(),
        stalled.elapsed().as_millis(),
    );
    assert_eq!(
        a.status,
        Some(201),
        "served once the hog is cut: {:?}",
        a.body
    );
    assert!(
        waited < drills::scaled(write_timeout * 6),
        "waited {waited:?} behind a hog cut after {write_timeout:?}"
    );
    assert!(closed, "the server closed the non-reading connection");
    s.gw.stop().await;
}

/// A well-behaved keep-alive client that never goes idle is closed once its connection is
/// older than `--max-connection-age-ms`: the request in progress is answered
/// (`connection: close`), then the server closes. Without a maximum age it keeps the
/// connection (and its slot) for as long as it likes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_are_closed_at_the_maximum_age() {
    let max_age = Duration::from_millis(1_000);
    let s = setup(8008, 100, |c| {
        c.max_connection_age_ms = max_age.as_millis() as u64;
    })
    .await;
    let started = Instant::now();
    let mut st = TcpStream::connect(s.gw.api).await.expect("connect");
    let give_up = drills::scaled(max_age * 6);
    let (mut answered, mut saw_close) = (0u32, false);
    let lifetime = loop {
        if started.elapsed() > give_up {
            break None;
        }
        if st
            .write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
            .await
            .is_err()
        {
            break Some(started.elapsed());
        }
        let mut buf = Vec::new();
        let mut chunk = [0u8; 1024];
        let eof = loop {
            match tokio::time::timeout(EXCHANGE_LIMIT, st.read(&mut chunk)).await {
                Ok(Ok(0)) | Ok(Err(_)) | Err(_) => break true,
                Ok(Ok(n)) => buf.extend_from_slice(&chunk[..n]),
            }
            if complete(&buf) {
                break false;
            }
        };
        if complete(&buf) {
            answered += 1;
            let head = String::from_utf8_lossy(&buf).to_ascii_lowercase();
            saw_close |= head.contains("connection: close");
        }
        if eof {
            break Some(started.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    println!(
        "drill=max_age max_connection_age_ms={} closed_after_ms={} answered={answered} connection_close_sent={saw_close}",
        max_age.as_millis(),
        lifetime.map_or("-".into(), |d| d.as_millis().to_string()),
    );
    let lifetime = lifetime.expect("the server closed an old connection");
    assert!(
        lifetime >= max_age,
        "closed after {lifetime:?}, before the maximum age"
    );
    assert!(answered >= 5, "the connection served requests until then");
    // The server is still there for a new connection.
    let (a, _) = normal_claim(s.gw.api, s.meta.sku, "after-max-age").await;
    assert_eq!(a.status, Some(201), "{:?}", a.body);
    s.gw.stop().await;
}
