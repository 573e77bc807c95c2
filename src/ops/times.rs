//! Times for `scr_halt --before/--after` (user guide 2.9.3): ISO 8601 as the guide shows
//! (`2023-07-04T21:00:00`), read in the local time zone unless it carries `Z` or an offset,
//! plus a few forms that are handy in scripts. Printing uses local time with its offset.

/// The forms [`parse`] accepts, for help and error messages.
pub const FORMS: &str = "YYYY-MM-DDTHH:MM[:SS] (also with a space instead of T, optionally ending in Z or \
+HH:MM), YYYY-MM-DD (midnight), HH:MM[:SS] (today), @SECONDS (since the epoch), now, now+N or +N with an \
optional unit s, m, h or d (also now-N)";

/// Seconds since the epoch for `text`; `now` is the current time (for relative forms).
pub fn parse(text: &str, now: i64) -> Result<i64, String> {
    let t = text.trim();
    let bad = || format!("{text:?} is not a time; accepted forms: {FORMS}");
    if t.is_empty() {
        return Err(bad());
    }
    if let Some(secs) = t.strip_prefix('@') {
        return secs.parse::<i64>().map_err(|_| bad());
    }
    if t.eq_ignore_ascii_case("now") {
        return Ok(now);
    }
    let rel = t.strip_prefix("now").map(str::trim_start).unwrap_or(t);
    if let Some(sign) = rel.chars().next().filter(|c| *c == '+' || (*c == '-' && rel.len() != t.len())) {
        let d = duration(rel[1..].trim()).ok_or_else(bad)?;
        return Ok(if sign == '+' { now + d } else { now - d });
    }
    if let Some(s) = clock(t) {
        let (y, m, d) = local_date(now);
        return local_to_epoch(y, m, d, s / 3600, s % 3600 / 60, s % 60).ok_or_else(bad);
    }
    iso(t).ok_or_else(bad)
}

/// `N`, `Ns`, `Nm`, `Nh`, `Nd` (or the words) in seconds.
pub fn duration(s: &str) -> Option<i64> {
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: i64 = num.parse().ok()?;
    let mult = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "s" | "sec" | "secs" | "second" | "seconds" => 1,
        "m" | "min" | "mins" | "minute" | "minutes" => 60,
        "h" | "hour" | "hours" => 3600,
        "d" | "day" | "days" => 86400,
        _ => return None,
    };
    n.checked_mul(mult)
}

/// `HH:MM[:SS]` as seconds of the day.
fn clock(s: &str) -> Option<i64> {
    let parts: Vec<&str> = s.split(':').collect();
    if !(2..=3).contains(&parts.len()) || parts.iter().any(|p| p.len() != 2 || !p.bytes().all(|b| b.is_ascii_digit())) {
        return None;
    }
    let n: Vec<i64> = parts.iter().map(|p| p.parse().unwrap_or(99)).collect();
    let (h, m, sec) = (n[0], n[1], n.get(2).copied().unwrap_or(0));
    (h < 24 && m < 60 && sec < 61).then_some(h * 3600 + m * 60 + sec)
}

fn digits(s: &str, n: usize) -> Option<i64> {
    (s.len() == n && s.bytes().all(|b| b.is_ascii_digit())).then(|| s.parse().ok()).flatten()
}

/// `YYYY-MM-DD[(T| )HH:MM[:SS[.fff]][Z|(+|-)HH[:MM]]]`.
fn iso(s: &str) -> Option<i64> {
    let (date, rest) = if s.len() > 10 { (s.get(..10)?, s.get(10..)?) } else { (s, "") };
    let ymd: Vec<&str> = date.split('-').collect();
    if ymd.len() != 3 {
        return None;
    }
    let (y, mo, d) = (digits(ymd[0], 4)?, digits(ymd[1], 2)?, digits(ymd[2], 2)?);
    if !(1..=12).contains(&mo) || d < 1 || d > days_in_month(y, mo) {
        return None;
    }
    if rest.is_empty() {
        return local_to_epoch(y, mo, d, 0, 0, 0);
    }
    let rest = rest.strip_prefix('T').or_else(|| rest.strip_prefix(' '))?;
    // Split off a zone designator.
    let (clock_part, zone) = match rest.find(['Z', 'z', '+', '-']) {
        Some(i) => (&rest[..i], Some(&rest[i..])),
        None => (rest, None),
    };
    let clock_part = clock_part.split_once('.').map_or(clock_part, |(c, frac)| {
        if frac.bytes().all(|b| b.is_ascii_digit()) && !frac.is_empty() {
            c
        } else {
            "invalid"
        }
    });
    let secs = clock(clock_part)?;
    let (h, mi, sec) = (secs / 3600, secs % 3600 / 60, secs % 60);
    match zone {
        None => local_to_epoch(y, mo, d, h, mi, sec),
        Some(z) => {
            let offset = if z.eq_ignore_ascii_case("z") {
                0
            } else {
                let sign = if z.starts_with('-') { -1 } else { 1 };
                let body = z[1..].replace(':', "");
                let (oh, om) = match body.len() {
                    2 => (digits(&body, 2)?, 0),
                    4 => (digits(&body[..2], 2)?, digits(&body[2..], 2)?),
                    _ => return None,
                };
                if oh > 23 || om > 59 {
                    return None;
                }
                sign * (oh * 3600 + om * 60)
            };
            Some(days_from_civil(y, mo, d) * 86400 + secs - offset)
        }
    }
}

fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        4 | 6 | 9 | 11 => 30,
        2 if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        2 => 28,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a civil date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146097 + doe - 719468
}

/// A local wall-clock time as seconds since the epoch (`mktime`, with the time zone's
/// daylight-saving rule deciding).
fn local_to_epoch(y: i64, mo: i64, d: i64, h: i64, mi: i64, s: i64) -> Option<i64> {
    // SAFETY: a zeroed tm is valid; mktime reads and normalises the struct we own.
    let t = unsafe {
        let mut tm: libc::tm = std::mem::zeroed();
        tm.tm_year = (y - 1900) as i32;
        tm.tm_mon = (mo - 1) as i32;
        tm.tm_mday = d as i32;
        tm.tm_hour = h as i32;
        tm.tm_min = mi as i32;
        tm.tm_sec = s as i32;
        tm.tm_isdst = -1;
        libc::mktime(&mut tm)
    };
    (t != -1).then_some(t as i64)
}

fn local_date(secs: i64) -> (i64, i64, i64) {
    let (tm, _) = crate::identity::local_tm(secs);
    (tm.tm_year as i64 + 1900, tm.tm_mon as i64 + 1, tm.tm_mday as i64)
}

/// `secs` as local ISO 8601 with its offset: `2023-07-04T21:00:00+02:00`.
pub fn format_local(secs: i64) -> String {
    crate::identity::iso_local(secs * 1_000_000, false)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_700_000_000; // 2023-11-14T22:13:20Z

    #[test]
    fn iso_with_zone_is_exact() {
        assert_eq!(parse("2023-07-04T21:00:00Z", NOW), Ok(1_688_504_400));
        assert_eq!(parse("2023-07-04T23:00:00+02:00", NOW), Ok(1_688_504_400));
        assert_eq!(parse("2023-07-04 16:00-0500", NOW), Ok(1_688_504_400));
        assert_eq!(parse("2023-07-04T21:00:00.250Z", NOW), Ok(1_688_504_400));
        assert_eq!(parse("1970-01-01T00:00:00Z", NOW), Ok(0));
    }

    #[test]
    fn local_forms_round_trip_through_the_local_zone() {
        let t = parse("2023-07-04T21:00:00", NOW).unwrap();
        assert!(format_local(t).starts_with("2023-07-04T21:00:00"), "{}", format_local(t));
        let t = parse("2024-02-29", NOW).unwrap();
        assert!(format_local(t).starts_with("2024-02-29T00:00:00"));
        let t = parse("06:30", NOW).unwrap();
        assert!(format_local(t)[10..].starts_with("T06:30:00"), "{}", format_local(t));
        assert_eq!(format_local(t)[..10], format_local(NOW)[..10], "today");
    }

    #[test]
    fn relative_and_epoch() {
        assert_eq!(parse("@1234", NOW), Ok(1234));
        assert_eq!(parse("now", NOW), Ok(NOW));
        assert_eq!(parse("+90", NOW), Ok(NOW + 90));
        assert_eq!(parse("now+2h", NOW), Ok(NOW + 7200));
        assert_eq!(parse("now - 1d", NOW), Ok(NOW - 86400));
        assert_eq!(parse("+10 minutes", NOW), Ok(NOW + 600));
    }

    #[test]
    fn malformed_times_are_refused_with_the_forms() {
        for bad in [
            "",
            "tomorrow",
            "2023-13-01",
            "2023-02-30",
            "2023-07-04T25:00",
            "2023-07-04X21:00",
            "2023-07-04T21:00+2",
            "21:00:00:00",
            "-5",
            "+5 fortnights",
            "@x",
            "2023-07-04T21:00.x",
        ] {
            let e = parse(bad, NOW).unwrap_err();
            assert!(e.contains("accepted forms"), "{bad}: {e}");
        }
    }
}
