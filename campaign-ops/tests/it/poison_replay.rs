//! `consumer poison replay` (the binary, on real MariaDB): a kept entry's claim goes in
//! once, with its stock, and its poison row goes; a claim the ledger had changes nothing
//! but the poison row; an entry that still fails (a record of a version this build does
//! not know among them) stays and is reported; an entry that is not kept is one error line
//! and changes nothing.

use std::process::{Command, Output};

use consumer::commit;
use ledger::poison::Poison;
use shard_router::ClaimRecord;

use crate::common::*;

const SKU: u64 = 10_401;

fn consumer(s: &Stack, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_consumer"))
        .args(["--redis", &s.redis.url(), "--shards", &SHARDS.to_string()])
        .args(["--mysql", &s.db.url()])
        .args(args)
        .env("RUST_LOG", "error")
        .output()
        .expect("run the consumer binary")
}

fn record(entry: &str, user: &str, rid: Option<&str>) -> ClaimRecord {
    // Generation 1: what a record written after the preheat carries (not a late claim).
    ClaimRecord {
        claim_id: format!("0-{entry}"),
        sku: SKU,
        user: user.into(),
        qty: 1,
        user_seq: 1,
        shard: 0,
        home: 0,
        request_id: rid.map(str::to_owned),
        ts_ms: shard_router::now_ms(),
        gen: 1,
    }
}

/// As the writer keeps a record MySQL refused: its stream's key, its entry id, its fields.
fn kept(s: &Stack, r: &ClaimRecord) -> Poison {
    Poison {
        stream: stream_key(s, r.shard),
        entry_id: r.claim_id.split_once('-').unwrap().1.to_owned(),
        reason: "row refused: read-only".into(),
        fields: ledger::poison::fields_json(r.encode()),
    }
}

async fn state(s: &Stack) -> (i64, i64, i64) {
    (
        s.count("SELECT COUNT(*) FROM claims").await,
        s.count(&format!(
            "SELECT available FROM sku_stock WHERE sku = {SKU}"
        ))
        .await,
        s.count("SELECT COUNT(*) FROM stream_poison").await,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_applies_each_entry_once_and_keeps_what_still_fails() {
    let s = Stack::start().await;
    campaign(&s, SKU, 10, SHARDS, 1, 3600).await;
    let fresh = record("1700000000000-1", "alice", None);
    let had = record("1700000000000-2", "bob", None);
    commit::write_batch(&s.pool, std::slice::from_ref(&had), T)
        .await
        .unwrap();
    // A cause not fixed yet: the server refuses carol's row (a trigger stands in for it).
    sqlx::raw_sql(
        "CREATE TRIGGER refuse_carol BEFORE INSERT ON claims FOR EACH ROW \
         IF NEW.user_id = 'carol' THEN SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'carol refused'; END IF",
    )
    .execute(&s.pool)
    .await
    .unwrap();
    let refused = record("1700000000000-3", "carol", Some("r-1"));
    let garbled = Poison {
        stream: stream_key(&s, 1),
        entry_id: "1700000000000-4".into(),
        reason: "not a claim record".into(),
        fields: r#"{"sku":"x"}"#.into(),
    };
    // A record as a later build might write it: version 2 of the record field. Its text
    // reads as a valid claim under version 1, which this build must not take it for.
    let mut unknown = kept(&s, &record("1700000000000-5", "dave", None));
    unknown.fields = unknown.fields.replace("\"c1\"", "\"c2\"");
    assert!(unknown.fields.contains("\"c2\""), "{}", unknown.fields);
    let entries = [
        kept(&s, &fresh),
        kept(&s, &had),
        kept(&s, &refused),
        garbled,
        unknown,
    ];
    ledger::poison::keep_now(&s.pool, &entries, T)
        .await
        .unwrap();
    assert_eq!(state(&s).await, (1, 9, 5));

    // One entry, by stream and id.
    let one = consumer(
        &s,
        &[
            "poison",
            "replay",
            "--stream",
            &entries[0].stream,
            "--entry",
            &entries[0].entry_id,
        ],
    );
    assert!(one.status.success(), "{one:?}");
    let report: serde_json::Value = serde_json::from_slice(&one.stdout).unwrap();
    assert_eq!(report["inserted"], 1, "{report}");
    assert_eq!(
        state(&s).await,
        (2, 8, 4),
        "the claim in, its unit taken, once"
    );

    // The same entry again: not kept any more; one error line, nothing changes.
    let again = consumer(
        &s,
        &[
            "poison",
            "replay",
            "--stream",
            &entries[0].stream,
            "--entry",
            &entries[0].entry_id,
        ],
    );
    assert!(!again.status.success());
    let err = String::from_utf8_lossy(&again.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("no poison entry"), "{err}");
    assert_eq!(state(&s).await, (2, 8, 4));

    // The rest: the claim the ledger had loses only its poison row; the refused one, the
    // garbled one and the unknown version stay, reported, and the run exits 1.
    let all = consumer(&s, &["poison", "replay", "--all"]);
    assert!(!all.status.success(), "{all:?}");
    let report: serde_json::Value = serde_json::from_slice(&all.stdout).unwrap();
    assert_eq!(report["inserted"], 0, "{report}");
    assert_eq!(report["already_in_ledger"], 1, "{report}");
    let left: Vec<(&str, &str)> = report["still_poison"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["entry_id"].as_str().unwrap(),
                f["error"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(left.len(), 3, "{report}");
    let ids: Vec<&str> = left.iter().map(|(id, _)| *id).collect();
    assert!(
        ids.contains(&"1700000000000-3")
            && ids.contains(&"1700000000000-4")
            && ids.contains(&"1700000000000-5"),
        "{report}"
    );
    let why = left
        .iter()
        .find(|(id, _)| *id == "1700000000000-5")
        .unwrap()
        .1;
    assert!(why.contains("unknown version 2"), "{why}");
    assert_eq!(state(&s).await, (2, 8, 3));
    let kept_now: Vec<String> = ledger::poison::list(&s.pool, 10, T)
        .await
        .unwrap()
        .into_iter()
        .map(|p| p.entry_id)
        .collect();
    assert_eq!(kept_now.len(), 3);

    // The cause fixed: carol's claim goes in; the garbled entry is no claim and stays, and
    // so does the unknown version.
    sqlx::raw_sql("DROP TRIGGER refuse_carol")
        .execute(&s.pool)
        .await
        .unwrap();
    let fixed = consumer(&s, &["poison", "replay", "--all"]);
    let report: serde_json::Value = serde_json::from_slice(&fixed.stdout).unwrap();
    assert_eq!(report["inserted"], 1, "{report}");
    assert_eq!(report["late"], 0, "{report}");
    assert_eq!(
        report["still_poison"].as_array().unwrap().len(),
        2,
        "{report}"
    );
    assert_eq!(state(&s).await, (3, 7, 2));

    // Bad input is refused by the command line itself, and changes nothing.
    let bad = consumer(&s, &["poison", "replay", "--stream", "x"]);
    assert!(!bad.status.success());
    assert_eq!(state(&s).await, (3, 7, 2));
}
