//! The external clients (`bench/src/stack/external`) against the bare baseline server in
//! this process: each one's answers, latency and CPU come back as a report.

use std::time::Duration;

use bench::stack::cpu::{Role, Watched};
use bench::stack::external::{run_external, ExternalClient, ExternalSpec};

async fn drive(client: ExternalClient) {
    let addr = crate::common::baseline_server(None).await;
    let spec = ExternalSpec {
        client,
        bin: client.name().to_owned(),
        url: format!("http://{addr}/v1/claims"),
        threads: 2,
        connections: 4,
        duration: Duration::from_secs(1),
        timeout: Duration::from_secs(2),
        tag: format!("ext-{}-", client.name()),
        skus: vec![1],
        tokens_file: None,
    };
    // The server runs in this process: its CPU is this process's.
    let watched = vec![Watched {
        name: "bare hyper server".into(),
        role: Role::Baseline,
        pid: None,
    }];
    let r = run_external(&spec, watched).await.unwrap();
    assert!(
        r.requests > 100,
        "{client:?} answered {} requests",
        r.requests
    );
    assert_eq!(
        r.statuses.get(&200).copied(),
        Some(r.requests),
        "{client:?}: every answer is the server's 200, counted once: {:?}",
        r.statuses
    );
    assert_eq!(r.socket_errors, 0);
    assert!(r.duration_s >= 0.9, "{client:?} ran {} s", r.duration_s);
    assert!(r.p50_us > 0 && r.p50_us <= r.p99_us && r.p99_us <= r.max_us);
    let own = &r.cpu[0];
    assert_eq!(own.role, Role::ExternalClient);
    assert!(own.process.starts_with(client.name()));
    assert!(own.cpu_s > 0.0 && own.us_per_answer > 0.0);
    let server = r.cpu.iter().find(|c| c.role == Role::Baseline).unwrap();
    assert!(server.cpu_s > 0.0, "the server's CPU is read over the run");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrk_reports_answers_latency_and_cpu() {
    drive(ExternalClient::Wrk).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2load_reports_answers_latency_and_cpu() {
    drive(ExternalClient::H2load).await;
}
