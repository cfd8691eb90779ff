//! Markdown summaries of reports, for issue notes and CI logs.

use std::fmt::Write;

use loadgen::latency::fmt_us;

use crate::report::Report;
use crate::stack::cpu::{CpuUse, Role};
use crate::stack::external::ExternalReport;

/// The summary of one run: its figures, latency by outcome, CPU by process, the external
/// clients on the same stack, the invariants.
pub fn run_summary(r: &Report) -> String {
    let mut s = String::new();
    figures(&mut s, r);
    outcomes(&mut s, r);
    if !r.cpu.is_empty() {
        let _ = writeln!(
            s,
            "\n| process | CPU s | CPU µs per answer |\n| --- | ---: | ---: |"
        );
        cpu_rows(&mut s, &r.cpu);
    }
    for x in r.external.iter().chain(&r.h2load) {
        external(&mut s, r, x);
    }
    if let Some(inv) = &r.invariants {
        let _ = writeln!(
            s,
            "\n**Invariants: {}**\n\n| check | result | detail |\n| --- | --- | --- |",
            if inv.passed { "PASS" } else { "FAIL" }
        );
        for c in &inv.checks {
            let _ = writeln!(
                s,
                "| {} | {} | {} |",
                c.name,
                if c.passed { "pass" } else { "FAIL" },
                c.detail
            );
        }
    }
    s
}

/// The heading and the run's figures (and the baseline's beside them).
fn figures(s: &mut String, r: &Report) {
    let _ = writeln!(s, "### {} — {} ({:?} loop)\n", r.kind, r.scenario, r.mode);
    let _ = writeln!(s, "| metric | value |\n| --- | ---: |");
    let _ = writeln!(s, "| connections | {} |", r.connections);
    let _ = writeln!(s, "| offered | {:.0} req/s |", r.offered_rps);
    let _ = writeln!(s, "| answers | {} |", r.requests);
    let _ = writeln!(s, "| measured window | {:.2} s |", r.measured_s);
    let _ = writeln!(s, "| throughput | {:.0} req/s |", r.throughput_rps);
    let _ = writeln!(s, "| claims/s | {:.0} |", r.claims_per_s);
    let _ = writeln!(
        s,
        "| errors | {} ({:.2}%) |",
        r.errors,
        100.0 * r.error_ratio()
    );
    if let Some(b) = &r.baseline {
        let _ = writeln!(
            s,
            "| baseline ({}) | {:.0} req/s, p99 {} |",
            b.server,
            b.baseline_rps,
            fmt_us(b.baseline_p99_us)
        );
        let _ = writeln!(s, "| throughput / baseline | {:.2} |", b.throughput_ratio);
        let _ = writeln!(s, "| p99 / baseline p99 | {:.2} |", b.p99_ratio);
        if b.cpu_us_per_answer > 0.0 && b.baseline_cpu_us_per_answer > 0.0 {
            let _ = writeln!(
                s,
                "| CPU per answer / baseline | {:.1} µs / {:.1} µs = {:.2} |",
                b.cpu_us_per_answer,
                b.baseline_cpu_us_per_answer,
                b.cpu_us_per_answer / b.baseline_cpu_us_per_answer
            );
        }
    }
}

/// Latency percentiles per outcome, and of the first second's requests.
fn outcomes(s: &mut String, r: &Report) {
    let _ = writeln!(
        s,
        "\n| outcome | count | p50 | p90 | p99 | p99.9 | max |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: |"
    );
    let all = std::iter::once(("all (measured)", r.latency.count, Some(&r.latency)));
    let rows = r
        .outcomes
        .iter()
        .map(|(name, n)| (name.as_str(), *n, r.latency_by_outcome.get(name.as_str())));
    for (name, n, p) in all.chain(rows) {
        match p {
            Some(p) => {
                let _ = writeln!(
                    s,
                    "| {name} | {n} | {} | {} | {} | {} | {} |",
                    fmt_us(p.p50_us),
                    fmt_us(p.p90_us),
                    fmt_us(p.p99_us),
                    fmt_us(p.p999_us),
                    fmt_us(p.max_us)
                );
            }
            None => {
                let _ = writeln!(s, "| {name} | {n} | – | – | – | – | – |");
            }
        }
    }
    for (name, p) in [
        ("sent in the first second", &r.first_second),
        ("claimed, sent in the first second", &r.first_second_claimed),
    ] {
        if let Some(p) = p {
            let _ = writeln!(
                s,
                "| {name} | {} | {} | {} | {} | {} | {} |",
                p.count,
                fmt_us(p.p50_us),
                fmt_us(p.p90_us),
                fmt_us(p.p99_us),
                fmt_us(p.p999_us),
                fmt_us(p.max_us)
            );
        }
    }
}

fn cpu_rows(s: &mut String, cpu: &[CpuUse]) {
    for c in cpu {
        let _ = writeln!(
            s,
            "| {} | {:.2} | {:.1} |",
            c.process, c.cpu_s, c.us_per_answer
        );
    }
}

/// An external client's run on the same stack, and its CPU per answer against the load
/// generator's.
fn external(s: &mut String, r: &Report, x: &ExternalReport) {
    let statuses: Vec<String> = x
        .statuses
        .iter()
        .map(|(k, v)| format!("{k}: {v}"))
        .collect();
    let _ = writeln!(
        s,
        "\n**External client, same stack ({}, {} connections, fresh SKU copies):** {} answers in {:.2} s = {:.0} req/s, p50 {}, p99 {}, max {}; statuses {}; socket errors {}\n",
        x.client,
        x.connections,
        x.requests,
        x.duration_s,
        x.throughput_rps,
        fmt_us(x.p50_us),
        fmt_us(x.p99_us),
        fmt_us(x.max_us),
        statuses.join(", "),
        x.socket_errors
    );
    let _ = writeln!(
        s,
        "| process | CPU s | CPU µs per answer |\n| --- | ---: | ---: |"
    );
    cpu_rows(s, &x.cpu);
    let ours = r.cpu.iter().find(|c| c.role == Role::LoadGenerator);
    let theirs = x.cpu.iter().find(|c| c.role == Role::ExternalClient);
    if let (Some(a), Some(b)) = (ours, theirs) {
        if b.us_per_answer > 0.0 {
            let _ = writeln!(
                s,
                "\nload generator / {}, CPU per answer: {:.1} / {:.1} µs = **{:.2}×**",
                x.client,
                a.us_per_answer,
                b.us_per_answer,
                a.us_per_answer / b.us_per_answer
            );
        }
    }
}
