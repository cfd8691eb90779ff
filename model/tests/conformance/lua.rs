//! The real scripts: their sources, their runs on Redis, their replies read into the
//! model's reply types.

use model::keyspace::ShardId;
use model::scripts::{ClaimReply, PreheatReply, ReleaseReply, SettleReply, TakeReply, WaveReply};
use redis::{Connection, Script, Value};

use crate::ids::Ids;

/// Script sources, so a test can run an altered copy of one.
#[derive(Clone)]
pub(crate) struct Sources {
    pub(crate) claim: String,
    pub(crate) take: String,
    pub(crate) settle: String,
    pub(crate) preheat: String,
    pub(crate) release_stock: String,
    pub(crate) release_user: String,
    pub(crate) wave: String,
}

impl Sources {
    /// The scripts of the repo, as the gateway and consumer embed them.
    pub(crate) fn repo() -> Self {
        Self {
            claim: include_str!("../../../lua/claim.lua").to_owned(),
            take: include_str!("../../../lua/take.lua").to_owned(),
            settle: include_str!("../../../lua/settle.lua").to_owned(),
            preheat: include_str!("../../../lua/preheat.lua").to_owned(),
            release_stock: include_str!("../../../lua/release_stock.lua").to_owned(),
            release_user: include_str!("../../../lua/release_user.lua").to_owned(),
            wave: include_str!("../../../lua/wave.lua").to_owned(),
        }
    }
}

impl Sources {
    /// The source of `lua/<name>.lua`, to alter.
    pub(crate) fn get_mut(&mut self, name: &str) -> &mut String {
        match name {
            "claim" => &mut self.claim,
            "take" => &mut self.take,
            "settle" => &mut self.settle,
            "preheat" => &mut self.preheat,
            "release_stock" => &mut self.release_stock,
            "release_user" => &mut self.release_user,
            "wave" => &mut self.wave,
            other => panic!("no script {other}"),
        }
    }
}

pub(crate) struct Scripts {
    pub(crate) claim: Script,
    pub(crate) take: Script,
    pub(crate) settle: Script,
    pub(crate) preheat: Script,
    pub(crate) release_stock: Script,
    pub(crate) release_user: Script,
    pub(crate) wave: Script,
}

impl Scripts {
    pub(crate) fn new(s: &Sources) -> Self {
        Self {
            claim: Script::new(&s.claim),
            take: Script::new(&s.take),
            settle: Script::new(&s.settle),
            preheat: Script::new(&s.preheat),
            release_stock: Script::new(&s.release_stock),
            release_user: Script::new(&s.release_user),
            wave: Script::new(&s.wave),
        }
    }
}

/// Runs `script` (EVALSHA, loading it on NOSCRIPT) with `keys` and `args`.
pub(crate) fn eval(
    con: &mut Connection,
    script: &Script,
    keys: &[String],
    args: &[String],
) -> Result<Vec<Value>, String> {
    let mut inv = script.prepare_invoke();
    for k in keys {
        inv.key(k);
    }
    for a in args {
        inv.arg(a);
    }
    match inv.invoke::<Value>(con) {
        Ok(Value::Array(items)) => Ok(items),
        Ok(other) => Err(format!("not an array: {other:?}")),
        Err(e) => Err(format!("script error: {e}")),
    }
}

/// One reply, in the model's terms; `Unreadable` is a Lua reply no model reply stands for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Reply {
    Claim(ClaimReply),
    Take(TakeReply),
    Settle(SettleReply),
    Preheat(PreheatReply),
    Release(ReleaseReply),
    Wave(WaveReply),
    /// A fault or reset: the test's own writes, nothing to compare.
    Written,
    Unreadable(String),
}

struct Raw<'a>(&'a [Value]);

impl Raw<'_> {
    fn code(&self) -> Result<i64, String> {
        self.int(0)
    }

    fn len(&self, n: usize) -> Result<(), String> {
        if self.0.len() == n {
            Ok(())
        } else {
            Err(format!("{} items where {n} were due", self.0.len()))
        }
    }

    fn int(&self, i: usize) -> Result<i64, String> {
        match self.0.get(i) {
            Some(Value::Int(n)) => Ok(*n),
            other => Err(format!("item {i} is not an integer: {other:?}")),
        }
    }

    fn int32(&self, i: usize) -> Result<i32, String> {
        i32::try_from(self.int(i)?).map_err(|e| format!("item {i}: {e}"))
    }

    fn uint(&self, i: usize) -> Result<u32, String> {
        u32::try_from(self.int(i)?).map_err(|e| format!("item {i}: {e}"))
    }

    fn shard(&self, i: usize) -> Result<ShardId, String> {
        ShardId::try_from(self.int(i)?).map_err(|e| format!("item {i}: {e}"))
    }

    fn text(&self, i: usize) -> Result<String, String> {
        match self.0.get(i) {
            Some(Value::BulkString(b)) => String::from_utf8(b.clone()).map_err(|e| e.to_string()),
            other => Err(format!("item {i} is not a string: {other:?}")),
        }
    }

    /// The single-item codes every script shares.
    fn bare(&self, code: i64) -> Result<(), String> {
        self.len(1)?;
        debug_assert_eq!(self.code()?, code);
        Ok(())
    }
}

fn unknown(code: i64) -> Result<Reply, String> {
    Err(format!("unknown code {code}"))
}

fn read(items: &[Value], f: impl FnOnce(&Raw<'_>, i64) -> Result<Reply, String>) -> Reply {
    let raw = Raw(items);
    raw.code()
        .and_then(|c| f(&raw, c))
        .unwrap_or_else(|e| Reply::Unreadable(format!("{e}: {items:?}")))
}

pub(crate) fn claim_reply(items: &[Value], ids: &mut Ids) -> Reply {
    read(items, |r, code| {
        let reply = match code {
            1 => {
                r.len(4)?;
                ClaimReply::Claimed {
                    claim: ids.model_claim(&r.text(1)?)?,
                    seq: r.uint(2)?,
                    remaining: r.int32(3)?,
                }
            }
            2 => {
                r.len(4)?;
                ClaimReply::Replay {
                    claim: ids.model_claim(&r.text(1)?)?,
                    shard: r.shard(2)?,
                    qty: r.int32(3)?,
                }
            }
            3 => {
                r.len(4)?;
                ClaimReply::Hold {
                    seq: r.uint(1)?,
                    remaining: r.int32(2)?,
                    gen: r.uint(3)?,
                }
            }
            10 => {
                r.len(2)?;
                ClaimReply::SoldOut {
                    remaining: r.int32(1)?,
                }
            }
            11 => {
                r.len(2)?;
                ClaimReply::LimitReached { held: r.int32(1)? }
            }
            4 | 12 | 13 | 14 | 15 => {
                r.bare(code)?;
                match code {
                    4 => ClaimReply::InProgress,
                    12 => ClaimReply::NotStarted,
                    13 => ClaimReply::Ended,
                    14 => ClaimReply::NotPreheated,
                    _ => ClaimReply::BadArgument,
                }
            }
            c => return unknown(c),
        };
        Ok(Reply::Claim(reply))
    })
}

pub(crate) fn take_reply(items: &[Value], ids: &mut Ids) -> Reply {
    read(items, |r, code| {
        let reply = match code {
            1 => {
                r.len(3)?;
                TakeReply::Claimed {
                    claim: ids.model_claim(&r.text(1)?)?,
                    remaining: r.int32(2)?,
                }
            }
            10 => {
                r.len(2)?;
                TakeReply::SoldOut {
                    remaining: r.int32(1)?,
                }
            }
            12..=16 => {
                r.bare(code)?;
                match code {
                    12 => TakeReply::NotStarted,
                    13 => TakeReply::Ended,
                    14 => TakeReply::NotPreheated,
                    15 => TakeReply::BadArgument,
                    _ => TakeReply::HoldExpired,
                }
            }
            c => return unknown(c),
        };
        Ok(Reply::Take(reply))
    })
}

pub(crate) fn settle_reply(items: &[Value]) -> Reply {
    read(items, |r, code| {
        let reply = match code {
            30 => {
                r.len(2)?;
                SettleReply::Settled { qty: r.int32(1)? }
            }
            31 => {
                r.bare(code)?;
                SettleReply::HoldGone
            }
            15 => {
                r.bare(code)?;
                SettleReply::BadArgument
            }
            c => return unknown(c),
        };
        Ok(Reply::Settle(reply))
    })
}

pub(crate) fn preheat_reply(items: &[Value]) -> Reply {
    read(items, |r, code| {
        let reply = match code {
            20 => {
                r.len(2)?;
                PreheatReply::Preheated { slice: r.int32(1)? }
            }
            21 => {
                r.len(2)?;
                PreheatReply::Live {
                    current: r.int32(1)?,
                }
            }
            22 => {
                r.bare(code)?;
                PreheatReply::Rebuilding
            }
            15 => {
                r.bare(code)?;
                PreheatReply::BadArgument
            }
            c => return unknown(c),
        };
        Ok(Reply::Preheat(reply))
    })
}

/// release_stock.lua and release_user.lua share their codes.
pub(crate) fn release_reply(items: &[Value]) -> Reply {
    read(items, |r, code| {
        let reply = match code {
            40 => {
                r.len(2)?;
                ReleaseReply::Released(r.int32(1)?)
            }
            41 => {
                r.bare(code)?;
                ReleaseReply::AlreadyReleased
            }
            14 => {
                r.bare(code)?;
                ReleaseReply::NotPreheated
            }
            15 => {
                r.bare(code)?;
                ReleaseReply::BadArgument
            }
            c => return unknown(c),
        };
        Ok(Reply::Release(reply))
    })
}

pub(crate) fn wave_reply(items: &[Value]) -> Reply {
    read(items, |r, code| {
        let reply = match code {
            70 => {
                r.len(2)?;
                WaveReply::Added { slice: r.int32(1)? }
            }
            71 => {
                r.bare(code)?;
                WaveReply::AlreadyAdded
            }
            14 => {
                r.bare(code)?;
                WaveReply::NotPreheated
            }
            15 => {
                r.bare(code)?;
                WaveReply::BadArgument
            }
            c => return unknown(c),
        };
        Ok(Reply::Wave(reply))
    })
}
