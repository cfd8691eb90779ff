//! One request of a user and what its answer says: the user's byte (a unit claimed, an
//! entry taken), its answer class, and in a queue phase when to send it again.

use std::sync::atomic::Ordering;
use std::time::Duration;

use hyper::header::{HeaderName, HeaderValue};
use loadgen::http::{Answer, Conn};
use loadgen::outcome::Outcome;
use loadgen::token::Tokens;
use loadgen::workload::ClaimReq;
use shard_router::{now_ms, ApiStatus};

use super::queue::Waiting;
use super::{Kind, Shared, CLOSED, ENTERED, NO_STATUS};

/// Header a waiting client sends its queue token in.
const QUEUE_TOKEN: &str = "queue-token";
/// A retry's delay after an answer that ends nothing (429, 503, no answer).
const RETRY: Duration = Duration::from_secs(1);

/// What a worker sends with.
pub(super) struct Ctx<'a> {
    pub(super) sku: u64,
    pub(super) kind: Kind,
    pub(super) tag: &'a str,
    pub(super) tokens: Option<&'a Tokens>,
    pub(super) shared: &'a Shared,
}

impl Ctx<'_> {
    /// Sends one request of `user` (with its queue token when `with_token` and it has
    /// one) and records what it says about the user; the class, and in a queue phase when
    /// to send again (`None`: the answer ends the user's wait).
    pub(super) async fn send(
        &self,
        conn: &mut Conn,
        user: u32,
        origin: u64,
        with_token: bool,
    ) -> (usize, Option<Duration>) {
        let answer = self.post(conn, user, origin, with_token).await;
        let body = body_of(&answer.body);
        let status = body.as_ref().map(|b| b.status);
        let mut next = None;
        match self.kind {
            Kind::Draw => self.note_entry(user, status),
            Kind::Fcfs | Kind::Queue { .. } => {
                self.note_claim(user, &answer);
                if let (Some(q), Kind::Queue { .. }) = (&self.shared.queue, self.kind) {
                    next = queue_next(q, user, body);
                }
            }
        }
        let class = status
            .and_then(|s| ApiStatus::ALL.iter().position(|a| *a == s))
            .unwrap_or(NO_STATUS);
        (class, next)
    }

    /// Posts `user`'s claim, with its queue token when `with_token` and it has one.
    async fn post(&self, conn: &mut Conn, user: u32, origin: u64, with_token: bool) -> Answer {
        let req = ClaimReq {
            sku: self.sku,
            user: user as u64,
            origin,
            qty: 1,
        };
        let auth = self
            .tokens
            .map(|t| t.authorization(req.user, || req.user_name(self.tag)));
        let token = self
            .shared
            .queue
            .as_ref()
            .filter(|_| with_token)
            .and_then(|q| q.tokens[user as usize].get())
            .and_then(|t| HeaderValue::from_str(t).ok());
        match token {
            Some(t) => {
                if let Some(q) = &self.shared.queue {
                    q.with_token.fetch_add(1, Ordering::Relaxed);
                }
                let extra = [(HeaderName::from_static(QUEUE_TOKEN), t)];
                conn.post_with(req.body(self.tag), auth, &extra).await
            }
            None => conn.post(req.body(self.tag), auth).await,
        }
    }

    /// A draw: flags the user entered, or told the entries are closed.
    fn note_entry(&self, user: u32, status: Option<ApiStatus>) {
        let slot = &self.shared.per_user[user as usize];
        match status {
            Some(
                ApiStatus::Entered
                | ApiStatus::Drawing
                | ApiStatus::Won
                | ApiStatus::WonPending
                | ApiStatus::Waitlisted
                | ApiStatus::Lost,
            ) => {
                slot.fetch_or(ENTERED, Ordering::Relaxed);
            }
            Some(ApiStatus::EntriesClosed) => {
                slot.fetch_or(CLOSED, Ordering::Relaxed);
            }
            _ => {}
        }
    }

    /// First come (with or without a queue): counts the user's units, and a queue's first
    /// and last claim.
    fn note_claim(&self, user: u32, answer: &Answer) {
        let slot = &self.shared.per_user[user as usize];
        if answer.outcome == Outcome::Claimed {
            // A fresh 201 (a replay answers 200): one more unit for this user.
            let _ = slot.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                Some(n.saturating_add(1))
            });
            if let Some(q) = &self.shared.queue {
                let t = now_ms();
                q.first_claim_ms.fetch_min(t, Ordering::Relaxed);
                q.last_claim_ms.fetch_max(t, Ordering::Relaxed);
            }
        } else if answer.outcome == Outcome::Replay {
            // The claim of a request whose answer was lost: the unit is this user's.
            let _ = slot.fetch_max(1, Ordering::Relaxed);
        }
    }
}

/// A queue phase: when to send `user` again after this answer (`None`: its wait is over),
/// keeping the queue token the answer carries.
fn queue_next(q: &Waiting, user: u32, body: Option<Body>) -> Option<Duration> {
    match body {
        Some(b) if b.status == ApiStatus::Queued => {
            if let Some(t) = b.queue_token {
                let _ = q.tokens[user as usize].set(t.into_boxed_str());
            }
            Some(Duration::from_millis(
                b.refresh_ms.unwrap_or(1000).clamp(100, 10_000),
            ))
        }
        Some(b) if b.status == ApiStatus::InvalidQueueToken => {
            q.invalid.fetch_add(1, Ordering::Relaxed);
            None
        }
        Some(b) => match b.status {
            ApiStatus::RateLimited
            | ApiStatus::Overloaded
            | ApiStatus::Unavailable
            | ApiStatus::InProgress
            | ApiStatus::NotStarted => Some(RETRY),
            _ => None,
        },
        // No answer (timeout, transport): try again.
        None => Some(RETRY),
    }
}

/// The fields of an answer's JSON body the bench reads.
#[derive(serde::Deserialize)]
struct Body {
    status: ApiStatus,
    #[serde(default)]
    queue_token: Option<String>,
    #[serde(default)]
    refresh_ms: Option<u64>,
}

fn body_of(body: &[u8]) -> Option<Body> {
    serde_json::from_slice::<Body>(body).ok()
}
