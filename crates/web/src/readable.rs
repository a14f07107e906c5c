//! How the pages, and `picogent runs`, say a status and a time to a person: a label for each
//! status word (`in_review` → "In review"), and a time as "3 min ago" with the exact time on
//! hover (`<time datetime>` with a `title`; `live.js` turns the title into the browser's local
//! time and keeps the words fresh).
//!
//! Relative times move by the minute, never by the second: a live fragment that shows them
//! changes at most once a minute, so it is not sent again every second for a clock alone.

use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

/// The label of a status word, for a person: `in_review` → "In review", `todo` → "To do".
/// A word this list does not know (a status added later, such as `did_nothing`) reads as its
/// words, the first one capitalised.
pub fn status_label(word: &str) -> String {
    let known = match word {
        "todo" => Some("To do"),
        "ok" => Some("OK"),
        "from_start" => Some("From the start"),
        _ => None,
    };
    match known {
        Some(label) => label.to_string(),
        None => words_of(word),
    }
}

/// `snake_case` (or `kebab-case`) as words, the first one capitalised: `did_nothing` → "Did nothing".
fn words_of(word: &str) -> String {
    let spaced = word.replace(['_', '-'], " ");
    let mut chars = spaced.trim().chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// How long before `now` `at` was, in words: "just now", "3 min ago", "2 h ago", "4 days ago",
/// and past a month the day itself, in UTC ("on 2026-11-01"). A time after `now` (another machine's
/// clock) is "just now".
pub fn ago(at: OffsetDateTime, now: OffsetDateTime) -> String {
    let seconds = (now - at).whole_seconds();
    let minutes = seconds / 60;
    let hours = minutes / 60;
    let days = hours / 24;
    if minutes < 1 {
        "just now".to_string()
    } else if hours < 1 {
        format!("{minutes} min ago")
    } else if days < 1 {
        format!("{hours} h ago")
    } else if days == 1 {
        "1 day ago".to_string()
    } else if days < 31 {
        format!("{days} days ago")
    } else {
        format!("on {}", at.to_offset(time::UtcOffset::UTC).date())
    }
}

/// The exact time, to the second, in UTC: `2026-12-01 20:29:49 UTC`. A browser shows it in
/// its own time zone instead (`live.js`).
pub fn exact(at: OffsetDateTime) -> String {
    let at = at.to_offset(time::UtcOffset::UTC);
    format!("{} {:02}:{:02}:{:02} UTC", at.date(), at.hour(), at.minute(), at.second())
}

/// An RFC 3339 time, as the state and the tracker give it, if it is one.
pub fn parse(text: &str) -> Option<OffsetDateTime> {
    OffsetDateTime::parse(text.trim(), &Rfc3339).ok()
}

/// `text` (an RFC 3339 time) as the pages show it: `<time datetime="…" title="exact">3 min
/// ago</time>`. Anything else is shown as it is, escaped.
pub fn time_html(text: &str, now: OffsetDateTime) -> String {
    let Some(at) = parse(text) else { return escape(text) };
    // Both attribute values are made here from a parsed time: digits, '-', ':', '.', 'T', 'Z',
    // '+', spaces and "UTC", nothing to escape.
    let datetime = at.format(&Rfc3339).unwrap_or_default();
    format!("<time datetime=\"{datetime}\" title=\"{}\">{}</time>", exact(at), ago(at, now))
}

fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#x27;"),
            c => out.push(c),
        }
    }
    out
}

/// The template filters: `{{ status|label }}` and `{{ rfc3339|when }}`.
pub(super) fn add_filters(env: &mut minijinja::Environment<'static>) {
    env.add_filter("label", |word: String| status_label(&word));
    env.add_filter("when", |text: String| {
        minijinja::Value::from_safe_string(time_html(&text, OffsetDateTime::now_utc()))
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_words_have_labels_and_unknown_ones_read_as_words() {
        for (word, label) in [
            ("in_review", "In review"),
            ("in_progress", "In progress"),
            ("todo", "To do"),
            ("backlog", "Backlog"),
            ("done", "Done"),
            ("completed", "Completed"),
            ("interrupted", "Interrupted"),
            ("did_nothing", "Did nothing"),
            ("reply_cap", "Reply cap"),
            ("some-new-word", "Some new word"),
            ("", ""),
        ] {
            assert_eq!(status_label(word), label, "{word}");
        }
    }

    #[test]
    fn times_read_as_how_long_ago_by_the_minute() {
        let now = time::macros::datetime!(2026-12-01 20:30:00 UTC);
        for (seconds_before, words) in [
            (-30, "just now"),
            (0, "just now"),
            (59, "just now"),
            (60, "1 min ago"),
            (3 * 60 + 59, "3 min ago"),
            (59 * 60, "59 min ago"),
            (60 * 60, "1 h ago"),
            (23 * 3600 + 3599, "23 h ago"),
            (24 * 3600, "1 day ago"),
            (3 * 86400, "3 days ago"),
            (30 * 86400, "30 days ago"),
            (40 * 86400, "on 2026-10-22"),
        ] {
            assert_eq!(ago(now - time::Duration::seconds(seconds_before), now), words, "{seconds_before} s before");
        }
    }

    #[test]
    fn a_time_element_carries_the_exact_time_and_other_text_is_escaped() {
        let now = time::macros::datetime!(2026-12-01 20:30:00 UTC);
        let html = time_html("2026-12-01T20:26:49.819878746Z", now);
        assert_eq!(
            html,
            "<time datetime=\"2026-12-01T20:26:49.819878746Z\" title=\"2026-12-01 20:26:49 UTC\">3 min ago</time>"
        );
        // Another offset is the same instant, said in UTC.
        let html = time_html("2026-12-01T21:29:00+01:00", now);
        assert!(html.contains("title=\"2026-12-01 20:29:00 UTC\">1 min ago<"), "{html}");
        assert_eq!(time_html("<b>soon</b>", now), "&lt;b&gt;soon&lt;/b&gt;");
    }
}
