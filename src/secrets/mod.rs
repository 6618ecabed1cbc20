//! Secret detection for provider items and Project text: named detectors in one pass, reported by name, never by the secret.
//!
//! Each detector is a rule in `rules.rs`: the literal keywords one of which must occur
//! (a token's documented prefix such as `ghp_`, `xoxb-`, `sk-ant-`, a word such as
//! `password`, or a service's name such as `cloudflare`), a pattern built from the
//! format's public description (prefix, length, alphabet, structure), and a check
//! (`checks.rs`). One Aho–Corasick pass finds the keywords, so text without any costs
//! that pass alone; patterns run only at the keywords found (anchored there for prefixed
//! tokens, in a small window otherwise), after a cheap precheck of the text around them.
//! The rules cover gitleaks' default rule set (its `config/gitleaks.toml`), rule by
//! rule, except where what it matches is not a secret (public client ids, publishable
//! keys) or is a file's path; `tests/it/secret_corpus` holds its test cases.
//!
//! The detectors, in the order [`scan`] reports them (the lowest wins when several
//! match); a name is the kind that `[REDACTED:<kind>]`, refusals and traces show:
//!
//! | name | what it matches |
//! |------|-----------------|
//! | `private_key` | a PEM/OpenSSH/PGP/SSH2 `BEGIN … PRIVATE KEY` block with a body (through its `END` line), a PuTTY key file; also inside JSON strings (`\n` escapes, e.g. a GCP service-account file) |
//! | `aws_access_key_id` | `AKIA`/`ASIA`/`AGPA`/`AIDA`/`AROA`/`ABIA`/`ACCA`/… + 16 uppercase alphanumerics |
//! | `aws_secret_access_key` | 40 base64 characters in an `aws_secret[_access]_key`/`SecretAccessKey` assignment, after an access key id (within a few lines: a credentials CSV, `--access-key AKIA… --secret-key …`, an `aws configure` transcript), or after an AWS label and a secret label (`AWS Secret Access Key [None]: …`, `the aws secret is …`); found by context, the value must mix three character classes at 4 bits of entropy per character (a hex digest is not one) |
//! | `aws_session_token`, `aws_bedrock_api_key` | an STS session token (`IQoJb3JpZ2luX2Vj…`, `FwoGZXIvYXdzE…`); a Bedrock API key (`ABSK…`, `bedrock-api-key-…`) |
//! | `github_token` | `ghp_`/`gho_`/`ghu_`/`ghs_`/`ghr_` + 36 or more, `github_pat_` + 22 or more |
//! | `gitlab_token` | `glpat-`, `gldt-`, `glrt-`, `glptt-`, `glcbt-`, `glft-`, `gloas-`, `glimt-`, `glagent-`, `glsoat-`, `glffct-`, `GR1348941` tokens (3 bits of entropy per character), `_gitlab_session=` cookies |
//! | `slack_token` | `xoxb-<id>-…`, `xoxp-`/`xoxe-` with three ids, `xoxa-`/`xoxr-`, `xoxo-`/`xoxs-`, `xoxe.xoxp-` (a body with letters and digits), `xoxe-`, `xapp-` |
//! | `slack_webhook` | `hooks.slack.com/services|workflows|triggers/` + `T…/…/…` or 43 or more token characters |
//! | `stripe_key`, `stripe_webhook_secret` | `sk_live_`/`rk_live_`/`sk_test_`/`rk_test_`/`sk_prod_`/`rk_prod_`; `whsec_` |
//! | `google_api_key`, `gcp_oauth_client_secret`, `google_oauth_access_token` | `AIza` + 35 (3.5 bits of entropy per character); `GOCSPX-`; `ya29.` |
//! | `anthropic_key`, `openai_key`, `openrouter_api_key` | `sk-ant-api03-…AA`, `sk-ant-admin01-…AA`; `sk-proj-`/`sk-svcacct-`/`sk-admin-`, `sk-` + 20 alphanumerics; `sk-or-v1-` |
//! | `groq_api_key`, `replicate_token`, `perplexity_api_key`, `xai_api_key`, `langsmith_api_key`, `pinecone_api_key`, `huggingface_token` | `gsk_`, `r8_`, `pplx-`, `xai-`, `lsv2_pt_`/`lsv2_sk_`, `pcsk_`, `hf_`/`api_org_` |
//! | `npm_token`, `pypi_token`, `rubygems_api_key`, `nuget_api_key`, `nuget_config_password`, `crates_io_token`, `docker_hub_token`, `artifactory_token`, `clojars_token` | `npm_` and `.npmrc`'s `_authToken=`/`_auth=`/`_password=`, `pypi-AgE…`, `rubygems_`, `oy2…`, `<add key="ClearTextPassword" value="…"/>`, `cio…`, `dckr_pat_`/`dckr_oat_`, `AKCp…`/`cmVmd…`, `CLOJARS_` |
//! | `jwt` | three base64url segments, the first starting `eyJ`, the second `ey` (an unsigned token's third may be empty); a JWT encoded once more in base64 (`ZXlK…`, checked by decoding it) |
//! | `azure_storage_key`, `azure_sas_token`, `azure_client_secret`, `azure_devops_pat` | `AccountKey=`/`SharedAccessKey=` + base64, or 88 base64 characters (a 64-byte key) after a storage label (`AZURE_STORAGE_KEY=`, `--account-key`, `az storage account keys list` output); a SAS `sig=`; `…Q~…` client secrets; 84-character `…AZDO…` PATs |
//! | `cloudflare_api_token`, `cloudflare_global_api_key`, `cloudflare_origin_ca_key` | `cfut_`/`cfat_` + 40 + an 8-hex checksum, or 40 token characters under a `cloudflare` key; `cfk_` + 40 + checksum, or 37–45 hex characters under a `cloudflare` key; `v1.0-<24 hex>-<146 hex>` |
//! | `alibaba_access_key_id`, `tencent_secret_id`, `digitalocean_token`, `heroku_api_key`, `okta_api_token`, `databricks_token`, `terraform_cloud_token`, `pulumi_access_token`, `planetscale_token`, `supabase_token`, `mapbox_secret_token`, `netlify_token`, `fastly_api_token`, `flyio_token` | `LTAI`, `AKID`, `dop_v1_`/`doo_v1_`/`dor_v1_`, `HRKU-AA`, `SSWS 00…`, `dapi`, `….atlasv1.…`, `pul-`, `pscale_tkn_`/`pscale_pw_`/`pscale_oauth_`, `sbp_`/`sb_secret_`, `sk.eyJ…`, `nfp_`, `Fastly-Key:`, `fo1_`/`fm1a_`/`fm1r_`/`fm2_` |
//! | `bitbucket_token`, `atlassian_api_token`, `linear_api_key`, `notion_token`, `figma_token`, `airtable_token`, `postman_api_key`, `contentful_token`, `sonarqube_token`, `typeform_token`, `dropbox_token`, `readme_api_key`, `adafruit_io_key`, `sourcegraph_token` | `ATBB`/`ATCTT3`, `ATATT3`, `lin_api_`, `secret_`/`ntn_`, `figd_`, `pat….…`, `PMAK-`, `CFPAT-`, `squ_`/`sqp_`/`sqa_`, `tfp_`, `sl.`, `rdme_`, `aio_`, `sgp_` |
//! | `circleci_token`, `buildkite_token`, `harness_token`, `octopus_deploy_api_key`, `prefect_api_key`, `scalingo_token`, `frameio_token`, `infracost_api_key`, `openshift_token`, `settlemint_token`, `defined_networking_token` | `CCIPAT_`/`CCIPRJ_`, `bkua_`, `pat.…`/`sat.…`, `API-`, `pnu_`, `tk-us-`, `fio-u-`, `ico-`, `sha256~` + 43, `sm_pat_`/`sm_aat_`/`sm_sat_`, `dnkey-…-…` |
//! | `discord_webhook`, `discord_bot_token`, `teams_webhook`, `telegram_bot_token`, `google_chat_webhook`, `zapier_webhook`, `ifttt_webhook` | webhook URLs with their tokens; Discord bot tokens; Telegram `<bot id>:A…` (35 characters mixing three character classes; also in `…/bot<token>/` URLs, or any under a `telegram` key) |
//! | `square_token`, `braintree_access_token`, `shopify_token`, `flutterwave_secret_key`, `shippo_token`, `easypost_api_key`, `duffel_token`, `facebook_access_token`, `plaid_access_token` | `EAAA…`/`sq0atp-`/`sq0csp-`, `access_token$production$…`, `shpat_`/`shpss_`/`shpca_`/`shppa_`, `FLWSECK-`/`FLWSECK_TEST-`, `shippo_live_`, `EZAK`/`EZTK`, `duffel_live_`, `EAAM…`/`EAAC…` and `<app id>|<app secret>`, `access-sandbox-<uuid>` |
//! | `sendgrid_api_key`, `mailgun_api_key`, `mailchimp_api_key`, `resend_api_key`, `mailersend_token`, `brevo_api_key` | `SG.…`, `key-` + 32 hex, 32 hex + `-us<n>`, `re_`, `mlsn.`, `xkeysib-` |
//! | `new_relic_key`, `sentry_token`, `sentry_dsn`, `grafana_token`, `honeycomb_key`, `dynatrace_token`, `splunk_hec_token` | `NRAK-`/`NRII-`/`NRJS-`/`…NRAL`, `sntryu_`/`sntrys_eyJ…_…`, a DSN with its key, `glc_`/`glsa_`/`eyJrIjoi…`, `hcaik_`/`X-Honeycomb-Team:`, `dt0c01.`, `Splunk <uuid>` |
//! | `launchdarkly_key`, `statsig_secret_key` | `api-`/`sdk-`/`mob-` + UUID; `secret-` + 43 |
//! | `vault_token`, `doppler_token`, `onepassword_token`, `onepassword_secret_key`, `infisical_token`, `age_secret_key` | `hvs.`/`hvb.`, `s.` + 24 mixing three character classes, `dp.pt.`/`dp.st.`/…, `ops_eyJ…`, `A3-…`, `st.<uuid>.…`, `AGE-SECRET-KEY-1…` |
//! | `twilio_api_key`, `adobe_client_secret`, `authress_access_key`, `clickhouse_api_secret`, `intra42_client_secret`, `maxmind_license_key`, `twitter_bearer_token` | `SK` + 32 hex, `p8e-`, `sc_….….acc_….…`, `4b1d` + 38, `s-s4t2ud-`/`s-s4t2af-`, `…_mmk`, `AAAAAAAAAAAAAAAAAAAAA…` |
//! | `sidekiq_secret`, `kubernetes_secret` | `<hex>:<hex>` under `BUNDLE_ENTERPRISE__CONTRIBSYS__COM` or in a `contribsys.com` URL; every value under `data:` (base64, 10 or more characters) or `stringData:` (looking generated) of a `kind: Secret` manifest |
//! | `connection_string_password` | `scheme://user:password@host` (any scheme: PostgreSQL, MySQL, MongoDB(+srv), Redis, AMQP, FTP, SMTP, HTTP(S), …; the password may hold an unencoded `@`, `/`, `#`) and `password=`/`pwd=` in a JDBC query or an ADO.NET string; the password is the match |
//! | `netrc_password`, `docker_config_auth`, `curl_credentials` | `machine … login … password <secret>` (`.netrc`); `"auth": "<base64 user:password>"` (Docker's `config.json`); the password of `curl -u`/`--user user:password` (the user of `-u "<key>:"`) |
//! | `bearer_token`, `basic_auth_header`, `authorization_token` | `Authorization: Bearer <token>` (or `Bearer eyJ…`), `Authorization: Basic <base64>`, `Authorization: Token …`/`Api-Token …` or a bare token |
//! | `algolia_api_key`, `alibaba_secret_key`, `asana_client_secret`, `beamer_api_token`, `bittrex_key`, `cisco_meraki_api_key`, `codecov_token`, `cohere_api_key`, `coinbase_token`, `confluent_key`, `datadog_api_key`, `discord_client_secret`, `droneci_token`, `etsy_token`, `facebook_secret`, `finicity_token`, `finnhub_token`, `flickr_token`, `freshbooks_token`, `gitter_token`, `gocardless_token`, `hubspot_api_key`, `intercom_token`, `kraken_token`, `kucoin_key`, `linkedin_client_secret`, `lob_api_key`, `looker_client_secret`, `mailgun_signing_key`, `mattermost_token`, `messagebird_token`, `nytimes_token`, `plaid_secret`, `privateai_api_key`, `rapidapi_key`, `sendbird_token`, `snyk_token`, `squarespace_token`, `sumologic_access_key`, `travis_ci_token`, `trello_token`, `twitch_token`, `twitter_token`, `yandex_token`, `zendesk_token` | keyed: a key naming the service (`ALGOLIA_API_KEY`, `twitter:`, `<jiraToken>`, `"coinbase", "…"`) assigned a value of the service's documented shape (length and alphabet, e.g. 32 hex, a UUID, `live_` + 40) with 2.5 bits of entropy per character; the same keyed form also finds the services above whose tokens have no prefix (`adafruit`, `airtable`, `atlassian`/`jira`/`confluence`, `bitbucket`, `cloudflare`, `contentful`, `dropbox`, `fastly`, `heroku`, `jfrog`/`artifactory`, `launchdarkly`, `linear`, `netlify`, `okta`, `sentry`, `sonar`, `sourcegraph`, `telegram`) |
//! | `password_assignment`, `generic_api_key_assignment` | a key whose last word names a credential (`password`, `DB_PASS`, `secret`, `client_secret`, `token`, `apiKey`, `X-API-Key`, `SECRET_KEY`, `auth`, `creds`, …; not a CSRF or public token) assigned a value that looks generated: 8 or more characters, two character classes, entropy of 3 bits per character (2.75 below 12 characters), not a word with digits (`password123`), a reference (`${X}`, `os.environ`), a path, a URL or a variable's name. Assigned means `=`, `:`, `=>`, `:=`, `::=`, `?=`, `.=`, JSON, YAML, headers, `<key>value</key>`, `("KEY", "value")`, a typed declaration (`var key string = …`, `val key: String = …`) or a command-line option (`--api-key …`) |
//!
//! Not secrets: documented examples (any value containing `EXAMPLE`, such as
//! `AKIAIOSFODNN7EXAMPLE`), placeholders (`your-…`, `<…>`, `${…}`, `{{…}}`, `XXXX…`,
//! `****`, `0000…`, `[REDACTED]`, `changeme`, `dummy`, `sample`), key markers with no
//! base64 body between them, public keys and certificates, hashes, UUIDs, commit ids,
//! base64 images, and prose with the words "token", "secret" or "password". A password
//! in a URL, a curl option or a config file counts unless it is such a placeholder, a
//! placeholder word (`password`, `secret`, `pass`, `p@ssw0rd`, also with digits after
//! it), a fill-in (`[PASSWORD]`, `{password}`, `$PASS`, `DB_PASSWORD`), the user name
//! again (`guest:guest`), or a port where a host stands in the user's place
//! (`http://localhost:8080@…`); an assignment's value must look generated, so
//! `password=password123` is not flagged while the same key with a random value is.

mod checks;
pub mod redact;
mod rules;

use aho_corasick::{AhoCorasick, AhoCorasickKind};
use regex_automata::meta::Regex;
use regex_automata::util::captures::Captures;
use regex_automata::{Anchored, Input};
use rules::{CREDENTIAL_WORDS, Check, KEYED_END, KEYED_PREFIX, Precheck, RULES, Rule};
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
    /// The part of the secret a check looks at (`b`), the key (`k`), the assignment
    /// operator (`o`), a URL's user (`u`) and a curl credential (`c`).
    body_group: Option<usize>,
    key_group: Option<usize>,
    operator_group: Option<usize>,
    user_group: Option<usize>,
    credential_group: Option<usize>,
}

/// The words a keyword stands for: itself, in lower case, in upper case and
/// capitalized (`cloudflare`, `CLOUDFLARE`, `Cloudflare`).
fn case_variants(word: &str) -> [String; 4] {
    let lower = word.to_ascii_lowercase();
    let mut capitalized = lower.clone();
    capitalized[..1].make_ascii_uppercase();
    [
        word.to_owned(),
        word.to_ascii_uppercase(),
        capitalized,
        lower,
    ]
}

/// A rule's regex: its pattern, or for a keyed rule the key, operator and value.
fn full_pattern(rule: &Rule) -> String {
    if rule.before_search != Precheck::ServiceKey {
        return rule.pattern.to_owned();
    }
    let words: Vec<String> = rule.keywords.iter().map(|w| regex::escape(w)).collect();
    format!(
        "(?i:{}){KEYED_PREFIX}{}{KEYED_END}",
        words.join("|"),
        rule.pattern
    )
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
            if rule.before_search == Precheck::CredentialKey {
                for word in CREDENTIAL_WORDS {
                    for variant in case_variants(word) {
                        add(variant, index);
                    }
                }
            }
            for keyword in rule.keywords {
                if rule.before_search == Precheck::ServiceKey {
                    for variant in case_variants(keyword) {
                        add(variant, index);
                    }
                } else {
                    add((*keyword).to_owned(), index);
                }
            }
        }
        let keywords = AhoCorasick::builder()
            .kind(Some(AhoCorasickKind::DFA))
            .build(&words)
            .expect("the secret keywords build an automaton");
        let compiled = RULES
            .iter()
            .map(|rule| {
                let regex =
                    Regex::new(&full_pattern(rule)).expect("the built-in secret patterns compile");
                let info = regex.group_info();
                let group = |name: &str| info.to_index(regex_automata::PatternID::ZERO, name);
                Compiled {
                    secret_groups: ["s", "j"].into_iter().filter_map(group).collect(),
                    body_group: group("b"),
                    key_group: group("k"),
                    operator_group: group("o"),
                    user_group: group("u"),
                    credential_group: group("c"),
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
                        Precheck::DigitsBefore { .. } => digits_before(text.as_bytes(), start),
                        _ => start,
                    };
                    if start < searched_to {
                        continue;
                    }
                    if rule.check == Check::KubernetesSecret {
                        // One walk per YAML document, however many `kind: Secret`
                        // lines it holds.
                        let (values, walked_to) = checks::kubernetes_secret_values(text, start);
                        for value in values.into_iter().filter(|v| v.start >= searched_to) {
                            found.push((rule_index, rule.name, value));
                        }
                        searched_to = walked_to;
                        continue;
                    }
                    let input = Input::new(text)
                        .span(start..text.len())
                        .anchored(Anchored::Yes);
                    compiled.regex.search_captures(&input, captures);
                    if let Some(whole) = captures.get_match() {
                        accept(text, rule_index, compiled, captures, &mut found);
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
            !inside_a_value(text, key_start)
                && assignment_after(text, key_start, key_end)
                && std::str::from_utf8(&text[key_start..key_end])
                    .is_ok_and(|key| checks::credential_key_kind(key).is_some())
        }
        Precheck::OperatorAfter => {
            let (key_start, key_end) = key_around(text, start, end);
            operator_at(text, key_start, key_end)
        }
        Precheck::ServiceKey => {
            let (key_start, _) = key_around(text, start, end);
            !inside_a_value(text, key_start) && service_operator_after(text, end)
        }
        Precheck::AtSignAfter => text[end..]
            .iter()
            .take(512)
            .find(|&&b| {
                b == b'@' || b.is_ascii_whitespace() || matches!(b, b'"' | b'\'' | b'<' | b'>')
            })
            .is_some_and(|&b| b == b'@'),
        Precheck::DigitsBefore { min, max } => {
            let digits_start = digits_before(text, start);
            let digits = start - digits_start;
            (min..=max).contains(&digits)
                && (digits_start == 0
                    || !is_word(text[digits_start - 1])
                    || text[..digits_start].ends_with(b"bot"))
        }
        Precheck::SecretAfter => {
            let window = &text[end..(end + 96).min(text.len())];
            window.windows(6).any(|w| w.eq_ignore_ascii_case(b"secret"))
        }
        Precheck::CurlBefore => {
            start > 0
                && text[start - 1].is_ascii_whitespace()
                && text[start.saturating_sub(1024)..start]
                    .windows(4)
                    .any(|w| w == b"curl")
        }
        Precheck::NameBefore => {
            let window = &text[start.saturating_sub(160)..start];
            window.windows(4).any(|w| w.eq_ignore_ascii_case(b"name"))
                || window.windows(3).any(|w| w.eq_ignore_ascii_case(b"key"))
        }
        Precheck::KindSecret => {
            let rest = &text[end..(end + 16).min(text.len())];
            let rest = rest.trim_ascii_start();
            let rest = rest
                .strip_prefix(b"\"")
                .or_else(|| rest.strip_prefix(b"'"))
                .unwrap_or(rest);
            rest.len() >= 6
                && rest[..6].eq_ignore_ascii_case(b"secret")
                && rest.get(6).is_none_or(|&b| !is_word(b))
        }
    }
}

/// Whether a key starting at `key_start` sits inside a value (`arn:aws:…:secret:…`,
/// `https://host/secret`, `a=b=c`): then it is no key.
fn inside_a_value(text: &[u8], key_start: usize) -> bool {
    key_start > 0 && matches!(text[key_start - 1], b':' | b'/' | b'=' | b'@')
}

/// Where the run of ASCII digits that ends at `end` starts (`end` when there is none).
fn digits_before(text: &[u8], end: usize) -> usize {
    let mut start = end;
    while start > end.saturating_sub(17) && text[start - 1].is_ascii_digit() {
        start -= 1;
    }
    start
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

/// Whether an assignment operator (`=`, `:`, `=>`, `:=`, `::=`, `?=`, `.=`) follows a
/// key ending at `at`, after an optional closing quote and a few spaces; also `,` after
/// a quoted key (`"API_TOKEN", "…"`) and `>` after `<key` (`<apiToken>…`).
fn operator_at(text: &[u8], key_start: usize, mut at: usize) -> bool {
    let before = key_start.checked_sub(1).map(|i| text[i]);
    let quoted = at < text.len() && matches!(text[at], b'"' | b'\'' | b'`');
    if quoted {
        at += 1;
    }
    let spaces_end = (at + 4).min(text.len());
    while at < spaces_end && matches!(text[at], b' ' | b'\t') {
        at += 1;
    }
    match text.get(at) {
        Some(b'=' | b':') => true,
        Some(b'?' | b'.') => text.get(at + 1) == Some(&b'='),
        Some(b',') => quoted && matches!(before, Some(b'"' | b'\'' | b'`')),
        Some(b'>') => before == Some(b'<'),
        _ => false,
    }
}

/// Whether an assignment of some form follows the key at `key_start..key_end`: an
/// operator (see [`operator_at`]), a typed declaration (`var apiToken string = …`,
/// `val apiKey: String = …`), or the value of a command-line option (`--api-key …`).
fn assignment_after(text: &[u8], key_start: usize, key_end: usize) -> bool {
    if operator_at(text, key_start, key_end) {
        return true;
    }
    let mut at = key_end;
    let spaces = |at: &mut usize, limit: usize| {
        let start = *at;
        while *at < text.len() && *at < start + limit && matches!(text[*at], b' ' | b'\t') {
            *at += 1;
        }
        *at - start
    };
    if spaces(&mut at, 4) == 0 {
        return false;
    }
    if text[key_start] == b'-' {
        // `--api-key <value>`; `--api-key --next-option` has no value.
        return text
            .get(at)
            .is_some_and(|&b| !b.is_ascii_whitespace() && b != b'-');
    }
    let type_start = at;
    while at < text.len()
        && at < type_start + 16
        && (text[at].is_ascii_alphanumeric()
            || matches!(text[at], b'_' | b'<' | b'>' | b'&' | b'\''))
    {
        at += 1;
    }
    if at == type_start {
        return false;
    }
    spaces(&mut at, 4) > 0 && text.get(at) == Some(&b'=')
}

/// Whether an operator follows a service's name at `end` within the rest of its key
/// (`_GLOBAL_API_KEY`, ` bot`), a closing quote and a few spaces.
fn service_operator_after(text: &[u8], end: usize) -> bool {
    let limit = (end + 32).min(text.len());
    let mut at = end;
    while at < limit
        && (text[at].is_ascii_alphanumeric()
            || matches!(text[at], b'_' | b'.' | b'-' | b' ' | b'\t'))
    {
        at += 1;
    }
    while at < limit && matches!(text[at], b'"' | b'\'' | b'`' | b' ' | b'\t') {
        at += 1;
    }
    // `.=` ends the loop above at its `=`.
    at < limit && matches!(text[at], b'=' | b':' | b'>' | b',' | b'|' | b'?')
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
        match accept(text, rule_index, compiled, captures, found) {
            Some(range) => {
                from = whole.end().max(range.end).max(whole.start() + 1);
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

/// Checks a pattern match against its rule and pushes the secret it holds onto
/// `found`. Returns its range, or `None` when the match is no secret.
fn accept(
    text: &str,
    rule_index: usize,
    compiled: &Compiled,
    captures: &Captures,
    found: &mut Vec<(usize, &'static str, Range<usize>)>,
) -> Option<Range<usize>> {
    let rule = &RULES[rule_index];
    let (kind, range) = accepted(text, rule, compiled, captures)?;
    if rule.min_entropy > 0.0 {
        let body = compiled
            .body_group
            .and_then(|g| captures.get_group(g))
            .map_or(range.clone(), |span| span.range());
        if checks::entropy(&text[body]) < rule.min_entropy {
            return None;
        }
    }
    found.push((rule_index, kind, range.clone()));
    Some(range)
}

/// The kind and range of a pattern match that passes its rule's check (see [`accept`]).
fn accepted(
    text: &str,
    rule: &Rule,
    compiled: &Compiled,
    captures: &Captures,
) -> Option<(&'static str, Range<usize>)> {
    let whole = captures.get_match()?.range();
    let group = |index: Option<usize>| index.and_then(|g| captures.get_group(g)).map(|s| s.range());
    let range = compiled
        .secret_groups
        .iter()
        .find_map(|&g| captures.get_group(g))
        .map_or(whole.clone(), |span| span.range());
    let secret = &text[range.clone()];
    let body = group(compiled.body_group).map_or(secret, |body| &text[body]);
    let token = || !checks::is_placeholder(secret);
    let name = rule.name;
    match rule.check {
        Check::Token => token().then_some((name, range)),
        Check::Mixed => (token() && checks::has_letter_and_digit(body)).then_some((name, range)),
        Check::Varied => (token() && checks::classes(body) >= 3).then_some((name, range)),
        Check::Delimited => {
            let before = text[..range.start].bytes().next_back();
            let delimited = before.is_none_or(|b| {
                !(b.is_ascii_alphanumeric() || matches!(b, b'_' | b'~' | b'.' | b'-'))
            });
            (delimited && token()).then_some((name, range))
        }
        Check::Password => (!checks::is_placeholder_password(secret)).then_some((name, range)),
        Check::UrlPassword => {
            let Some(user) = group(compiled.user_group) else {
                // A token as the whole userinfo (`https://<token>@host`).
                return checks::looks_generated(secret).then_some((name, range));
            };
            let user = &text[user];
            let password = checks::url_password(text, range)?;
            let candidate = &text[password.clone()];
            (!checks::is_placeholder_password(candidate)
                && !candidate.eq_ignore_ascii_case(user)
                && !checks::is_host_and_port(user, candidate))
            .then_some((name, password))
        }
        Check::Generated => checks::looks_generated(secret).then_some((name, range)),
        Check::Keyed => token().then_some((name, range)),
        Check::AwsSecret => checks::looks_like_random_key(secret).then_some((name, range)),
        Check::AzureKey => {
            let before = &text[range.start.saturating_sub(8)..range.start];
            (checks::looks_like_random_key(secret) && !before.to_ascii_lowercase().contains("sha"))
                .then_some((name, range))
        }
        Check::CurlUser => {
            let credential = group(compiled.credential_group)?;
            checks::curl_credential(text, credential).map(|range| (name, range))
        }
        Check::Base64Jwt => checks::is_base64_jwt(secret).then_some((name, range)),
        // Walked in `Scanner::find`, one document at a time.
        Check::KubernetesSecret => None,
        Check::Assignment => {
            let key_range = group(compiled.key_group)?;
            // A key inside a value (`arn:aws:…:secret:prod/db`, `a=b=c`) is no key.
            if inside_a_value(text.as_bytes(), key_range.start) {
                return None;
            }
            let key = &text[key_range.clone()];
            let operator = group(compiled.operator_group).map_or("=", |op| &text[op]);
            let before = text[..key_range.start].bytes().next_back();
            let operator_fits = match operator.trim_ascii() {
                // `<apiToken>value`
                op if op.starts_with('>') => before == Some(b'<'),
                // `"API_TOKEN", "value"`
                op if op.ends_with(',') => matches!(before, Some(b'"' | b'\'' | b'`')),
                // `--api-key value`
                "" => key.starts_with('-'),
                _ => true,
            };
            if !operator_fits {
                return None;
            }
            let kind = checks::credential_key_kind(key)?;
            // The pattern stops a value at 256 characters (so that a run of failing
            // pairs costs linear time); an accepted one extends to its real end.
            let end = range.end + checks::value_length(&text[range.end..]);
            checks::looks_generated(secret).then_some((kind, range.start..end))
        }
        Check::KeyBlock => checks::key_block(text, whole).map(|range| (name, range)),
        Check::PuttyBlock => checks::putty_block(text, whole).map(|range| (name, range)),
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
                format!("key={}{}", "AIza", "SyD3k9Lm2Qx7Rt4Vb6Nc1Zd5Gh0Jw8Eu7Ap"),
            ),
            ("openai_key", format!("OPENAI {}{}", "sk-", "Ab3".repeat(8))),
            (
                "anthropic_key",
                format!(
                    "{}{}AA",
                    "sk-ant-",
                    "api03-".to_owned() + &"z9Qx_-7".repeat(13)
                ),
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

    /// `n` characters of `alphabet`, deterministic in `seed` (samples that look random
    /// without a literal that looks like a real secret in this file).
    fn random(alphabet: &str, n: usize, seed: u64) -> String {
        let alphabet = alphabet.as_bytes();
        let mut state = seed;
        (0..n)
            .map(|_| {
                state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
                let mut z = state;
                z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
                alphabet[((z ^ (z >> 31)) % alphabet.len() as u64) as usize] as char
            })
            .collect()
    }

    const B64: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const ALNUM: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    const LOWER_ALNUM: &str = "abcdefghijklmnopqrstuvwxyz0123456789";
    const HEX: &str = "0123456789abcdef";
    const B64URL: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

    /// Every detector added after the first set, each with a text it must find (as that
    /// detector, covering the secret) and a near miss it must pass over.
    #[test]
    fn each_added_detector_finds_its_format_and_passes_over_its_near_miss() {
        let b64_40 = random(B64, 40, 1);
        let hex_40 = random(HEX, 40, 2);
        let azure_key = format!("{}==", random(B64, 86, 3));
        let key_id = format!(
            "{}{}",
            "AKIA",
            random("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", 16, 4)
        );
        let jwt = format!(
            "{}{}.{}{}.{}",
            "eyJ",
            "hbGciOiJIUzI1NiJ9",
            "eyJ",
            "zdWIiOiIxMjM0NTY3ODkwIn0",
            random(B64URL, 43, 5)
        );
        let base64 = |text: &str| {
            let mut out = String::new();
            for chunk in text.as_bytes().chunks(3) {
                let n = chunk.iter().fold(0u32, |acc, &b| (acc << 8) | u32::from(b))
                    << (8 * (3 - chunk.len()));
                for i in 0..=chunk.len() {
                    out.push(B64.as_bytes()[((n >> (18 - 6 * i)) & 63) as usize] as char);
                }
                out.push_str(&"=".repeat(3 - chunk.len()));
            }
            out
        };
        // (detector, text, the secret in it, near miss)
        let cases: Vec<(&str, String, String, String)> = vec![
            (
                "aws_secret_access_key",
                format!("AWS Access Key ID [None]: {key_id}\nAWS Secret Access Key [None]: {b64_40}\n"),
                b64_40.clone(),
                format!("AWS Secret Access Key rotated in commit {hex_40}"),
            ),
            (
                "aws_secret_access_key",
                format!("s3cmd --access_key {key_id} --secret_key {b64_40} ls"),
                b64_40.clone(),
                format!("AKIAIOSFODNN7EXAMPLE deployed with build {hex_40}"),
            ),
            (
                "aws_secret_access_key",
                format!("The aws secret for backups is {b64_40}."),
                b64_40.clone(),
                "The AWS secret access key is shown once; rotate it in the console.".to_owned(),
            ),
            (
                "azure_storage_key",
                format!("az storage blob list --account-name st1 --account-key {azure_key}"),
                azure_key.clone(),
                format!("\"storage\": {{\"integrity\": \"sha512-{azure_key}\"}}"),
            ),
            (
                "azure_storage_key",
                format!("[{{\"keyName\": \"key1\", \"permissions\": \"FULL\", \"value\": \"{azure_key}\"}}]"),
                azure_key.clone(),
                "[{\"keyName\": \"key1\", \"permissions\": \"FULL\"}]".to_owned(),
            ),
            (
                "cloudflare_api_token",
                format!("{}{}{}", "cfut_", random(ALNUM, 40, 6), random(HEX, 8, 7)),
                format!("{}{}{}", "cfut_", random(ALNUM, 40, 6), random(HEX, 8, 7)),
                format!("{}{}", "cfut_", random(ALNUM, 40, 6)),
            ),
            (
                "cloudflare_api_token",
                format!("cloudflare: \"{}\"", random(B64URL, 40, 8)),
                random(B64URL, 40, 8),
                format!("cloudflare zone id: {}", random(HEX, 32, 9)),
            ),
            (
                "cloudflare_global_api_key",
                format!("CLOUDFLARE_GLOBAL_API_KEY: {}", random(HEX, 37, 10)),
                random(HEX, 37, 10),
                format!("CLOUDFLARE_ACCOUNT_ID={}", random(HEX, 32, 11)),
            ),
            (
                "cloudflare_origin_ca_key",
                format!("{}{}-{}", "v1.0-", random(HEX, 24, 12), random(HEX, 146, 13)),
                format!("{}{}-{}", "v1.0-", random(HEX, 24, 12), random(HEX, 146, 13)),
                format!("{}{}", "release v1.0-", random(HEX, 24, 12)),
            ),
            (
                "telegram_bot_token",
                format!("bot {}:{}{}", "1234567890", "AB", random(B64URL, 33, 14)),
                format!("{}:{}{}", "1234567890", "AB", random(B64URL, 33, 14)),
                "type=\"12345:AgencyIdentificationCodeContentType\"".to_owned(),
            ),
            (
                "telegram_bot_token",
                format!("https://api.telegram.org/bot{}:{}{}/getMe", "987654321", "AA", random(B64URL, 33, 15)),
                format!("{}:{}{}", "987654321", "AA", random(B64URL, 33, 15)),
                "chat_id=-1001234567890".to_owned(),
            ),
            (
                "connection_string_password",
                "ftp://deploy:Xk9#mQ2/vL7p@ftp.example.net/releases".to_owned(),
                "Xk9#mQ2/vL7p".to_owned(),
                "http://localhost:8080@evil.example/login".to_owned(),
            ),
            (
                "connection_string_password",
                "https://ci:p@ss-W0rd-7Qz@git.example.com/acme/app.git?ref=me@example.com".to_owned(),
                "p@ss-W0rd-7Qz".to_owned(),
                format!("docker://registry.local:5000/team/app@sha256:{}", random(HEX, 64, 16)),
            ),
            (
                "connection_string_password",
                "amqps://svc_orders:Rb7kLq2Zx9Vt@mq.internal:5671/".to_owned(),
                "Rb7kLq2Zx9Vt".to_owned(),
                "amqp://guest:guest@localhost:5672/ and https://user:password@example.com".to_owned(),
            ),
            (
                "curl_credentials",
                "curl -s --user 'api:Xk9mQ2vL7pR4' https://api.example.com".to_owned(),
                "Xk9mQ2vL7pR4".to_owned(),
                "curl -s --user \"$API_USER:$API_PASSWORD\" https://api.example.com".to_owned(),
            ),
            (
                "curl_credentials",
                "curl -u \"Xk9mQ2vL7pR4:\" https://api.example.com/v1/charges".to_owned(),
                "Xk9mQ2vL7pR4".to_owned(),
                "curl -u \"test:test\" http://localhost:9200".to_owned(),
            ),
            (
                "authorization_token",
                format!("-H \"Authorization: Token {hex_40}\""),
                hex_40.clone(),
                "-H \"Authorization: Token **********\"".to_owned(),
            ),
            (
                "kubernetes_secret",
                format!("apiVersion: v1\nkind: Secret\ndata:\n  password: {}\n", base64("Xk9mQ2vL7pR4")),
                base64("Xk9mQ2vL7pR4"),
                "apiVersion: v1\nkind: ExternalSecret\nspec:\n  data:\n    - secretKey: db-password\n".to_owned(),
            ),
            (
                "jwt",
                format!("token: {}", base64(&jwt)),
                base64(&jwt),
                format!("payload: {}", base64("hello from order 123456 shipped to warehouse 42")),
            ),
            (
                "nuget_config_password",
                "<add key=\"ClearTextPassword\" value=\"Xk9mQ2vL7pR4\" />".to_owned(),
                "Xk9mQ2vL7pR4".to_owned(),
                "<add key=\"ClearTextPassword\" value=\"%NUGET_PASSWORD%\" />".to_owned(),
            ),
            (
                "aws_bedrock_api_key",
                format!("{}{}", "ABSK", random(B64, 130, 17)),
                format!("{}{}", "ABSK", random(B64, 130, 17)),
                format!("{}{}", "ABSK", random(B64, 40, 17)),
            ),
            (
                "facebook_access_token",
                format!("{}|{}", "1234567890123456", random(B64URL, 27, 18)),
                format!("{}|{}", "1234567890123456", random(B64URL, 27, 18)),
                "| 1234567890123456 | total |".to_owned(),
            ),
            (
                "adobe_client_secret",
                format!("{}{}", "p8e-", random(ALNUM, 32, 19)),
                format!("{}{}", "p8e-", random(ALNUM, 32, 19)),
                format!("{}{}", "p8e-", random(ALNUM, 16, 19)),
            ),
            (
                "clickhouse_api_secret",
                format!("{}{}", "4b1d", random(ALNUM, 38, 20)),
                format!("{}{}", "4b1d", random(ALNUM, 38, 20)),
                format!("{}{}", "4b1d", "X".repeat(38)),
            ),
            (
                "flyio_token",
                format!("{}{}", "fo1_", random(B64URL, 43, 21)),
                format!("{}{}", "fo1_", random(B64URL, 43, 21)),
                format!("{}{}", "fo1_", "x".repeat(43)),
            ),
            (
                "infracost_api_key",
                format!("{}{}", "ico-", random(ALNUM, 32, 22)),
                format!("{}{}", "ico-", random(ALNUM, 32, 22)),
                format!("/assets/video_box.ico-{}.png", random(HEX, 32, 22)),
            ),
            (
                "openshift_token",
                format!("oc login --token={}{} ", "sha256~", random(B64URL, 43, 23)),
                format!("{}{}", "sha256~", random(B64URL, 43, 23)),
                "--token=\"sha256~XXXXXXXXXX_PUT_YOUR_TOKEN_HERE_XXXXXXXXXXXX\"".to_owned(),
            ),
            (
                "plaid_access_token",
                format!("{}{}", "access-sandbox-", "3f2a4c1e-9b7d-4e2f-8a6c-1d5e9f0b2c7a"),
                format!("{}{}", "access-sandbox-", "3f2a4c1e-9b7d-4e2f-8a6c-1d5e9f0b2c7a"),
                "access-sandbox-environment-notes".to_owned(),
            ),
            (
                "sourcegraph_token",
                format!("{}{}", "sgp_", random("0123456789abcdefABCDEF", 40, 24)),
                format!("{}{}", "sgp_", random("0123456789abcdefABCDEF", 40, 24)),
                "sgp_5555555dAAAAA7777777CcccCFaaaaaaaaaaaaaa".to_owned(),
            ),
            (
                "twitter_bearer_token",
                format!("{}M{}", "A".repeat(21), random(ALNUM, 90, 25)),
                format!("{}M{}", "A".repeat(21), random(ALNUM, 90, 25)),
                format!("data:image/png;base64,{}{}{}", random(B64, 20, 26), "A".repeat(40), random(B64, 300, 27)),
            ),
            (
                "vault_token",
                format!("token: {}{}", "s.", random(ALNUM, 24, 28)),
                format!("{}{}", "s.", random(ALNUM, 24, 28)),
                "s.AcceptanceTimeoutSeconds = 30".to_owned(),
            ),
            (
                "sidekiq_secret",
                format!("https://{}:{}@gems.contribsys.com/", random(HEX, 8, 29), random(HEX, 8, 30)),
                format!("{}:{}", random(HEX, 8, 29), random(HEX, 8, 30)),
                "source \"https://gems.contribsys.com/\" do".to_owned(),
            ),
            (
                "slack_token",
                format!("t={}", ["xoxe", "4726837507825", "4848681849303", "4856614048758", &random(HEX, 32, 31)].join("-")),
                ["xoxe", "4726837507825", "4848681849303", "4856614048758", &random(HEX, 32, 31)].join("-"),
                "xoxb-xoxb-my-bot-token and xoxe.xoxp-1-SlackAppConfigurationAccessTokenHere".to_owned(),
            ),
            (
                "slack_webhook",
                format!("{}{}", "hooks.slack.com/services/", random(ALNUM, 44, 32)),
                format!("{}{}", "hooks.slack.com/services/", random(ALNUM, 44, 32)),
                "See https://api.slack.com/messaging/webhooks for the hooks.slack.com URL.".to_owned(),
            ),
            (
                "jwt",
                format!("String none = \"{}{}.{}{}.\";", "eyJ", "hbGciOiJub25lIn0", "eyJ", "zdWIiOiJ0ZXN0LXVzZXIifQ"),
                format!("{}{}.{}{}.", "eyJ", "hbGciOiJub25lIn0", "eyJ", "zdWIiOiJ0ZXN0LXVzZXIifQ"),
                "The header eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9 decodes to JSON.".to_owned(),
            ),
        ];
        for (name, text, secret, near_miss) in &cases {
            let found: Vec<SecretMatch> = scan_all(text).collect();
            let start = text
                .find(secret.as_str())
                .expect("the secret is in its text");
            assert!(
                found.iter().any(|m| m.kind == *name
                    && m.range.start <= start
                    && m.range.end >= start + secret.len()),
                "{name} in {text:?}: {found:?}"
            );
            assert_eq!(
                scan(near_miss),
                None,
                "{name}: false positive on {near_miss:?}"
            );
        }
    }

    /// The rest of the added detectors, and the detectors whose shape changed to match
    /// their format: a text each must find, a near miss each must pass over.
    #[test]
    fn added_and_reshaped_token_formats() {
        let hex = |n, seed| random(HEX, n, seed);
        let alnum = |n, seed| random(ALNUM, n, seed);
        // (detector, secret, near miss)
        let cases: Vec<(&str, String, String)> = vec![
            (
                "authress_access_key",
                format!(
                    "sc_{}.{}.acc_{}.{}",
                    alnum(10, 1),
                    alnum(4, 2),
                    alnum(10, 3),
                    random(B64URL, 40, 4)
                ),
                format!("sc_{}.{}", alnum(10, 1), alnum(4, 2)),
            ),
            (
                "defined_networking_token",
                format!("dnkey-{}-{}", random(B64URL, 26, 5), random(B64URL, 52, 6)),
                format!("dnkey-{}", random(B64URL, 26, 5)),
            ),
            (
                "intra42_client_secret",
                format!("{}{}", "s-s4t2ud-", hex(64, 7)),
                format!("{}{}", "s-s4t2ud-", hex(32, 7)),
            ),
            (
                "maxmind_license_key",
                format!("{}_{}_mmk", alnum(6, 8), alnum(29, 9)),
                format!("{}_{}_mmk", "aaaaaa", "a".repeat(29)),
            ),
            (
                "settlemint_token",
                format!("{}{}", "sm_pat_", alnum(16, 10)),
                format!("{}{}", "sm_pat_", alnum(10, 10)),
            ),
            (
                "anthropic_key",
                format!("{}{}AA", "sk-ant-admin01-", random(B64URL, 93, 11)),
                "sk-ant-api03-abc123xyz-456de-klMnopqrstuvwx-3456yza789bcde-1234fghijklmnopAA"
                    .to_owned(),
            ),
            (
                "sentry_token",
                format!(
                    "sntrys_{}_{}",
                    "eyJpYXQiOjE3MDAwMDAwMDAuNSwidXJsIjoiaHR0cHM6Ly9zZW50cnkuaW8iLCJvcmciOiJhY21lIn0=",
                    random(B64, 43, 12)
                ),
                format!("sntrys_{}_{}", alnum(90, 13), alnum(43, 14)),
            ),
            (
                "google_api_key",
                format!("{}{}", "AIza", random(B64URL, 35, 15)),
                format!("apiKey: \"{}{}\"", "AIza", "a".repeat(35)),
            ),
            (
                "gitlab_token",
                format!("{}{}", "GR1348941", random(B64URL, 20, 16)),
                format!("{}{}", "GR1348941", "12312312312312312312"),
            ),
            (
                "gitlab_token",
                format!("_gitlab_session={}", random(LOWER_ALNUM, 32, 17)),
                "_gitlab_session=expired".to_owned(),
            ),
            (
                "easypost_api_key",
                format!("{}{}", "EZTK", alnum(54, 18)),
                format!("{}{}", "EZTK", alnum(50, 18)),
            ),
            (
                "dynatrace_token",
                format!(
                    "dt0c01.{}.{}",
                    random(LOWER_ALNUM, 24, 19),
                    random(LOWER_ALNUM, 64, 20)
                ),
                "dt0c01.".to_owned(),
            ),
            (
                "square_token",
                format!("{}{}", "EAAA", random(B64URL, 60, 21)),
                format!("aws-cli@sha256:eaaa{}", hex(60, 22)),
            ),
            (
                "grafana_token",
                format!("{}{}", "eyJrIjoi", alnum(70, 23)),
                format!("glc_{}=", "1".repeat(42)),
            ),
            (
                "flutterwave_secret_key",
                format!("{}{}", "FLWSECK_TEST-", hex(12, 24)),
                "FLWSECK".to_owned(),
            ),
            (
                "onepassword_secret_key",
                format!(
                    "A3-{}-{}-{}-{}-{}",
                    "ASWWYB", "798JRYLJVD4", "23DC2", "86TVM", "H43EB"
                ),
                "A3-XXXXXX-XXXXXXXXXXX-XXXXX-XXXXX-XXXXX".to_owned(),
            ),
            (
                "artifactory_token",
                format!("{}{}", "cmVmd", alnum(59, 25)),
                format!("{}{}", "cmVmd", "X".repeat(59)),
            ),
            (
                "harness_token",
                format!("pat.{}.{}.{}", alnum(22, 26), alnum(24, 27), alnum(20, 28)),
                format!("pat.{}", alnum(22, 26)),
            ),
            (
                "typeform_token",
                format!("{}{}", "tfp_", random("abcdef0123456789-_.=", 59, 29)),
                "tfp_".to_owned(),
            ),
            (
                "stripe_key",
                format!("{}{}", "rk_prod_", alnum(40, 30)),
                format!("task_test_{}", alnum(30, 30)),
            ),
            (
                "new_relic_key",
                format!("{}{}", "NRAK-", random(LOWER_ALNUM, 27, 31)),
                "NRAK-".to_owned(),
            ),
            (
                "sendgrid_api_key",
                format!("{}{}", "SG.", random("abcdefghij0123456789=_-.", 66, 32)),
                "SG.foo and SG.bar".to_owned(),
            ),
        ];
        for (name, secret, near_miss) in &cases {
            let text = format!("value {secret} end");
            let found: Vec<SecretMatch> = scan_all(&text).collect();
            assert!(
                found
                    .iter()
                    .any(|m| m.kind == *name && text[m.range.clone()].contains(secret.as_str())),
                "{name} in {text:?}: {found:?}"
            );
            assert_eq!(
                scan(near_miss),
                None,
                "{name}: false positive on {near_miss:?}"
            );
        }
    }

    /// The keyed detectors: the service's name in a key, a value of the service's
    /// shape; the same key with a value of another shape is no secret.
    #[test]
    fn keyed_detectors_need_the_service_key_and_the_value_shape() {
        let uuid = "8d3c2f1a-6b7e-4c9d-a2f5-0e1b3c4d5e6f";
        let cases: Vec<(&str, &str, String)> = vec![
            ("adafruit_io_key", "adafruit", random(LOWER_ALNUM, 32, 40)),
            ("airtable_token", "airtable", random(LOWER_ALNUM, 17, 41)),
            ("algolia_api_key", "algolia", random(HEX, 32, 42)),
            ("alibaba_secret_key", "alibaba", random(LOWER_ALNUM, 30, 43)),
            ("asana_client_secret", "asana", random(LOWER_ALNUM, 32, 44)),
            (
                "atlassian_api_token",
                "jira",
                random(LOWER_ALNUM, 20, 45) + &random(HEX, 4, 45),
            ),
            (
                "beamer_api_token",
                "beamer",
                format!("b_{}", random(LOWER_ALNUM, 44, 46)),
            ),
            ("bitbucket_token", "bitbucket", random(LOWER_ALNUM, 64, 47)),
            ("bittrex_key", "bittrex", random(LOWER_ALNUM, 32, 48)),
            ("cisco_meraki_api_key", "meraki", random(HEX, 40, 49)),
            ("codecov_token", "codecov", random(LOWER_ALNUM, 32, 50)),
            ("cohere_api_key", "cohere", random(ALNUM, 40, 51)),
            ("coinbase_token", "coinbase", random(B64URL, 64, 52)),
            ("confluent_key", "confluent", random(LOWER_ALNUM, 64, 53)),
            (
                "contentful_token",
                "contentful",
                random(LOWER_ALNUM, 43, 54),
            ),
            ("datadog_api_key", "datadog", random(LOWER_ALNUM, 40, 55)),
            ("discord_client_secret", "discord", random(B64URL, 32, 56)),
            ("droneci_token", "droneci", random(LOWER_ALNUM, 32, 57)),
            ("dropbox_token", "dropbox", random(LOWER_ALNUM, 15, 58)),
            ("etsy_token", "etsy", random(LOWER_ALNUM, 24, 59)),
            ("facebook_secret", "facebook", random(HEX, 32, 60)),
            ("fastly_api_token", "fastly", random(B64URL, 32, 61)),
            ("finicity_token", "finicity", random(LOWER_ALNUM, 20, 62)),
            ("finnhub_token", "finnhub", random(LOWER_ALNUM, 20, 63)),
            ("flickr_token", "flickr", random(LOWER_ALNUM, 32, 64)),
            (
                "freshbooks_token",
                "freshbooks",
                random(LOWER_ALNUM, 64, 65),
            ),
            ("gitter_token", "gitter", random(B64URL, 40, 66)),
            (
                "gocardless_token",
                "gocardless",
                format!("live_{}", random(B64URL, 40, 67)),
            ),
            ("heroku_api_key", "heroku", uuid.to_owned()),
            ("hubspot_api_key", "hubspot", uuid.to_uppercase()),
            ("intercom_token", "intercom", random(B64URL, 60, 68)),
            ("artifactory_token", "jfrog", random(LOWER_ALNUM, 64, 69)),
            ("kraken_token", "kraken", random(B64, 85, 70)),
            ("kucoin_key", "kucoin", random(HEX, 24, 71)),
            ("launchdarkly_key", "launchdarkly", random(B64URL, 40, 72)),
            ("linear_api_key", "linear", random(HEX, 32, 73)),
            (
                "linkedin_client_secret",
                "linkedin",
                random(LOWER_ALNUM, 16, 74),
            ),
            (
                "lob_api_key",
                "lob",
                format!("test_{}", random(HEX, 35, 75)),
            ),
            (
                "looker_client_secret",
                "looker",
                random(LOWER_ALNUM, 24, 76),
            ),
            (
                "mailgun_signing_key",
                "mailgun",
                format!("{}-00001111-22223333", random(HEX, 32, 77)),
            ),
            (
                "mattermost_token",
                "mattermost",
                random(LOWER_ALNUM, 26, 78),
            ),
            (
                "messagebird_token",
                "messagebird",
                random(LOWER_ALNUM, 25, 79),
            ),
            ("netlify_token", "netlify", random(B64URL, 43, 80)),
            ("nytimes_token", "nytimes", random(LOWER_ALNUM, 32, 81)),
            (
                "okta_api_token",
                "okta",
                format!("00{}", random(B64URL, 40, 82)),
            ),
            ("plaid_secret", "plaid", random(LOWER_ALNUM, 30, 83)),
            (
                "privateai_api_key",
                "privateai",
                random(LOWER_ALNUM, 32, 84),
            ),
            ("rapidapi_key", "rapidapi", random(B64URL, 50, 85)),
            ("sendbird_token", "sendbird", random(HEX, 40, 86)),
            ("sentry_token", "sentry", random(HEX, 64, 87)),
            ("snyk_token", "snyk", uuid.to_owned()),
            ("sonarqube_token", "sonar_login", random(ALNUM, 40, 88)),
            ("sourcegraph_token", "sourcegraph", random(HEX, 40, 89)),
            ("squarespace_token", "squarespace", uuid.to_owned()),
            ("sumologic_access_key", "sumo", random(ALNUM, 64, 90)),
            (
                "telegram_bot_token",
                "telegram",
                format!("12345678:A{}", random(LOWER_ALNUM, 34, 91)),
            ),
            ("travis_ci_token", "travis", random(LOWER_ALNUM, 22, 92)),
            ("trello_token", "trello", random(ALNUM, 32, 93)),
            ("twitch_token", "twitch", random(LOWER_ALNUM, 30, 94)),
            ("twitter_token", "twitter", random(LOWER_ALNUM, 45, 95)),
            (
                "yandex_token",
                "yandex",
                format!("YC{}", random(B64URL, 38, 96)),
            ),
            ("zendesk_token", "zendesk", random(LOWER_ALNUM, 40, 97)),
            (
                "sidekiq_secret",
                "BUNDLE_GEMS__CONTRIBSYS__COM",
                format!("{}:{}", random(HEX, 8, 98), random(HEX, 8, 99)),
            ),
        ];
        let names: Vec<_> = detector_names().collect();
        for (name, service, value) in &cases {
            assert!(names.contains(name), "{name} is a detector");
            let text = format!("{service}: \"{value}\"");
            let found: Vec<SecretMatch> = scan_all(&text).collect();
            assert!(
                found
                    .iter()
                    .any(|m| m.kind == *name && &text[m.range.clone()] == value),
                "{name} in {text:?}: {found:?}"
            );
            let other_shape = format!("{service}: \"{}\"", &value[..value.len() / 2]);
            assert_eq!(
                scan(&other_shape),
                None,
                "{name}: false positive on {other_shape:?}"
            );
            // A Telegram token is also found by its own shape, anywhere.
            if *name != "telegram_bot_token" {
                let not_a_key = format!("see {service} docs, code {value}");
                assert!(
                    scan_all(&not_a_key).all(|m| m.kind != *name),
                    "{name} without its key: {not_a_key:?}"
                );
            }
        }
    }

    /// The assignment forms the generic detector reads, and look-alikes it must not.
    #[test]
    fn credential_assignments_in_every_syntax() {
        let value = random(ALNUM, 32, 100);
        let forms = [
            format!("apiToken=\"{value}\""),
            format!("<apiToken>\n    {value}\n</apiToken>"),
            format!("{{\"config.ini\": \"API_TOKEN={value}\\nBACKUP_ENABLED=true\"}}"),
            format!("var apiToken string = \"{value}\""),
            format!("val apiKey: String = \"{value}\""),
            format!("apiToken := `{value}`"),
            format!("$apiToken .= \"{value}\""),
            format!("System.setProperty(\"API_TOKEN\", \"{value}\")"),
            format!("  \"apiToken\" => \"{value}\""),
            format!("API_TOKEN ::= \"{value}\""),
            format!("API_TOKEN ?= \"{value}\""),
            format!("deploy --api-key {value} --region eu"),
            format!("\"user_auth\": \"{value}\""),
            format!("creds = {value}"),
        ];
        for text in &forms {
            let found: Vec<SecretMatch> = scan_all(text).collect();
            assert!(
                found
                    .iter()
                    .any(|m| m.kind == "generic_api_key_assignment"
                        && text[m.range.clone()] == value),
                "{text:?}: {found:?}"
            );
        }
        let look_alikes = [
            "deploy --token-file /run/secrets/token --api-key-stdin".to_owned(),
            "System.setProperty(\"API_TOKEN\", System.getenv(\"TOKEN\"))".to_owned(),
            "<apiToken>${API_TOKEN}</apiToken>".to_owned(),
            "var apiToken string = os.Getenv(\"TOKEN\")".to_owned(),
            format!("csrf-token={value}"),
            format!("publicToken = \"{value}\""),
            format!("<input name=\"authenticity_token\" value=\"{value}\">"),
            format!("apiToken > {value}"),
            format!("register(\"apiToken\" {value})"),
        ];
        for text in &look_alikes {
            assert_eq!(scan(text), None, "false positive on {text:?}");
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
            "aws secret ",
            "AKIA0123456789ABCDEF ",
            "storage ",
            "cloudflare: ",
            "curl -u a:b ",
            "- name: API_TOKEN\n  value: x\n",
            "kind: Secret\ndata:\n  a: ",
            "u:p@h@",
            "Authorization: ",
            "--api-key ",
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
