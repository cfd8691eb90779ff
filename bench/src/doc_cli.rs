//! The flags and subcommands README.md and docs/*.md name exist in the binaries, read from
//! their clap command trees (`gateway`, `consumer`, `bench`; here because bench's own
//! command line lives in this binary). A command line in code (`consumer poison replay
//! --all`, `cargo run -p bench -- --help`, `bench run --gateway-arg=--user-rate=0`) is walked
//! like the binary would parse it: each subcommand and flag where it is written. A flag said
//! of a binary (gateway `--listen`, consumer `run --lease-ms`) must be one of that binary's;
//! a flag alone in the text, one of some binary's. Statuses: gateway/tests/docs.rs; paths
//! and links: test-support/tests/docs_links.rs.

use clap::{Arg, Command, CommandFactory};
use test_support::docs::{self, Doc, Span};

/// Code spans that name another program's flags, on purpose.
const NOT_OURS: &[(&str, &str)] = &[
    // A tokio runtime setting measured and not added.
    ("docs/BENCHMARKS.md", "--global-queue-interval 1"),
    // h2load's own flag.
    ("docs/BENCHMARKS.md", "--log-file"),
];

struct Binary {
    name: &'static str,
    /// The package that builds it, for `cargo run -p <package>`.
    package: &'static str,
    command: Command,
}

fn binaries() -> Vec<Binary> {
    let mut all = vec![
        Binary {
            name: "gateway",
            package: "gateway",
            command: gateway::Config::command(),
        },
        Binary {
            name: "consumer",
            package: "campaign-ops",
            command: campaign_ops::cli::Cli::command(),
        },
        Binary {
            name: "bench",
            package: "bench",
            command: crate::Cli::command(),
        },
    ];
    // Propagates global flags (`--log-format`, `--mysql`) to every subcommand.
    for b in &mut all {
        b.command.build();
    }
    all
}

/// The argument `--name` (or an alias) of `cmd`.
fn long<'c>(cmd: &'c Command, name: &str) -> Option<&'c Arg> {
    cmd.get_arguments().find(|a| {
        a.get_long() == Some(name) || a.get_all_aliases().is_some_and(|v| v.contains(&name))
    })
}

/// Whether `--name` is an argument of `cmd` or of any command below it.
fn anywhere(cmd: &Command, name: &str) -> bool {
    long(cmd, name).is_some() || cmd.get_subcommands().any(|s| anywhere(s, name))
}

/// The problems of `args` given to `bin`, walked as clap would: subcommands descend, each
/// flag must be the current command's (globals included), a flag's value is skipped.
fn walk(bins: &[Binary], bin: &Binary, args: &[&str]) -> Vec<String> {
    let mut problems = Vec::new();
    let mut cmd = &bin.command;
    let mut path = bin.name.to_string();
    let mut i = 0;
    while i < args.len() {
        let word = args[i];
        i += 1;
        if word == "--" {
            break;
        }
        if let Some(flag) = word.strip_prefix("--") {
            let (name, value) = match flag.split_once('=') {
                Some((n, v)) => (n, Some(v)),
                None => (flag, None),
            };
            let Some(arg) = long(cmd, name) else {
                problems.push(format!("`{path}` has no --{name}"));
                continue;
            };
            if let (Some(inner), true) = (value, name == "gateway-arg") {
                let gateway = bins.iter().find(|b| b.name == "gateway").expect("gateway");
                problems.extend(walk(bins, gateway, &[inner]));
            }
            if value.is_none() && arg.get_action().takes_values() {
                let many = arg.get_num_args().is_some_and(|r| r.max_values() > 1);
                i += 1;
                while many && i < args.len() && !args[i].starts_with('-') {
                    i += 1;
                }
            }
        } else if let Some(shorts) = word.strip_prefix('-').filter(|s| !s.is_empty()) {
            for c in shorts.chars() {
                if !cmd.get_arguments().any(|a| a.get_short() == Some(c)) {
                    problems.push(format!("`{path}` has no -{c}"));
                }
            }
        } else if let Some(sub) = cmd.find_subcommand(word) {
            path = format!("{path} {}", sub.get_name());
            cmd = sub;
        } else if cmd.has_subcommands() && cmd.get_positionals().next().is_none() {
            problems.push(format!("`{path}` has no subcommand {word}"));
            break;
        }
    }
    problems
}

/// The binary and its arguments if `words` run one of `bins`: `consumer status 1`,
/// `./target/release/gateway --listen …`, `cargo run --release -p bench -- --help`, after
/// any `NAME=value` environment settings.
fn invocation<'w>(bins: &'w [Binary], words: &'w [&'w str]) -> Option<(&'w Binary, &'w [&'w str])> {
    let start = words
        .iter()
        .position(|w| !w.contains('=') || w.starts_with('-'))?;
    let words = &words[start..];
    let first = words.first()?;
    let program = first.rsplit('/').next().unwrap_or(first);
    if let Some(bin) = bins.iter().find(|b| b.name == program) {
        return Some((bin, &words[1..]));
    }
    if words.get(..2) != Some(&["cargo", "run"]) {
        return None;
    }
    let package = words
        .windows(2)
        .find(|w| w[0] == "-p" || w[0] == "--package")?[1];
    let bin = bins.iter().find(|b| b.package == package)?;
    let rest = words
        .iter()
        .position(|w| *w == "--")
        .map_or(&[][..], |at| &words[at + 1..]);
    Some((bin, rest))
}

/// The binary a span is said of: named just before it ("gateway `--listen`"), or at the
/// start of its table cell ("gateway `--listen` / `--admin-listen`").
fn said_of<'b>(bins: &'b [Binary], doc: &Doc, span: &Span) -> Option<&'b Binary> {
    let lead = span.lead.trim();
    let in_table = doc
        .text
        .lines()
        .nth(span.line - 1)
        .is_some_and(|l| l.trim_start().starts_with('|'));
    let last = lead.rsplit(' ').next().unwrap_or("");
    let first = lead.split(' ').next().unwrap_or("");
    bins.iter()
        .find(|b| b.name == last || (in_table && b.name == first))
}

/// The problems of one span, and whether it named any flag or command of ours.
fn check_span(bins: &[Binary], doc: &Doc, span: &Span) -> (bool, Vec<String>) {
    if NOT_OURS.contains(&(doc.path.as_str(), span.text.as_str())) {
        return (false, Vec::new());
    }
    // `consumer poison [--limit N]`: the brackets only say "optional".
    let words: Vec<&str> = span
        .text
        .split_whitespace()
        .map(|w| w.trim_matches(['[', ']']))
        .filter(|w| !w.is_empty())
        .collect();
    // The model checker's binaries: their flags are the model's, not held here.
    if words
        .first()
        .is_some_and(|w| ["model-check", "draw-check"].contains(w))
    {
        return (false, Vec::new());
    }
    if let Some((bin, args)) = invocation(bins, &words) {
        return (true, walk(bins, bin, args));
    }
    let flags: Vec<&str> = words
        .iter()
        .copied()
        .filter(|w| w.starts_with("--") && w.len() > 2)
        .collect();
    match said_of(bins, doc, span) {
        Some(bin)
            if words
                .first()
                .is_some_and(|w| bin.command.find_subcommand(w).is_some()) =>
        {
            (true, walk(bins, bin, &words))
        }
        Some(bin) if words.first().is_some_and(|w| w.starts_with("--")) => {
            let problems = flags
                .iter()
                .map(|f| f.trim_start_matches('-').split('=').next().unwrap_or(""))
                .filter(|name| !anywhere(&bin.command, name))
                .map(|name| format!("`{}` has no --{name}", bin.name))
                .collect();
            (true, problems)
        }
        _ if words.first().is_some_and(|w| w.starts_with("--")) => {
            let mut problems = Vec::new();
            for flag in &flags {
                let (name, value) = flag[2..].split_once('=').unwrap_or((&flag[2..], ""));
                if !bins.iter().any(|b| anywhere(&b.command, name)) {
                    problems.push(format!("no binary has --{name}"));
                }
                if name == "gateway-arg" && value.starts_with("--") {
                    let gateway = bins.iter().find(|b| b.name == "gateway").expect("gateway");
                    problems.extend(walk(bins, gateway, &[value]));
                }
            }
            (true, problems)
        }
        _ => (false, Vec::new()),
    }
}

#[test]
fn docs_name_only_flags_and_subcommands_the_binaries_have() {
    let bins = binaries();
    let mut problems = Vec::new();
    let mut checked = 0;
    for doc in docs::all() {
        for span in doc.spans() {
            let (ours, found) = check_span(&bins, &doc, &span);
            checked += usize::from(ours);
            problems.extend(
                found
                    .into_iter()
                    .map(|p| format!("{}: `{}`: {p}", doc.at(span.line), span.text)),
            );
        }
    }
    println!(
        "{checked} command lines and flags checked, {} wrong",
        problems.len()
    );
    assert!(
        checked > 100,
        "only {checked} command lines and flags found in the docs"
    );
    assert!(
        problems.is_empty(),
        "README.md and docs/*.md name flags or subcommands the binaries do not have:\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_walk_refuses_what_the_binaries_refuse() {
    // The check itself: a misspelt flag, a flag on the wrong subcommand, an unknown
    // subcommand and a gateway flag passed through bench are all caught.
    let bins = binaries();
    let consumer = &bins[1];
    let bench = &bins[2];
    assert!(walk(&bins, consumer, &["poison", "replay", "--all"]).is_empty());
    assert!(walk(&bins, consumer, &["--mysql", "x", "run", "--lease-ms", "5"]).is_empty());
    assert_eq!(
        walk(&bins, consumer, &["poison", "replay", "--al"]).len(),
        1
    );
    assert_eq!(
        walk(&bins, consumer, &["status", "--lease-ms", "5"]).len(),
        1
    );
    assert_eq!(walk(&bins, consumer, &["poisson", "1"]).len(), 1);
    assert!(walk(&bins, bench, &["run", "--gateway-arg=--user-rate=0"]).is_empty());
    assert_eq!(
        walk(&bins, bench, &["run", "--gateway-arg=--user-rat=0"]).len(),
        1
    );
}
