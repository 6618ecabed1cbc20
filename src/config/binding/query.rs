//! The SQLite query rule a binding checks without opening anything: one statement whose
//! only parameter is `?1`. Whether it prepares read-only is checked on the database
//! (`ctxd validate`, and `serve` at start-up).

/// Problems of a SQLite query: it must be one statement whose only parameter is `?1`.
/// String literals, quoted identifiers and comments are skipped, so `'what?'` or
/// `-- ?2` are not parameters.
pub(super) fn query_problems(sql: &str) -> Vec<String> {
    let mut found = Vec::new();
    if sql.trim().is_empty() {
        found.push("must not be empty".to_owned());
        return found;
    }
    let chars: Vec<char> = sql.chars().collect();
    let mut uses_p1 = false;
    let mut others: Vec<String> = Vec::new();
    let mut statement_ended = false;
    let mut second_statement = false;
    let is_word = |c: char| c.is_alphanumeric() || c == '_' || c == '$';
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        match c {
            '\'' | '"' | '`' | '[' => {
                let close = if c == '[' { ']' } else { c };
                i += 1;
                while i < chars.len() {
                    if chars[i] == close {
                        // A doubled quote is an escaped quote inside the literal.
                        if close != ']' && chars.get(i + 1) == Some(&close) {
                            i += 2;
                            continue;
                        }
                        break;
                    }
                    i += 1;
                }
                i += 1;
                second_statement |= statement_ended;
                continue;
            }
            '-' if next == Some('-') => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
                continue;
            }
            '/' if next == Some('*') => {
                i += 2;
                while i < chars.len() && !(chars[i] == '*' && chars.get(i + 1) == Some(&'/')) {
                    i += 1;
                }
                i += 2;
                continue;
            }
            ';' => statement_ended = true,
            c if c.is_whitespace() => {}
            '?' => {
                second_statement |= statement_ended;
                let digits: String = chars[i + 1..]
                    .iter()
                    .take_while(|c| c.is_ascii_digit())
                    .collect();
                i += 1 + digits.len();
                if digits.is_empty() {
                    others.push("?".to_owned());
                } else if digits.trim_start_matches('0') == "1" {
                    uses_p1 = true;
                } else {
                    others.push(format!("?{digits}"));
                }
                continue;
            }
            ':' | '@' | '$'
                if next.is_some_and(|n| n.is_alphanumeric() || n == '_')
                    && (i == 0 || !is_word(chars[i - 1])) =>
            {
                second_statement |= statement_ended;
                let name: String = chars[i + 1..]
                    .iter()
                    .take_while(|c| c.is_alphanumeric() || **c == '_')
                    .collect();
                i += 1 + name.chars().count();
                others.push(format!("{c}{name}"));
                continue;
            }
            _ => second_statement |= statement_ended,
        }
        i += 1;
    }
    if second_statement {
        found.push("must be a single statement".to_owned());
    }
    others.dedup();
    for other in others {
        found.push(format!(
            "uses the parameter {other}: the lookup value is the only parameter, written ?1"
        ));
    }
    if !uses_p1 {
        found.push("must use ?1 for the lookup value".to_owned());
    }
    found
}
