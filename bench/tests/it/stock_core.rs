//! `bench core` end to end on tiny numbers: both private Redis targets start, every claim
//! succeeds, the slices add up, and the servers are gone afterwards.

use bench::stock_core::{self, CoreOpts};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn core_bench_runs_on_single_and_cluster() {
    let opts = CoreOpts {
        claims: 500,
        concurrency: 8,
        width: 4,
        shards: 16,
        reps: 1,
        masters: 3,
        no_request_id: false,
        json: None,
    };
    let r = stock_core::run(&opts).await.unwrap();
    assert_eq!(r.samples.len(), 2);
    for s in &r.samples {
        assert_eq!((s.claimed, s.errors), (500, 0), "{s:?}");
        assert!(s.slices_consistent, "{s:?}");
        // CPU is read from each process's CPU clock (nanoseconds): the claims cost both
        // this process and Redis some, so a reading that failed or was taken from the
        // wrong process shows as missing or zero.
        for cpu in [s.client_cpu_us_per_claim, s.redis_cpu_us_per_claim] {
            assert!(cpu.is_some_and(|us| us > 0.0), "{s:?}");
        }
    }
    assert!(r.single_median_claims_per_s > 0.0 && r.cluster_median_claims_per_s > 0.0);
    let table = stock_core::render(&r);
    assert!(table.contains("| median | single | cluster (3 masters) |"));
    assert!(table.contains("| Redis CPU µs per claim |"), "{table}");
    assert_eq!(stock_core::median(vec![3.0, 1.0, 2.0]), 2.0);
    assert_eq!(stock_core::median(vec![4.0, 1.0, 2.0, 3.0]), 2.5);
}
