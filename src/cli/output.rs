//! Text output shared by the subcommands that print records for people: yes/no
//! answers, aligned columns and the names serde gives enum variants.

use serde::Serialize;

pub(crate) fn yes_no(value: bool) -> &'static str {
    if value { "yes" } else { "no" }
}

/// Rows as columns two spaces apart, each line trimmed.
pub(crate) fn columns(rows: &[Vec<String>], indent: &str) -> String {
    let mut widths: Vec<usize> = Vec::new();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            let width = cell.chars().count();
            match widths.get_mut(i) {
                Some(w) => *w = (*w).max(width),
                None => widths.push(width),
            }
        }
    }
    let mut out = String::new();
    for row in rows {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::LayerReason;

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
    fn names_and_answers() {
        assert_eq!(yes_no(true), "yes");
        assert_eq!(yes_no(false), "no");
        assert_eq!(serde_name(&LayerReason::ProviderItems), "PROVIDER_ITEMS");
        assert_eq!(serde_name(&42), "?");
    }
}
