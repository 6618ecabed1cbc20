//! The checks a pattern match must pass to count as a secret: placeholders and
//! documented examples are not secrets, a generic assignment needs a credential-named
//! key and a generated-looking value, a private key needs a body, and a password in a
//! URL, a curl option or a Kubernetes manifest is found by the structure around it.

use std::ops::Range;

/// Substrings that mark a value as a placeholder or a documented example, in any case.
const PLACEHOLDER_MARKS: &[&str] = &[
    "example",
    "placeholder",
    "redacted",
    "changeme",
    "change_me",
    "change-me",
    "changeit",
    "dummy",
    "sample",
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
/// Runs of `x` that fill in for a token (`sk_live_XXXXXXXX…`); a long random token
/// holds four equal characters now and then, six hardly ever.
const FILLER_RUNS: &[&str] = &["xxxxxx", "XXXXXX"];

/// `your` as a word of its own (`your-api-key`, `YOUR_TOKEN`, `YourApiKey`,
/// `insert_your_key`), in one case throughout: inside a random token (`…RYOUREc…`) it is
/// chance.
fn has_your(value: &str) -> bool {
    ["your", "YOUR", "Your"].iter().any(|mark| {
        value.match_indices(mark).any(|(at, _)| {
            let before = value[..at].bytes().next_back();
            let after = value[at + mark.len()..].bytes().next();
            before.is_none_or(|b| !b.is_ascii_alphanumeric())
                && after.is_none_or(|b| !b.is_ascii_lowercase())
        })
    })
}

pub(super) fn is_placeholder(value: &str) -> bool {
    let lower = value.to_ascii_lowercase();
    if PLACEHOLDER_MARKS.iter().any(|mark| lower.contains(mark))
        || FILLER_RUNS.iter().any(|run| value.contains(run))
        || has_your(value)
    {
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

/// How many of the character classes lower case, upper case, digits and other
/// characters `value` uses.
pub(super) fn classes(value: &str) -> usize {
    let bytes = value.as_bytes();
    [
        bytes.iter().any(u8::is_ascii_lowercase),
        bytes.iter().any(u8::is_ascii_uppercase),
        bytes.iter().any(u8::is_ascii_digit),
        bytes.iter().any(|b| !b.is_ascii_alphanumeric()),
    ]
    .into_iter()
    .filter(|&class| class)
    .count()
}

/// Whether `value` looks like a random key drawn from a base64 alphabet: not a
/// placeholder, three character classes, 4 bits of entropy per character. A hex digest
/// (two classes) or a word (low entropy) is not one.
pub(super) fn looks_like_random_key(value: &str) -> bool {
    !is_placeholder(value) && classes(value) >= 3 && entropy(value) >= 4.0
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

/// Whether `value` is an absolute path (`/run/secrets/db`, `/Users/alice/.env`): it
/// starts with `/` and its parts are short or lower-case names, where base64 that
/// starts with `/` (`/yJ01v2ataAlXYMT…`) has long mixed-case parts.
fn is_path(value: &str) -> bool {
    value.strip_prefix('/').is_some_and(|rest| {
        rest.split('/').all(|part| {
            part.len() <= 12
                || part
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-".contains(&b))
        })
    })
}

/// Whether `value` refers to a value elsewhere with `%`: `%VAR%` (Windows), `%(name)s`,
/// `%s` (printf); `%62%5F…` (a percent-encoded value) does not.
fn is_percent_reference(value: &str) -> bool {
    let Some(rest) = value.strip_prefix('%') else {
        return false;
    };
    let name = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    rest.starts_with('(') || rest.len() <= 2 || rest.strip_suffix('%').is_some_and(name)
}

/// Whether the letters of `value` form words in camel case (`GetUserNameById`): after
/// each capital at least one lower-case letter.
fn is_camel_case(value: &str) -> bool {
    let bytes = value.as_bytes();
    bytes.iter().enumerate().all(|(i, b)| {
        !b.is_ascii_uppercase() || bytes.get(i + 1).is_some_and(u8::is_ascii_lowercase)
    })
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
        || value.starts_with(['$', '~', '.', '&', '@'])
        || is_path(value)
        || is_percent_reference(value)
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
    // Words joined by separators (`prod-db-password`), or one word; a long run of
    // letters in random case (`BAgQpSvuvcrBWLpI…`) is no word.
    let random_case = {
        let upper = bytes.iter().filter(|b| b.is_ascii_uppercase()).count();
        value.len() >= 12
            && (value.len() / 4..=value.len() * 3 / 4).contains(&upper)
            && !is_camel_case(value)
    };
    if !random_case
        && value
            .split(['-', '_', '.', ' '])
            .all(|part| part.bytes().all(|b| b.is_ascii_alphabetic()))
    {
        return false;
    }
    // Words and a version (`jjwt-jackson-0.11.2`, `spring-boot-3.2.1`): every part is a
    // word or a number, at least one is a word and at least one a number.
    let parts = || value.split(['-', '_', '.', ' ']);
    let word = |part: &str| part.len() >= 3 && part.bytes().all(|b| b.is_ascii_alphabetic());
    let number = |part: &str| !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit());
    if value.contains(['-', '_', '.'])
        && parts().all(|part| part.bytes().all(|b| b.is_ascii_alphabetic()) || number(part))
        && parts().any(word)
        && parts().any(number)
    {
        return false;
    }
    // Hex draws from 16 characters, so a random hex value has less entropy per
    // character than one drawn from 62.
    let hex = bytes.iter().all(u8::is_ascii_hexdigit);
    let needed = match (value.len(), hex) {
        (16.., true) => 2.5,
        (12.., _) => 3.0,
        _ => 2.75,
    };
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

/// Words before `token` or `key` that make it something that opens nothing: a form's
/// anti-forgery token, a publishable key.
const NOT_A_CREDENTIAL_QUALIFIERS: &[&str] =
    &["csrf", "xsrf", "authenticity", "public", "publishable"];

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
    if previous.is_some_and(|p| NOT_A_CREDENTIAL_QUALIFIERS.contains(&p))
        || last.starts_with("public")
    {
        return None;
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
        || matches!(last, "credential" | "credentials" | "creds" | "auth")
        || ["apikey", "secretkey", "accesskey", "privatekey"]
            .iter()
            .any(|w| last.ends_with(w))
        || (last == "key" && previous.is_some_and(|p| KEY_QUALIFIERS.contains(&p)));
    generic.then_some("generic_api_key_assignment")
}

/// Words that stand in for a password in examples (`user:password@`, `-u user:pass`),
/// also with digits or `!` after them (`password123`) and spelled with digits
/// (`p@ssw0rd`).
const PLACEHOLDER_PASSWORDS: &[&str] = &[
    "password",
    "passwd",
    "pass",
    "pwd",
    "secret",
    "token",
    "changeme",
    "changeit",
    "mypassword",
    "yourpassword",
    "passw0rd",
    "p@ssw0rd",
    "p@ssword",
    "pa$$word",
    "test",
    "foo",
    "bar",
    "baz",
    "fake",
    "demo",
];

/// Passwords (in URLs, connection strings, curl options, config files) that are
/// placeholders, not secrets: documented examples and fill-ins (see [`is_placeholder`]),
/// references (`$PASSWORD`, `%s`, `DB_PASSWORD`), fill-ins in brackets (`[PASSWORD]`,
/// `{password}`), one repeated character (`yyy`), and the placeholder words.
pub(super) fn is_placeholder_password(password: &str) -> bool {
    let lower = password.to_ascii_lowercase();
    let bytes = password.as_bytes();
    let bracketed = |open: u8, close: u8| {
        bytes.len() >= 2 && bytes[0] == open && bytes[bytes.len() - 1] == close
    };
    if is_placeholder(password)
        || password.starts_with(['$', ':'])
        || is_percent_reference(password)
        || (bytes.len() >= 3 && bytes.iter().all(|&b| b == bytes[0]))
        || bracketed(b'[', b']')
        || bracketed(b'(', b')')
    {
        return true;
    }
    // `{password}` is a fill-in; `{ZqL5kVrX1n8tA2}` a password in braces.
    if bracketed(b'{', b'}') && !looks_generated(&password[1..password.len() - 1]) {
        return true;
    }
    // An environment variable's name (`DB_PASSWORD`).
    if password.contains('_')
        && bytes
            .iter()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || *b == b'_')
    {
        return true;
    }
    let stem = lower.trim_end_matches(|c: char| c.is_ascii_digit() || c == '!');
    PLACEHOLDER_PASSWORDS.contains(&stem)
}

/// The password of a URL's userinfo, given everything between `user:` and the last
/// `@` of the URL. Unencoded `@`, `/`, `?`, `#` make the split ambiguous, so the
/// password ends at the first `@` after which a host follows (no further `@` before
/// the path or query; a `#` there is the password's): `p@ss@host/x@y` → `p@ss`,
/// `pw@host/a?mail=b@c` → `pw`, `pw@x#y@host` → `pw@x#y`. What comes before a port and
/// a path (`:5000/app@sha256:…`) is no password.
pub(super) fn url_password(text: &str, after_colon: Range<usize>) -> Option<Range<usize>> {
    let rest = &text[after_colon.clone()];
    let host_follows = |at: usize| {
        let host = &text[at + 1..];
        let end = host
            .find(|c: char| c.is_whitespace() || "/?\"'<>".contains(c))
            .unwrap_or(host.len());
        !host[..end].contains('@')
    };
    let end = rest
        .match_indices('@')
        .map(|(at, _)| at)
        .chain(std::iter::once(rest.len()))
        .filter(|&end| end > 0)
        .find(|&end| host_follows(after_colon.start + end))?;
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    if (1..=5).contains(&digits) && matches!(rest.as_bytes().get(digits), Some(b'/' | b'?' | b'#'))
    {
        return None;
    }
    Some(after_colon.start..after_colon.start + end)
}

/// Whether `user:password@` is really `host:port@` (`http://localhost:8080@evil.example`
/// is a host with a port in the userinfo's place, not a credential).
pub(super) fn is_host_and_port(user: &str, password: &str) -> bool {
    let port =
        !password.is_empty() && password.len() <= 5 && password.bytes().all(|b| b.is_ascii_digit());
    // `user@host:8080@…`: the host is after the user's own `@`.
    let host = user.rsplit('@').next().unwrap_or(user);
    let host = host.contains('.') || host.eq_ignore_ascii_case("localhost");
    port && host
}

/// The secret of a curl `-u`/`--user` credential at `credential` (`user:password`,
/// `"user:password"`, `'user':"password"`): the password, or the user when the password
/// is empty (`-u "<api key>:"`); `None` for placeholders, variables, a password equal
/// to the user, or no colon at all.
pub(super) fn curl_credential(text: &str, credential: Range<usize>) -> Option<Range<usize>> {
    let raw = &text[credential.clone()];
    let base = credential.start;
    let unquote = |range: Range<usize>| {
        let part = &text[range.clone()];
        let quoted = part.len() >= 2
            && matches!(part.as_bytes()[0], b'"' | b'\'')
            && part.as_bytes()[part.len() - 1] == part.as_bytes()[0];
        if quoted {
            range.start + 1..range.end - 1
        } else {
            range
        }
    };
    let (user, password) = match raw.as_bytes().first() {
        Some(&quote @ (b'"' | b'\'')) => {
            let close = 1 + raw[1..].find(char::from(quote))?;
            if raw.as_bytes().get(close + 1) == Some(&b':') {
                (
                    base + 1..base + close,
                    unquote(base + close + 2..credential.end),
                )
            } else {
                let inner = &raw[1..close];
                let colon = inner.find(':')?;
                (base + 1..base + 1 + colon, base + 2 + colon..base + close)
            }
        }
        _ => {
            let colon = raw.find(':')?;
            (
                base..base + colon,
                unquote(base + colon + 1..credential.end),
            )
        }
    };
    let (user_text, password_text) = (&text[user.clone()], &text[password.clone()]);
    if password_text.is_empty() {
        return looks_generated(user_text).then_some(user);
    }
    (password_text.len() >= 3
        && !is_placeholder_password(password_text)
        && !password_text.eq_ignore_ascii_case(user_text)
        && !user_text.starts_with('$'))
    .then_some(password)
}

/// How far an assigned value runs in `rest`: to a space, a quote, a separator or an
/// escaped line break (`\n` in a JSON string).
pub(super) fn value_length(rest: &str) -> usize {
    let bytes = rest.as_bytes();
    let mut at = 0;
    while at < bytes.len() {
        match bytes[at] {
            b if b.is_ascii_whitespace() => break,
            b'"' | b'\'' | b'`' | b',' | b';' | b'<' | b'>' | b'{' | b'}' | b'(' | b')' | b'['
            | b']' => break,
            b'\\'
                if matches!(
                    bytes.get(at + 1),
                    Some(b'n' | b'r' | b't' | b'"' | b'\'' | b'\\')
                ) =>
            {
                break;
            }
            _ => at += 1,
        }
    }
    at
}

/// Decodes standard or URL-safe base64, with or without padding.
fn decode_base64(value: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(value.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0u32);
    for byte in value.bytes() {
        let sextet = match byte {
            b'A'..=b'Z' => byte - b'A',
            b'a'..=b'z' => byte - b'a' + 26,
            b'0'..=b'9' => byte - b'0' + 52,
            b'+' | b'-' => 62,
            b'/' | b'_' => 63,
            b'=' => break,
            _ => return None,
        };
        acc = (acc << 6) | u32::from(sextet);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Some(out)
}

/// Whether `value` is a JWT encoded once more in base64: it decodes to `eyJ…` with a
/// second segment that starts `ey`.
pub(super) fn is_base64_jwt(value: &str) -> bool {
    let Some(decoded) = decode_base64(value) else {
        return false;
    };
    let decoded = String::from_utf8_lossy(&decoded);
    let mut segments = decoded.split('.');
    segments
        .next()
        .is_some_and(|header| header.starts_with("eyJ"))
        && segments
            .next()
            .is_some_and(|claims| claims.starts_with("ey"))
        && segments.next().is_some()
}

/// The YAML document (between `---` lines, within 16 KiB either way) around `at`.
fn yaml_document(text: &str, at: usize) -> Range<usize> {
    let low = text.floor_char_boundary(at.saturating_sub(16 * 1024));
    let high = text.ceil_char_boundary((at + 16 * 1024).min(text.len()));
    let start = text[low..at].rfind("\n---").map_or(low, |i| low + i + 4);
    let end = text[at..high].find("\n---").map_or(high, |i| at + i);
    start..end
}

/// A YAML line: where it starts and ends, its indentation (spaces and tabs) and its
/// content.
struct YamlLine<'a> {
    indent: usize,
    content: &'a str,
    content_start: usize,
}

fn yaml_lines(text: &str, document: Range<usize>) -> Vec<YamlLine<'_>> {
    let mut lines = Vec::new();
    let mut start = document.start;
    for line in text[document.clone()].split('\n') {
        let trimmed = line.trim_start_matches([' ', '\t']);
        let indent = line.len() - trimmed.len();
        lines.push(YamlLine {
            indent,
            content: trimmed.trim_end_matches('\r'),
            content_start: start + indent,
        });
        start += line.len() + 1;
    }
    lines
}

/// The secret values of the Kubernetes `kind: Secret` manifest whose `kind:` is at
/// `kind_at`: each value under `data:` that is base64 of 10 or more characters, and
/// each value under `stringData:` that looks generated. Empty values, `""`, templates
/// (`{{ … }}`) and list entries (`- key: …`, as in an ExternalSecret) are not. Also
/// returns where the document walked ends, so that a caller walks it once.
pub(super) fn kubernetes_secret_values(text: &str, kind_at: usize) -> (Vec<Range<usize>>, usize) {
    let document = yaml_document(text, kind_at);
    let walked_to = document.end;
    let lines = yaml_lines(text, document);
    let mut values = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let section = &lines[i];
        i += 1;
        let plain = match section.content.split('#').next().unwrap_or("").trim_end() {
            "data:" => false,
            "stringData:" => true,
            _ => continue,
        };
        let mut entry_indent = None;
        while i < lines.len() {
            let line = &lines[i];
            if line.content.is_empty() || line.content.starts_with('#') {
                i += 1;
                continue;
            }
            if line.indent <= section.indent {
                break;
            }
            let level = *entry_indent.get_or_insert(line.indent);
            i += 1;
            if line.indent != level || line.content.starts_with('-') {
                continue;
            }
            let Some((key, value)) = line.content.split_once(':') else {
                continue;
            };
            if key.is_empty()
                || !key
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
            {
                continue;
            }
            let value_text = value.trim_start_matches([' ', '\t']);
            let mut range = {
                let start = line.content_start + key.len() + 1 + (value.len() - value_text.len());
                start..start + value_text.trim_end().len()
            };
            if matches!(value_text.trim_end(), "|" | ">" | "|-" | ">-" | "|+" | ">+") {
                // A block scalar: the more deeply indented lines after it.
                let (mut first, mut last) = (None, None);
                while i < lines.len() && (lines[i].indent > level || lines[i].content.is_empty()) {
                    if !lines[i].content.is_empty() {
                        first.get_or_insert(lines[i].content_start);
                        last = Some(lines[i].content_start + lines[i].content.len());
                    }
                    i += 1;
                }
                match (first, last) {
                    (Some(first), Some(last)) => range = first..last,
                    _ => continue,
                }
            }
            let quoted = &text[range.clone()];
            if quoted.len() >= 2
                && matches!(quoted.as_bytes()[0], b'"' | b'\'')
                && quoted.as_bytes()[quoted.len() - 1] == quoted.as_bytes()[0]
            {
                range = range.start + 1..range.end - 1;
            }
            let value = &text[range.clone()];
            let secret = if plain {
                looks_generated(value)
            } else {
                let body = value.trim_end_matches('=');
                body.len() >= 10
                    && body.bytes().all(|b| {
                        b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'\n' | b' ')
                    })
                    && !is_placeholder(value)
            };
            if secret {
                values.push(range);
            }
        }
    }
    (values, walked_to)
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
            ("user_auth", "generic_api_key_assignment"),
            ("creds", "generic_api_key_assignment"),
            ("--account-key", "generic_api_key_assignment"),
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
            "csrf-token",
            "authenticity_token",
            "publicToken",
            "public_key",
            "author",
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

    #[test]
    fn url_passwords_split_at_the_right_at_sign() {
        // (text after `user:`, the password)
        for (rest, password) in [
            ("hunter2", Some("hunter2")),
            ("p@ss", Some("p@ss")),
            ("p@ss@host/x?y=a", Some("p@ss")),
            ("pw@host/path?email=a", Some("pw")),
            ("Bq?Wx@3Pc4", Some("Bq?Wx@3Pc4")),
            ("ab/cd", Some("ab/cd")),
            ("pa#ss", Some("pa#ss")),
            ("5000/team/app", None),
            ("8443?next=", None),
            ("8080/files/", None),
        ] {
            let text = format!("x://u:{rest}@h");
            let range = 6..6 + rest.len();
            let found = url_password(&text, range).map(|r| &text[r]);
            assert_eq!(found, password, "{rest}");
        }
        assert!(is_host_and_port("localhost", "8080"));
        assert!(is_host_and_port("10.0.0.5", "3000"));
        assert!(!is_host_and_port("root", "12345"));
        assert!(!is_host_and_port("db.internal", "s3cret"));
    }

    #[test]
    fn placeholder_passwords() {
        for password in [
            "password",
            "PASSWORD123",
            "passw0rd",
            "p@ssw0rd",
            "changeme!",
            "[PASSWORD]",
            "{password}",
            "(password)",
            "$DB_PASS",
            "%(password)s",
            "DB_PASSWORD",
            "yyy",
            "<password>",
            "your-password",
            "token",
        ] {
            assert!(is_placeholder_password(password), "{password}");
        }
        for password in [
            "hunter2",
            "pw",
            "P@ssw0rd$1",
            "{ZqL5kVrX1n8tA2}",
            "deadbeef",
            "Xk9#mQ2/vL7p",
        ] {
            assert!(!is_placeholder_password(password), "{password}");
        }
    }

    #[test]
    fn curl_credentials_are_read_from_every_quoting() {
        // (the option's value, the secret)
        for (value, secret) in [
            ("deploy:Xk9mQ2vL7pR4", Some("Xk9mQ2vL7pR4")),
            ("'api:Xk9mQ2vL7pR4'", Some("Xk9mQ2vL7pR4")),
            ("\"j.smith:dB2yF6@qL9vZm1P#4J\"", Some("dB2yF6@qL9vZm1P#4J")),
            ("kevin:'pRf7vG2h1L8nQkW9'", Some("pRf7vG2h1L8nQkW9")),
            (
                "\"{acd3c08b}\":\"{ZqL5kVrX1n8tA2}\"",
                Some("{ZqL5kVrX1n8tA2}"),
            ),
            ("\":d2LkV78zLx!t\"", Some("d2LkV78zLx!t")),
            ("\"d2LkV78zLx!t:\"", Some("d2LkV78zLx!t")),
            ("'test:test'", None),
            ("\"$1:$2\"", None),
            ("\"${username}\":\"${password}\"", None),
            ("neo4j:[PASSWORD]", None),
            ("username:token", None),
            ("\":\"", None),
            ("\"myusername\"", None),
        ] {
            let found = curl_credential(value, 0..value.len()).map(|r| &value[r]);
            assert_eq!(found, secret, "{value}");
        }
    }

    #[test]
    fn base64_jwts() {
        let jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJlLWJ5dGVz";
        let standard =
            "ZXlKaGJHY2lPaUpJVXpJMU5pSjkuZXlKemRXSWlPaUl4SW4wLmMybG5ibUYwZFhKbExXSjVkR1Z6";
        assert!(decode_base64(standard).is_some_and(|d| d == jwt.as_bytes()));
        assert!(is_base64_jwt(standard));
        assert!(is_base64_jwt(standard.trim_end_matches('=')));
        assert!(!is_base64_jwt("ZXlKaGJHY2lPaUpJVXpJMU5pSjk="));
        assert!(!is_base64_jwt("aGVsbG8gd29ybGQgZnJvbSBvcmRlciAxMjM0NTY="));
    }

    #[test]
    fn kubernetes_secret_values_are_the_data_values() {
        let manifest = "apiVersion: v1\ndata:\n  password: UyFCXCpkJHpEc2I9\n  short: YmFyCg==\n  empty: \"\"\n  tpl: {{ .Values.x }}\n  .dockercfg: |\n    eyJhdXRocyI6e30K\nkind: Secret\nstringData:\n  token: Xk9mQ2vL7pR4sT6u\n  note: hello\n---\nkind: ConfigMap\ndata:\n  key: c2VjcmV0L215c2VjcmV0\n";
        let kind = manifest.find("kind: Secret").unwrap();
        let (values, walked_to) = kubernetes_secret_values(manifest, kind);
        let values: Vec<&str> = values.into_iter().map(|r| &manifest[r]).collect();
        assert_eq!(walked_to, manifest.find("\n---").unwrap());
        assert_eq!(
            values,
            ["UyFCXCpkJHpEc2I9", "eyJhdXRocyI6e30K", "Xk9mQ2vL7pR4sT6u"]
        );
    }
}
