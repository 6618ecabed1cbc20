//! The detector table: for every credential format, the literal keywords that must
//! appear for it to be looked for, the pattern that finds it, and the check a match
//! must pass. Patterns are checked against public format descriptions; the order is
//! the reporting order of [`super::scan`].

/// What a match must pass besides its pattern (see `checks.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Check {
    /// A token with a distinctive prefix: only placeholders and documented examples
    /// are dropped.
    Token,
    /// As `Token`, and the token holds both a letter and a digit.
    Mixed,
    /// As `Token`, and the character before the match is not a token character
    /// (for formats a word boundary cannot delimit).
    Delimited,
    /// A password in a URL or a connection string: placeholders and the placeholder
    /// words (`password`, `changeme`, …) are dropped; anything else counts.
    Password,
    /// A value assigned to a credential-named key: the key's last word names a
    /// credential and the value looks generated (entropy, character classes, not a
    /// word, path, reference or identifier).
    Assignment,
    /// A value after a scheme (`Basic`, `Bearer`): looks generated, as for `Assignment`.
    Generated,
    /// A PEM/OpenSSH/PGP/SSH2 `BEGIN … PRIVATE KEY` header: only a key body after it
    /// counts, and the match grows to the `END` line.
    KeyBlock,
    /// A PuTTY key file header: the match grows over its private lines and MAC.
    PuttyBlock,
}

/// One detector rule.
pub(super) struct Rule {
    /// The detector's name, reported as the kind; several rules may share one.
    pub(super) name: &'static str,
    /// Literals (case-sensitive) of which one must occur for the rule to be tried.
    pub(super) keywords: &'static [&'static str],
    /// Whether the match starts at the keyword (`true`: tried there only, cheap), or
    /// may start up to `before` bytes earlier and is searched for around it.
    pub(super) anchored: bool,
    pub(super) before: usize,
    /// The regex; a group named `s`, when present, is the secret's range.
    pub(super) pattern: &'static str,
    pub(super) check: Check,
    /// A cheap test at a keyword before any pattern runs there.
    pub(super) before_search: Precheck,
}

/// A cheap test of the text at a keyword that rules out most places where a rule's
/// pattern cannot match, so that common words (`key`, `token`, `://`) cost little.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Precheck {
    /// None: the pattern runs at every keyword.
    None,
    /// The keyword starts a word (the pattern starts with a word boundary).
    WordStart,
    /// An assignment operator (`=`, `:`) follows the keyword within the key's end, a
    /// quote and a few spaces (`password=`, `"apiKey": `, `secret_access_key = `).
    OperatorAfter,
    /// The word around the keyword is a key that names a credential (see
    /// `checks::credential_key_kind`) and an assignment operator follows it; the
    /// pattern is then tried once, anchored at the key's start.
    CredentialKey,
    /// An `@` follows the keyword before a space, quote, `/`, `?` or `#` (the
    /// credentials part of `scheme://user:password@host`).
    AtSignAfter,
}

const fn at(
    name: &'static str,
    keywords: &'static [&'static str],
    pattern: &'static str,
    check: Check,
) -> Rule {
    Rule {
        name,
        keywords,
        anchored: true,
        before: 0,
        pattern,
        check,
        before_search: if starts_with_word_boundary(pattern) {
            Precheck::WordStart
        } else {
            Precheck::None
        },
    }
}

const fn near(
    name: &'static str,
    keywords: &'static [&'static str],
    before: usize,
    pattern: &'static str,
    check: Check,
) -> Rule {
    Rule {
        name,
        keywords,
        anchored: false,
        before,
        pattern,
        check,
        before_search: Precheck::None,
    }
}

/// Whether `pattern` starts with an ASCII word boundary, `(?-u:\b)`.
const fn starts_with_word_boundary(pattern: &str) -> bool {
    let (bytes, prefix) = (pattern.as_bytes(), b"(?-u:\\b)");
    if bytes.len() < prefix.len() {
        return false;
    }
    let mut i = 0;
    while i < prefix.len() {
        if bytes[i] != prefix[i] {
            return false;
        }
        i += 1;
    }
    true
}

impl Rule {
    /// This rule with `precheck` at its keywords.
    const fn checked_first(self, precheck: Precheck) -> Rule {
        Rule {
            before_search: precheck,
            ..self
        }
    }
}

use Check::{Assignment, Delimited, Generated, KeyBlock, Mixed, Password, PuttyBlock, Token};

/// Keywords of the generic assignment rules, each also tried as `UPPER` and `Capitalized`.
pub(super) const CREDENTIAL_WORDS: &[&str] =
    &["pass", "pwd", "secret", "token", "key", "credential"];

/// Every rule, in reporting order. `(?-u:\b)` is an ASCII word boundary (a Unicode one
/// would make the regex engine give up its fast paths on non-ASCII text).
pub(super) const RULES: &[Rule] = &[
    near(
        "private_key",
        &["PRIVATE KEY"],
        48,
        r"-{4,5} ?BEGIN [A-Z0-9 ]{0,30}PRIVATE KEY(?: BLOCK)? ?-{4,5}",
        KeyBlock,
    ),
    at(
        "private_key",
        &["PuTTY-User-Key-File-"],
        r"PuTTY-User-Key-File-\d: [^\r\n]{1,64}",
        PuttyBlock,
    ),
    at(
        "aws_access_key_id",
        &[
            "AKIA", "ASIA", "AGPA", "AIDA", "AROA", "AIPA", "ANPA", "ANVA", "ABIA", "ACCA", "A3T",
        ],
        r"(?-u:\b)(?:AKIA|ASIA|AGPA|AIDA|AROA|AIPA|ANPA|ANVA|ABIA|ACCA|A3T[A-Z0-9])[A-Z0-9]{16}(?-u:\b)",
        Token,
    ),
    near(
        "aws_secret_access_key",
        &["secret", "Secret", "SECRET"],
        32,
        r#"(?i:aws[_.-]?secret(?:[_.-]?access)?(?:[_.-]?key)?|secret[_.-]?access[_.-]?key)["']?\s*(?:=>|:=|[:=])\s*["']?(?P<s>[A-Za-z0-9/+]{40})(?:[^A-Za-z0-9/+=]|$)"#,
        Token,
    )
    .checked_first(Precheck::OperatorAfter),
    at(
        "aws_secret_access_key",
        &["AKIA", "ASIA"],
        r#"(?-u:\b)(?:AKIA|ASIA)[A-Z0-9]{16}["']?[ \t]*[,;|\t:][ \t]*["']?(?P<s>[A-Za-z0-9/+]{40})(?:[^A-Za-z0-9/+=]|$)"#,
        Token,
    ),
    at(
        "aws_session_token",
        &["IQoJb3JpZ2luX2Vj", "FwoGZXIvYXdzE"],
        r"(?:IQoJb3JpZ2luX2Vj|FwoGZXIvYXdzE)[A-Za-z0-9/+=]{100,}",
        Token,
    ),
    at(
        "github_token",
        &["ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"],
        r"(?-u:\b)(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,})",
        Token,
    ),
    at(
        "gitlab_token",
        &[
            "glpat-",
            "gldt-",
            "glrt-",
            "glptt-",
            "glcbt-",
            "glft-",
            "gloas-",
            "glimt-",
            "glagent-",
            "glsoat-",
            "glffct-",
            "GR1348941",
        ],
        r"(?-u:\b)(?:(?:glpat|gldt|glrt|glptt|glcbt|glft|gloas|glimt|glagent|glsoat|glffct)-[A-Za-z0-9_.-]{20,}|GR1348941[A-Za-z0-9_-]{20,})",
        Token,
    ),
    at(
        "slack_token",
        &["xox", "xapp-"],
        r"(?-u:\b)(?:xox[abposr]-[A-Za-z0-9-]{10,}|xoxe\.xox[bp]-\d-[A-Za-z0-9_-]{20,}|xoxe-\d-[A-Za-z0-9_-]{20,}|xapp-\d-[A-Za-z0-9-]{20,})",
        Token,
    ),
    near(
        "slack_webhook",
        &["hooks.slack.com"],
        8,
        r"(?:https?://)?hooks\.slack\.com/(?:services|workflows|triggers)/T[A-Za-z0-9_]+/[A-Za-z0-9_]+/[A-Za-z0-9_]+",
        Token,
    ),
    at(
        "stripe_key",
        &["sk_live_", "rk_live_", "sk_test_", "rk_test_"],
        r"(?-u:\b)[sr]k_(?:live|test)_[0-9A-Za-z]{16,}",
        Token,
    ),
    at(
        "stripe_webhook_secret",
        &["whsec_"],
        r"(?-u:\b)whsec_[A-Za-z0-9+/]{32,}",
        Token,
    ),
    at(
        "google_api_key",
        &["AIza"],
        r"(?-u:\b)AIza[0-9A-Za-z_-]{35}",
        Token,
    ),
    at(
        "gcp_oauth_client_secret",
        &["GOCSPX-"],
        r"(?-u:\b)GOCSPX-[A-Za-z0-9_-]{28}",
        Token,
    ),
    at(
        "google_oauth_access_token",
        &["ya29."],
        r"(?-u:\b)ya29\.[A-Za-z0-9_-]{30,}",
        Token,
    ),
    at(
        "anthropic_key",
        &["sk-ant-"],
        r"(?-u:\b)sk-ant-[A-Za-z0-9_-]{20,}",
        Token,
    ),
    at(
        "openrouter_api_key",
        &["sk-or-"],
        r"(?-u:\b)sk-or-v\d-[a-f0-9]{64}",
        Token,
    ),
    at(
        "openai_key",
        &["sk-proj-", "sk-svcacct-", "sk-admin-"],
        r"(?-u:\b)sk-(?:proj|svcacct|admin)-[A-Za-z0-9_-]{20,}",
        Token,
    ),
    at(
        "openai_key",
        &["sk-"],
        r"(?-u:\b)sk-[A-Za-z0-9]{20,}(?-u:\b)",
        Mixed,
    ),
    at(
        "npm_token",
        &["npm_"],
        r"(?-u:\b)npm_[A-Za-z0-9]{36}(?-u:\b)",
        Token,
    ),
    at(
        "npm_token",
        &["_authToken", "_auth", "_password"],
        r#"_auth(?:Token)?\s*=\s*["']?(?P<s>[A-Za-z0-9+/=_.-]{16,})|_password\s*=\s*["']?(?P<j>[A-Za-z0-9+/=]{8,})"#,
        Token,
    ),
    at(
        "jwt",
        &["eyJ"],
        r"(?-u:\b)eyJ[A-Za-z0-9_-]{7,}\.eyJ[A-Za-z0-9_-]{7,}\.[A-Za-z0-9_-]{10,}",
        Token,
    ),
    near(
        "azure_storage_key",
        &["AccountKey", "SharedAccessKey"],
        0,
        r"(?:AccountKey|SharedAccessKey)\s*=\s*(?P<s>[A-Za-z0-9+/]{40,}={0,2})",
        Token,
    ),
    near(
        "azure_sas_token",
        &["sig="],
        1,
        r"[?&]sig=(?P<s>[A-Za-z0-9%+/]{40,}=*)",
        Token,
    ),
    near(
        "azure_client_secret",
        &["Q~"],
        4,
        r"[A-Za-z0-9_~.]{3}\dQ~[A-Za-z0-9_~.-]{31,34}",
        Delimited,
    ),
    near(
        "azure_devops_pat",
        &["AZDO"],
        76,
        r"(?-u:\b)[A-Za-z0-9]{76}AZDO[A-Za-z0-9]{4}(?-u:\b)",
        Token,
    ),
    at(
        "alibaba_access_key_id",
        &["LTAI"],
        r"(?-u:\b)LTAI[A-Za-z0-9]{12,20}(?-u:\b)",
        Token,
    ),
    at(
        "tencent_secret_id",
        &["AKID"],
        r"(?-u:\b)AKID[A-Za-z0-9]{32}(?-u:\b)",
        Token,
    ),
    at(
        "digitalocean_token",
        &["dop_v1_", "doo_v1_", "dor_v1_"],
        r"(?-u:\b)do[opr]_v1_[a-f0-9]{64}(?-u:\b)",
        Token,
    ),
    at(
        "heroku_api_key",
        &["HRKU-"],
        r"(?-u:\b)HRKU-AA[A-Za-z0-9_-]{58}",
        Token,
    ),
    at(
        "okta_api_token",
        &["SSWS"],
        r"SSWS\s+(?P<s>00[A-Za-z0-9_-]{40})",
        Token,
    ),
    at(
        "databricks_token",
        &["dapi"],
        r"(?-u:\b)dapi[a-f0-9]{32}(?:-\d)?(?-u:\b)",
        Token,
    ),
    near(
        "terraform_cloud_token",
        &[".atlasv1."],
        14,
        r"(?-u:\b)[A-Za-z0-9]{14}\.atlasv1\.[A-Za-z0-9_=-]{60,}",
        Token,
    ),
    at(
        "pulumi_access_token",
        &["pul-"],
        r"(?-u:\b)pul-[a-f0-9]{40}(?-u:\b)",
        Token,
    ),
    at(
        "planetscale_token",
        &["pscale_"],
        r"(?-u:\b)pscale_(?:tkn|pw|oauth)_[A-Za-z0-9_=.-]{32,}",
        Token,
    ),
    at(
        "supabase_token",
        &["sbp_", "sb_secret_"],
        r"(?-u:\b)(?:sbp_[a-f0-9]{40}(?-u:\b)|sb_secret_[A-Za-z0-9_-]{31,})",
        Token,
    ),
    at(
        "mapbox_secret_token",
        &["sk.eyJ"],
        r"(?-u:\b)sk\.eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{20,}",
        Token,
    ),
    at(
        "netlify_token",
        &["nfp_"],
        r"(?-u:\b)nfp_[A-Za-z0-9]{36}(?-u:\b)",
        Token,
    ),
    at(
        "fastly_api_token",
        &["Fastly-Key", "fastly-key", "FASTLY-KEY"],
        r#"(?i:fastly-key)["']?\s*:\s*["']?(?P<s>[A-Za-z0-9_-]{32})"#,
        Token,
    ),
    at(
        "bitbucket_token",
        &["ATBB", "ATCTT3"],
        r"(?-u:\b)(?:ATBB[A-Za-z0-9_=.-]{32}|ATCTT3[A-Za-z0-9_=-]{100,})",
        Token,
    ),
    at(
        "atlassian_api_token",
        &["ATATT3"],
        r"(?-u:\b)ATATT3[A-Za-z0-9_=-]{150,}",
        Token,
    ),
    at(
        "huggingface_token",
        &["hf_", "api_org_"],
        r"(?-u:\b)(?:hf|api_org)_[A-Za-z]{34}(?-u:\b)",
        Token,
    ),
    at(
        "linear_api_key",
        &["lin_api_"],
        r"(?-u:\b)lin_api_[A-Za-z0-9]{40}(?-u:\b)",
        Token,
    ),
    at(
        "notion_token",
        &["secret_", "ntn_"],
        r"(?-u:\b)(?:secret_[A-Za-z0-9]{43}|ntn_\d{11}[A-Za-z0-9]{35})(?-u:\b)",
        Token,
    ),
    at(
        "figma_token",
        &["figd_"],
        r"(?-u:\b)figd_[A-Za-z0-9_-]{40,}",
        Token,
    ),
    at(
        "airtable_token",
        &["pat"],
        r"(?-u:\b)pat[A-Za-z0-9]{14}\.[a-f0-9]{64}(?-u:\b)",
        Token,
    ),
    at(
        "postman_api_key",
        &["PMAK-"],
        r"(?-u:\b)PMAK-[a-f0-9]{24}-[a-f0-9]{34}(?-u:\b)",
        Token,
    ),
    at(
        "contentful_token",
        &["CFPAT-"],
        r"(?-u:\b)CFPAT-[A-Za-z0-9_-]{43}",
        Token,
    ),
    at(
        "sonarqube_token",
        &["squ_", "sqp_", "sqa_"],
        r"(?-u:\b)sq[upa]_[a-f0-9]{40}(?-u:\b)",
        Token,
    ),
    at(
        "typeform_token",
        &["tfp_"],
        r"(?-u:\b)tfp_[A-Za-z0-9_-]{40,}",
        Token,
    ),
    at(
        "dropbox_token",
        &["sl."],
        r"(?-u:\b)sl\.(?:[A-Za-z]\.)?[A-Za-z0-9_-]{130,}",
        Token,
    ),
    at(
        "readme_api_key",
        &["rdme_"],
        r"(?-u:\b)rdme_[a-z0-9]{70}(?-u:\b)",
        Token,
    ),
    at(
        "adafruit_io_key",
        &["aio_"],
        r"(?-u:\b)aio_[A-Za-z0-9]{28}(?-u:\b)",
        Token,
    ),
    at(
        "circleci_token",
        &["CCIPAT_", "CCIPRJ_"],
        r"(?-u:\b)CCIP(?:AT|RJ)_[A-Za-z0-9]{22}_[a-f0-9]{40}(?-u:\b)",
        Token,
    ),
    at(
        "buildkite_token",
        &["bkua_"],
        r"(?-u:\b)bkua_[a-f0-9]{40}(?-u:\b)",
        Token,
    ),
    at(
        "harness_token",
        &["pat.", "sat."],
        r"(?-u:\b)[ps]at\.[A-Za-z0-9_-]{22}\.[a-f0-9]{24}\.[A-Za-z0-9]{20}(?-u:\b)",
        Token,
    ),
    at(
        "octopus_deploy_api_key",
        &["API-"],
        r"(?-u:\b)API-[A-Z0-9]{26,27}(?-u:\b)",
        Mixed,
    ),
    at(
        "prefect_api_key",
        &["pnu_"],
        r"(?-u:\b)pnu_[A-Za-z0-9]{36}(?-u:\b)",
        Token,
    ),
    at(
        "scalingo_token",
        &["tk-us-"],
        r"(?-u:\b)tk-us-[A-Za-z0-9_-]{48}",
        Token,
    ),
    at(
        "frameio_token",
        &["fio-u-"],
        r"(?-u:\b)fio-u-[A-Za-z0-9_=-]{64}",
        Token,
    ),
    at(
        "pypi_token",
        &["pypi-AgE"],
        r"(?-u:\b)pypi-AgE[A-Za-z0-9_-]{50,}",
        Token,
    ),
    at(
        "rubygems_api_key",
        &["rubygems_"],
        r"(?-u:\b)rubygems_[a-f0-9]{48}(?-u:\b)",
        Token,
    ),
    at(
        "nuget_api_key",
        &["oy2"],
        r"(?-u:\b)oy2[a-z0-9]{43}(?-u:\b)",
        Token,
    ),
    at(
        "crates_io_token",
        &["cio"],
        r"(?-u:\b)cio[A-Za-z0-9]{32}(?-u:\b)",
        Mixed,
    ),
    at(
        "docker_hub_token",
        &["dckr_"],
        r"(?-u:\b)dckr_(?:pat|oat)_[A-Za-z0-9_-]{27,}",
        Token,
    ),
    at(
        "artifactory_token",
        &["AKCp", "cmVmdGtu"],
        r"(?-u:\b)(?:AKCp[A-Za-z0-9]{69}|cmVmdGtuOjAxOj[A-Za-z0-9]{40,})(?-u:\b)",
        Token,
    ),
    at(
        "clojars_token",
        &["CLOJARS_"],
        r"(?-u:\b)CLOJARS_[a-z0-9]{60}(?-u:\b)",
        Token,
    ),
    near(
        "discord_webhook",
        &["discord.com/api/webhooks/", "discordapp.com/api/webhooks/"],
        16,
        r"https?://(?:canary\.|ptb\.)?discord(?:app)?\.com/api/webhooks/\d+/[A-Za-z0-9_-]{60,}",
        Token,
    ),
    at(
        "discord_bot_token",
        &["MT", "Mj", "Mz", "ND", "NT", "Nj", "Nz", "OD", "OT"],
        r"(?-u:\b)[MNO][A-Za-z0-9_-]{23,27}\.[A-Za-z0-9_-]{6}\.[A-Za-z0-9_-]{27,40}",
        Mixed,
    ),
    near(
        "teams_webhook",
        &[".webhook.office.com/", "outlook.office.com/webhook"],
        64,
        r"https://[A-Za-z0-9.-]*(?:webhook\.office\.com/webhookb2|outlook\.office\.com/webhook)/[a-f0-9-]{36}@[a-f0-9-]{36}/IncomingWebhook/[a-f0-9]{32}/[a-f0-9-]{36}",
        Token,
    ),
    near(
        "telegram_bot_token",
        &[":AA"],
        10,
        r"(?-u:\b)\d{8,10}:AA[A-Za-z0-9_-]{33}",
        Token,
    ),
    near(
        "google_chat_webhook",
        &["chat.googleapis.com"],
        8,
        r"https://chat\.googleapis\.com/v1/spaces/[A-Za-z0-9_-]+/messages\?key=[A-Za-z0-9_-]+&token=[A-Za-z0-9_%=-]+",
        Token,
    ),
    near(
        "zapier_webhook",
        &["hooks.zapier.com"],
        8,
        r"https://hooks\.zapier\.com/hooks/catch/\d+/[a-z0-9]+/?",
        Token,
    ),
    near(
        "ifttt_webhook",
        &["maker.ifttt.com"],
        8,
        r"https://maker\.ifttt\.com/trigger/[A-Za-z0-9_-]+/with/key/[A-Za-z0-9_-]{20,}",
        Token,
    ),
    at(
        "square_token",
        &["EAAA", "sq0atp-", "sq0csp-"],
        r"(?-u:\b)(?:EAAA[A-Za-z0-9_-]{60}|sq0(?:atp|csp)-[A-Za-z0-9_-]{22,43})",
        Token,
    ),
    at(
        "braintree_access_token",
        &["access_token$production$"],
        r"access_token\$production\$[a-z0-9]{16}\$[a-f0-9]{32}",
        Token,
    ),
    at(
        "shopify_token",
        &["shpat_", "shpss_", "shpca_", "shppa_"],
        r"(?-u:\b)shp(?:at|ss|ca|pa)_[a-fA-F0-9]{32}(?-u:\b)",
        Token,
    ),
    at(
        "flutterwave_secret_key",
        &["FLWSECK"],
        r"(?-u:\b)FLWSECK(?:_TEST)?-[a-f0-9]{32}-X(?-u:\b)",
        Token,
    ),
    at(
        "shippo_token",
        &["shippo_"],
        r"(?-u:\b)shippo_(?:live|test)_[a-f0-9]{40}(?-u:\b)",
        Token,
    ),
    at(
        "easypost_api_key",
        &["EZAK", "EZTK"],
        r"(?-u:\b)EZ[AT]K[a-z0-9]{54}(?-u:\b)",
        Token,
    ),
    at(
        "duffel_token",
        &["duffel_"],
        r"(?-u:\b)duffel_(?:live|test)_[A-Za-z0-9_-]{43}",
        Token,
    ),
    at(
        "sendgrid_api_key",
        &["SG."],
        r"(?-u:\b)SG\.[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{43}",
        Token,
    ),
    at(
        "mailgun_api_key",
        &["key-"],
        r"(?-u:\b)key-[a-f0-9]{32}(?-u:\b)",
        Token,
    ),
    near(
        "mailchimp_api_key",
        &["-us"],
        32,
        r"(?-u:\b)[a-f0-9]{32}-us\d{1,2}(?-u:\b)",
        Token,
    ),
    at(
        "resend_api_key",
        &["re_"],
        r"(?-u:\b)re_[A-Za-z0-9]{8}_[A-Za-z0-9]{24}(?-u:\b)",
        Token,
    ),
    at(
        "mailersend_token",
        &["mlsn."],
        r"(?-u:\b)mlsn\.[a-f0-9]{64}(?-u:\b)",
        Token,
    ),
    at(
        "brevo_api_key",
        &["xkeysib-", "xsmtpsib-"],
        r"(?-u:\b)x(?:key|smtp)sib-[a-f0-9]{64}-[A-Za-z0-9]{16}(?-u:\b)",
        Token,
    ),
    at(
        "new_relic_key",
        &["NRAK-", "NRII-", "NRJS-"],
        r"(?-u:\b)(?:NRAK-[A-Z0-9]{27}(?-u:\b)|NRII-[A-Za-z0-9_-]{32}|NRJS-[a-f0-9]{19}(?-u:\b))",
        Token,
    ),
    near(
        "new_relic_key",
        &["NRAL"],
        36,
        r"(?-u:\b)[a-f0-9]{36}NRAL(?-u:\b)",
        Token,
    ),
    at(
        "sentry_token",
        &["sntryu_", "sntrys_"],
        r"(?-u:\b)(?:sntryu_[a-f0-9]{64}(?-u:\b)|sntrys_[A-Za-z0-9_=+/-]{40,})",
        Token,
    ),
    near(
        "sentry_dsn",
        &["sentry.io/"],
        80,
        r"https?://[a-f0-9]{32}(?::[a-f0-9]{32})?@[A-Za-z0-9.-]*sentry\.io/\d+",
        Token,
    ),
    at(
        "grafana_token",
        &["glc_", "glsa_"],
        r"(?-u:\b)(?:glc_[A-Za-z0-9+/_=-]{32,}|glsa_[A-Za-z0-9]{32}_[a-f0-9]{8}(?-u:\b))",
        Token,
    ),
    at(
        "honeycomb_key",
        &["hcaik_", "hcxik_", "hcaic_", "hcxic_"],
        r"(?-u:\b)hc[a-z]i[kc]_[a-z0-9]{58,}",
        Token,
    ),
    at(
        "honeycomb_key",
        &["X-Honeycomb-Team", "x-honeycomb-team"],
        r#"(?i:x-honeycomb-team)["']?\s*[:=]\s*["']?(?P<s>[A-Za-z0-9]{20,64})"#,
        Token,
    ),
    at(
        "dynatrace_token",
        &["dt0c01."],
        r"(?-u:\b)dt0c01\.[A-Z0-9]{24}\.[A-Z0-9]{64}(?-u:\b)",
        Token,
    ),
    at(
        "splunk_hec_token",
        &["Splunk "],
        r"Splunk\s+(?P<s>[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12})",
        Token,
    ),
    at(
        "launchdarkly_key",
        &["api-", "sdk-", "mob-"],
        r"(?-u:\b)(?:api|sdk|mob)-[a-f0-9]{8}-[a-f0-9]{4}-[a-f0-9]{4}-[a-f0-9]{4}-[a-f0-9]{12}(?-u:\b)",
        Token,
    ),
    at(
        "statsig_secret_key",
        &["secret-"],
        r"(?-u:\b)secret-[A-Za-z0-9]{43}(?-u:\b)",
        Token,
    ),
    at(
        "vault_token",
        &["hvs.", "hvb."],
        r"(?-u:\b)hv[sb]\.[A-Za-z0-9_-]{20,}",
        Token,
    ),
    at(
        "doppler_token",
        &["dp."],
        r"(?-u:\b)dp\.(?:pt|st|sa|ct|scim|audit)\.[A-Za-z0-9._-]{40,}",
        Token,
    ),
    at(
        "onepassword_token",
        &["ops_eyJ"],
        r"(?-u:\b)ops_eyJ[A-Za-z0-9_=+/-]{50,}",
        Token,
    ),
    at(
        "onepassword_secret_key",
        &["A3-"],
        r"(?-u:\b)A3-[A-Z0-9]{6}-(?:[A-Z0-9]{6}-)?[A-Z0-9]{5}(?:-[A-Z0-9]{5}){3}(?-u:\b)",
        Token,
    ),
    at(
        "infisical_token",
        &["st."],
        r"(?-u:\b)st\.[a-f0-9-]{36}\.[a-f0-9]{32}\.[a-f0-9]{32}(?-u:\b)",
        Token,
    ),
    at(
        "age_secret_key",
        &["AGE-SECRET-KEY-1"],
        r"AGE-SECRET-KEY-1[QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L]{58}",
        Token,
    ),
    at(
        "groq_api_key",
        &["gsk_"],
        r"(?-u:\b)gsk_[A-Za-z0-9]{52}(?-u:\b)",
        Token,
    ),
    at(
        "replicate_token",
        &["r8_"],
        r"(?-u:\b)r8_[A-Za-z0-9]{37}(?-u:\b)",
        Token,
    ),
    at(
        "perplexity_api_key",
        &["pplx-"],
        r"(?-u:\b)pplx-[A-Za-z0-9]{48}(?-u:\b)",
        Token,
    ),
    at(
        "xai_api_key",
        &["xai-"],
        r"(?-u:\b)xai-[A-Za-z0-9]{80}(?-u:\b)",
        Token,
    ),
    at(
        "langsmith_api_key",
        &["lsv2_"],
        r"(?-u:\b)lsv2_(?:pt|sk)_[a-f0-9]{32}_[a-f0-9]{10}(?-u:\b)",
        Token,
    ),
    at(
        "pinecone_api_key",
        &["pcsk_"],
        r"(?-u:\b)pcsk_[A-Za-z0-9]{4,8}_[A-Za-z0-9]{50,}(?-u:\b)",
        Token,
    ),
    at(
        "twilio_api_key",
        &["SK"],
        r"(?-u:\b)SK[0-9a-f]{32}(?-u:\b)",
        Mixed,
    ),
    near(
        "connection_string_password",
        &["://"],
        32,
        r#"(?-u:\b)[A-Za-z][A-Za-z0-9+.-]{0,31}://[^\s:/?#@"'<>]{0,128}:(?P<s>[^\s/?#@"'<>]{1,256})@[A-Za-z0-9\[._-]"#,
        Password,
    )
    .checked_first(Precheck::AtSignAfter),
    near(
        "connection_string_password",
        &[
            "password=",
            "Password=",
            "PASSWORD=",
            "pwd=",
            "Pwd=",
            "PWD=",
        ],
        1,
        r#"[?&;](?i:password|pwd)\s*=\s*(?P<s>[^&;\s"'<>]+)"#,
        Password,
    ),
    at(
        "netrc_password",
        &["machine"],
        r"(?-u:\b)machine[ \t]+\S+\s+login[ \t]+\S+\s+password[ \t]+(?P<s>\S+)",
        Password,
    ),
    at(
        "docker_config_auth",
        &["\"auth\""],
        r#""auth"\s*:\s*"(?P<s>[A-Za-z0-9+/]{8,}={0,2})""#,
        Generated,
    ),
    near(
        "bearer_token",
        &["bearer", "Bearer", "BEARER"],
        24,
        r#"(?i:(?-u:\b)authorization)["']?\s*[:=]\s*["']?(?i:bearer)\s+(?P<s>[A-Za-z0-9._~+/-]{20,}=*)|(?i:(?-u:\b)bearer)\s+(?P<j>eyJ[A-Za-z0-9_-]{7,}[A-Za-z0-9._-]*)"#,
        Generated,
    ),
    near(
        "basic_auth_header",
        &["basic", "Basic", "BASIC"],
        24,
        r#"(?i:(?-u:\b)authorization)["']?\s*[:=]\s*["']?(?i:basic)\s+(?P<s>[A-Za-z0-9+/]{8,}={0,2})"#,
        Generated,
    ),
    at(
        "generic_api_key_assignment",
        &[],
        r#"(?P<k>[A-Za-z0-9_.-]{1,64})["']?[ \t]*(?:=>|:=|[:=])[ \t]*["']?(?P<s>[^\s"'`,;<>{}()\[\]]{8,256})"#,
        Assignment,
    )
    .checked_first(Precheck::CredentialKey),
];
