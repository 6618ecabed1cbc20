//! Text output shared by the subcommands that print records for people: yes/no
//! answers, aligned columns that fit the terminal, the names serde gives enum variants,
//! and the one escaping of stored text.
//!
//! Stored strings — objectives, ids, details, titles, rendered context — come from
//! callers and providers. Printed raw, a newline or U+2028 forges a line (`blocked yes`)
//! and `ESC[2J` clears the operator's screen, so every human output passes them through
//! [`printable`] (one-line values) or [`printable_lines`] (multi-line text).

use crate::config::EnvVars;
use serde::Serialize;
use std::borrow::Cow;

/// The width tables fit in when `$COLUMNS` does not say (shells set `COLUMNS` but do not
/// export it unless told to).
pub(crate) const DEFAULT_WIDTH: usize = 100;
/// Narrower than this, `$COLUMNS` is taken for a mistake.
const MIN_WIDTH: usize = 40;

/// The width human tables fit in: `$COLUMNS` when it is a number, else [`DEFAULT_WIDTH`].
pub(crate) fn terminal_width(env: &EnvVars) -> usize {
    env.get("COLUMNS")
        .and_then(|columns| columns.trim().parse::<usize>().ok())
        .filter(|width| *width >= MIN_WIDTH)
        .unwrap_or(DEFAULT_WIDTH)
}

/// A one-line value safe to print: see [`escaped`].
pub(crate) fn printable(text: &str) -> Cow<'_, str> {
    escaped(text, false)
}

/// Multi-line text (rendered context) safe to print: newlines and tabs stay, everything
/// else of [`escaped`] is escaped.
pub(crate) fn printable_lines(text: &str) -> Cow<'_, str> {
    escaped(text, true)
}

/// `text` with every control character (C0 — newline, CR, tab, ESC, … — DEL and C1,
/// NEL U+0085 among them), the line and paragraph separators U+2028/U+2029 and the
/// bidirectional formatting characters written as escapes: the one escaping of text ctxd
/// did not write ([`crate::providers::untrusted::escaped`]). `keep_lines` keeps newlines
/// and tabs.
fn escaped(text: &str, keep_lines: bool) -> Cow<'_, str> {
    crate::providers::untrusted::escaped(text, keep_lines)
}

pub(crate) fn yes_no(value: bool) -> &'static str {
    if value { "yes" } else { "no" }
}

/// Rows (the first one the header) as columns when every line fits in `width`, else
/// each row as a record — one `HEADER  value` line per column, records a blank line
/// apart — so no table runs wider than the terminal but for one long value.
pub(crate) fn table(rows: &[Vec<String>], indent: &str, width: usize) -> String {
    let text = columns(rows, indent);
    if text.lines().all(|line| line.chars().count() <= width) {
        return text;
    }
    let Some((header, records)) = rows.split_first() else {
        return text;
    };
    let label_width = header.iter().map(|h| h.chars().count()).max().unwrap_or(0);
    let mut out = String::new();
    for (i, record) in records.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        for (label, value) in header.iter().zip(record) {
            let line = format!("{indent}{label:<label_width$}  {}", printable(value));
            out.push_str(line.trim_end());
            out.push('\n');
        }
    }
    out
}

/// Rows as columns two spaces apart, each line trimmed; cells escaped ([`printable`]).
pub(crate) fn columns(rows: &[Vec<String>], indent: &str) -> String {
    let rows: Vec<Vec<Cow<'_, str>>> = rows
        .iter()
        .map(|row| row.iter().map(|cell| printable(cell)).collect())
        .collect();
    let mut widths: Vec<usize> = Vec::new();
    for row in &rows {
        for (i, cell) in row.iter().enumerate() {
            let width = cell.chars().count();
            match widths.get_mut(i) {
                Some(w) => *w = (*w).max(width),
                None => widths.push(width),
            }
        }
    }
    let mut out = String::new();
    for row in &rows {
        let mut line = String::from(indent);
        for (i, cell) in row.iter().enumerate() {
            line.push_str(cell);
            if i + 1 < row.len() {
                let pad = widths[i] - cell.chars().count() + 2;
                line.extend(std::iter::repeat_n(' ', pad));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// The serde name of a unit enum variant (`PROVIDER_ITEMS`, `response`), `?` for
/// anything else.
pub(crate) fn serde_name<T: Serialize>(value: &T) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(name)) => name,
        _ => "?".to_owned(),
    }
}

/// `value` split at spaces into lines of at most `width` characters; a word longer than
/// that stays whole on its own line.
pub(crate) fn wrap(value: &str, width: usize) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    let mut line = String::new();
    for word in value.split(' ') {
        let fits = line.chars().count() + 1 + word.chars().count() <= width;
        if line.is_empty() || fits {
            if !line.is_empty() {
                line.push(' ');
            }
            line.push_str(word);
        } else {
            lines.push(std::mem::take(&mut line));
            line.push_str(word);
        }
    }
    lines.push(line);
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::LayerReason;
    use crate::providers::untrusted::needs_escape;

    #[test]
    fn columns_line_up_and_lines_are_trimmed() {
        let rows = vec![
            vec!["A".to_owned(), "LONG HEADER".to_owned(), "".to_owned()],
            vec!["wider".to_owned(), "x".to_owned(), "".to_owned()],
        ];
        assert_eq!(columns(&rows, "  "), "  A      LONG HEADER\n  wider  x\n");
        assert_eq!(columns(&[], ""), "");
    }

    #[test]
    fn stored_text_cannot_forge_lines_or_drive_the_terminal() {
        let hostile = "billing\ntenant alpha\r\u{1b}[2Jblocked yes\u{2028}x\u{2029}y\u{85}z\u{202e}\t\u{7f}\0";
        let shown = printable(hostile);
        assert_eq!(
            shown,
            "billing\\ntenant alpha\\r\\u{1b}[2Jblocked yes\\u{2028}x\\u{2029}y\\u{85}z\\u{202e}\\t\\u{7f}\\u{0}"
        );
        assert!(!shown.chars().any(needs_escape));
        let block = printable_lines("line one\n\tline two\u{1b}[2J\r\n");
        assert_eq!(block, "line one\n\tline two\\u{1b}[2J\\r\n");
        // Ordinary text, accents and all, is printed as it is.
        assert!(matches!(
            printable("Café Zürich — 東京 ✓"),
            Cow::Borrowed(_)
        ));
        // Tables escape every cell.
        let rows = vec![
            vec!["A".to_owned(), "B".to_owned()],
            vec!["x\ny".to_owned(), "z".to_owned()],
        ];
        assert_eq!(columns(&rows, ""), "A     B\nx\\ny  z\n");
    }

    #[test]
    fn a_table_too_wide_for_the_terminal_becomes_records() {
        let rows = vec![
            vec!["LAYER".to_owned(), "FINGERPRINT".to_owned()],
            vec!["profile".to_owned(), "sha256:".to_owned() + &"a".repeat(64)],
            vec!["orders".to_owned(), "-".to_owned()],
        ];
        let wide = table(&rows, "  ", 200);
        assert_eq!(wide, columns(&rows, "  "));
        let narrow = table(&rows, "  ", 60);
        assert_eq!(
            narrow,
            format!(
                "  LAYER        profile\n  FINGERPRINT  sha256:{}\n\n  LAYER        orders\n  FINGERPRINT  -\n",
                "a".repeat(64)
            )
        );
    }

    #[test]
    fn values_wrap_at_spaces() {
        assert_eq!(wrap("a bb ccc", 4), ["a bb", "ccc"]);
        assert_eq!(wrap("averylongword x", 4), ["averylongword", "x"]);
        assert_eq!(wrap("", 4), [""]);
    }

    #[test]
    fn names_and_answers() {
        assert_eq!(yes_no(true), "yes");
        assert_eq!(yes_no(false), "no");
        assert_eq!(serde_name(&LayerReason::ProviderItems), "PROVIDER_ITEMS");
        assert_eq!(serde_name(&42), "?");
    }
}
