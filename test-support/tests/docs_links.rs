//! Every file, link and section README.md and docs/*.md send a reader to exists: relative
//! Markdown links (and their `#anchor`), repository paths such as `lua/claim.lua` or
//! `gateway/src/cache.rs:42` in code spans and prose, and section references such as
//! `docs/DESIGN.md "The draw"` or `see "Identity"`. The status tables and CLI flags are held
//! to the code by gateway/tests/docs.rs and bench/src/doc_cli.rs.

use std::path::Path;

use test_support::docs::{self, anchor, repo_root, Doc};

/// Extensions that make a word a file name even in prose.
const FILE_EXTENSIONS: &[&str] = &[
    "md", "rs", "lua", "sh", "toml", "yml", "yaml", "json", "sql", "cfg", "py", "svg",
];

/// Top-level directories a code-span word may start with to be read as a repository path
/// (`target` is build output, not the repository's).
fn top_level_dirs() -> Vec<String> {
    std::fs::read_dir(repo_root())
        .expect("read the workspace root")
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with('.') && n != "target")
        .collect()
}

/// `word` as a repository path (without `./`, a `:line` or `:line-line` suffix, or trailing
/// punctuation), if it reads as one: in code, a path under a top-level directory or a file
/// name with one of `FILE_EXTENSIONS`; in prose, only the latter.
fn as_path(word: &str, in_code: bool, dirs: &[String]) -> Option<String> {
    let w = word.trim_matches(|c: char| "()[],;.:'\"*".contains(c));
    let w = w.strip_prefix("./").unwrap_or(w);
    if w.contains(['<', '>', '{', '}', '*', '…', '$', '=', '|']) || w.contains("://") {
        return None;
    }
    // gateway/src/cache.rs:42 or :42-60
    let w = match w.split_once(':') {
        Some((path, line)) if line.chars().all(|c| c.is_ascii_digit() || c == '-') => path,
        Some(_) => return None,
        None => w,
    };
    if w.starts_with('/') || w.starts_with('-') {
        return None;
    }
    let has_extension = Path::new(w)
        .extension()
        .is_some_and(|e| FILE_EXTENSIONS.contains(&e.to_string_lossy().as_ref()));
    let under_top = w
        .split_once('/')
        .is_some_and(|(first, _)| dirs.iter().any(|d| d == first));
    let is_path = if in_code {
        under_top || (has_extension && w.contains('/'))
    } else {
        has_extension && (w.contains('/') || w.ends_with(".md"))
    };
    is_path.then(|| w.to_string())
}

/// The repository's files and directories, relative to the root (build output and git's
/// own files left out).
fn repository_entries() -> Vec<String> {
    fn walk(dir: &Path, root: &Path, out: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let path = entry.path();
            let name = entry.file_name();
            if name == ".git" || (dir == root && name == "target") {
                continue;
            }
            out.push(
                path.strip_prefix(root)
                    .unwrap_or(&path)
                    .to_string_lossy()
                    .into_owned(),
            );
            if path.is_dir() {
                walk(&path, root, out);
            }
        }
    }
    let root = repo_root();
    let mut out = Vec::new();
    walk(&root, &root, &mut out);
    out
}

/// The root `.gitignore`'s anchored paths: files the docs may name (a secrets file the
/// operator writes) that are not in the repository by design.
fn ignored_paths() -> Vec<String> {
    std::fs::read_to_string(repo_root().join(".gitignore"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().strip_prefix('/').map(str::to_string))
        .collect()
}

/// Where a named path is found.
struct Repository {
    dirs: Vec<String>,
    entries: Vec<String>,
    ignored: Vec<String>,
}

impl Repository {
    fn load() -> Self {
        Self {
            dirs: top_level_dirs(),
            entries: repository_entries(),
            ignored: ignored_paths(),
        }
    }

    /// From the workspace root or the doc's own directory (`DESIGN.md` in
    /// docs/OPERATIONS.md); a path that does not start at a top-level directory may also be
    /// the tail of one that does (`client/draw.rs` in the row of `shard-router/`).
    fn has(&self, doc: &Doc, path: &str) -> bool {
        let path = path.trim_end_matches('/');
        if repo_root().join(path).exists() || doc.dir().join(path).exists() {
            return true;
        }
        if self.ignored.iter().any(|i| i == path) {
            return true;
        }
        let at_top = path
            .split('/')
            .next()
            .is_some_and(|first| self.dirs.iter().any(|d| d == first));
        !at_top
            && self
                .entries
                .iter()
                .any(|e| e.ends_with(&format!("/{path}")))
    }
}

#[test]
fn every_repository_path_the_docs_name_exists() {
    let repo = Repository::load();
    let dirs = &repo.dirs;
    let mut problems = Vec::new();
    let mut checked = 0;
    for doc in docs::all() {
        for span in doc.spans() {
            for word in span.text.split_whitespace() {
                if let Some(path) = as_path(word, true, dirs) {
                    checked += 1;
                    if !repo.has(&doc, &path) {
                        problems.push(format!(
                            "{}: `{path}` is not in the repository",
                            doc.at(span.line)
                        ));
                    }
                }
            }
        }
        let prose = without_code(&doc.text);
        for (i, line) in prose.lines().enumerate() {
            for word in line.split(|c: char| c.is_whitespace() || "()[]".contains(c)) {
                if let Some(path) = as_path(word, false, dirs) {
                    checked += 1;
                    if !repo.has(&doc, &path) {
                        problems.push(format!(
                            "{}: {path} is not in the repository",
                            doc.at(i + 1)
                        ));
                    }
                }
            }
        }
    }
    report("repository paths", checked, problems);
}

#[test]
fn every_markdown_link_and_anchor_resolves() {
    let mut problems = Vec::new();
    let mut checked = 0;
    for doc in docs::all() {
        for (line, target) in doc.links() {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            checked += 1;
            let (path, fragment) = target.split_once('#').unwrap_or((&target, ""));
            let file = if path.is_empty() {
                Path::new(&doc.path).to_path_buf()
            } else {
                let full = doc.dir().join(path);
                if !full.exists() {
                    problems.push(format!(
                        "{}: link to {path}, which is not in the repository",
                        doc.at(line)
                    ));
                    continue;
                }
                full.strip_prefix(repo_root())
                    .unwrap_or(&full)
                    .to_path_buf()
            };
            if fragment.is_empty() || file.extension().is_none_or(|e| e != "md") {
                continue;
            }
            let target_doc = Doc::read(&normalize(&file));
            if !target_doc.sections().iter().any(|s| anchor(s) == fragment) {
                problems.push(format!(
                    "{}: link to #{fragment}, which is no heading of {}",
                    doc.at(line),
                    target_doc.path
                ));
            }
        }
    }
    report("links", checked, problems);
}

#[test]
fn every_section_the_docs_refer_to_exists() {
    let mut problems = Vec::new();
    let all = docs::all();
    let refs = all
        .iter()
        .flat_map(|doc| section_refs(doc).into_iter().map(move |r| (doc, r)))
        .collect::<Vec<_>>();
    for (doc, (line, file, section)) in &refs {
        let path = file.as_deref().unwrap_or(&doc.path);
        if !repo_root().join(path).is_file() {
            problems.push(format!(
                "{}: {path} is not in the repository",
                doc.at(*line)
            ));
            continue;
        }
        let target = Doc::read(path);
        let wanted = section.to_lowercase();
        let found = target
            .sections()
            .iter()
            .any(|s| s.to_lowercase().starts_with(&wanted));
        if !found {
            problems.push(format!(
                "{}: \"{section}\" is no section of {}",
                doc.at(*line),
                target.path
            ));
        }
    }
    report("section references", refs.len(), problems);
}

/// `docs/../README.md` → `README.md`.
fn normalize(path: &Path) -> String {
    let mut parts: Vec<String> = Vec::new();
    for c in path.components() {
        match c.as_os_str().to_string_lossy().as_ref() {
            ".." => {
                parts.pop();
            }
            "." => {}
            p => parts.push(p.to_string()),
        }
    }
    parts.join("/")
}

/// The doc's text with code spans and fenced blocks blanked (line breaks kept), so prose
/// checks do not read code as prose.
fn without_code(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut in_fence = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
        } else if !in_fence {
            let mut code = false;
            for piece in line.split('`') {
                if !code {
                    out.push_str(piece);
                }
                out.push(' ');
                code = !code;
            }
        }
        out.push('\n');
    }
    out
}

/// `docs/DESIGN.md "The draw"`, `README "Upgrading"`, `BENCHMARKS.md, "Floors"` (with the
/// file, resolved from the workspace root or docs/) and `see "Identity"` (in the same doc),
/// with their lines; a quotation may run over a line break.
fn section_refs(doc: &Doc) -> Vec<(usize, Option<String>, String)> {
    let prose = without_code(&doc.text);
    let flat = prose.replace('\n', " ");
    let line_of = |offset: usize| prose[..offset].matches('\n').count() + 1;
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(q) = flat[from..].find('"').map(|q| q + from) {
        let Some(end) = flat[q + 1..].find('"').map(|e| e + q + 1) else {
            break;
        };
        from = end + 1;
        let section = flat[q + 1..end]
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        let before = flat[..q].trim_end().trim_end_matches(',');
        let word = before.rsplit([' ', '(', '[']).next().unwrap_or("");
        let file = if word == "README" || word == "README.md" {
            Some("README.md".to_string())
        } else if word.ends_with(".md") {
            let name = word.trim_start_matches("docs/");
            if Path::new(&repo_root().join("docs").join(name)).exists() {
                Some(format!("docs/{name}"))
            } else {
                Some(word.to_string())
            }
        } else if word == "see" {
            None
        } else {
            continue;
        };
        out.push((line_of(q), file, section));
    }
    out
}

fn report(what: &str, checked: usize, problems: Vec<String>) {
    println!("{what}: {checked} checked, {} wrong", problems.len());
    assert!(
        problems.is_empty(),
        "{} {what} in README.md and docs/*.md do not resolve:\n{}",
        problems.len(),
        problems.join("\n")
    );
}
