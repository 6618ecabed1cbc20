//! The detector table: for every credential format, the literal keywords that must
//! appear for it to be looked for, the pattern that finds it, and the check a match
//! must pass. Patterns are checked against public format descriptions and, rule by
//! rule, against gitleaks' default rule set and its test cases; the order is the
//! reporting order of [`super::scan`].

/// What a match must pass besides its pattern (see `checks.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Check {
    /// A token with a distinctive prefix: only placeholders and documented examples
    /// are dropped (and, for rules with a minimum entropy, values below it).
    Token,
    /// As `Token`, and the token (or its body, group `b`) holds a letter and a digit.
    Mixed,
    /// As `Token`, and the body (group `b`, else the token) mixes three of lower case,
    /// upper case, digits and other characters: a format whose shape alone also fits
    /// identifiers (`12345:AgencyIdentificationCodeContentType`).
    Varied,
    /// As `Token`, and the character before the match is not a token character
    /// (for formats a word boundary cannot delimit).
    Delimited,
    /// A password in a connection string or a config file: placeholders and the
    /// placeholder words (`password`, `changeme`, …) are dropped; anything else counts.
    Password,
    /// A password in a URL's userinfo (`scheme://user:password@host`): the password is
    /// split from the host at the right `@`, and a host and port (`localhost:8080@`), a
    /// port and path (`:5000/app@sha256:…`), a password equal to the user name and a
    /// placeholder are no password. A userinfo without a password counts when it is a
    /// token (`https://<40 hex>@github.com/…`): 20 or more characters, looking generated.
    UrlPassword,
    /// A value assigned to a credential-named key: the key's last word names a
    /// credential and the value looks generated (entropy, character classes, not a
    /// word, path, reference or identifier).
    Assignment,
    /// A value of a service's documented shape under a key naming the service: not a
    /// placeholder, 2.5 bits of entropy per character.
    Keyed,
    /// A value after a scheme (`Basic`, `Bearer`): looks generated, as for `Assignment`.
    Generated,
    /// A 40-character AWS secret access key found by its surroundings (an AWS secret
    /// label, an access key id before it): mixes three character classes, 4 bits of
    /// entropy per character.
    AwsSecret,
    /// An 88-character Azure storage account key found by its surroundings: as
    /// `AwsSecret`, and not a digest (`sha512-…`).
    AzureKey,
    /// The credential of a curl `-u`/`--user` option: the password of `user:password`
    /// (the user when the password is empty), unless a placeholder or a variable.
    CurlUser,
    /// A JWT encoded once more in base64: it decodes to `eyJ….ey….…`.
    Base64Jwt,
    /// A Kubernetes `kind: Secret` manifest: every value under its `data:` (base64 of
    /// 10 or more characters) and `stringData:` (looking generated) is a secret.
    KubernetesSecret,
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
    /// Literals (case-sensitive) of which one must occur for the rule to be tried. A
    /// keyed rule's keywords are also tried in upper case and capitalized.
    pub(super) keywords: &'static [&'static str],
    /// Whether the match starts at the keyword (`true`: tried there only, cheap), or
    /// may start up to `before` bytes earlier and is searched for around it.
    pub(super) anchored: bool,
    pub(super) before: usize,
    /// The regex; a group named `s`, when present, is the secret's range, a group `b`
    /// the part of it that the check looks at. A keyed rule's pattern is the value's
    /// shape only: the key and operator before it are added when the rule is compiled.
    pub(super) pattern: &'static str,
    pub(super) check: Check,
    /// A cheap test at a keyword before any pattern runs there.
    pub(super) before_search: Precheck,
    /// Bits of entropy per character the secret (or its body) must reach.
    pub(super) min_entropy: f64,
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
    /// `checks::credential_key_kind`) followed by an assignment (an operator, `<key>`,
    /// `"KEY", "value"`, a typed declaration, a command-line option); the pattern is
    /// then tried once, anchored at the key's start.
    CredentialKey,
    /// The keyword names a service inside a key (`CLOUDFLARE_API_KEY`, `twitter:`)
    /// that an operator follows within a few characters: the rule is keyed, its pattern
    /// is `key operator value`, anchored at the keyword.
    ServiceKey,
    /// An `@` follows the keyword before a space or a quote (the credentials part of
    /// `scheme://user:password@host`).
    AtSignAfter,
    /// `min` to `max` digits end at the keyword, after a non-word character or `bot`
    /// (`123456789:AA…`, `https://api.telegram.org/bot123…`); the pattern is tried
    /// anchored at the digits.
    DigitsBefore { min: usize, max: usize },
    /// `secret` (in any case) follows the keyword within 96 bytes.
    SecretAfter,
    /// The keyword is a curl option (`-u`, `--user`) after a space, and `curl` occurs
    /// in the 1 KiB before it.
    CurlBefore,
    /// `kind:` is followed by `Secret` (a Kubernetes Secret manifest).
    KindSecret,
    /// `name` or `key` occurs in the 160 bytes before the keyword (a `value` whose key
    /// is given as a `name`).
    NameBefore,
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
        min_entropy: 0.0,
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
        min_entropy: 0.0,
    }
}

/// A keyed rule: a key naming the service (one of `words`, in any case) assigned a
/// value of the shape `value` (a regex for the value alone).
const fn keyed(name: &'static str, words: &'static [&'static str], value: &'static str) -> Rule {
    Rule {
        name,
        keywords: words,
        anchored: true,
        before: 0,
        pattern: value,
        check: Check::Keyed,
        before_search: Precheck::ServiceKey,
        min_entropy: 2.5,
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

    /// This rule, dropping matches below `bits` of entropy per character.
    const fn entropy(self, bits: f64) -> Rule {
        Rule {
            min_entropy: bits,
            ..self
        }
    }

    /// This rule with another check.
    const fn checked(self, check: Check) -> Rule {
        Rule { check, ..self }
    }
}

/// The regex a keyed rule's value follows: the key's remaining characters (a service
/// word is often inside a longer key: `CLOUDFLARE_API_KEY`, `telegram bot`), an
/// optional closing quote, an operator (`=`, `:`, `=>`, `:=`, `::=`, `?=`, `.=`, `>`
/// of `<key>value`, `,` of `"KEY", "value"`) and any quotes or spaces before the value.
pub(super) const KEYED_PREFIX: &str =
    r#"[A-Za-z0-9_. \t-]{0,20}?["'`]{0,2}[ \t]{0,4}(?:=>|:{1,3}=|[?.]=|\|\||[=:>,])[\s"'`=]{0,8}"#;

/// What may follow a keyed rule's value: a quote, a space, a separator, an escaped line
/// break or the end.
pub(super) const KEYED_END: &str = r#"(?:["'`\s;,)}\]<&|]|\\[nrt]|$)"#;

use Check::{
    Assignment, AwsSecret, AzureKey, Base64Jwt, CurlUser, Delimited, Generated, KeyBlock,
    KubernetesSecret, Mixed, Password, PuttyBlock, Token, UrlPassword, Varied,
};

/// Keywords of the generic assignment rules, each also tried as `UPPER` and `Capitalized`.
pub(super) const CREDENTIAL_WORDS: &[&str] = &[
    "pass",
    "pwd",
    "secret",
    "token",
    "key",
    "credential",
    "creds",
    "auth",
];

/// Every rule, in reporting order. `(?-u:\b)` is an ASCII word boundary (a Unicode one
/// would make the regex engine give up its fast paths on non-ASCII text). A group after
/// the secret (`(?:[^…]|$)`) ends it where a word boundary cannot.
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
    // An access key id and, within a few lines after it, 40 base64 characters
    // (`AKIA…,<secret>` in a credentials CSV, `--access-key AKIA… --secret-key …`).
    at(
        "aws_secret_access_key",
        &["AKIA", "ASIA"],
        r#"(?-u:\b)(?:AKIA|ASIA)[A-Z0-9]{16}(?s:.){0,160}?[^A-Za-z0-9/+=](?P<s>[A-Za-z0-9/+]{40})(?:[^A-Za-z0-9/+=]|$)"#,
        AwsSecret,
    ),
    // An AWS label and a secret label before 40 base64 characters (`AWS Secret Access
    // Key [None]: …`, `aws secret: …`, `the AWS secret key is …`).
    near(
        "aws_secret_access_key",
        &["aws", "AWS", "Aws"],
        0,
        r#"(?i:aws)(?s:.){0,96}?(?i:secret)(?s:.){0,80}?[^A-Za-z0-9/+=](?P<s>[A-Za-z0-9/+]{40})(?:[^A-Za-z0-9/+=]|$)"#,
        AwsSecret,
    )
    .checked_first(Precheck::SecretAfter),
    // A secret access key label, in any spelling, before 40 base64 characters (`Your
    // secret access key is …`, `Secret access key: …`).
    near(
        "aws_secret_access_key",
        &[
            "ecret access key",
            "ecret Access Key",
            "ECRET ACCESS KEY",
            "ecret_access_key",
            "ECRET_ACCESS_KEY",
            "ecretAccessKey",
        ],
        1,
        r#"(?i:secret[ _.-]?access[ _.-]?key)(?s:.){0,80}?[^A-Za-z0-9/+=](?P<s>[A-Za-z0-9/+]{40})(?:[^A-Za-z0-9/+=]|$)"#,
        AwsSecret,
    ),
    at(
        "aws_session_token",
        &["IQoJb3JpZ2luX2Vj", "FwoGZXIvYXdzE"],
        r"(?:IQoJb3JpZ2luX2Vj|FwoGZXIvYXdzE)[A-Za-z0-9/+=]{100,}",
        Token,
    ),
    at(
        "aws_bedrock_api_key",
        &["ABSK", "bedrock-api-key-"],
        r"(?-u:\b)(?:ABSK[A-Za-z0-9+/]{109,269}={0,2}|bedrock-api-key-YmVkcm9jay5hbWF6b25hd3MuY29t[A-Za-z0-9+/]*={0,2})",
        Token,
    )
    .entropy(3.0),
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
    )
    .entropy(3.0),
    at(
        "gitlab_token",
        &["_gitlab_session="],
        r"_gitlab_session=[0-9a-z]{32}(?-u:\b)",
        Token,
    )
    .entropy(3.0),
    at(
        "slack_token",
        &["xoxb-", "xoxp-", "xoxe-", "xoxa-", "xoxr-", "xoxo-", "xoxs-", "xapp-"],
        r"(?-u:\b)(?:xoxb-\d{8,14}-(?:\d{8,14}-)?[A-Za-z0-9-]{10,}|xox[pe](?:-\d{8,14}){3}-[A-Za-z0-9-]{20,}|xox[ar]-(?:\d-)?[0-9A-Za-z]{8,48}(?:-[0-9A-Za-z]+)*|xox[os]-\d+-\d+-\d+-[A-Fa-f0-9]+|xoxe-\d-[A-Za-z0-9_-]{20,}|xapp-\d-[A-Za-z0-9-]{20,})",
        Token,
    ),
    at(
        "slack_token",
        &["xoxe.xox"],
        r"(?-u:\b)xoxe\.xox[bp]-\d-(?P<b>[A-Za-z0-9_-]{20,})",
        Mixed,
    ),
    near(
        "slack_webhook",
        &["hooks.slack.com"],
        8,
        r"(?:https?://)?hooks\.slack\.com/(?:services|workflows|triggers)/(?:T[A-Za-z0-9_]+(?:/[A-Za-z0-9_]+){2,3}|[A-Za-z0-9+/_]{43,})",
        Token,
    ),
    at(
        "stripe_key",
        &[
            "sk_live_", "rk_live_", "sk_test_", "rk_test_", "sk_prod_", "rk_prod_",
        ],
        r"(?-u:\b)[sr]k_(?:live|test|prod)_[0-9A-Za-z]{16,}",
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
        r"(?-u:\b)(?P<s>AIza[0-9A-Za-z_-]{35})(?:[^0-9A-Za-z_-]|$)",
        Token,
    )
    .entropy(3.5),
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
        r"(?-u:\b)(?P<s>sk-ant-[a-z]{3,8}\d{2}-[A-Za-z0-9_-]{80,120}AA)(?:[^A-Za-z0-9_-]|$)",
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
        r"(?-u:\b)eyJ[A-Za-z0-9_-]{7,}\.ey[A-Za-z0-9_-]{7,}\.(?:[A-Za-z0-9_-]{10,}={0,2})?",
        Token,
    ),
    at(
        "jwt",
        &["ZXlK"],
        r"(?-u:\b)ZXlK[A-Za-z0-9+/_-]{40,}={0,2}",
        Base64Jwt,
    ),
    near(
        "azure_storage_key",
        &["AccountKey", "SharedAccessKey"],
        0,
        r"(?:AccountKey|SharedAccessKey)\s*=\s*(?P<s>[A-Za-z0-9+/]{40,}={0,2})",
        Token,
    ),
    // A storage label and, a few lines on, the 88 base64 characters of a 64-byte key
    // (`AZURE_STORAGE_KEY=…`, `--account-key …`, `az storage account keys list`).
    near(
        "azure_storage_key",
        &[
            "storage",
            "Storage",
            "STORAGE",
            "account-key",
            "accountKey",
            "account_key",
            "ACCOUNT_KEY",
            "keyName",
        ],
        0,
        r"(?i:storage|account[_-]?key|keyname)(?s:.){0,160}?[^A-Za-z0-9+/=](?P<s>[A-Za-z0-9+/]{86}==)(?:[^A-Za-z0-9+/=]|$)",
        AzureKey,
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
        r"(?P<s>[A-Za-z0-9_~.]{3}\dQ~[A-Za-z0-9_~.-]{31,34})(?:[^A-Za-z0-9_~.-]|$)",
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
        "cloudflare_api_token",
        &["cfut_", "cfat_"],
        r"(?-u:\b)cf[ua]t_[A-Za-z0-9]{40}[a-f0-9]{8}(?-u:\b)",
        Token,
    ),
    at(
        "cloudflare_global_api_key",
        &["cfk_"],
        r"(?-u:\b)cfk_[A-Za-z0-9]{40}[a-f0-9]{8}(?-u:\b)",
        Token,
    ),
    at(
        "cloudflare_origin_ca_key",
        &["v1.0-"],
        r"(?-u:\b)v1\.0-[a-f0-9]{24}-[a-f0-9]{146}(?-u:\b)",
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
    )
    .entropy(3.5),
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
        r"(?-u:\b)tfp_[A-Za-z0-9_.=-]{40,}",
        Token,
    ),
    at(
        "dropbox_token",
        &["sl."],
        r"(?-u:\b)sl\.(?:[A-Za-z]\.)?[A-Za-z0-9_=-]{130,}",
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
        r"(?-u:\b)[ps]at\.[A-Za-z0-9_-]{22}\.[A-Za-z0-9]{24}\.[A-Za-z0-9]{20}(?-u:\b)",
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
        "nuget_config_password",
        &["<add key=", "<add Key=", "<ADD KEY="],
        r#"(?i:<add key="(?:ClearText)?Password"\s*value=")(?P<s>[^"]{8,})"\s*/>"#,
        Password,
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
        &["AKCp", "cmVmd"],
        r"(?-u:\b)(?:AKCp[A-Za-z0-9]{69}|cmVmd[A-Za-z0-9]{59}|cmVmdGtuOjAxOj[A-Za-z0-9]{40,})(?-u:\b)",
        Token,
    )
    .entropy(3.5),
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
        r"https://[A-Za-z0-9.-]*(?:webhook\.office\.com/webhookb2|outlook\.office\.com/webhook)/[a-f0-9-]{36}@[a-f0-9-]{36}/IncomingWebhook/[a-z0-9]{32}/[a-f0-9-]{36}",
        Token,
    ),
    // A bot id, `:`, and 35 characters starting with `A` (`AA…` mostly); the body must
    // mix three character classes so that `12345:SomeCamelCaseIdentifierOfThatLength`
    // is not taken for one.
    at(
        "telegram_bot_token",
        &[":A"],
        r"(?P<s>\d{5,16}:(?P<b>A[A-Za-z0-9_-]{34}))(?:[^A-Za-z0-9_-]|$)",
        Varied,
    )
    .checked_first(Precheck::DigitsBefore { min: 5, max: 16 }),
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
        &["sq0atp-", "sq0csp-"],
        r"(?-u:\b)sq0(?:atp|csp)-[A-Za-z0-9_-]{22,43}",
        Token,
    ),
    at(
        "square_token",
        &["EAAA"],
        r"(?-u:\b)(?P<s>EAAA(?P<b>[A-Za-z0-9_-]{22,60}))(?:[^A-Za-z0-9_-]|$)",
        Mixed,
    ),
    at(
        "facebook_access_token",
        &["EAAM", "EAAC"],
        r"(?-u:\b)EAA[MC][A-Za-z0-9]{100,}",
        Token,
    )
    .entropy(4.0),
    // An app access token, `<app id>|<app secret>`.
    at(
        "facebook_access_token",
        &["|", "%7C"],
        r"(?P<s>\d{15,16}(?:\||%7C)(?P<b>[A-Za-z0-9_-]{27,40}))(?:[^A-Za-z0-9_-]|$)",
        Mixed,
    )
    .checked_first(Precheck::DigitsBefore { min: 15, max: 16 }),
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
        r"(?-u:\b)FLWSECK(?:_TEST)?-[a-hA-H0-9]{12}(?:[a-hA-H0-9]{20}-X)?(?-u:\b)",
        Token,
    ),
    at(
        "shippo_token",
        &["shippo_"],
        r"(?-u:\b)shippo_(?:live|test)_[a-fA-F0-9]{40}(?-u:\b)",
        Token,
    ),
    at(
        "easypost_api_key",
        &["EZAK", "EZTK"],
        r"(?-u:\b)EZ[AT]K[A-Za-z0-9]{54}(?-u:\b)",
        Token,
    ),
    at(
        "duffel_token",
        &["duffel_"],
        r"(?-u:\b)duffel_(?:live|test)_[A-Za-z0-9_=-]{43}",
        Token,
    ),
    at(
        "sendgrid_api_key",
        &["SG."],
        r"(?-u:\b)(?P<s>SG\.(?P<b>[A-Za-z0-9_=.-]{66}))(?:[^A-Za-z0-9_=.-]|$)",
        Mixed,
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
        r"(?-u:\b)(?:NRAK-[A-Za-z0-9]{27}(?-u:\b)|NRII-[A-Za-z0-9_-]{32}|NRJS-[a-f0-9]{19}(?-u:\b))",
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
        &["sntryu_"],
        r"(?-u:\b)sntryu_[a-f0-9]{64}(?-u:\b)",
        Token,
    )
    .entropy(3.5),
    at(
        "sentry_token",
        &["sntrys_eyJ"],
        r"(?-u:\b)(?P<s>sntrys_eyJ[A-Za-z0-9+/_-]{10,400}={0,2}_[A-Za-z0-9+/_-]{43})(?:[^A-Za-z0-9+/_-]|$)",
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
        &["glc_", "glsa_", "eyJrIjoi"],
        r"(?-u:\b)(?:glc_[A-Za-z0-9+/_=-]{32,}|glsa_[A-Za-z0-9]{32}_[a-f0-9]{8}(?-u:\b)|eyJrIjoi[A-Za-z0-9]{70,400}={0,3})",
        Token,
    )
    .entropy(3.0),
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
        r"(?-u:\b)dt0c01\.[A-Za-z0-9]{24}\.[A-Za-z0-9]{64}(?-u:\b)",
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
    // A legacy Vault service token, `s.` and 24 characters mixing letters and digits
    // (`s.AcceptanceTimeoutSeconds` is a property, not a token).
    at(
        "vault_token",
        &["s."],
        r"(?-u:\b)(?P<s>s\.(?P<b>[A-Za-z0-9]{24}))(?:[^A-Za-z0-9_.-]|$)",
        Varied,
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
        r"(?-u:\b)A3-[A-Z0-9]{6}-(?:[A-Z0-9]{11}|(?:[A-Z0-9]{6}-)?[A-Z0-9]{5})(?:-[A-Z0-9]{5}){3}(?-u:\b)",
        Token,
    )
    .entropy(3.0),
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
    at(
        "adobe_client_secret",
        &["p8e-"],
        r"(?-u:\b)p8e-[A-Za-z0-9]{32}(?-u:\b)",
        Token,
    ),
    at(
        "authress_access_key",
        &["sc_", "ext_", "scauth_", "authress_"],
        r"(?-u:\b)(?:sc|ext|scauth|authress)_[A-Za-z0-9]{5,30}\.[A-Za-z0-9]{4,6}\.acc[_-][A-Za-z0-9-]{10,32}\.[A-Za-z0-9+/_=-]{30,120}",
        Token,
    ),
    at(
        "clickhouse_api_secret",
        &["4b1d"],
        r"(?-u:\b)4b1d[A-Za-z0-9]{38}(?-u:\b)",
        Token,
    )
    .entropy(3.0),
    at(
        "defined_networking_token",
        &["dnkey-"],
        r"(?-u:\b)dnkey-[A-Za-z0-9=_-]{26}-[A-Za-z0-9=_-]{52}",
        Token,
    ),
    at(
        "flyio_token",
        &["fo1_", "fm1a_", "fm1r_", "fm2_"],
        r"(?-u:\b)(?:fo1_[A-Za-z0-9_-]{43}|fm1[ar]_[A-Za-z0-9+/]{100,}={0,3}|fm2_[A-Za-z0-9+/]{100,}={0,3})",
        Token,
    )
    .entropy(4.0),
    at(
        "infracost_api_key",
        &["ico-"],
        r"(?-u:\b)(?P<s>ico-[A-Za-z0-9]{32})(?:[^A-Za-z0-9_.-]|$)",
        Token,
    )
    .entropy(3.0),
    at(
        "intra42_client_secret",
        &["s-s4t2ud-", "s-s4t2af-"],
        r"(?-u:\b)s-s4t2(?:ud|af)-[a-fA-F0-9]{64}(?-u:\b)",
        Token,
    ),
    near(
        "maxmind_license_key",
        &["_mmk"],
        37,
        r"(?-u:\b)[A-Za-z0-9]{6}_[A-Za-z0-9]{29}_mmk(?-u:\b)",
        Token,
    )
    .entropy(4.0),
    at(
        "openshift_token",
        &["sha256~"],
        r"(?-u:\b)(?P<s>sha256~[A-Za-z0-9_-]{43})(?:[^A-Za-z0-9_-]|$)",
        Token,
    )
    .entropy(3.5),
    at(
        "plaid_access_token",
        &["access-sandbox-", "access-development-", "access-production-"],
        r"(?-u:\b)access-(?:sandbox|development|production)-[a-f0-9]{8}-[a-f0-9]{4}-[a-f0-9]{4}-[a-f0-9]{4}-[a-f0-9]{12}(?-u:\b)",
        Token,
    ),
    at(
        "settlemint_token",
        &["sm_pat_", "sm_aat_", "sm_sat_"],
        r"(?-u:\b)sm_[pas]at_[A-Za-z0-9]{16}(?-u:\b)",
        Token,
    )
    .entropy(3.0),
    at(
        "sourcegraph_token",
        &["sgp_"],
        r"(?-u:\b)sgp_(?:(?:[a-fA-F0-9]{16}|local)_)?[a-fA-F0-9]{40}(?-u:\b)",
        Token,
    )
    .entropy(3.0),
    at(
        "twitter_bearer_token",
        &["AAAAAAAAAAAAAAAAAAAAA"],
        r"(?-u:\b)(?P<s>A{21}(?P<b>[B-Za-z0-9%][A-Za-z0-9%]{79,99}))(?:[^A-Za-z0-9%+/=]|$)",
        Mixed,
    ),
    near(
        "sidekiq_secret",
        &["@gems.contribsys.com", "@enterprise.contribsys.com"],
        32,
        r"(?i:https?)://(?P<s>[a-f0-9]{8}:[a-f0-9]{8})@(?:gems|enterprise)\.contribsys\.com",
        Token,
    ),
    at(
        "kubernetes_secret",
        &["kind:"],
        r"kind:",
        KubernetesSecret,
    )
    .checked_first(Precheck::KindSecret),
    near(
        "connection_string_password",
        &["://"],
        32,
        r#"(?-u:\b)[A-Za-z][A-Za-z0-9+.-]{0,31}://(?:(?P<u>[^\s:/?#"'<>]{0,128}):(?P<s>[^\s"'<>]{1,256})|(?P<j>[A-Za-z0-9_.~%-]{20,128}))@[A-Za-z0-9\[._-]"#,
        UrlPassword,
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
    at(
        "curl_credentials",
        &["-u", "--user"],
        r#"(?:-u|--user)(?:=|[ \t]{1,5})(?P<c>"[^"\n]*"(?::(?:"[^"\n]*"|'[^'\n]*'|[^\s"']+))?|'[^'\n]*'(?::(?:"[^"\n]*"|'[^'\n]*'|[^\s"']+))?|[^\s"':]*:(?:"[^"\n]*"|'[^'\n]*'|[^\s"']*))"#,
        CurlUser,
    )
    .checked_first(Precheck::CurlBefore),
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
    // `Authorization: Token …`, `Api-Token …`, or a bare token with no scheme.
    near(
        "authorization_token",
        &["authorization", "Authorization", "AUTHORIZATION"],
        0,
        r#"(?i:(?-u:\b)authorization)["']?[ \t]*[:=][ \t]*["']?(?:(?i:api-token|token)[ \t]+(?P<s>[A-Za-z0-9._~+/@=-]{8,})|(?P<j>[A-Za-z0-9._~+/@=-]{16,}))(?:[^A-Za-z0-9._~+/@=-]|$)"#,
        Generated,
    ),
    // Keyed rules, from gitleaks' keyed ("semi-generic") rules: the service's name in
    // the key, a value of the service's documented shape.
    keyed("adafruit_io_key", &["adafruit"], r"(?P<s>[A-Za-z0-9_-]{32})"),
    keyed("airtable_token", &["airtable"], r"(?P<s>[A-Za-z0-9]{17})"),
    keyed("algolia_api_key", &["algolia"], r"(?P<s>[A-Za-z0-9]{32})"),
    keyed("alibaba_secret_key", &["alibaba"], r"(?P<s>[A-Za-z0-9]{30})"),
    keyed("asana_client_secret", &["asana"], r"(?P<s>[A-Za-z0-9]{32})"),
    keyed(
        "atlassian_api_token",
        &["atlassian", "confluence", "jira"],
        r"(?P<s>[A-Za-z0-9]{20}[A-Fa-f0-9]{4})",
    ),
    keyed("beamer_api_token", &["beamer"], r"(?P<s>b_[A-Za-z0-9=_-]{44})"),
    keyed(
        "bitbucket_token",
        &["bitbucket", "BitBucket"],
        r"(?P<s>[A-Za-z0-9=_-]{64})",
    ),
    keyed("bittrex_key", &["bittrex"], r"(?P<s>[A-Za-z0-9]{32})"),
    keyed("cisco_meraki_api_key", &["meraki"], r"(?P<s>[0-9a-f]{40})"),
    keyed(
        "cloudflare_global_api_key",
        &["cloudflare", "CloudFlare"],
        r"(?P<s>[a-f0-9]{37,45})",
    ),
    keyed(
        "cloudflare_api_token",
        &["cloudflare", "CloudFlare"],
        r"(?P<s>[A-Za-z0-9_-]{40})",
    ),
    keyed("codecov_token", &["codecov"], r"(?P<s>[A-Za-z0-9]{32})"),
    keyed(
        "cohere_api_key",
        &["cohere", "co_api_key"],
        r"(?P<s>[A-Za-z0-9]{40})",
    ),
    keyed("coinbase_token", &["coinbase"], r"(?P<s>[A-Za-z0-9_-]{64})"),
    keyed(
        "confluent_key",
        &["confluent"],
        r"(?P<s>[A-Za-z0-9]{64}|[A-Za-z0-9]{16})",
    ),
    keyed("contentful_token", &["contentful"], r"(?P<s>[A-Za-z0-9=_-]{43})"),
    keyed(
        "datadog_api_key",
        &["datadog"],
        r"(?P<s>[A-Za-z0-9]{40}|[a-f0-9]{32})",
    ),
    // Gitleaks' own samples of this secret are 32 digits, at about 3 bits per character.
    keyed(
        "discord_client_secret",
        &["discord"],
        r"(?P<s>[a-f0-9]{64}|[A-Za-z0-9=_-]{32})",
    )
    .entropy(2.0),
    keyed(
        "droneci_token",
        &["droneci", "DroneCI"],
        r"(?P<s>[A-Za-z0-9]{32})",
    ),
    keyed(
        "dropbox_token",
        &["dropbox"],
        r"(?P<s>sl\.[A-Za-z0-9=_-]{135}|[A-Za-z0-9]{11}AAAAAAAAAA[A-Za-z0-9=_-]{43}|[A-Za-z0-9]{15})",
    ),
    keyed("etsy_token", &["etsy"], r"(?P<s>[A-Za-z0-9]{24})"),
    keyed("facebook_secret", &["facebook"], r"(?P<s>[a-f0-9]{32})"),
    keyed("fastly_api_token", &["fastly"], r"(?P<s>[A-Za-z0-9=_-]{32})"),
    keyed(
        "finicity_token",
        &["finicity"],
        r"(?P<s>[a-f0-9]{32}|[A-Za-z0-9]{20})",
    ),
    keyed("finnhub_token", &["finnhub"], r"(?P<s>[A-Za-z0-9]{20})"),
    keyed("flickr_token", &["flickr"], r"(?P<s>[A-Za-z0-9]{32})"),
    keyed(
        "freshbooks_token",
        &["freshbooks", "FreshBooks"],
        r"(?P<s>[A-Za-z0-9]{64})",
    ),
    keyed("gitter_token", &["gitter"], r"(?P<s>[A-Za-z0-9_-]{40})"),
    keyed(
        "gocardless_token",
        &["gocardless", "GoCardless"],
        r"(?P<s>live_[A-Za-z0-9=_-]{40})",
    ),
    keyed(
        "heroku_api_key",
        &["heroku"],
        r"(?P<s>[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12})",
    ),
    keyed(
        "hubspot_api_key",
        &["hubspot", "HubSpot"],
        r"(?P<s>[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12})",
    ),
    keyed("intercom_token", &["intercom"], r"(?P<s>[A-Za-z0-9=_-]{60})"),
    keyed(
        "artifactory_token",
        &["jfrog", "JFrog", "artifactory", "bintray", "xray"],
        r"(?P<s>[A-Za-z0-9]{73}|[A-Za-z0-9]{64})",
    ),
    keyed("kraken_token", &["kraken"], r"(?P<s>[A-Za-z0-9/=_+-]{80,90})"),
    keyed(
        "kucoin_key",
        &["kucoin", "KuCoin"],
        r"(?P<s>[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|[a-f0-9]{24})",
    ),
    keyed(
        "launchdarkly_key",
        &["launchdarkly", "LaunchDarkly"],
        r"(?P<s>[A-Za-z0-9=_-]{40})",
    ),
    keyed("linear_api_key", &["linear"], r"(?P<s>[a-f0-9]{32})"),
    keyed(
        "linkedin_client_secret",
        &["linkedin", "linked_in", "linked-in", "LinkedIn"],
        r"(?P<s>[A-Za-z0-9]{16})",
    ),
    keyed("lob_api_key", &["lob"], r"(?P<s>(?:live|test)_[a-f0-9]{35})"),
    keyed("looker_client_secret", &["looker"], r"(?P<s>[A-Za-z0-9]{24})"),
    keyed(
        "mailgun_signing_key",
        &["mailgun", "MailGun"],
        r"(?P<s>[a-h0-9]{32}-[a-h0-9]{8}-[a-h0-9]{8})",
    ),
    keyed("mattermost_token", &["mattermost"], r"(?P<s>[A-Za-z0-9]{26})"),
    keyed(
        "messagebird_token",
        &["messagebird", "message-bird", "message_bird", "MessageBird"],
        r"(?P<s>[A-Za-z0-9]{25})",
    ),
    keyed(
        "netlify_token",
        &["netlify"],
        r"(?P<s>[A-Za-z0-9=_-]{40,46})",
    ),
    keyed(
        "nytimes_token",
        &["nytimes", "newyorktimes", "NYTimes"],
        r"(?P<s>[A-Za-z0-9=_-]{32})",
    ),
    keyed("okta_api_token", &["okta"], r"(?P<s>00[A-Za-z0-9_=-]{40})"),
    keyed("plaid_secret", &["plaid"], r"(?P<s>[A-Za-z0-9]{30})"),
    keyed(
        "privateai_api_key",
        &["privateai", "private_ai", "private-ai", "PrivateAI"],
        r"(?P<s>[A-Za-z0-9]{32})",
    ),
    keyed(
        "rapidapi_key",
        &["rapidapi", "RapidAPI"],
        r"(?P<s>[A-Za-z0-9_-]{50})",
    ),
    keyed(
        "sendbird_token",
        &["sendbird", "SendBird"],
        r"(?P<s>[a-f0-9]{40})",
    ),
    keyed("sentry_token", &["sentry"], r"(?P<s>[a-f0-9]{64})"),
    keyed(
        "snyk_token",
        &["snyk"],
        r"(?P<s>[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12})",
    ),
    keyed(
        "sonarqube_token",
        &["sonar"],
        r"(?P<s>(?:squ_|sqp_|sqa_)?[A-Za-z0-9=_-]{40})",
    ),
    keyed(
        "sourcegraph_token",
        &["sourcegraph"],
        r"(?P<s>[a-fA-F0-9]{40})",
    ),
    keyed(
        "squarespace_token",
        &["squarespace", "SquareSpace"],
        r"(?P<s>[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})",
    ),
    keyed("sumologic_access_key", &["sumo"], r"(?P<s>[A-Za-z0-9]{64})"),
    keyed(
        "telegram_bot_token",
        &["telegr"],
        r"(?P<s>\d{5,16}:A[A-Za-z0-9_-]{34})",
    ),
    keyed("travis_ci_token", &["travis"], r"(?P<s>[A-Za-z0-9]{22})"),
    keyed("trello_token", &["trello"], r"(?P<s>[A-Za-z0-9-]{32})"),
    keyed("twitch_token", &["twitch"], r"(?P<s>[A-Za-z0-9]{30})"),
    keyed(
        "twitter_token",
        &["twitter"],
        r"(?P<s>A{22}[A-Za-z0-9%]{80,100}|\d{15,25}-[A-Za-z0-9]{20,40}|[A-Za-z0-9]{50}|[A-Za-z0-9]{45}|[A-Za-z0-9]{25})",
    ),
    keyed(
        "yandex_token",
        &["yandex"],
        r"(?P<s>YC[A-Za-z0-9_-]{38}|AQVN[A-Za-z0-9_-]{35,38}|t1\.[A-Za-z0-9_-]+={0,2}\.[A-Za-z0-9_-]{86}={0,2})",
    ),
    keyed("zendesk_token", &["zendesk", "ZenDesk"], r"(?P<s>[A-Za-z0-9]{40})"),
    keyed(
        "sidekiq_secret",
        &[
            "bundle_enterprise__contribsys__com",
            "bundle_gems__contribsys__com",
        ],
        r"(?P<s>[a-f0-9]{8}:[a-f0-9]{8})",
    )
    .checked(Token)
    .entropy(0.0),
    // A credential-named `name` and its `value` on the next line or in the same object
    // (`- name: API_TOKEN` / `value: …` in a Kubernetes or CI env list,
    // `{"name": "API_TOKEN", "value": "…"}`).
    near(
        "generic_api_key_assignment",
        &["value", "Value", "VALUE"],
        160,
        r#"(?:name|Name|NAME|key|Key|KEY)["']?[ \t]*[:=][ \t]*["']?(?P<k>[A-Za-z0-9_.-]{1,64})["']?[ \t]*(?:,[ \t]*|\r?\n[ \t]*(?:-[ \t]+)?)["']?(?:value|Value|VALUE)["']?[ \t]*[:=][ \t]*["']?(?P<s>(?:[^\s"'`,;<>{}()\[\]\\]|\\[^nrt"'\\\s]){8,256})"#,
        Assignment,
    )
    .checked_first(Precheck::NameBefore),
    at(
        "generic_api_key_assignment",
        &[],
        r#"(?P<k>[A-Za-z0-9_.-]{1,64})(?P<o>[ \t]*:[ \t]*&?[A-Za-z_][A-Za-z0-9_<>']{0,15}[ \t]+=[ \t]*|[ \t]+[A-Za-z_][A-Za-z0-9_]{0,15}[ \t]+=[ \t]*|["'`]?[ \t]*(?:=>|:{1,3}=|[?.]=|[:=])[ \t]*|["'`][ \t]*,[ \t]*|>\s*|[ \t]+)["'`]?(?P<s>(?:[^\s"'`,;<>{}()\[\]\\]|\\[^nrt"'\\\s]){8,256})"#,
        Assignment,
    )
    .checked_first(Precheck::CredentialKey),
];
