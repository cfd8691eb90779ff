//! Times as operators write them on the command line: RFC 3339 (`2026-12-01T10:00:00Z`,
//! offsets allowed), relative to now (`now`, `now+10m`, `now-30s`, `now+1h30m`), or
//! milliseconds since the epoch (`1796000000000`).

use std::str::FromStr;

/// Milliseconds since the epoch for `s`, with `now_ms` as "now". The error names the forms.
pub fn parse_ms(s: &str, now_ms: i64) -> Result<i64, String> {
    let s = s.trim();
    let bad = |why: String| {
        format!(
            "{s:?}: {why} (use RFC 3339 like 2026-12-01T10:00:00Z, now+10m, or ms since the epoch)"
        )
    };
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
        return s.parse().map_err(|_| bad("too large".into()));
    }
    if let Some(rest) = s.strip_prefix("now") {
        if rest.is_empty() {
            return Ok(now_ms);
        }
        let (sign, span) = match rest.as_bytes()[0] {
            b'+' => (1, &rest[1..]),
            b'-' => (-1, &rest[1..]),
            _ => return Err(bad("expected + or - after now".into())),
        };
        let span = jiff::Span::from_str(span).map_err(|e| bad(e.to_string()))?;
        let ms = span
            .total(jiff::Unit::Millisecond)
            .map_err(|e| bad(e.to_string()))?;
        if !ms.is_finite() || ms.abs() > 1e15 {
            return Err(bad("out of range".into()));
        }
        return Ok(now_ms + sign * ms as i64);
    }
    let ts = jiff::Timestamp::from_str(s).map_err(|e| bad(e.to_string()))?;
    Ok(ts.as_millisecond())
}

/// Parses `<time>=<units>` (a `--wave`).
pub fn parse_wave(s: &str, now_ms: i64) -> Result<(i64, u64), String> {
    let (at, units) = s
        .rsplit_once('=')
        .ok_or_else(|| format!("--wave {s:?}: expected <time>=<units>, e.g. now+10m=200"))?;
    let units: u64 = units
        .parse()
        .map_err(|_| format!("--wave {s:?}: units {units:?} is not a whole number"))?;
    if units == 0 {
        return Err(format!("--wave {s:?}: units must be at least 1"));
    }
    Ok((parse_ms(at, now_ms)?, units))
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_800_000_000_000;

    #[test]
    fn every_form_parses() {
        assert_eq!(parse_ms("1796000000000", NOW), Ok(1_796_000_000_000));
        assert_eq!(parse_ms("now", NOW), Ok(NOW));
        assert_eq!(parse_ms("now+10m", NOW), Ok(NOW + 600_000));
        assert_eq!(parse_ms("now-30s", NOW), Ok(NOW - 30_000));
        assert_eq!(parse_ms("now+1h30m", NOW), Ok(NOW + 5_400_000));
        assert_eq!(parse_ms("1970-01-01T00:00:01Z", NOW), Ok(1000));
        assert_eq!(parse_ms("1970-01-01T01:00:01+01:00", NOW), Ok(1000));
        assert_eq!(parse_wave("now+1m=200", NOW), Ok((NOW + 60_000, 200)));
    }

    #[test]
    fn bad_forms_say_what_is_accepted() {
        for bad in ["", "tomorrow", "now*3", "now+ten", "2026-13-01T00:00:00Z"] {
            let e = parse_ms(bad, NOW).unwrap_err();
            assert!(e.contains("RFC 3339"), "{bad}: {e}");
        }
        assert!(parse_wave("now=0", NOW).is_err());
        assert!(parse_wave("now", NOW).is_err());
    }
}
