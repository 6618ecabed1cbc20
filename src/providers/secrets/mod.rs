//! Secret detection for provider items and Project text: named detectors in one pass, reported by name, never by the secret.
//!
//! Each detector is a rule in `rules.rs`: the literal keywords one of which must occur
//! (a token's documented prefix such as `ghp_`, `xoxb-`, `sk-ant-`, or a word such as
//! `password`), a pattern built from the format's public description (prefix, length,
//! alphabet, structure), and a check (`checks.rs`). One Aho–Corasick pass finds the
//! keywords, so text without any costs that pass alone; patterns run only at the
//! keywords found (anchored there for prefixed tokens, in a small window otherwise).
//!
//! The detectors, in the order [`scan`] reports them (the lowest wins when several
//! match); a name is the kind that `[REDACTED:<kind>]`, refusals and traces show:
//!
//! | name | what it matches |
//! |------|-----------------|
//! | `private_key` | a PEM/OpenSSH/PGP/SSH2 `BEGIN … PRIVATE KEY` block with a body (through its `END` line), a PuTTY key file; also inside JSON strings (`\n` escapes, e.g. a GCP service-account file) |
//! | `aws_access_key_id` | `AKIA`/`ASIA`/`AGPA`/`AIDA`/`AROA`/… + 16 uppercase alphanumerics |
//! | `aws_secret_access_key` | an `aws_secret[_access]_key`/`SecretAccessKey` assignment of 40 base64 characters, or 40 base64 characters right after an access key id (`AKIA…,…` as in a credentials CSV) |
//! | `aws_session_token` | an STS session token (`IQoJb3JpZ2luX2Vj…`, `FwoGZXIvYXdzE…`) |
//! | `github_token` | `ghp_`/`gho_`/`ghu_`/`ghs_`/`ghr_` + 36 or more, `github_pat_` + 22 or more |
//! | `gitlab_token` | `glpat-`, `gldt-`, `glrt-`, `glptt-`, `glcbt-`, `glft-`, `gloas-`, `glimt-`, `glagent-`, `glsoat-`, `glffct-`, `GR1348941` tokens |
//! | `slack_token` | `xoxb-`/`xoxp-`/`xoxa-`/`xoxo-`/`xoxs-`/`xoxr-`, `xoxe.xoxp-`, `xapp-` |
//! | `slack_webhook` | `hooks.slack.com/services|workflows|triggers/T…/…/…` |
//! | `stripe_key`, `stripe_webhook_secret` | `sk_live_`/`rk_live_`/`sk_test_`/`rk_test_`; `whsec_` |
//! | `google_api_key`, `gcp_oauth_client_secret`, `google_oauth_access_token` | `AIza` + 35; `GOCSPX-`; `ya29.` |
//! | `anthropic_key`, `openai_key`, `openrouter_api_key` | `sk-ant-…`; `sk-proj-`/`sk-svcacct-`/`sk-admin-`, `sk-` + 20 alphanumerics; `sk-or-v1-` |
//! | `groq_api_key`, `replicate_token`, `perplexity_api_key`, `xai_api_key`, `langsmith_api_key`, `pinecone_api_key`, `huggingface_token` | `gsk_`, `r8_`, `pplx-`, `xai-`, `lsv2_pt_`/`lsv2_sk_`, `pcsk_`, `hf_`/`api_org_` |
//! | `npm_token`, `pypi_token`, `rubygems_api_key`, `nuget_api_key`, `crates_io_token`, `docker_hub_token`, `artifactory_token`, `clojars_token` | `npm_` and `.npmrc`'s `_authToken=`/`_auth=`/`_password=`, `pypi-AgE…`, `rubygems_`, `oy2…`, `cio…`, `dckr_pat_`/`dckr_oat_`, `AKCp…`/`cmVmdGtu…`, `CLOJARS_` |
//! | `jwt` | three base64url segments, the first two starting with `eyJ` |
//! | `azure_storage_key`, `azure_sas_token`, `azure_client_secret`, `azure_devops_pat` | `AccountKey=`/`SharedAccessKey=` + base64; a SAS `sig=`; `…Q~…` client secrets; 84-character `…AZDO…` PATs |
//! | `alibaba_access_key_id`, `tencent_secret_id`, `digitalocean_token`, `heroku_api_key`, `okta_api_token`, `databricks_token`, `terraform_cloud_token`, `pulumi_access_token`, `planetscale_token`, `supabase_token`, `mapbox_secret_token`, `netlify_token`, `fastly_api_token` | `LTAI`, `AKID`, `dop_v1_`/`doo_v1_`/`dor_v1_`, `HRKU-AA`, `SSWS 00…`, `dapi`, `….atlasv1.…`, `pul-`, `pscale_tkn_`/`pscale_pw_`, `sbp_`/`sb_secret_`, `sk.eyJ…`, `nfp_`, `Fastly-Key:` |
//! | `bitbucket_token`, `atlassian_api_token`, `linear_api_key`, `notion_token`, `figma_token`, `airtable_token`, `postman_api_key`, `contentful_token`, `sonarqube_token`, `typeform_token`, `dropbox_token`, `readme_api_key`, `adafruit_io_key` | `ATBB`/`ATCTT3`, `ATATT3`, `lin_api_`, `secret_`/`ntn_`, `figd_`, `pat….…`, `PMAK-`, `CFPAT-`, `squ_`/`sqp_`/`sqa_`, `tfp_`, `sl.`, `rdme_`, `aio_` |
//! | `circleci_token`, `buildkite_token`, `harness_token`, `octopus_deploy_api_key`, `prefect_api_key`, `scalingo_token`, `frameio_token` | `CCIPAT_`/`CCIPRJ_`, `bkua_`, `pat.…`/`sat.…`, `API-`, `pnu_`, `tk-us-`, `fio-u-` |
//! | `discord_webhook`, `discord_bot_token`, `teams_webhook`, `telegram_bot_token`, `google_chat_webhook`, `zapier_webhook`, `ifttt_webhook` | webhook URLs with their tokens; Discord bot tokens; Telegram `<id>:AA…` |
//! | `square_token`, `braintree_access_token`, `shopify_token`, `flutterwave_secret_key`, `shippo_token`, `easypost_api_key`, `duffel_token` | `EAAA`/`sq0atp-`/`sq0csp-`, `access_token$production$…`, `shpat_`/`shpss_`/`shpca_`/`shppa_`, `FLWSECK-`, `shippo_live_`, `EZAK`, `duffel_live_` |
//! | `sendgrid_api_key`, `mailgun_api_key`, `mailchimp_api_key`, `resend_api_key`, `mailersend_token`, `brevo_api_key` | `SG.…`, `key-` + 32 hex, 32 hex + `-us<n>`, `re_`, `mlsn.`, `xkeysib-` |
//! | `new_relic_key`, `sentry_token`, `sentry_dsn`, `grafana_token`, `honeycomb_key`, `dynatrace_token`, `splunk_hec_token` | `NRAK-`/`NRII-`/`…NRAL`, `sntryu_`/`sntrys_`, a DSN with its key, `glc_`/`glsa_`, `hcaik_`/`X-Honeycomb-Team:`, `dt0c01.`, `Splunk <uuid>` |
//! | `launchdarkly_key`, `statsig_secret_key` | `api-`/`sdk-`/`mob-` + UUID; `secret-` + 43 |
//! | `vault_token`, `doppler_token`, `onepassword_token`, `onepassword_secret_key`, `infisical_token`, `age_secret_key` | `hvs.`/`hvb.`, `dp.pt.`/`dp.st.`/…, `ops_eyJ…`, `A3-…`, `st.<uuid>.…`, `AGE-SECRET-KEY-1…` |
//! | `twilio_api_key` | `SK` + 32 hex |
//! | `connection_string_password` | `scheme://user:password@host` (PostgreSQL, MySQL, MongoDB(+srv), Redis, AMQP, HTTP basic, …) and `password=`/`pwd=` in a JDBC query or an ADO.NET string; the password is the match |
//! | `netrc_password`, `docker_config_auth` | `machine … login … password <secret>` (`.netrc`); `"auth": "<base64 user:password>"` (Docker's `config.json`) |
//! | `bearer_token`, `basic_auth_header` | `Authorization: Bearer <token>` (or `Bearer eyJ…`), `Authorization: Basic <base64>` |
//! | `password_assignment`, `generic_api_key_assignment` | a key whose last word names a credential (`password`, `DB_PASS`, `secret`, `client_secret`, `token`, `apiKey`, `X-API-Key`, `SECRET_KEY`, …) assigned (`=`, `:`, `=>`, `:=`, JSON, YAML, headers) a value that looks generated: 8 or more characters, two character classes, entropy of 3 bits per character (2.75 below 12 characters), not a word with digits (`password123`), a reference (`${X}`, `os.environ`), a path, a URL or a variable's name |
//!
//! Not secrets: documented examples (any value containing `EXAMPLE`, such as
//! `AKIAIOSFODNN7EXAMPLE`), placeholders (`your-…`, `<…>`, `${…}`, `{{…}}`, `XXXX…`,
//! `****`, `0000…`, `[REDACTED]`, `changeme`, `dummy`, `sample`), key markers with no
//! base64 body between them, public keys and certificates, hashes, UUIDs, commit ids,
//! base64 images, and prose with the words "token", "secret" or "password". A password
//! in a URL counts unless it is such a placeholder or a placeholder word (`password`,
//! `secret`, …); an assignment's value must look generated, so `password=password123`
//! is not flagged while the same key with a random value is.

mod checks;
mod rules;

use aho_corasick::{AhoCorasick, AhoCorasickKind};
use regex_automata::meta::Regex;
use regex_automata::util::captures::Captures;
use regex_automata::{Anchored, Input};
use rules::{CREDENTIAL_WORDS, Check, Precheck, RULES, Rule};
use serde_json::Value;
use std::fmt;
use std::ops::Range;
use std::sync::LazyLock;

/// A named secret detector. It holds only the detector's name, so neither its `Debug` nor
/// its `Display` can ever reveal the text it matched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Detector {
    name: &'static str,
}

impl Detector {
    /// The detector's stable snake_case name, e.g. `github_token`.
    pub(crate) fn name(self) -> &'static str {
        self.name
    }
}

impl fmt::Display for Detector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name)
    }
}

/// One secret in a text: which detector found it (its name, the kind) and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretMatch {
    /// The detector's name, e.g. `github_token`.
    pub kind: &'static str,
    /// The secret's byte range in the text.
    pub range: Range<usize>,
}

/// How far past a keyword a windowed (not anchored) search looks at first; a match
/// reaching the window's end is searched again to the end of the text.
const WINDOW_AFTER: usize = 256;

/// A rule's compiled pattern and the slots of its named groups.
struct Compiled {
    regex: Regex,
    /// Capture group indexes of the secret (`s`, then `j`) in order of preference.
    secret_groups: Vec<usize>,
    key_group: Option<usize>,
}

/// Every rule compiled, and one automaton over all their keywords.
struct Scanner {
    keywords: AhoCorasick,
    /// For each keyword (by pattern id), the rules it triggers.
    triggers: Vec<Vec<usize>>,
    compiled: Vec<Compiled>,
}

static SCANNER: LazyLock<Scanner> = LazyLock::new(Scanner::build);

impl Scanner {
    fn build() -> Scanner {
        let mut words: Vec<String> = Vec::new();
        let mut triggers: Vec<Vec<usize>> = Vec::new();
        let mut add = |word: String, rule: usize| match words.iter().position(|w| *w == word) {
            Some(at) => triggers[at].push(rule),
            None => {
                words.push(word);
                triggers.push(vec![rule]);
            }
        };
        for (index, rule) in RULES.iter().enumerate() {
            if rule.check == Check::Assignment {
                for word in CREDENTIAL_WORDS {
                    let mut capitalized = word.to_string();
                    capitalized[..1].make_ascii_uppercase();
                    for variant in [word.to_string(), word.to_ascii_uppercase(), capitalized] {
                        add(variant, index);
                    }
                }
            }
            for keyword in rule.keywords {
                add((*keyword).to_owned(), index);
            }
        }
        let keywords = AhoCorasick::builder()
            .kind(Some(AhoCorasickKind::DFA))
            .build(&words)
            .expect("the secret keywords build an automaton");
        let compiled = RULES
            .iter()
            .map(|rule| {
                let regex = Regex::new(rule.pattern).expect("the built-in secret patterns compile");
                let info = regex.group_info();
                let group = |name: &str| info.to_index(regex_automata::PatternID::ZERO, name);
                Compiled {
                    secret_groups: ["s", "j"].into_iter().filter_map(group).collect(),
                    key_group: group("k"),
                    regex,
                }
            })
            .collect();
        Scanner {
            keywords,
            triggers,
            compiled,
        }
    }

    /// Every match of every rule, as `(rule index, kind, range)`, unsorted, possibly
    /// overlapping.
    fn find(&self, text: &str) -> Vec<(usize, &'static str, Range<usize>)> {
        let mut hits: Vec<(usize, usize, usize)> = Vec::new();
        for hit in self.keywords.find_overlapping_iter(text) {
            for &rule in &self.triggers[hit.pattern().as_usize()] {
                if worth_searching(
                    text.as_bytes(),
                    RULES[rule].before_search,
                    hit.start(),
                    hit.end(),
                ) {
                    hits.push((rule, hit.start(), hit.end()));
                }
            }
        }
        let mut found = Vec::new();
        if hits.is_empty() {
            return found;
        }
        hits.sort_unstable();
        hits.dedup();
        let mut caps = None::<(usize, Captures)>;
        let mut at = 0;
        while at < hits.len() {
            let rule_index = hits[at].0;
            let rule = &RULES[rule_index];
            let compiled = &self.compiled[rule_index];
            let captures = match &mut caps {
                Some((index, captures)) if *index == rule_index => captures,
                slot => {
                    &mut slot
                        .insert((rule_index, compiled.regex.create_captures()))
                        .1
                }
            };
            let mut next = at;
            if rule.anchored {
                let mut searched_to = 0;
                while next < hits.len() && hits[next].0 == rule_index {
                    let (_, start, end) = hits[next];
                    next += 1;
                    let start = match rule.before_search {
                        Precheck::CredentialKey => key_around(text.as_bytes(), start, end).0,
                        _ => start,
                    };
                    if start < searched_to {
                        continue;
                    }
                    let input = Input::new(text)
                        .span(start..text.len())
                        .anchored(Anchored::Yes);
                    compiled.regex.search_captures(&input, captures);
                    if let Some(whole) = captures.get_match() {
                        if let Some(secret) = accept(text, rule, compiled, captures) {
                            found.push((rule_index, secret.0, secret.1));
                        }
                        searched_to = whole.end();
                    }
                }
            } else {
                while next < hits.len() && hits[next].0 == rule_index {
                    let (_, first, last) = hits[next];
                    let mut window_end = last + WINDOW_AFTER;
                    next += 1;
                    while next < hits.len()
                        && hits[next].0 == rule_index
                        && hits[next].1 <= window_end
                    {
                        window_end = hits[next].2 + WINDOW_AFTER;
                        next += 1;
                    }
                    let start = text.floor_char_boundary(first.saturating_sub(rule.before));
                    let end = text.ceil_char_boundary(window_end.min(text.len()));
                    search_window(text, start..end, rule_index, compiled, captures, &mut found);
                }
            }
            at = next;
        }
        found
    }
}

/// Whether a rule's pattern can match at the keyword found at `start..end` (see
/// [`Precheck`]).
fn worth_searching(text: &[u8], precheck: Precheck, start: usize, end: usize) -> bool {
    let is_word = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    match precheck {
        Precheck::None => true,
        Precheck::WordStart => start == 0 || !is_word(text[start - 1]),
        Precheck::CredentialKey => {
            let (key_start, key_end) = key_around(text, start, end);
            let inside_a_value =
                key_start > 0 && matches!(text[key_start - 1], b':' | b'/' | b'=' | b'@');
            !inside_a_value
                && operator_at(text, key_end)
                && std::str::from_utf8(&text[key_start..key_end])
                    .is_ok_and(|key| checks::credential_key_kind(key).is_some())
        }
        Precheck::OperatorAfter => {
            let (_, key_end) = key_around(text, start, end);
            operator_at(text, key_end)
        }
        Precheck::AtSignAfter => text[end..]
            .iter()
            .take(512)
            .find(|&&b| {
                b == b'@'
                    || b.is_ascii_whitespace()
                    || matches!(b, b'/' | b'?' | b'#' | b'"' | b'\'' | b'<' | b'>')
            })
            .is_some_and(|&b| b == b'@'),
    }
}

/// The key around a keyword at `start..end`: key characters (`[A-Za-z0-9_.-]`) up to
/// 64 bytes before it and 24 after it.
fn key_around(text: &[u8], start: usize, end: usize) -> (usize, usize) {
    let is_key = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-');
    let mut key_start = start;
    while key_start > start.saturating_sub(64) && is_key(text[key_start - 1]) {
        key_start -= 1;
    }
    let mut key_end = end;
    let limit = (end + 24).min(text.len());
    while key_end < limit && is_key(text[key_end]) {
        key_end += 1;
    }
    (key_start, key_end)
}

/// Whether an assignment operator (`=`, `:`, `=>`, `:=`) follows a key ending at `at`,
/// after an optional closing quote and a few spaces.
fn operator_at(text: &[u8], mut at: usize) -> bool {
    if at < text.len() && matches!(text[at], b'"' | b'\'') {
        at += 1;
    }
    let spaces_end = (at + 4).min(text.len());
    while at < spaces_end && matches!(text[at], b' ' | b'\t') {
        at += 1;
    }
    at < text.len() && matches!(text[at], b'=' | b':')
}

/// Every match of a windowed rule in `window`, checked, into `found`. A match that
/// reaches the window's end is searched again to the end of the text; a match that
/// fails its check is searched past its start, not past its end, so that a pair like
/// `url=…?token=…` still finds the token.
fn search_window(
    text: &str,
    window: Range<usize>,
    rule_index: usize,
    compiled: &Compiled,
    captures: &mut Captures,
    found: &mut Vec<(usize, &'static str, Range<usize>)>,
) {
    let rule = &RULES[rule_index];
    let mut from = window.start;
    while from < window.end {
        let input = Input::new(text).span(from..window.end);
        compiled.regex.search_captures(&input, captures);
        let Some(mut whole) = captures.get_match() else {
            return;
        };
        if whole.end() == window.end && window.end < text.len() {
            let input = Input::new(text)
                .span(whole.start()..text.len())
                .anchored(Anchored::Yes);
            compiled.regex.search_captures(&input, captures);
            match captures.get_match() {
                Some(longer) => whole = longer,
                None => return,
            }
        }
        match accept(text, rule, compiled, captures) {
            Some((kind, range)) => {
                from = whole.end().max(range.end).max(whole.start() + 1);
                found.push((rule_index, kind, range));
            }
            None => {
                let secret_start = compiled
                    .secret_groups
                    .iter()
                    .find_map(|&g| captures.get_group(g))
                    .map_or(whole.start(), |span| span.start);
                from = secret_start.max(whole.start() + 1);
            }
        }
        from = text.ceil_char_boundary(from);
    }
}

/// The kind and range of a pattern match that passes its rule's check.
fn accept(
    text: &str,
    rule: &Rule,
    compiled: &Compiled,
    captures: &Captures,
) -> Option<(&'static str, Range<usize>)> {
    let whole = captures.get_match()?.range();
    let range = compiled
        .secret_groups
        .iter()
        .find_map(|&g| captures.get_group(g))
        .map_or(whole.clone(), |span| span.range());
    let secret = &text[range.clone()];
    match rule.check {
        Check::Token => (!checks::is_placeholder(secret)).then_some((rule.name, range)),
        Check::Mixed => (!checks::is_placeholder(secret) && checks::has_letter_and_digit(secret))
            .then_some((rule.name, range)),
        Check::Delimited => {
            let before = text[..range.start].bytes().next_back();
            let delimited = before.is_none_or(|b| {
                !(b.is_ascii_alphanumeric() || matches!(b, b'_' | b'~' | b'.' | b'-'))
            });
            (delimited && !checks::is_placeholder(secret)).then_some((rule.name, range))
        }
        Check::Password => (!checks::is_placeholder_password(secret)).then_some((rule.name, range)),
        Check::Generated => checks::looks_generated(secret).then_some((rule.name, range)),
        Check::Assignment => {
            let key_range = captures.get_group(compiled.key_group?)?.range();
            // A key inside a value (`arn:aws:…:secret:prod/db`, `a=b=c`) is no key.
            if text[..key_range.start]
                .bytes()
                .next_back()
                .is_some_and(|b| matches!(b, b':' | b'/' | b'=' | b'@'))
            {
                return None;
            }
            let key = &text[key_range];
            let kind = checks::credential_key_kind(key)?;
            // The pattern stops a value at 256 characters (so that a run of failing
            // pairs costs linear time); an accepted one extends to its real end.
            let end = range.end
                + text[range.end..]
                    .find(|c: char| c.is_whitespace() || "\"'`,;<>{}()[]".contains(c))
                    .unwrap_or(text.len() - range.end);
            checks::looks_generated(secret).then_some((kind, range.start..end))
        }
        Check::KeyBlock => checks::key_block(text, whole).map(|range| (rule.name, range)),
        Check::PuttyBlock => checks::putty_block(text, whole).map(|range| (rule.name, range)),
    }
}

/// Every secret in `text`, in order of position, without overlaps: where matches
/// overlap they are joined into one, reported as the first detector (in the
/// documented order) among them. Clean text costs one keyword pass.
pub fn scan_all(text: &str) -> impl Iterator<Item = SecretMatch> + use<> {
    let mut found = SCANNER.find(text);
    found.sort_unstable_by_key(|(rule, _, range)| (range.start, *rule));
    let mut joined: Vec<(usize, SecretMatch)> = Vec::with_capacity(found.len());
    for (rule, kind, range) in found {
        match joined.last_mut() {
            Some((first_rule, last)) if range.start < last.range.end => {
                last.range.end = last.range.end.max(range.end);
                if rule < *first_rule {
                    *first_rule = rule;
                    last.kind = kind;
                }
            }
            _ => joined.push((rule, SecretMatch { kind, range })),
        }
    }
    joined.into_iter().map(|(_, found)| found)
}

/// The first detector (in the documented order) that matches anywhere in `text`.
pub fn scan(text: &str) -> Option<Detector> {
    SCANNER
        .find(text)
        .into_iter()
        .min_by_key(|(rule, _, _)| *rule)
        .map(|(_, name, _)| Detector { name })
}

/// Scans every string (keys and values, recursively) of a JSON value.
///
/// Strings are visited depth-first in document order and the first string with a match
/// decides the detector. An object entry whose value is a string is also scanned as the
/// assignment `key: value`, so `{"client_secret": "…"}` is caught like `client_secret: …`.
pub(crate) fn scan_json(value: &Value) -> Option<Detector> {
    match value {
        Value::String(text) => scan(text),
        Value::Array(elements) => elements.iter().find_map(scan_json),
        Value::Object(map) => scan_map(map),
        Value::Null | Value::Bool(_) | Value::Number(_) => None,
    }
}

/// Scans a JSON object's keys and values as [`scan_json`] does, without copying it.
pub fn scan_map(map: &serde_json::Map<String, Value>) -> Option<Detector> {
    map.iter().find_map(|(key, value)| {
        scan(key).or_else(|| match value {
            Value::String(text) => scan(text).or_else(|| scan(&format!("{key}: {text}"))),
            other => scan_json(other),
        })
    })
}

/// Every detector name, in reporting order, each once, for docs and tests.
pub fn detector_names() -> impl Iterator<Item = &'static str> {
    let mut names: Vec<&'static str> = Vec::new();
    for rule in RULES {
        let kinds: &[&'static str] = if rule.check == Check::Assignment {
            &["password_assignment", rule.name]
        } else {
            std::slice::from_ref(&rule.name)
        };
        for &kind in kinds {
            if !names.contains(&kind) {
                names.push(kind);
            }
        }
    }
    names.into_iter()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::collections::HashSet;

    /// One positive sample per detector. Credential-shaped samples are assembled at run
    /// time so this file never contains a literal that itself looks like a real secret.
    fn positives() -> Vec<(&'static str, String)> {
        let b64_40 = "wJalrXUtnFEMIK7MDENGbPxRfiCYzQ4mPLvKEYab".to_owned();
        assert_eq!(b64_40.len(), 40);
        let jwt = format!(
            "{}{}.{}{}.{}",
            "eyJ",
            "hbGciOiJIUzI1NiJ9",
            "eyJ",
            "zdWIiOiIxMjM0NTY3ODkwIn0",
            "dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
        );
        vec![
            (
                "private_key",
                format!(
                    "key:\n{} RSA {}-----\nMIIEowIBAAKCAQEA\n",
                    "-----BEGIN", "PRIVATE KEY"
                ),
            ),
            (
                "aws_access_key_id",
                format!("id is {}{} ok", "AKIA", "Q3ZRT7MN4XPLW2KD"),
            ),
            (
                "aws_secret_access_key",
                format!("{} = {}", "aws_secret_access_key", b64_40),
            ),
            (
                "github_token",
                format!("token {}{}", "ghp_", "a".repeat(36)),
            ),
            (
                "gitlab_token",
                format!("{}{}", "glpat-", "a1Y2z3".repeat(4)),
            ),
            (
                "slack_token",
                format!("{}{}", "xoxb-", "123456789012-abcdefABCDEF"),
            ),
            (
                "slack_webhook",
                format!(
                    "post to https://{}/services/{}/{}/{}",
                    "hooks.slack.com",
                    "T00000000",
                    "B00000000",
                    "Q7w".repeat(8)
                ),
            ),
            (
                "stripe_key",
                format!("{}{}", "sk_live_", "4eC39HqLyjWDarjtT1zdp7dc"),
            ),
            (
                "google_api_key",
                format!("key={}{}", "AIza", "S".repeat(35)),
            ),
            ("openai_key", format!("OPENAI {}{}", "sk-", "Ab3".repeat(8))),
            (
                "anthropic_key",
                format!("{}{}", "sk-ant-", "api03-".to_owned() + &"z9".repeat(20)),
            ),
            ("npm_token", format!("{}{}", "npm_", "n".repeat(36))),
            ("jwt", format!("cookie={jwt};")),
            (
                "connection_string_password",
                format!(
                    "DATABASE_URL={}://app:{}@db.internal:5432/app",
                    "postgres", "hunter2"
                ),
            ),
            (
                "azure_storage_key",
                format!(
                    "DefaultEndpointsProtocol=https;AccountName=acct;{}={}==;",
                    "AccountKey",
                    "q".repeat(86)
                ),
            ),
            (
                "bearer_token",
                format!(
                    "{}: Bearer {}",
                    "Authorization",
                    "opaque.Tok3n-value_".repeat(2)
                ),
            ),
            (
                "generic_api_key_assignment",
                format!("{} = \"{}\"", "api_key", "a8f5f167f44f4964e6c998dee827110c"),
            ),
        ]
    }

    #[test]
    fn the_first_detectors_keep_their_names() {
        let samples = positives();
        let names: Vec<_> = detector_names().collect();
        for (name, sample) in &samples {
            assert!(names.contains(name), "{name} is a detector");
            let found = scan(sample).map(Detector::name);
            assert_eq!(found, Some(*name), "sample for {name}");
        }
    }

    #[test]
    fn variants_are_detected() {
        let cases: Vec<(&str, String)> = vec![
            (
                "private_key",
                format!("{} {}-----\nMIIB", "-----BEGIN", "PRIVATE KEY"),
            ),
            (
                "private_key",
                format!("{} EC {}-----\nMHcC", "-----BEGIN", "PRIVATE KEY"),
            ),
            (
                "private_key",
                format!("{} DSA {}-----\r\nMIIB\r\n", "-----BEGIN", "PRIVATE KEY"),
            ),
            (
                "private_key",
                format!(
                    "{} OPENSSH {}-----\nb3Bl\n-----END",
                    "-----BEGIN", "PRIVATE KEY"
                ),
            ),
            (
                "private_key",
                format!("{} ENCRYPTED {}-----\\nMIIF", "-----BEGIN", "PRIVATE KEY"),
            ),
            ("aws_access_key_id", format!("{}{}", "ASIA", "Y".repeat(16))),
            ("aws_access_key_id", format!("{}{}", "AROA", "7".repeat(16))),
            (
                "aws_access_key_id",
                format!("café{}{}", "AKIA", "Z".repeat(16)),
            ),
            (
                "aws_secret_access_key",
                format!("{}: \"{}\"", "AWS_SECRET", "k/+9".repeat(10)),
            ),
            ("github_token", format!("{}{}", "ghs_", "b".repeat(40))),
            (
                "github_token",
                format!("{}{}", "github_pat_", "11AB_".repeat(5)),
            ),
            ("stripe_key", format!("{}{}", "rk_live_", "c".repeat(16))),
            ("stripe_key", format!("{}{}", "sk_test_", "d".repeat(16))),
            ("openai_key", format!("{}{}", "sk-proj-", "e_F-".repeat(6))),
            (
                "bearer_token",
                format!("Bearer {}{}", "eyJ", "hbGciOiJIUzI1"),
            ),
            (
                "connection_string_password",
                format!("{}://{}@cluster0.example.net", "mongodb+srv", "u:p"),
            ),
            (
                "connection_string_password",
                format!("{}://:{}@cache:6379", "redis", "pw"),
            ),
            (
                "connection_string_password",
                format!("{}://me:{}@mq", "amqp", "pw"),
            ),
            (
                "connection_string_password",
                format!("{}://me:{}@example.com/x", "https", "pw"),
            ),
            (
                "generic_api_key_assignment",
                format!("{}: {}", "CLIENT_SECRET", "g7Hq2LmX9pZ4vR1c"),
            ),
            (
                "generic_api_key_assignment",
                format!("{}={}", "secret_key", "h8Jk3Lm9Pq2Rs7Tv4Wx1"),
            ),
        ];
        for (name, sample) in &cases {
            assert_eq!(
                scan(sample).map(Detector::name),
                Some(*name),
                "variant of {name}"
            );
        }
    }

    #[test]
    fn ordinary_prose_scans_clean() {
        let sha256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
        let negatives = [
            "See https://example.com/refunds for the refund policy.".to_owned(),
            "Visit https://example.com:8443/account?next=/orders#top today".to_owned(),
            "Your order ORD-77812 shipped on 2024-03-05.".to_owned(),
            "Customer CUST-1042 was created at 2024-03-05T10:15:30Z (2024-03-05T10:15:30+02:00)."
                .to_owned(),
            "Contact alice.smith@example.com or mailto:support@example.com.".to_owned(),
            "https://alice@example.com/profile has no password".to_owned(),
            "The token expired; please request a new token.".to_owned(),
            "Keep your secret safe and never share a secret with anyone.".to_owned(),
            "To reset your password: visit the portal and choose a new password.".to_owned(),
            "Password: use the reset link. Secret: none. Token: n/a.".to_owned(),
            "The API key is shown on the settings page; your client secret is hidden.".to_owned(),
            "api_key: see the dashboard".to_owned(),
            "api_key_id = 1234567890123456789".to_owned(),
            "api_key=****************************".to_owned(),
            "api_key=${API_KEY_FROM_THE_ENVIRONMENT}".to_owned(),
            "Request id 123e4567-e89b-12d3-a456-426614174000".to_owned(),
            format!("digest {sha256}"),
            format!("image@sha256:{sha256}"),
            "We use scikit-learn (sk-learn) and task-runner for the sk-1 model.".to_owned(),
            "Authorization: Bearer tokens are issued by the portal.".to_owned(),
            "Use the Bearer scheme in the Authorization header.".to_owned(),
            "Call 555-0100 between 09:00 and 17:00.".to_owned(),
            "Ticket AKIA-12 is about IAM access keys.".to_owned(),
            "Accounts: AccountKey is rotated monthly.".to_owned(),
            "Ship to 221B Baker Street, London NW1 6XE.".to_owned(),
            format!("{}{}", "AKIA", "IOSFODNN7EXAMPLE"),
            format!("token: {}{}", "ghp_", "x".repeat(36)),
            format!(
                "{}\n{}",
                "-----BEGIN RSA PRIVATE KEY-----", "-----END RSA PRIVATE KEY-----"
            ),
            "password=password123".to_owned(),
            "postgres://app:${DB_PASSWORD}@db/app".to_owned(),
            String::new(),
        ];
        for text in &negatives {
            assert_eq!(scan(text), None, "false positive on {text:?}");
        }
    }

    #[test]
    fn lowest_index_wins() {
        let text = format!(
            "{}{} and {}{}",
            "ghp_",
            "a".repeat(36),
            "AKIA",
            "Q3ZRT7MN4XPLW2KD"
        );
        assert_eq!(scan(&text).map(Detector::name), Some("aws_access_key_id"));
    }

    #[test]
    fn scan_json_finds_nested_secrets() {
        let token = format!("{}{}", "ghp_", "a".repeat(36));
        let in_key = json!({ "outer": { token.clone(): "plain" } });
        let in_value = json!({ "outer": { "inner": { "note": token.clone() } } });
        let in_array = json!({ "list": [1, true, null, "plain", ["deeper", token.clone()]] });
        let as_assignment = json!({ "client_secret": "a8f5f167f44f4964e6c998dee827110c" });
        for value in [&in_key, &in_value, &in_array] {
            assert_eq!(
                scan_json(value).map(Detector::name),
                Some("github_token"),
                "{value}"
            );
        }
        assert_eq!(
            scan_json(&as_assignment).map(Detector::name),
            Some("generic_api_key_assignment")
        );
        assert_eq!(
            scan_json(&json!(token)).map(Detector::name),
            Some("github_token")
        );
        let clean = json!({
            "orderId": "ORD-77812",
            "customer": { "id": "CUST-1042", "email": "alice@example.com" },
            "url": "https://example.com/refunds",
            "password": "visit the portal to reset it",
            "tags": ["token", "secret", 42, 1.5, false, null],
        });
        assert_eq!(scan_json(&clean), None);
    }

    /// Fragments that arbitrary texts are built of: token prefixes, key markers,
    /// assignments, URL pieces, base64 runs, line breaks and multibyte characters.
    const FRAGMENTS: &[&str] = &[
        "ghp_",
        "AKIA",
        "sk-",
        "xoxb-",
        "eyJ",
        "-----BEGIN RSA PRIVATE KEY-----",
        "-----END RSA PRIVATE KEY-----",
        "PuTTY-User-Key-File-3: ssh-rsa\nPrivate-Lines: 2\n",
        "Private-MAC: ab",
        "password",
        "=",
        ": ",
        "\"",
        "://",
        "u:p@",
        "@",
        "/",
        "\n",
        "\\n",
        "\r\n",
        " ",
        "é",
        "€",
        "😀",
        "Q~",
        ":AA",
        "sig=",
        "Bearer ",
        "Authorization: ",
        "MIIEowIBAAKCAQEA",
        "aB3dE5fG7hJ9kL1mN3pQ",
        "0123456789abcdef",
        "-us1",
        "NRAL",
    ];

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(400))]
        #[test]
        fn matches_are_ordered_disjoint_char_aligned_and_agree_with_scan(
            picks in proptest::collection::vec(0..FRAGMENTS.len(), 0..40)
        ) {
            let text: String = picks.iter().map(|&i| FRAGMENTS[i]).collect();
            let found: Vec<SecretMatch> = scan_all(&text).collect();
            let mut previous_end = 0;
            for found in &found {
                proptest::prop_assert!(found.range.start >= previous_end);
                proptest::prop_assert!(found.range.start < found.range.end);
                proptest::prop_assert!(text.is_char_boundary(found.range.start));
                proptest::prop_assert!(text.is_char_boundary(found.range.end));
                previous_end = found.range.end;
            }
            proptest::prop_assert_eq!(scan(&text).is_some(), !found.is_empty());
        }
    }

    #[test]
    fn a_long_assigned_value_is_covered_to_its_end() {
        let value = "aB3dE5fG7hJ9kL1mN3pQ".repeat(40);
        let text = format!("GOOGLE_CREDENTIALS={value} next");
        let found: Vec<SecretMatch> = scan_all(&text).collect();
        assert_eq!(found.len(), 1);
        assert_eq!(&text[found[0].range.clone()], value);
    }

    #[test]
    #[ignore = "timing: run by hand in release"]
    fn repeated_keywords_scan_in_linear_time() {
        let _ = scan("warm up");
        for unit in [
            "token=",
            "a://b:c@",
            "password: x ",
            "-----BEGIN PRIVATE KEY-----\n",
            "ghp_",
            "key=",
            "?sig=",
            "1Q~",
            "12345678:AA",
            "eyJ.",
            "Bearer ",
            "xoxb-",
        ] {
            let time = |n: usize| {
                let text = unit.repeat(n);
                let started = std::time::Instant::now();
                let _ = scan_all(&text).count();
                started.elapsed()
            };
            let (small, large) = (time(10_000), time(40_000));
            println!("{unit:?}: {small:?} → {large:?}");
            assert!(large < small * 12, "{unit:?}: {small:?} → {large:?}");
        }
    }

    #[test]
    fn every_detector_is_in_the_module_table() {
        let table = include_str!("mod.rs");
        for name in detector_names() {
            assert!(table.contains(&format!("`{name}`")), "{name} is documented");
        }
    }

    #[test]
    fn detector_names_are_unique_and_snake_case() {
        let names: Vec<_> = detector_names().collect();
        let unique: HashSet<_> = names.iter().copied().collect();
        assert_eq!(unique.len(), names.len());
        assert!(names.len() > 100, "{} detectors", names.len());
        for name in names {
            assert!(
                !name.is_empty()
                    && name
                        .chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'),
                "{name} is not snake_case"
            );
        }
    }

    #[test]
    fn detector_never_shows_the_matched_text() {
        for (name, sample) in positives() {
            let detector = scan(&sample).expect("positive sample matches");
            assert_eq!(
                format!("{detector:?}"),
                format!("Detector {{ name: {name:?} }}")
            );
            assert_eq!(detector.to_string(), name);
        }
        let token = format!("{}{}", "ghp_", "a".repeat(36));
        let detector = scan(&token).unwrap();
        assert!(!format!("{detector:?}{detector}").contains(&token));
    }
}
