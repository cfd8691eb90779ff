//! Per-SKU series of closed campaigns are left out of `/metrics`. The Prometheus recorder
//! has no call to delete one series, so `/metrics` is rendered through [`render`], which
//! drops every line labelled with a forgotten SKU; reconciliation of a closed campaign is
//! refused, so nothing sets those series again.

use std::collections::HashSet;
use std::sync::{LazyLock, RwLock};

use metrics_exporter_prometheus::PrometheusHandle;

static FORGOTTEN: LazyLock<RwLock<HashSet<u64>>> = LazyLock::new(Default::default);

/// From now on, `/metrics` carries no series labelled `sku="<sku>"`.
pub fn forget_sku(sku: u64) {
    FORGOTTEN
        .write()
        .unwrap_or_else(|p| p.into_inner())
        .insert(sku);
}

/// The Prometheus text without the forgotten SKUs' series.
pub fn render(handle: &PrometheusHandle) -> String {
    // The log writer counts what it drops itself; read at each scrape.
    metrics::counter!(crate::metrics::LOG_LINES_DROPPED).absolute(telemetry::dropped_lines());
    filter(&handle.render())
}

fn filter(text: &str) -> String {
    let gone = FORGOTTEN.read().unwrap_or_else(|p| p.into_inner());
    if gone.is_empty() {
        return text.to_owned();
    }
    let labels: Vec<String> = gone.iter().map(|s| format!("sku=\"{s}\"")).collect();
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        if line.starts_with('#') || !labels.iter().any(|l| line.contains(l.as_str())) {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forgotten_skus_lose_their_lines_only() {
        forget_sku(77);
        let text = "# TYPE flashgate_reconcile_drift gauge\n\
                    flashgate_reconcile_drift{sku=\"77\"} 0\n\
                    flashgate_reconcile_drift{sku=\"770\"} 1\n";
        let out = filter(text);
        assert!(!out.contains("sku=\"77\"}"), "{out}");
        assert!(out.contains("sku=\"770\"} 1"), "{out}");
    }
}
