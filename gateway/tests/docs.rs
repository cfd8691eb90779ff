//! docs/API.md held to the gateway's answers. Its status tables (header `status | HTTP |
//! meaning`) list exactly the pairs of `status` and HTTP code that `ApiStatus::codes`
//! declares, both ways; every answer the gateway writes is checked against that list in
//! debug builds (gateway/src/reply.rs), so a table cannot name an answer the code never
//! gives, nor miss one it gives. The body fields the tables name are keys the gateway
//! writes or reads. Paths and links: test-support/tests/docs_links.rs; CLI flags: bench/src/doc_cli.rs.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use shard_router::ApiStatus;
use test_support::docs::{backticked, repo_root, Doc};

/// The (HTTP code, status) pairs of docs/API.md's status tables, each with where it is said.
fn documented(api: &Doc, problems: &mut Vec<String>) -> BTreeMap<(u16, String), String> {
    let mut pairs = BTreeMap::new();
    for row in api.tables_headed("status").into_iter().flatten() {
        let at = api.at(row.line);
        let (Some(names), Some(codes)) = (row.cells.first(), row.cells.get(1)) else {
            problems.push(format!("{at}: a status row without an HTTP cell"));
            continue;
        };
        let codes: Vec<u16> = codes
            .split(|c: char| !c.is_ascii_digit())
            .filter(|w| w.len() == 3)
            .filter_map(|w| w.parse().ok())
            .collect();
        if codes.is_empty() {
            problems.push(format!("{at}: no HTTP code in {:?}", row.cells[1]));
        }
        for name in backticked(names) {
            if name.parse::<ApiStatus>().is_err() {
                problems.push(format!(
                    "{at}: `{name}` is no status the gateway writes (shard-router/src/status.rs)"
                ));
            }
            for &code in &codes {
                pairs.insert((code, name.to_string()), at.clone());
            }
        }
    }
    pairs
}

#[test]
fn api_status_tables_list_exactly_the_answers_the_gateway_gives() {
    let api = Doc::read("docs/API.md");
    let mut problems = Vec::new();
    let documented = documented(&api, &mut problems);
    let declared: BTreeSet<(u16, String)> = ApiStatus::ALL
        .iter()
        .flat_map(|s| s.codes().iter().map(|&c| (c, s.as_str().to_string())))
        .collect();
    for ((code, name), at) in &documented {
        if !declared.contains(&(*code, name.clone())) {
            problems.push(format!(
                "{at}: `{name}` with {code}, an answer the gateway never gives"
            ));
        }
    }
    for (code, name) in &declared {
        if !documented.contains_key(&(*code, name.clone())) {
            problems.push(format!(
                "docs/API.md: no status table lists `{name}` with {code}, an answer the gateway gives"
            ));
        }
    }
    println!(
        "{} pairs documented, {} declared, {} wrong",
        documented.len(),
        declared.len(),
        problems.len()
    );
    assert!(
        problems.is_empty(),
        "docs/API.md drifted from the gateway's answers:\n{}",
        problems.join("\n")
    );
}

#[test]
fn api_status_tables_name_only_fields_the_gateway_knows() {
    let api = Doc::read("docs/API.md");
    let keys = keys_written(&repo_root().join("gateway/src"));
    let mut problems = Vec::new();
    let mut checked = 0;
    for row in api.tables_headed("status").into_iter().flatten() {
        for cell in row.cells.iter().skip(1) {
            for word in backticked(cell) {
                let is_field = word.starts_with(|c: char| c.is_ascii_lowercase())
                    && word
                        .chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
                    && word.parse::<ApiStatus>().is_err()
                    && !["null", "true", "false"].contains(&word);
                if !is_field {
                    continue;
                }
                checked += 1;
                if !keys.contains(word) {
                    problems.push(format!(
                        "{}: `{word}` is no field of any answer or request (gateway/src)",
                        api.at(row.line)
                    ));
                }
            }
        }
    }
    println!("{checked} fields checked, {} wrong", problems.len());
    assert!(
        checked > 0,
        "no fields found in docs/API.md's status tables"
    );
    assert!(
        problems.is_empty(),
        "docs/API.md names fields the gateway neither writes nor reads:\n{}",
        problems.join("\n")
    );
}

/// The JSON keys of the gateway's answers and requests (a table may say which request field
/// an answer is about): the fields of its `Serialize` and `Deserialize` structs and the keys
/// it puts into a body map (`.with("held", ..)`, `body.insert("sku".into(), ..)`,
/// `br#"{"error":"sku "#`).
fn keys_written(dir: &Path) -> BTreeSet<String> {
    let mut keys = BTreeSet::new();
    for entry in std::fs::read_dir(dir).expect("read gateway/src").flatten() {
        let path = entry.path();
        if path.is_dir() {
            keys.extend(keys_written(&path));
            continue;
        }
        if path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("read a source file");
        for marker in [".with(\"", "{\"", ",\""] {
            for (at, _) in text.match_indices(marker) {
                let rest = &text[at + marker.len()..];
                if let Some(end) = rest.find('"') {
                    keys.insert(rest[..end].to_string());
                }
            }
        }
        for (at, _) in text.match_indices("\".into()") {
            if let Some(start) = text[..at].rfind('"') {
                keys.insert(text[start + 1..at].to_string());
            }
        }
        let mut serialized = false;
        let mut depth = 0usize;
        for line in text.lines().map(str::trim) {
            if line.starts_with("#[derive(") && line.contains("erialize") {
                serialized = true;
            } else if serialized && depth == 0 && line.contains("struct ") {
                depth = usize::from(line.ends_with('{'));
                serialized = depth > 0;
            } else if serialized && depth > 0 {
                if line.starts_with('}') {
                    serialized = false;
                    depth = 0;
                } else if let Some((name, _)) = line.split_once(':') {
                    let name = name
                        .trim_start_matches("pub(crate) ")
                        .trim_start_matches("pub ");
                    if name
                        .chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
                    {
                        keys.insert(name.to_string());
                    }
                }
            }
        }
    }
    keys
}
