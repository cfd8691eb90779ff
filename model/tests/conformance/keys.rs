//! Key names and the model's small numbers as the strings Redis sees.
//!
//! The names must match `shard-router/src/keys.rs` (`ShardKeys`, `claims_stream`): the
//! scripts take every key from the caller, so a name that drifted from keys.rs would hold
//! the model to a keyspace no gateway uses. The tags are `t<shard>` instead of the
//! placement's `fg:<s>:<n>`: one Redis, no cluster, so any tag serves.

use model::keyspace::{Rid, ShardId, User};

/// The one SKU of the run (the model has one SKU).
pub(crate) const SKU: u64 = 7;
/// Shards of the run: enough for a take to have somewhere to go that is not home.
pub(crate) const SHARDS: ShardId = 3;
/// Users and request ids, few enough that replays and in-progress answers happen often.
pub(crate) const USERS: User = 4;
pub(crate) const RIDS: Rid = 6;
/// Wave ids: few, so repeats (`71`) happen.
pub(crate) const WAVES: u8 = 40;
/// `shard_router::keys::EVENTS_CHANNEL`.
pub(crate) const CHANNEL: &str = "fg:events";
/// A stored answer's TTL, seconds (the gateway's default: 24 h).
pub(crate) const REQ_TTL_S: u64 = 86_400;

pub(crate) struct Keys {
    tag: String,
}

impl Keys {
    pub(crate) fn new(shard: ShardId) -> Self {
        Self {
            tag: format!("t{shard}"),
        }
    }

    fn tagged(&self, kind: &str) -> String {
        format!("{{{}}}:{kind}:{SKU}", self.tag)
    }

    pub(crate) fn stock(&self) -> String {
        self.tagged("stock")
    }
    pub(crate) fn debt(&self) -> String {
        self.tagged("debt")
    }
    pub(crate) fn meta(&self) -> String {
        self.tagged("meta")
    }
    pub(crate) fn users(&self) -> String {
        self.tagged("users")
    }
    pub(crate) fn useq(&self) -> String {
        self.tagged("useq")
    }
    pub(crate) fn holds(&self) -> String {
        self.tagged("holds")
    }
    pub(crate) fn relstock(&self) -> String {
        self.tagged("relstock")
    }
    pub(crate) fn reluser(&self) -> String {
        self.tagged("reluser")
    }
    pub(crate) fn waves(&self) -> String {
        self.tagged("waves")
    }
    pub(crate) fn claims(&self) -> String {
        format!("{{{}}}:claims", self.tag)
    }
    /// `ShardKeys::request`: `None` is a fixed key the scripts never touch.
    pub(crate) fn req(&self, user: User, rid: Option<Rid>) -> String {
        match rid {
            Some(r) => {
                let u = user_name(user);
                format!(
                    "{{{}}}:req:{SKU}:{}:{u}:{}",
                    self.tag,
                    u.len(),
                    rid_name(Some(r))
                )
            }
            None => format!("{{{}}}:req:-", self.tag),
        }
    }
}

pub(crate) fn user_name(u: User) -> String {
    format!("u{u}")
}

/// `None` is the empty request id, as the scripts take it.
pub(crate) fn rid_name(r: Option<Rid>) -> String {
    r.map_or_else(String::new, |r| format!("r{r}"))
}

pub(crate) fn wave_name(w: u8) -> String {
    format!("w{w}")
}

fn small(text: &str, prefix: char, what: &str) -> Result<u8, String> {
    text.strip_prefix(prefix)
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| format!("not a {what} of this run: {text:?}"))
}

pub(crate) fn parse_user(text: &str) -> Result<User, String> {
    small(text, 'u', "user")
}

pub(crate) fn parse_rid(text: &str) -> Result<Option<Rid>, String> {
    if text.is_empty() {
        return Ok(None);
    }
    small(text, 'r', "request id").map(Some)
}

pub(crate) fn parse_wave(text: &str) -> Result<u8, String> {
    small(text, 'w', "wave id")
}
