//! Turns a scenario's workload into request bodies. Request `k` is a pure function of `(seed, k)`, so
//! every worker can build any request without shared state, two runs with the same seed
//! send the same requests, and a repeat can rebuild the exact request it repeats.

use bytes::Bytes;

/// How far back a repeat may reach: retries happen soon after the original.
const REPEAT_WINDOW: u64 = 1_000;

/// One claim to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimReq {
    pub sku: u64,
    pub user: u64,
    /// The request index this one repeats (itself when fresh); also its request id.
    pub origin: u64,
    pub qty: u32,
}

impl ClaimReq {
    pub fn is_repeat(&self, k: u64) -> bool {
        self.origin != k
    }

    /// JSON body per docs/API.md "HTTP API". `tag` keeps users and request ids of different
    /// runs apart on a long-lived stack.
    pub fn body(&self, tag: &str) -> Bytes {
        Bytes::from(format!(
            r#"{{"sku":{},"user":"{tag}u{}","qty":{},"request_id":"{tag}r{}"}}"#,
            self.sku, self.user, self.qty, self.origin
        ))
    }

    pub fn user_name(&self, tag: &str) -> String {
        format!("{tag}u{}", self.user)
    }
}

/// What the request generator takes from a scenario (bench's `Scenario::workload` fills it).
#[derive(Debug, Clone, PartialEq)]
pub struct WorkloadSpec {
    /// SKU ids in rank order (the first is the most popular).
    pub skus: Vec<u64>,
    /// Distinct users; request k of the run is sent by user `k mod users`.
    pub users: u64,
    /// Units per claim.
    pub qty: u32,
    /// Share of requests that resend an earlier request unchanged.
    pub repeat_ratio: f64,
    /// Zipf exponent of SKU popularity (0 = uniform).
    pub zipf_s: f64,
    /// Seed of the request generator.
    pub seed: u64,
}

/// The request generator of a run.
#[derive(Debug, Clone)]
pub struct Workload {
    skus: Vec<u64>,
    /// Cumulative Zipf weights over `skus`, last = 1.0.
    cdf: Vec<f64>,
    users: u64,
    qty: u32,
    /// `repeat_ratio` scaled to u64 for an integer comparison with a hash.
    repeat_cut: u64,
    seed: u64,
}

impl Workload {
    pub fn new(s: &WorkloadSpec) -> Self {
        let weights: Vec<f64> = (0..s.skus.len())
            .map(|i| 1.0 / ((i + 1) as f64).powf(s.zipf_s))
            .collect();
        let total: f64 = weights.iter().sum();
        let mut acc = 0.0;
        let mut cdf: Vec<f64> = weights
            .iter()
            .map(|w| {
                acc += w / total;
                acc
            })
            .collect();
        if let Some(last) = cdf.last_mut() {
            *last = 1.0;
        }
        Self {
            skus: s.skus.clone(),
            cdf,
            users: s.users,
            qty: s.qty,
            repeat_cut: (s.repeat_ratio * u64::MAX as f64) as u64,
            seed: s.seed,
        }
    }

    fn h(&self, k: u64, salt: u64) -> u64 {
        splitmix(self.seed ^ splitmix(k ^ salt.wrapping_mul(0x9e37_79b9_7f4a_7c15)))
    }

    fn is_repeat(&self, k: u64) -> bool {
        k > 0 && self.h(k, 1) < self.repeat_cut
    }

    /// Request `k` of the run.
    pub fn request(&self, k: u64) -> ClaimReq {
        let mut origin = k;
        if self.is_repeat(k) {
            let back = 1 + self.h(k, 2) % k.min(REPEAT_WINDOW);
            origin = k - back;
            // Repeat a request that was itself fresh, so the repeat resends what was sent.
            while self.is_repeat(origin) {
                origin -= 1;
            }
        }
        self.fresh(origin)
    }

    fn fresh(&self, k: u64) -> ClaimReq {
        let u = (self.h(k, 3) >> 11) as f64 / (1u64 << 53) as f64;
        let i = self
            .cdf
            .partition_point(|&c| c < u)
            .min(self.skus.len() - 1);
        ClaimReq {
            sku: self.skus[i],
            user: k % self.users,
            origin: k,
            qty: self.qty,
        }
    }
}

fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}
