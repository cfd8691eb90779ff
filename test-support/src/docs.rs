//! The project's Markdown (README.md and docs/*.md) read the way the tests that hold it to
//! the code need it: code spans, table rows, links and section references, each with the
//! line it sits on so a failure names `docs/API.md:12`.

use std::path::{Path, PathBuf};

/// The workspace root (this crate's parent directory).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("test-support sits inside the workspace")
        .to_path_buf()
}

/// One Markdown file of the project.
#[derive(Debug)]
pub struct Doc {
    /// Relative to the workspace root, e.g. `docs/API.md`.
    pub path: String,
    pub text: String,
}

/// A piece of inline code (between backticks, possibly across a line break) or one line of
/// a fenced block (lines ending in `\` joined with the next).
#[derive(Debug, Clone)]
pub struct Span {
    /// 1-based line where the span starts.
    pub line: usize,
    pub text: String,
    /// The text before the span on its line, from the start of its table cell if it is in
    /// a table: what the span is said of ("gateway `--listen`").
    pub lead: String,
}

/// A table row: its cells, trimmed, without the outer pipes.
#[derive(Debug, Clone)]
pub struct Row {
    pub line: usize,
    pub cells: Vec<String>,
}

/// README.md and every docs/*.md, in name order.
pub fn all() -> Vec<Doc> {
    let root = repo_root();
    let mut paths = vec!["README.md".to_string()];
    let mut names: Vec<String> = std::fs::read_dir(root.join("docs"))
        .expect("read docs/")
        .map(|e| {
            e.expect("docs/ entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .filter(|n| n.ends_with(".md"))
        .collect();
    names.sort();
    paths.extend(names.into_iter().map(|n| format!("docs/{n}")));
    paths.iter().map(|p| Doc::read(p)).collect()
}

impl Doc {
    /// `path` relative to the workspace root.
    pub fn read(path: &str) -> Doc {
        let text = std::fs::read_to_string(repo_root().join(path))
            .unwrap_or_else(|e| panic!("read {path}: {e}"));
        Doc {
            path: path.to_string(),
            text,
        }
    }

    /// `docs/API.md:12`, for messages.
    pub fn at(&self, line: usize) -> String {
        format!("{}:{line}", self.path)
    }

    /// The directory the file's relative links start from.
    pub fn dir(&self) -> PathBuf {
        repo_root().join(Path::new(&self.path).parent().unwrap_or(Path::new("")))
    }

    /// Every code span and fenced line, in order.
    pub fn spans(&self) -> Vec<Span> {
        let mut scan = SpanScan::default();
        for (i, line) in self.text.lines().enumerate() {
            scan.line(i + 1, line);
        }
        scan.out
    }

    /// Every table outside fenced blocks: runs of lines starting with `|`, each as its
    /// rows (the header first, the separator row left out).
    pub fn tables(&self) -> Vec<Vec<Row>> {
        let mut in_fence = false;
        let mut tables = Vec::new();
        let mut current: Vec<Row> = Vec::new();
        for (i, line) in self.text.lines().enumerate() {
            let t = line.trim();
            if t.starts_with("```") {
                in_fence = !in_fence;
            }
            if in_fence || !t.starts_with('|') {
                if !current.is_empty() {
                    tables.push(std::mem::take(&mut current));
                }
                continue;
            }
            let inner = t.trim_start_matches('|').trim_end_matches('|');
            let cells: Vec<String> = inner.split('|').map(|c| c.trim().to_string()).collect();
            if !cells.iter().all(|c| c.chars().all(|ch| "-: ".contains(ch))) {
                current.push(Row { line: i + 1, cells });
            }
        }
        if !current.is_empty() {
            tables.push(current);
        }
        tables
    }

    /// The body rows of the tables whose header row starts with the cell `first_header`.
    pub fn tables_headed(&self, first_header: &str) -> Vec<Vec<Row>> {
        self.tables()
            .into_iter()
            .filter(|t| t[0].cells.first().is_some_and(|c| c == first_header))
            .map(|t| t[1..].to_vec())
            .collect()
    }

    /// The targets of `[text](target)` links, with their lines.
    pub fn links(&self) -> Vec<(usize, String)> {
        let mut out = Vec::new();
        for (i, line) in self.text.lines().enumerate() {
            let mut rest = line;
            while let Some(at) = rest.find("](") {
                let after = &rest[at + 2..];
                let Some(end) = after.find(')') else { break };
                out.push((i + 1, after[..end].to_string()));
                rest = &after[end..];
            }
        }
        out
    }

    /// The sections a reader can be sent to: headings, and the bold lead of a paragraph or
    /// list item (`**Identity**`, `- **Rebuild from the ledger.**`), without the markup.
    pub fn sections(&self) -> Vec<String> {
        let mut out = Vec::new();
        for line in self.text.lines() {
            let t = line.trim_start();
            if let Some(h) = t.strip_prefix('#') {
                out.push(h.trim_start_matches('#').trim().to_string());
            }
            let item = t.trim_start_matches(|c: char| {
                c == '-' || c == '.' || c == ' ' || c.is_ascii_digit()
            });
            if let Some(b) = item.strip_prefix("**") {
                if let Some(end) = b.find("**") {
                    out.push(b[..end].trim_end_matches(['.', ':']).to_string());
                }
            }
        }
        out
    }
}

/// GitHub's anchor for a heading: lower case, spaces to `-`, punctuation dropped.
pub fn anchor(heading: &str) -> String {
    heading
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The backticked pieces of a table cell.
pub fn backticked(cell: &str) -> Vec<&str> {
    cell.split('`').skip(1).step_by(2).collect()
}

/// The reading of [`Doc::spans`], one line at a time.
#[derive(Default)]
struct SpanScan {
    out: Vec<Span>,
    in_fence: bool,
    /// A fenced line ending in `\`, to be joined with the next.
    fence: Option<Span>,
    /// An inline span still open at the end of a line: it continues on the next one,
    /// unless a blank line ends the paragraph.
    open: Option<Span>,
}

impl SpanScan {
    /// Line `n` (1-based).
    fn line(&mut self, n: usize, line: &str) {
        if line.trim_start().starts_with("```") {
            self.in_fence = !self.in_fence;
            self.open = None;
        } else if self.in_fence {
            self.fenced(n, line);
        } else if line.trim().is_empty() {
            self.open = None;
        } else {
            self.prose(n, line);
        }
    }

    /// A line of a fenced block: one span, or joined with the next after a `\`.
    fn fenced(&mut self, n: usize, line: &str) {
        let piece = line.trim_end();
        let joined = match self.fence.take() {
            Some(mut f) => {
                f.text.push(' ');
                f.text.push_str(piece.trim_start());
                f
            }
            None => Span {
                line: n,
                text: piece.trim_start().to_string(),
                lead: String::new(),
            },
        };
        match joined.text.strip_suffix('\\') {
            Some(head) => {
                self.fence = Some(Span {
                    text: head.trim_end().to_string(),
                    ..joined
                })
            }
            None => self.out.push(joined),
        }
    }

    /// A line outside fences: the end of a span left open, then the spans it opens.
    fn prose(&mut self, n: usize, line: &str) {
        let mut lead = String::new();
        let mut rest = line;
        if let Some(mut span) = self.open.take() {
            match rest.find('`') {
                Some(end) => {
                    span.text.push(' ');
                    span.text.push_str(rest[..end].trim());
                    self.out.push(span);
                    rest = &rest[end + 1..];
                }
                None => {
                    span.text.push(' ');
                    span.text.push_str(rest.trim());
                    self.open = Some(span);
                    return;
                }
            }
        }
        while let Some(start) = rest.find('`') {
            lead.push_str(&rest[..start]);
            // Only the text of the current table cell leads a span in a table.
            if let Some(pipe) = lead.rfind('|') {
                lead.drain(..=pipe);
            }
            let after = &rest[start + 1..];
            match after.find('`') {
                Some(end) => {
                    self.out.push(Span {
                        line: n,
                        text: after[..end].trim().to_string(),
                        lead: lead.clone(),
                    });
                    lead.push_str(&after[..end]);
                    rest = &after[end + 1..];
                }
                None => {
                    self.open = Some(Span {
                        line: n,
                        text: after.trim().to_string(),
                        lead: lead.clone(),
                    });
                    rest = "";
                }
            }
        }
    }
}
