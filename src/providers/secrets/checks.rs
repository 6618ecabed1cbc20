//! The checks a pattern match must pass to count as a secret: placeholders and
//! documented examples are not secrets, a generic assignment needs a credential-named
//! key and a generated-looking value, and a private key needs a body.

use std::ops::Range;

/// Substrings that mark a value as a placeholder or a documented example.
const PLACEHOLDER_MARKS: &[&str] = &[
    "example",
    "your",
    "placeholder",
    "redacted",
    "changeme",
    "change_me",
    "change-me",
    "changeit",
    "dummy",
    "sample",
    "xxxx",
    "****",
    "${",
    "{{",
    "<",
    ">",
    "...",
    "…",
    "insert",
    "replace",
    "[filtered]",
];

/// Whether `value` is a placeholder: a documented example (`…EXAMPLE…`), a fill-in
/// (`your-…`, `<…>`, `${…}`, `{{…}}`, `[REDACTED]`, `changeme`), or mostly one filler
/// character (`XXXX…`, `****`, `0000…`).
pub(super) fn is_placeholder(value: &str) -> bool {
    let lower = value.to_ascii_lowercase();
    if PLACEHOLDER_MARKS.iter().any(|mark| lower.contains(mark)) {
        return true;
    }
    let mut counts = [0usize; 256];
    for byte in value.bytes() {
        counts[usize::from(byte)] += 1;
    }
    let fillers = [b'x', b'X', b'*', b'0', b'#', b'.', b'-', b'_'];
    fillers
        .iter()
        .any(|&filler| counts[usize::from(filler)] * 10 >= value.len() * 6)
}

/// Shannon entropy of `value`'s bytes, in bits per byte.
pub(super) fn entropy(value: &str) -> f64 {
    let mut counts = [0u32; 256];
    for byte in value.bytes() {
        counts[usize::from(byte)] += 1;
    }
    let length = value.len() as f64;
    counts
        .iter()
        .filter(|&&count| count > 0)
        .map(|&count| {
            let p = f64::from(count) / length;
            -p * p.log2()
        })
        .sum()
}

/// Whether `value` has both an ASCII letter and an ASCII digit.
pub(super) fn has_letter_and_digit(value: &str) -> bool {
    value.bytes().any(|b| b.is_ascii_alphabetic()) && value.bytes().any(|b| b.is_ascii_digit())
}

/// Whether a value assigned to a credential-named key looks generated rather than
/// being a word, a reference, a path or an identifier. `password123`, `hunter2`,
/// `prod-db-password`, `GITHUB_TOKEN`, `os.environ`, `/run/secrets/x` do not.
pub(super) fn looks_generated(value: &str) -> bool {
    if value.len() < 8 || is_placeholder(value) {
        return false;
    }
    if value.contains("://")
        || value.starts_with(['/', '$', '%', '~', '.', '&', '@', '#'])
        || value.starts_with("./")
    {
        return false;
    }
    let bytes = value.as_bytes();
    let classes = [
        bytes.iter().any(u8::is_ascii_lowercase),
        bytes.iter().any(u8::is_ascii_uppercase),
        bytes.iter().any(u8::is_ascii_digit),
        bytes.iter().any(|b| !b.is_ascii_alphanumeric()),
    ];
    if classes.iter().filter(|&&class| class).count() < 2 {
        return false;
    }
    let digits = bytes.iter().filter(|b| b.is_ascii_digit()).count();
    // An environment variable's name (`GITHUB_TOKEN`).
    if value.contains('_')
        && digits <= 2
        && bytes
            .iter()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || *b == b'_')
    {
        return false;
    }
    // A dotted name (`process.env.API_KEY`, `settings.PASSWORD`).
    if digits == 0
        && value.contains('.')
        && value.split('.').all(|part| {
            !part.is_empty() && part.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        })
    {
        return false;
    }
    // A word with a few digits or a closing mark (`password123`, `Welcome1!`), or
    // words joined by separators (`prod-db-password`).
    let stem = value.trim_end_matches(['!', '?', '.']);
    let stem = stem.trim_end_matches(|c: char| c.is_ascii_digit());
    let wordy = |word: &str| {
        let mut letters = word.bytes();
        letters.next().is_some_and(|b| b.is_ascii_alphabetic())
            && (letters.clone().all(|b| b.is_ascii_lowercase())
                || letters.all(|b| b.is_ascii_uppercase()))
    };
    if value.len() - stem.len() <= 5 && stem.len() <= 14 && wordy(stem) {
        return false;
    }
    if value
        .split(['-', '_', '.', ' '])
        .all(|part| part.bytes().all(|b| b.is_ascii_alphabetic()))
    {
        return false;
    }
    let needed = if value.len() >= 12 { 3.0 } else { 2.75 };
    entropy(value) >= needed
}

/// The words of an identifier, lowercase: split at non-alphanumerics and at case
/// changes (`X-API-Key` → x, api, key; `dbPassword` → db, password; `APIKey` → api, key).
fn words(key: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut current = String::new();
    let chars: Vec<char> = key.chars().collect();
    for (i, &c) in chars.iter().enumerate() {
        if !c.is_ascii_alphanumeric() {
            if !current.is_empty() {
                words.push(std::mem::take(&mut current));
            }
            continue;
        }
        let previous = i.checked_sub(1).map(|j| chars[j]);
        let next = chars.get(i + 1).copied();
        let boundary = c.is_ascii_uppercase()
            && previous.is_some_and(|p| {
                p.is_ascii_lowercase()
                    || (p.is_ascii_uppercase() && next.is_some_and(|n| n.is_ascii_lowercase()))
            });
        if boundary && !current.is_empty() {
            words.push(std::mem::take(&mut current));
        }
        current.push(c.to_ascii_lowercase());
    }
    if !current.is_empty() {
        words.push(current);
    }
    words
}

/// Words before `key` that make it a credential's key (`api_key`, `client_key`, …).
const KEY_QUALIFIERS: &[&str] = &[
    "api",
    "secret",
    "access",
    "private",
    "app",
    "signing",
    "encryption",
    "master",
    "license",
    "auth",
    "session",
    "account",
    "client",
    "consumer",
    "shared",
    "hmac",
    "priv",
    "service",
    "admin",
    "write",
    "deploy",
    "ingest",
    "sdk",
    "server",
];

/// Words before `token` that make it a cursor (`next_page_token`), not a credential.
const CURSOR_QUALIFIERS: &[&str] = &[
    "page",
    "next",
    "continuation",
    "sync",
    "resume",
    "pagination",
    "cursor",
    "idempotency",
];

/// The kind an assignment to `key` reports when its key names a credential:
/// `password_assignment` for passwords, `generic_api_key_assignment` for keys, secrets,
/// tokens and credentials; `None` for any other key (`token_type`, `secret_name`,
/// `password_file`, `cache_key`, `api_key_id`).
pub(super) fn credential_key_kind(key: &str) -> Option<&'static str> {
    let mut words = words(key);
    while words.len() > 1
        && words.last().is_some_and(|last| {
            matches!(
                last.as_str(),
                "value" | "b64" | "base64" | "hex" | "raw" | "plain" | "str" | "string"
            ) || last.bytes().all(|b| b.is_ascii_digit())
        })
    {
        words.pop();
    }
    let last = words.last()?.as_str();
    let previous = words.len().checked_sub(2).map(|i| words[i].as_str());
    if ["password", "passwd", "passphrase"]
        .iter()
        .any(|w| last.ends_with(w))
        || matches!(last, "pass" | "pwd")
    {
        return Some("password_assignment");
    }
    // Pagination and sync cursors are called tokens but open nothing.
    if last.ends_with("token")
        && (previous.is_some_and(|p| CURSOR_QUALIFIERS.contains(&p))
            || ["pagetoken", "nexttoken", "synctoken"]
                .iter()
                .any(|w| last.ends_with(w)))
    {
        return None;
    }
    let generic = last.ends_with("secret")
        || last.ends_with("token")
        || matches!(last, "credential" | "credentials" | "creds")
        || ["apikey", "secretkey", "accesskey", "privatekey"]
            .iter()
            .any(|w| last.ends_with(w))
        || (last == "key" && previous.is_some_and(|p| KEY_QUALIFIERS.contains(&p)));
    generic.then_some("generic_api_key_assignment")
}

/// Passwords in URLs that are placeholders, not secrets.
pub(super) fn is_placeholder_password(password: &str) -> bool {
    let lower = password.to_ascii_lowercase();
    is_placeholder(password)
        || password.starts_with(['$', '%', ':'])
        || matches!(
            lower.as_str(),
            "password"
                | "pass"
                | "passwd"
                | "pwd"
                | "secret"
                | "changeme"
                | "changeit"
                | "mypassword"
        )
}

/// The byte after the line break at `at` (`\n`, `\r\n`, or the two-character escape
/// `\n` of a JSON string), or `None` when no line break is there.
fn after_break(text: &str, at: usize) -> Option<usize> {
    let rest = &text[at..];
    ["\r\n", "\n", "\\r\\n", "\\n"]
        .iter()
        .find(|brk| rest.starts_with(**brk))
        .map(|brk| at + brk.len())
}

/// Where the line starting at `from` ends (the next line break, or the text's end).
fn line_end(text: &str, from: usize) -> usize {
    let bytes = text.as_bytes();
    let mut at = from;
    while at < bytes.len() {
        match bytes[at] {
            b'\n' if at > from && bytes[at - 1] == b'\r' => return at - 1,
            b'\n' => return at,
            b'\\' if bytes.get(at + 1) == Some(&b'n') => {
                return if at >= from + 2 && &bytes[at - 2..at] == b"\\r" {
                    at - 2
                } else {
                    at
                };
            }
            _ => at += 1,
        }
    }
    bytes.len()
}

fn is_base64_line(line: &str) -> bool {
    !line.is_empty()
        && line
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'+' || b == b'/' || b == b'=')
}

/// The lines after `from`: empty lines and `Name: value` header lines are passed over,
/// base64 lines are the body. Returns the body's length, where the last body line ends,
/// and where the line that stopped the walk starts (`None` at the text's end).
fn walk_body(text: &str, mut from: usize) -> (usize, usize, Option<usize>) {
    let (mut body, mut end) = (0, from);
    loop {
        let stop = line_end(text, from);
        let raw = &text[from..stop];
        let line = raw.trim_matches([' ', '\t']);
        if is_base64_line(line) {
            body += line.len();
            end = from + raw.find(line).unwrap_or(0) + line.len();
        } else if !(line.is_empty() || line.contains(": ")) {
            return (body, end, Some(from));
        }
        match after_break(text, stop) {
            Some(next) => from = next,
            None => return (body, end, None),
        }
    }
}

/// A private key from its `BEGIN` header at `header`: the header must end its line and
/// be followed by base64 body lines (after optional `Name: value` headers). The key
/// runs through the `END` line, or, without one, to its last body line. Markers with
/// nothing (or `...`, `<your key>`) between them are no key.
pub(super) fn key_block(text: &str, header: Range<usize>) -> Option<Range<usize>> {
    let after_spaces = header.end
        + (text[header.end..].len() - text[header.end..].trim_start_matches([' ', '\t']).len());
    let start = after_break(text, after_spaces)?;
    let (body, end, stopped) = walk_body(text, start);
    if body < 4 {
        return None;
    }
    if let Some(line_start) = stopped {
        let line = &text[line_start..line_end(text, line_start)];
        let trimmed = line.trim_start_matches([' ', '\t']);
        if trimmed.starts_with("-----END") || trimmed.starts_with("---- END") {
            let offset = line_start + (line.len() - trimmed.len());
            let after_end = offset + trimmed.find("END").unwrap_or(0) + 3;
            let dashes = text[after_end..]
                .find('-')
                .map_or(after_end, |i| after_end + i);
            let close =
                dashes + (text[dashes..].len() - text[dashes..].trim_start_matches('-').len());
            return Some(header.start..close);
        }
    }
    Some(header.start..end)
}

/// A PuTTY key file from its header: through its `Private-Lines` body and, when there,
/// its `Private-MAC` line.
pub(super) fn putty_block(text: &str, header: Range<usize>) -> Option<Range<usize>> {
    let window_end = text.floor_char_boundary((header.end + 32 * 1024).min(text.len()));
    let lines_at = header.end + text[header.end..window_end].find("Private-Lines:")?;
    let start = after_break(text, line_end(text, lines_at))?;
    let (body, end, stopped) = walk_body_strict(text, start);
    if body < 4 {
        return None;
    }
    if let Some(line_start) = stopped
        && text[line_start..].starts_with("Private-MAC:")
    {
        return Some(header.start..line_end(text, line_start));
    }
    Some(header.start..end)
}

/// As [`walk_body`], but any non-base64 line (headers included) ends the body.
fn walk_body_strict(text: &str, mut from: usize) -> (usize, usize, Option<usize>) {
    let (mut body, mut end) = (0, from);
    loop {
        let stop = line_end(text, from);
        let line = text[from..stop].trim_matches([' ', '\t']);
        if !is_base64_line(line) {
            return (body, end, Some(from));
        }
        body += line.len();
        end = stop;
        match after_break(text, stop) {
            Some(next) => from = next,
            None => return (body, end, None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_and_examples() {
        for value in [
            "AKIAIOSFODNN7EXAMPLE",
            "your-api-key",
            "${API_KEY}",
            "{{ secrets.X }}",
            "<token>",
            "XXXXXXXXXXXXXXXXXXXX",
            "********",
            "[REDACTED]",
            "changeme",
        ] {
            assert!(is_placeholder(value), "{value}");
        }
        for value in [
            "ghp_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
            "a8f5f167f44f4964e6c998dee827110c",
        ] {
            assert!(!is_placeholder(value), "{value}");
        }
    }

    #[test]
    fn generated_values_and_words() {
        for value in [
            "a8f5f167f44f4964e6c998dee827110c",
            "Xk9#mQ2!vL7@pR4z",
            "abcdefghijklmnopqrstuvwxyz0123",
        ] {
            assert!(looks_generated(value), "{value}");
        }
        for value in [
            "password123",
            "Welcome1!",
            "prod-db-password",
            "GITHUB_TOKEN",
            "process.env.API_KEY",
            "/run/secrets/db",
            "aaaaaaaaaaaaaaaa",
            "1234567890",
            "https://x.example/a1",
        ] {
            assert!(!looks_generated(value), "{value}");
        }
    }

    #[test]
    fn credential_keys() {
        for (key, kind) in [
            ("password", "password_assignment"),
            ("DB_PASSWORD", "password_assignment"),
            ("PGPASSWORD", "password_assignment"),
            ("spring.datasource.password", "password_assignment"),
            ("api_key", "generic_api_key_assignment"),
            ("X-API-Key", "generic_api_key_assignment"),
            ("apiKey", "generic_api_key_assignment"),
            ("APIKey", "generic_api_key_assignment"),
            ("client_secret", "generic_api_key_assignment"),
            ("_authToken", "generic_api_key_assignment"),
            ("SECRET_KEY", "generic_api_key_assignment"),
            ("refresh_token_value", "generic_api_key_assignment"),
        ] {
            assert_eq!(credential_key_kind(key), Some(kind), "{key}");
        }
        for key in [
            "token_type",
            "secret_name",
            "password_file",
            "cache_key",
            "api_key_id",
            "tokenizer",
            "bypass",
            "max_tokens",
        ] {
            assert_eq!(credential_key_kind(key), None, "{key}");
        }
    }

    #[test]
    fn key_blocks_need_a_body() {
        let header = "-----BEGIN RSA PRIVATE KEY-----";
        let full = format!("{header}\nMIIEow\n-----END RSA PRIVATE KEY----- tail");
        assert_eq!(key_block(&full, 0..header.len()), Some(0..full.len() - 5));
        let escaped = format!("\"{header}\\nMIIEow\\n-----END RSA PRIVATE KEY-----\\n\"");
        let found = key_block(&escaped, 1..1 + header.len()).unwrap();
        assert!(escaped[found].ends_with("KEY-----"));
        let cut = format!("x {header}\nMIIB");
        assert_eq!(key_block(&cut, 2..2 + header.len()), Some(2..cut.len()));
        for empty in [
            format!("{header}\n-----END RSA PRIVATE KEY-----"),
            format!("{header}\n...\n-----END RSA PRIVATE KEY-----"),
            format!("{header} and so on"),
        ] {
            assert_eq!(key_block(&empty, 0..header.len()), None, "{empty}");
        }
    }
}
