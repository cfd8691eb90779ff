//! The draw model's script functions (`model::draw::scripts`) held to `lua/draw_*.lua` on
//! a private redis-server: a seeded random sequence of steps (open with good and bad
//! arguments and each state, entries before, in and after the window, close, marks of
//! random ranks, restores of entries old and new, wins, grant answers, and the loss of
//! every key) runs on both sides, and after each step the reply and every draw key (the
//! meta, the entrants, the top-K, the entries stream) must agree. Priorities are
//! `shard_router::draw::priority` of the seed, as draw_enter.lua computes them.
//!
//! `FG_CONFORMANCE_SEED` and `FG_CONFORMANCE_STEPS` override the seed and length.

use std::collections::BTreeMap;

use model::draw::scripts::{
    ClaimRef, CloseReply, CountReply, DrawShard, DrawState, EnterReply, EntryId, GrantAnswer,
    MarkBatch, OpenArgs, OpenReply, Standing, User,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use redis::{Connection, Script, Value};
use test_support::RedisServer;

const SKU: u64 = 42;
const SEED: &[u8] = b"the draw conformance seed, 32 b.";
const USERS: u8 = 6;
const META: &str = "{0}:draw:42";
const ENTRANTS: &str = "{0}:entrants:42";
const TOPK: &str = "{0}:topk:42";
const STREAM: &str = "{0}:entries";

fn user(u: User) -> String {
    format!("u{u:02}")
}

fn prio(u: User) -> u64 {
    shard_router::draw::priority(SEED, SKU, &user(u))
}

fn answer_key(u: User) -> String {
    format!("{{0}}:req:42:3:{}:draw", user(u))
}

fn pads() -> (Vec<u8>, Vec<u8>) {
    let (mut i, mut o) = (vec![0x36u8; 64], vec![0x5cu8; 64]);
    for (n, b) in SEED.iter().enumerate() {
        i[n] ^= b;
        o[n] ^= b;
    }
    (i, o)
}

fn env<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

struct Side {
    con: Connection,
    model: DrawShard,
    /// The model's entry ids and Redis's stream ids, both ways.
    ids: BTreeMap<EntryId, String>,
    next_synthetic: EntryId,
    scripts: BTreeMap<&'static str, Script>,
}

fn ints(v: &Value) -> Vec<Value> {
    match v {
        Value::Array(a) => a.clone(),
        other => panic!("not an array: {other:?}"),
    }
}

fn text(v: &Value) -> String {
    match v {
        Value::BulkString(b) => String::from_utf8(b.clone()).expect("utf-8"),
        Value::SimpleString(s) => s.clone(),
        Value::Int(i) => i.to_string(),
        other => panic!("not text: {other:?}"),
    }
}

fn num(v: &Value) -> i64 {
    text(v).parse().expect("a number")
}

impl Side {
    fn eval(&mut self, name: &str, keys: &[String], args: &[Vec<u8>]) -> Vec<Value> {
        let mut inv = self.scripts[name].prepare_invoke();
        for k in keys {
            inv.key(k);
        }
        for a in args {
            inv.arg(a.as_slice());
        }
        ints(&inv.invoke::<Value>(&mut self.con).expect("script runs"))
    }

    fn standing(&self, s: Standing) -> String {
        match s {
            Standing::E(id) => format!("E|{}", self.ids[&id]),
            Standing::R(r) => format!("R|{r}"),
            Standing::W(c) => format!("W|c{}|{}", c.id, c.shard),
        }
    }

    /// Every draw key of the shard, as Redis holds it and as the model does.
    fn compare(&mut self, step: usize, what: &str) {
        let state: Option<String> = redis::cmd("HGET")
            .arg(META)
            .arg("state")
            .query(&mut self.con)
            .unwrap();
        let fields: Vec<Option<i64>> = redis::cmd("HMGET")
            .arg(META)
            .arg(&["estart", "draw_at", "k", "stock", "hold", "hn"])
            .query(&mut self.con)
            .unwrap();
        let model_fields = self.model.meta.map_or(vec![None; 6], |m| {
            vec![
                Some(m.estart),
                Some(m.draw_at),
                Some(i64::from(m.k)),
                Some(i64::from(m.stock)),
                m.hold.map(|h| i64::from(h.0)),
                m.hold.map(|h| i64::from(h.1)),
            ]
        });
        let entrants: BTreeMap<String, String> = redis::cmd("HGETALL")
            .arg(ENTRANTS)
            .query(&mut self.con)
            .unwrap();
        let model_entrants: BTreeMap<String, String> = self
            .model
            .entrants
            .iter()
            .map(|(&u, &s)| (user(u), self.standing(s)))
            .collect();
        let top: Vec<(String, u64)> = redis::cmd("ZRANGE")
            .arg(TOPK)
            .arg(0)
            .arg(-1)
            .arg("WITHSCORES")
            .query(&mut self.con)
            .unwrap();
        let model_top: Vec<(String, u64)> =
            self.model.topk.iter().map(|&(p, u)| (user(u), p)).collect();
        let stream: Vec<(String, BTreeMap<String, String>)> = redis::cmd("XRANGE")
            .arg(STREAM)
            .arg("-")
            .arg("+")
            .query(&mut self.con)
            .unwrap();
        let stream: Vec<(String, String, String)> = stream
            .into_iter()
            .map(|(id, f)| (id, f["user"].clone(), f["prio"].clone()))
            .collect();
        let model_stream: Vec<(String, String, String)> = self
            .model
            .stream
            .iter()
            .map(|(id, e)| (self.ids[id].clone(), user(e.user), e.prio.to_string()))
            .collect();
        let at = format!("step {step} ({what})");
        assert_eq!(
            state.as_deref(),
            self.model.state().map(DrawState::as_str),
            "{at}: state"
        );
        assert_eq!(fields, model_fields, "{at}: meta");
        assert_eq!(entrants, model_entrants, "{at}: entrants");
        assert_eq!(top, model_top, "{at}: top-K");
        assert_eq!(stream, model_stream, "{at}: entries stream");
    }
}

#[test]
fn the_draw_model_does_what_the_draw_scripts_do() {
    let seed = env("FG_CONFORMANCE_SEED", 0xd4a3_u64);
    let steps = env("FG_CONFORMANCE_STEPS", 3_000_usize);
    let server = RedisServer::start();
    let lua = |src: &str| Script::new(src);
    let mut side = Side {
        con: server.connection(),
        model: DrawShard::default(),
        ids: BTreeMap::new(),
        next_synthetic: 1_000_000,
        scripts: BTreeMap::from([
            ("open", lua(include_str!("../../lua/draw_open.lua"))),
            ("enter", lua(include_str!("../../lua/draw_enter.lua"))),
            ("close", lua(include_str!("../../lua/draw_close.lua"))),
            ("mark", lua(include_str!("../../lua/draw_mark.lua"))),
            ("restore", lua(include_str!("../../lua/draw_restore.lua"))),
        ]),
    };
    let mut rng = StdRng::seed_from_u64(seed);
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    let (ipad, opad) = pads();
    for step in 1..=steps {
        let what: String;
        match rng.random_range(0..100) {
            // draw_open: good and bad windows, k and stock, each state.
            0..8 => {
                let estart = 1000;
                let draw_at = if rng.random_bool(0.1) { 1000 } else { 2000 };
                let k = rng.random_range(0..4u32);
                let stock = rng.random_range(0..3u32);
                // None: `held`, a restore's first step.
                let state = [
                    Some(DrawState::Open),
                    Some(DrawState::Closed),
                    Some(DrawState::Drawn),
                    None,
                ][rng.random_range(0..4)];
                // The restore's token, and for a publish its count of writes: often the
                // hold's own count, so that publishes go through as well as refused.
                let token = rng.random_range(1..3u8);
                let counted = side.model.meta.and_then(|m| m.hold).map_or(0, |h| h.1);
                let publish = (state.is_some() && rng.random_bool(0.3)).then(|| {
                    if rng.random_bool(0.6) {
                        counted
                    } else {
                        rng.random_range(0..3)
                    }
                });
                let real = side.eval(
                    "open",
                    &[META.into()],
                    &[
                        estart.to_string().into(),
                        draw_at.to_string().into(),
                        k.to_string().into(),
                        stock.to_string().into(),
                        ipad.clone(),
                        opad.clone(),
                        state.map_or("held", DrawState::as_str).into(),
                        if publish.is_some() { "publish" } else { "" }.into(),
                        token.to_string().into(),
                        publish.unwrap_or(0).to_string().into(),
                    ],
                );
                let model = side.model.open(OpenArgs {
                    estart,
                    draw_at,
                    k,
                    stock,
                    state,
                    token,
                    publish,
                });
                let got = match num(&real[0]) {
                    20 if text(&real[1]) == "held" => OpenReply::Opened(None),
                    20 => OpenReply::Opened(Some(parse_state(&real[1]))),
                    21 => OpenReply::Live(parse_state(&real[1])),
                    15 => OpenReply::BadArgument,
                    14 => OpenReply::NotPreheated,
                    c => panic!("draw_open code {c}"),
                };
                assert_eq!(got, model, "step {step}: draw_open");
                what = format!(
                    "open {state:?} k {k} stock {stock} token {token} publish {publish:?} -> {model:?}"
                );
                *seen.entry("open").or_default() += 1;
            }
            // draw_enter: before, in and after the window.
            8..50 => {
                let u = rng.random_range(0..USERS);
                let now = [500i64, 1500, 1500, 2500][rng.random_range(0..4)];
                let real = side.eval(
                    "enter",
                    &[
                        META.into(),
                        ENTRANTS.into(),
                        TOPK.into(),
                        STREAM.into(),
                        answer_key(u),
                    ],
                    &[
                        SKU.to_string().into(),
                        user(u).into(),
                        now.to_string().into(),
                    ],
                );
                let before = side.model.last_id;
                let model = side.model.enter(u, prio(u), now);
                if side.model.last_id != before {
                    // A fresh entry: the model's id and Redis's are the same entry.
                    side.ids.insert(side.model.last_id, text(&real[1]));
                }
                // Entered and drawing name the value's tail (an entry id, or a rank or win
                // written over it): compared as text.
                let tail = |s: Standing| side.standing(s)[2..].to_owned();
                let model_tail = match model {
                    EnterReply::Entered { standing, .. } | EnterReply::Closed(standing) => {
                        Some(tail(standing))
                    }
                    _ => None,
                };
                let real_tail = matches!(num(&real[0]), 80 | 85).then(|| text(&real[1]));
                assert_eq!(real_tail, model_tail, "step {step}: draw_enter's id");
                let got = match num(&real[0]) {
                    80 => EnterReply::Entered {
                        standing: Standing::E(0),
                        fresh: num(&real[2]) == 1,
                    },
                    81 => EnterReply::Won(ClaimRef {
                        id: text(&real[1])[1..].parse().expect("c<id>"),
                        shard: num(&real[2]) as u8,
                    }),
                    82 => EnterReply::WonPending,
                    83 => EnterReply::Waitlisted(num(&real[1]) as u32),
                    84 => EnterReply::Lost,
                    85 => EnterReply::Closed(Standing::E(0)),
                    12 => EnterReply::NotStarted,
                    13 => EnterReply::Ended,
                    14 => EnterReply::NotPreheated,
                    c => panic!("draw_enter code {c}"),
                };
                let model_cmp = match model {
                    EnterReply::Entered { fresh, .. } => EnterReply::Entered {
                        standing: Standing::E(0),
                        fresh,
                    },
                    EnterReply::Closed(_) => EnterReply::Closed(Standing::E(0)),
                    other => other,
                };
                assert_eq!(
                    got,
                    model_cmp,
                    "step {step}: draw_enter {} at {now}",
                    user(u)
                );
                what = format!("enter {} at {now} -> {model:?}", user(u));
                *seen.entry(reply_name(&model)).or_default() += 1;
            }
            50..60 => {
                let real = side.eval("close", &[META.into(), ENTRANTS.into(), TOPK.into()], &[]);
                let model = side.model.close();
                let got = match num(&real[0]) {
                    14 => CloseReply::NotPreheated,
                    90 => CloseReply::Closed {
                        state: parse_state(&real[1]),
                        entrants: num(&real[2]) as u32,
                        top: real[3..]
                            .chunks(2)
                            .map(|p| {
                                let name = text(&p[0]);
                                (name[1..].parse().expect("uNN"), num(&p[1]) as u64)
                            })
                            .collect(),
                    },
                    c => panic!("draw_close code {c}"),
                };
                assert_eq!(got, model, "step {step}: draw_close");
                what = format!("close -> {model:?}");
                *seen.entry("close").or_default() += 1;
            }
            60..72 => {
                let n = rng.random_range(0..4);
                let ranks: Vec<(User, u32)> = (0..n)
                    .map(|_| (rng.random_range(0..USERS), rng.random_range(1..6)))
                    .collect();
                let token = rng.random_range(1..3u8);
                let (batch, arg) = [
                    (MarkBatch::Last, "1".to_owned()),
                    (MarkBatch::More, "0".to_owned()),
                    (MarkBatch::Held(token), format!("h:{token}")),
                ][rng.random_range(0..3)]
                .clone();
                let mut args: Vec<Vec<u8>> = vec![arg.into()];
                for (u, r) in &ranks {
                    args.push(user(*u).into());
                    args.push(r.to_string().into());
                }
                let real = side.eval("mark", &[META.into(), ENTRANTS.into()], &args);
                let model = side.model.mark(batch, &ranks);
                assert_eq!(count(&real, 91), model, "step {step}: draw_mark {ranks:?}");
                what = format!("mark {ranks:?} {batch:?} -> {model:?}");
                *seen.entry("mark").or_default() += 1;
            }
            72..82 => {
                // Entries the ledger holds: ids the stream handed out, or others.
                let n = rng.random_range(0..4);
                let mut batch = Vec::new();
                for _ in 0..n {
                    let u = rng.random_range(0..USERS);
                    let known: Vec<EntryId> = side.ids.keys().copied().collect();
                    let id = if !known.is_empty() && rng.random_bool(0.5) {
                        known[rng.random_range(0..known.len())]
                    } else {
                        side.next_synthetic += 1;
                        let id = side.next_synthetic;
                        side.ids.insert(id, format!("{id}-0"));
                        id
                    };
                    batch.push((u, prio(u), id));
                }
                let token = rng.random_range(1..3u8);
                let mut args: Vec<Vec<u8>> = vec![token.to_string().into()];
                for (u, p, id) in &batch {
                    args.push(user(*u).into());
                    args.push(p.to_string().into());
                    args.push(side.ids[id].clone().into());
                }
                let real = side.eval(
                    "restore",
                    &[META.into(), ENTRANTS.into(), TOPK.into()],
                    &args,
                );
                let model = side.model.restore(token, &batch);
                assert_eq!(count(&real, 92), model, "step {step}: draw_restore");
                what = format!("restore {batch:?} -> {model:?}");
                *seen.entry("restore").or_default() += 1;
            }
            82..90 => {
                // The grant's win mark (StockClient::draw_won's HSET).
                let u = rng.random_range(0..USERS);
                let c = ClaimRef {
                    id: rng.random_range(1..50),
                    shard: rng.random_range(0..3),
                };
                redis::cmd("HSET")
                    .arg(ENTRANTS)
                    .arg(user(u))
                    .arg(format!("W|c{}|{}", c.id, c.shard))
                    .exec(&mut side.con)
                    .unwrap();
                side.model.won(u, c);
                what = format!("won {} {c:?}", user(u));
            }
            90..97 => {
                // The grant claim's stored answer: pending, made, or gone.
                let u = rng.random_range(0..USERS);
                let a = match rng.random_range(0..3) {
                    0 => Some(GrantAnswer::Pending),
                    1 => Some(GrantAnswer::Claim(ClaimRef {
                        id: rng.random_range(1..50),
                        shard: rng.random_range(0..3),
                    })),
                    _ => None,
                };
                match a {
                    None => {
                        redis::cmd("DEL")
                            .arg(answer_key(u))
                            .exec(&mut side.con)
                            .unwrap();
                        side.model.grants.remove(&u);
                    }
                    Some(GrantAnswer::Pending) => {
                        redis::cmd("SET")
                            .arg(answer_key(u))
                            .arg("P")
                            .exec(&mut side.con)
                            .unwrap();
                        side.model.grants.insert(u, GrantAnswer::Pending);
                    }
                    Some(GrantAnswer::Claim(c)) => {
                        redis::cmd("SET")
                            .arg(answer_key(u))
                            .arg(format!("c{}|{}|1|1", c.id, c.shard))
                            .exec(&mut side.con)
                            .unwrap();
                        side.model.grants.insert(u, GrantAnswer::Claim(c));
                    }
                }
                what = format!("grant answer of {} {a:?}", user(u));
            }
            _ => {
                // The shard loses every key (its stream ids go on from the clock).
                redis::cmd("FLUSHALL").exec(&mut side.con).unwrap();
                side.model = DrawShard {
                    last_id: side.model.last_id,
                    ..DrawShard::default()
                };
                what = "loss".to_owned();
                *seen.entry("loss").or_default() += 1;
            }
        }
        side.compare(step, &what);
    }
    eprintln!("{steps} draw steps of seed {seed:#x} agree: {seen:?}");
    for must in [
        "entered",
        "won",
        "won_pending",
        "waitlisted",
        "lost",
        "drawing",
        "ended",
    ] {
        assert!(
            seen.contains_key(must),
            "no {must} reply in {steps} steps: {seen:?}"
        );
    }
}

fn parse_state(v: &Value) -> DrawState {
    match text(v).as_str() {
        "open" => DrawState::Open,
        "closed" => DrawState::Closed,
        "drawn" => DrawState::Drawn,
        s => panic!("state {s}"),
    }
}

fn count(real: &[Value], ok: i64) -> CountReply {
    match num(&real[0]) {
        14 => CountReply::NotPreheated,
        c if c == ok => CountReply::Done(num(&real[1]) as u32),
        c => panic!("code {c}"),
    }
}

fn reply_name(r: &EnterReply) -> &'static str {
    match r {
        EnterReply::Entered { .. } => "entered",
        EnterReply::Won(_) => "won",
        EnterReply::WonPending => "won_pending",
        EnterReply::Waitlisted(_) => "waitlisted",
        EnterReply::Lost => "lost",
        EnterReply::Closed(_) => "drawing",
        EnterReply::NotStarted => "not_started",
        EnterReply::Ended => "ended",
        EnterReply::NotPreheated => "not_preheated",
    }
}
