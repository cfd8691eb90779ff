//! Pinned placement answers. If one of these fails, a change moved SKUs or users between
//! shards — which strands live stock and user counts of running deployments.

use super::*;

#[test]
fn tags_are_pinned() {
    let p = Placement::new(16).unwrap();
    let tags: Vec<(&str, u16)> = (0..16).map(|s| (p.tag(s), slot_of_tag(p.tag(s)))).collect();
    assert_eq!(
        tags,
        vec![
            ("fg:0:7", 508),
            ("fg:1:0", 1579),
            ("fg:2:25", 2498),
            ("fg:3:39", 3531),
            ("fg:4:145", 4667),
            ("fg:5:118", 5682),
            ("fg:6:46", 6646),
            ("fg:7:427", 7677),
            ("fg:8:21", 8685),
            ("fg:9:162", 9668),
            ("fg:10:406", 10795),
            ("fg:11:247", 11839),
            ("fg:12:5", 12822),
            ("fg:13:2", 13761),
            ("fg:14:279", 14837),
            ("fg:15:224", 15868),
        ]
    );
}

#[test]
fn sku_shards_are_pinned() {
    let p = Placement::new(16).unwrap();
    let table: [(u64, u16, &[u16]); 6] = [
        (1, 8, &[1, 2, 3, 4, 5, 6, 7, 8]),
        (42, 8, &[4, 5, 6, 7, 8, 9, 10, 11]),
        (1001, 8, &[11, 12, 13, 14, 15, 0, 1, 2]),
        (987654321, 8, &[9, 10, 11, 12, 13, 14, 15, 0]),
        (42, 1, &[4]),
        (
            1,
            16,
            &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 0],
        ),
    ];
    for (sku, width, want) in table {
        assert_eq!(p.shards_of(sku, width), want, "sku {sku} width {width}");
    }
}

#[test]
fn homes_and_second_chances_are_pinned() {
    let p = Placement::new(16).unwrap();
    let table: [(&str, u16, &[u16]); 5] = [
        ("alice", 6, &[4, 5, 7, 8, 9, 10, 11]),
        ("bob", 4, &[5, 6, 7, 8, 9, 10, 11]),
        ("u0", 10, &[9, 11, 4, 5, 6, 7, 8]),
        ("u4999", 5, &[6, 7, 8, 9, 10, 11, 4]),
        ("用户", 10, &[4, 5, 6, 7, 8, 9, 11]),
    ];
    for (user, home, second) in table {
        assert_eq!(p.home_shard(42, 8, user), home, "home of {user}");
        assert_eq!(
            p.second_chances(42, 8, user, |_| false),
            second,
            "order of {user}"
        );
    }
}

#[test]
fn second_chances_skip_home_and_empty() {
    let p = Placement::new(16).unwrap();
    let order = p.second_chances(42, 8, "alice", |s| s == 5 || s == 9);
    assert_eq!(order, vec![4, 7, 8, 10, 11]);
    assert!(p.second_chances(42, 1, "alice", |_| false).is_empty());
}

/// A claim takes `walkable` before its home answers and builds the walk from it only when
/// it holds: the walk is the one `second_chances` plans with the same view.
#[test]
fn the_walk_from_walkable_is_the_planned_walk() {
    let p = Placement::new(16).unwrap();
    for width in [1, 2, 3, 8, 16] {
        for u in 0..200 {
            let user = format!("user-{u}");
            let home = p.home_shard(42, width, &user);
            let shards = p.shards_of(42, width);
            // Every shard of the SKU but one (u-th) empty, then all, none, every other.
            let lone = shards[u % shards.len()];
            let filters: [&dyn Fn(u16) -> bool; 4] =
                [&|s| s != lone, &|_| true, &|_| false, &|s| s % 2 == 0];
            for empty in filters {
                let planned = p.second_chances(42, width, &user, empty);
                let open = p.walkable(42, width, home, empty);
                assert_eq!(open.is_empty(), planned.is_empty(), "{user} at {width}");
                let walk = p.second_chances(42, width, &user, |s| !open.contains(s));
                assert_eq!(walk, planned, "{user} at width {width}");
            }
        }
    }
}

#[test]
fn homes_spread_over_the_width() {
    let p = Placement::new(16).unwrap();
    let mut counts = [0u32; 16];
    for u in 0..16_000 {
        counts[usize::from(p.home_shard(7, 16, &format!("user-{u}")))] += 1;
    }
    for c in counts {
        assert!((800..1200).contains(&c), "home counts uneven: {counts:?}");
    }
}

/// `redis-cli --cluster create` splits the slots into M equal contiguous runs. Every tag
/// sits in its own window, so S shards land on M masters as evenly as possible.
#[test]
fn tags_spread_evenly_over_masters() {
    for shards in [1u16, 3, 4, 16, 17, 64, 256, 1024] {
        let p = Placement::new(shards).unwrap();
        for masters in [3u32, 5, 6] {
            let mut per = vec![0u32; masters as usize];
            for s in 0..shards {
                let slot = u32::from(slot_of_tag(p.tag(s)));
                per[(slot * masters / u32::from(CLUSTER_SLOTS)) as usize] += 1;
            }
            let (lo, hi) = (per.iter().min().unwrap(), per.iter().max().unwrap());
            // Past 256 shards a window is too narrow to aim at its centre: allow 2.
            let slack = if shards <= 256 { 1 } else { 2 };
            assert!(hi - lo <= slack, "S={shards} M={masters}: {per:?}");
        }
    }
}

#[test]
fn bounds_are_checked() {
    assert_eq!(Placement::new(0), Err(BadShardCount(0)));
    assert!(Placement::new(MAX_SHARDS + 1).is_err());
    let p = Placement::new(4).unwrap();
    assert!(p.check_width(0).is_err());
    assert!(p.check_width(5).is_err());
    assert!(p.check_width(4).is_ok());
}

/// Home shards and second-chance orders are what the list-building code computed before
/// they were derived without a list: the formulas of `shards_of` and `second_chances`
/// written out over a materialized list, checked across shard counts, widths that wrap
/// past the last shard, SKUs and users (the pinned table above never wraps).
#[test]
fn list_free_placement_matches_the_list() {
    for shards in [1u16, 7, 16, 64] {
        let p = Placement::new(shards).unwrap();
        for sku in (0..40u64).chain([u64::MAX, 4_000_000]) {
            for width in 1..=shards.min(16) {
                let s = u64::from(shards);
                let base = XxHash64::oneshot(SEED_SKU, &sku.to_le_bytes()) % s;
                let list: Vec<ShardId> = (0..u64::from(width))
                    .map(|i| ((base + i) % s) as ShardId)
                    .collect();
                assert_eq!(p.shards_of(sku, width), list);
                for user in ["alice", "u4999", "用户", ""] {
                    let w = list.len() as u64;
                    let home = list[(XxHash64::oneshot(SEED_USER, user.as_bytes()) % w) as usize];
                    assert_eq!(
                        p.home_shard(sku, width, user),
                        home,
                        "{shards} {sku} {width} {user}"
                    );
                    let start = (XxHash64::oneshot(SEED_SECOND, user.as_bytes()) % w) as usize;
                    let empty = |x: ShardId| x % 3 == 1;
                    let order: Vec<ShardId> = (0..list.len())
                        .map(|i| list[(start + i) % list.len()])
                        .filter(|&x| x != home && !empty(x))
                        .collect();
                    assert_eq!(p.second_chances(sku, width, user, empty), order);
                }
            }
        }
    }
}
