//! One step applied to both sides: the real script on Redis with the arguments the
//! gateway or consumer would send, the model's function with the same ones; faults and
//! resets as the same writes on both.

use model::keyspace::{Answer, Event, Shard, ShardId};
use model::scripts::{self, Verb};

use crate::ids::Ids;
use crate::keys::{self, Keys, CHANNEL, REQ_TTL_S, SHARDS, SKU};
use crate::lua::{self, Reply};
use crate::run::{redis_now_ms, Run};
use crate::steps::{Fault, Step, DEADLINE_MARGIN_MS};
use redis::Connection;

impl Run<'_> {
    fn answer_text(&self, a: &Answer) -> String {
        match a {
            Answer::Pending => "P".to_owned(),
            Answer::Done {
                claim,
                shard,
                qty,
                tentative,
            } => format!(
                "{}{}|{shard}|{qty}",
                if *tentative { "~" } else { "" },
                self.ids.to_real(*claim)
            ),
        }
    }

    fn redis(&mut self, f: impl FnOnce(&mut Connection) -> redis::RedisResult<()>) -> Reply {
        match f(&mut self.con) {
            Ok(()) => Reply::Written,
            Err(e) => Reply::Unreadable(format!("fault write: {e}")),
        }
    }

    /// Applies `step` to both sides: (redis reply, model reply, model events).
    pub(crate) fn apply(&mut self, step: &mut Step) -> (Reply, Reply, Vec<Event>) {
        let mut ev = Vec::new();
        let s = |sh: ShardId| usize::from(sh);
        match step {
            Step::Claim { args } => {
                let k = Keys::new(args.shard);
                let mut keys = vec![
                    k.stock(),
                    k.meta(),
                    k.users(),
                    k.useq(),
                    k.holds(),
                    k.claims(),
                ];
                let mut argv = vec![
                    SKU.to_string(),
                    keys::user_name(args.user),
                    args.qty.to_string(),
                    args.now.to_string(),
                    args.shard.to_string(),
                    args.hold_ttl.to_string(),
                ];
                // The request's key and arguments only with a request id, as shard-router
                // sends them (lua/claim.lua).
                let rid = keys::rid_name(args.rid);
                if !rid.is_empty() {
                    keys.push(k.req(args.user, args.rid));
                    argv.extend([rid, REQ_TTL_S.to_string()]);
                }
                let real = match lua::eval(&mut self.con, &self.scripts.claim, &keys, &argv) {
                    Ok(v) => lua::claim_reply(&v, &mut self.ids),
                    Err(e) => Reply::Unreadable(e),
                };
                let m = scripts::claim(&mut self.model[s(args.shard)], args, None, &mut ev);
                (real, Reply::Claim(m), ev)
            }
            Step::Take { args, late } => {
                let now = redis_now_ms();
                args.deadline = if *late {
                    now - DEADLINE_MARGIN_MS
                } else {
                    now + DEADLINE_MARGIN_MS
                };
                let k = Keys::new(args.shard);
                let keys = [k.stock(), k.meta(), k.claims()];
                let argv = [
                    SKU.to_string(),
                    keys::user_name(args.user),
                    args.qty.to_string(),
                    args.now.to_string(),
                    args.seq.to_string(),
                    args.home.to_string(),
                    keys::rid_name(args.rid),
                    args.shard.to_string(),
                    args.deadline.to_string(),
                    args.hold_gen.to_string(),
                ];
                let real = match lua::eval(&mut self.con, &self.scripts.take, &keys, &argv) {
                    Ok(v) => lua::take_reply(&v, &mut self.ids),
                    Err(e) => Reply::Unreadable(e),
                };
                let m = scripts::take(&mut self.model[s(args.shard)], args, now, None, &mut ev);
                (real, Reply::Take(m), ev)
            }
            Step::Settle {
                shard,
                user,
                seq,
                verb,
                rid,
                hold_gen,
            } => {
                let k = Keys::new(*shard);
                let keys = [k.users(), k.holds(), k.req(*user, *rid), k.meta()];
                let (name, answer) = match verb {
                    Verb::Keep(a) => ("keep", self.answer_text(a)),
                    Verb::Undo => ("undo", String::new()),
                    Verb::Final(a) => ("final", self.answer_text(a)),
                };
                let argv = [
                    keys::user_name(*user),
                    seq.to_string(),
                    name.to_owned(),
                    keys::rid_name(*rid),
                    answer,
                    REQ_TTL_S.to_string(),
                    hold_gen.map_or_else(String::new, |g| g.to_string()),
                ];
                let real = match lua::eval(&mut self.con, &self.scripts.settle, &keys, &argv) {
                    Ok(v) => lua::settle_reply(&v),
                    Err(e) => Reply::Unreadable(e),
                };
                let m = scripts::settle(
                    &mut self.model[s(*shard)],
                    *user,
                    *seq,
                    *verb,
                    *rid,
                    *hold_gen,
                );
                (real, Reply::Settle(m), ev)
            }
            Step::Preheat {
                shard,
                slice,
                limit,
                start,
                end,
            } => {
                let k = Keys::new(*shard);
                let keys = [k.stock(), k.meta()];
                let argv = [
                    slice.to_string(),
                    limit.to_string(),
                    start.to_string(),
                    end.to_string(),
                ];
                let real = match lua::eval(&mut self.con, &self.scripts.preheat, &keys, &argv) {
                    Ok(v) => lua::preheat_reply(&v),
                    Err(e) => Reply::Unreadable(e),
                };
                let m = scripts::preheat(
                    &mut self.model[s(*shard)],
                    *slice,
                    *limit,
                    *start,
                    *end,
                    None,
                );
                (real, Reply::Preheat(m), ev)
            }
            Step::ReleaseStock { shard, claim, qty } => {
                let k = Keys::new(*shard);
                let keys = [k.stock(), k.relstock(), k.debt()];
                let argv = [
                    self.ids.to_real(*claim),
                    qty.to_string(),
                    SKU.to_string(),
                    shard.to_string(),
                    CHANNEL.to_owned(),
                ];
                let real = match lua::eval(&mut self.con, &self.scripts.release_stock, &keys, &argv)
                {
                    Ok(v) => lua::release_reply(&v),
                    Err(e) => Reply::Unreadable(e),
                };
                let m = scripts::release_stock(
                    &mut self.model[s(*shard)],
                    *claim,
                    *qty,
                    *shard,
                    &mut ev,
                );
                (real, Reply::Release(m), ev)
            }
            Step::ReleaseUser {
                shard,
                claim,
                user,
                qty,
            } => {
                let k = Keys::new(*shard);
                let keys = [k.users(), k.reluser(), k.meta()];
                let argv = [
                    self.ids.to_real(*claim),
                    keys::user_name(*user),
                    qty.to_string(),
                ];
                let real = match lua::eval(&mut self.con, &self.scripts.release_user, &keys, &argv)
                {
                    Ok(v) => lua::release_reply(&v),
                    Err(e) => Reply::Unreadable(e),
                };
                let m = scripts::release_user(&mut self.model[s(*shard)], *claim, *user, *qty);
                (real, Reply::Release(m), ev)
            }
            Step::Wave { shard, id, units } => {
                let k = Keys::new(*shard);
                let keys = [k.stock(), k.waves(), k.debt()];
                let argv = [
                    keys::wave_name(*id),
                    units.to_string(),
                    SKU.to_string(),
                    shard.to_string(),
                    CHANNEL.to_owned(),
                ];
                let real = match lua::eval(&mut self.con, &self.scripts.wave, &keys, &argv) {
                    Ok(v) => lua::wave_reply(&v),
                    Err(e) => Reply::Unreadable(e),
                };
                let m = scripts::wave(&mut self.model[s(*shard)], *id, *units, *shard, &mut ev);
                (real, Reply::Wave(m), ev)
            }
            Step::Fault { shard, fault } => (self.fault(*shard, *fault), Reply::Written, ev),
            Step::Reset => {
                let real = self.redis(|c| redis::cmd("FLUSHALL").query(c));
                self.model = vec![Shard::default(); usize::from(SHARDS)];
                self.ids = Ids::new(SHARDS);
                self.since = vec![None; usize::from(SHARDS)];
                self.seen.clear();
                (real, Reply::Written, ev)
            }
        }
    }

    /// A fault both sides take alike. A fence or generation goes only onto a meta the
    /// model has (its meta is all fields or none); elsewhere the step changes nothing.
    fn fault(&mut self, shard: ShardId, fault: Fault) -> Reply {
        let k = Keys::new(shard);
        let sh = &mut self.model[usize::from(shard)];
        match fault {
            Fault::DelSlice => {
                sh.stock = None;
                self.redis(|c| redis::cmd("DEL").arg(k.stock()).query(c))
            }
            Fault::DelMeta => {
                sh.meta = None;
                self.redis(|c| redis::cmd("DEL").arg(k.meta()).query(c))
            }
            Fault::Fence | Fault::SetGen(_) => {
                let Some(m) = sh.meta.as_mut() else {
                    return Reply::Written;
                };
                let (field, value) = match fault {
                    Fault::SetGen(g) => {
                        m.gen = g;
                        ("gen", g.to_string())
                    }
                    _ => {
                        m.fenced = true;
                        // rebuild_fence.lua writes its fence token; scripts test presence.
                        ("rebuild", "fence-1".to_owned())
                    }
                };
                self.redis(|c| {
                    redis::cmd("HSET")
                        .arg(k.meta())
                        .arg(field)
                        .arg(value)
                        .query(c)
                })
            }
            Fault::Unfence => {
                if let Some(m) = sh.meta.as_mut() {
                    m.fenced = false;
                }
                self.redis(|c| redis::cmd("HDEL").arg(k.meta()).arg("rebuild").query(c))
            }
            Fault::SetDebt(n) => {
                sh.debt = n;
                self.redis(|c| {
                    if n > 0 {
                        redis::cmd("SET").arg(k.debt()).arg(n).query(c)
                    } else {
                        redis::cmd("DEL").arg(k.debt()).query(c)
                    }
                })
            }
        }
    }
}
