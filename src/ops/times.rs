//! Times for `scr_halt --before/--after` (user guide 2.9.3): the guide's ISO 8601
//! (`2023-07-04T21:00:00`) and the forms SCR's own scripts and users type (`3pm today`,
//! `tomorrow 8am`, `+2 hours`, `next monday 9:00`, `December 11 03:00`, `@SECONDS`), read by
//! the `parse_datetime` crate (uutils' implementation of GNU `date -d`), in the local time zone
//! (`TZ`) unless the text carries `Z`, an offset or a zone name. The compact relative forms
//! scripts use (`+90`, `+1d`, `now+2h`, `now-30m`) are read here, since GNU `date` takes a
//! trailing letter for a military time zone. Printing uses local time with its offset.

/// The forms [`parse`] accepts, for help and error messages.
pub(crate) const FORMS: &str = "those of GNU date -d, e.g. 2023-07-04T21:00:00 (local time unless it ends in Z \
or +HH:MM), '2023-07-04 21:00', 21:00 (today), '3pm today', 'tomorrow 8am', 'next monday 9:00', \
'December 11 03:00', '+2 hours', @SECONDS (since the epoch), now; and +N or now+N/now-N with an optional \
unit s, m, h or d";

/// Seconds since the epoch for `text`; `now` is the current time (for relative forms and the
/// day a bare time of day falls on).
pub fn parse(text: &str, now: i64) -> Result<i64, TimeError> {
    let t = text.trim();
    let bad = || TimeError::NotATime { text: text.to_string() };
    if t.is_empty() {
        return Err(bad());
    }
    if let Some(v) = compact_relative(t, now) {
        return v.ok_or_else(bad);
    }
    let base = jiff::Timestamp::from_second(now).map_err(|e| TimeError::Now { now, why: e.to_string() })?;
    let base = base.to_zoned(jiff::tz::TimeZone::system());
    match parse_datetime::parse_datetime_at_date(base, t) {
        Ok(p) if p.as_zoned().is_some() => Ok(p.unix_epoch_second()),
        Ok(_) => Err(TimeError::TooFar { text: text.to_string() }),
        Err(_) => Err(bad()),
    }
}

/// A time [`parse`] cannot read: the text as given, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TimeError {
    /// None of the accepted forms ([`FORMS`]).
    #[error("{text:?} is not a time; accepted forms: {FORMS}")]
    NotATime {
        /// The text as given.
        text: String,
    },
    /// A time past what the clock can represent.
    #[error("{text:?} is too far in the future")]
    TooFar {
        /// The text as given.
        text: String,
    },
    /// The current time itself is out of range.
    #[error("current time {now}: {why}")]
    Now {
        /// The current time, in seconds since the epoch.
        now: i64,
        /// What is wrong with it.
        why: String,
    },
}

/// `+N[unit]`, `now+N[unit]`, `now-N[unit]` (unit `s`, `m`, `h`, `d` or the words): `None`
/// when `t` is not of this shape (another form, for the crate), `Some(None)` when it is but the
/// number or unit is bad, else the time.
fn compact_relative(t: &str, now: i64) -> Option<Option<i64>> {
    let (rel, after_now) = match t.get(..3) {
        Some(n) if n.eq_ignore_ascii_case("now") => (t[3..].trim_start(), true),
        _ => (t, false),
    };
    let sign = rel.chars().next().filter(|c| *c == '+' || (*c == '-' && after_now))?;
    let body = rel[1..].trim();
    // "+2 hours", "now + 1 day", "+5 fortnights": words after a space are GNU date's.
    let compact = body.find(|c: char| !c.is_ascii_digit()).is_none_or(|i| !body[i..].starts_with(' '));
    if !compact || body.is_empty() || !body.starts_with(|c: char| c.is_ascii_digit()) {
        return None;
    }
    let d = duration(body);
    Some(d.map(|d| if sign == '+' { now + d } else { now - d }))
}

/// `N`, `Ns`, `Nm`, `Nh`, `Nd` (or the words) in seconds.
pub(crate) fn duration(s: &str) -> Option<i64> {
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
        assert_eq!(parse("+2 hours", NOW), Ok(NOW + 7200));
        assert_eq!(parse("now + 1 day", NOW), Ok(NOW + 86400));
        assert_eq!(parse("+1 fortnight", NOW), Ok(NOW + 14 * 86400));
    }

    /// The local date and clock of `t`: `("2023-11-14", "15:00:00")`.
    fn local(t: i64) -> (String, String) {
        let s = format_local(t);
        (s[..10].to_string(), s[11..19].to_string())
    }

    #[test]
    fn the_words_of_scr_users_are_read_against_now() {
        let day = 86400;
        let (today, _) = local(NOW);
        let (tomorrow, _) = local(NOW + day);
        let t = parse("3pm today", NOW).unwrap();
        assert_eq!(local(t), (today.clone(), "15:00:00".to_string()));
        assert_eq!(parse("today 15:00", NOW), Ok(t));
        assert_eq!(parse("15:00", NOW), Ok(t));
        let t = parse("tomorrow 8am", NOW).unwrap();
        assert_eq!(local(t), (tomorrow.clone(), "08:00:00".to_string()));
        assert_eq!(parse("8am tomorrow", NOW), Ok(t));
        let t = parse("tomorrow", NOW).unwrap();
        assert_eq!(local(t), (tomorrow, local(NOW).1));
        // NOW is a Tuesday (local time, in any zone between UTC-12 and UTC+1).
        let t = parse("next monday 9:00", NOW).unwrap();
        assert_eq!(local(t).1, "09:00:00");
        assert!(t > NOW && t - NOW < 7 * day, "{}", format_local(t));
        let t = parse("December 11 03:00", NOW).unwrap();
        assert_eq!(local(t), ("2023-12-11".to_string(), "03:00:00".to_string()));
    }

    #[test]
    fn malformed_times_are_refused_with_the_forms() {
        for bad in [
            "",
            "  ",
            "yesterday-ish",
            "2023-13-01",
            "2023-02-30",
            "2023-07-04T25:00",
            "2023-07-04T21:00+2x",
            "21:00:00:00",
            "-5",
            "+5 fortnite",
            "+5fortnights",
            "@x",
            "noon tomorrow at the latest",
        ] {
            let e = parse(bad, NOW).unwrap_err().to_string();
            assert!(e.contains("accepted forms") && e.contains("3pm today"), "{bad}: {e}");
        }
    }
}
