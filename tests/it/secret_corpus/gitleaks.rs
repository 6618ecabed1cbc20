//! Positives from gitleaks' default rule set (`config/gitleaks.toml`): every rule's
//! true-positive test cases, reproduced as ctxd's own generators. A case keeps the test
//! case's context (the command line, the config line, the JSON around it) and the rule's
//! token format (prefix, length, alphabet), and draws a fresh random secret; no value is
//! copied. Keyed rules ("a key naming the service, then a value of this shape") are
//! tested as gitleaks tests them, in the assignment syntaxes of `SYNTAXES`.
//!
//! Left out, because what they match is not a secret or is not in text: public client
//! identifiers (`adobe-client-id`, `asana-client-id`, `bitbucket-client-id`,
//! `discord-client-id`, `linkedin-client-id`, `looker-client-id`,
//! `messagebird-client-id`, `plaid-client-id`, `sendbird-access-id`,
//! `sumologic-access-id`, `new-relic-user-api-id`); publishable keys meant for clients
//! (`flutterwave-public-key`, `lob-pub-api-key`, `mailgun-pub-key`, `mapbox-api-token`
//! with `pk.`); rules on a file's path (`pkcs12-file`, and the path conditions of
//! `nuget-config-password`, `hashicorp-tf-password`); and test cases whose value is a
//! documented example or a dictionary word, which ctxd's placeholder and entropy checks
//! drop by design (the all-`Q` age key, the `…EXAMPLE…` Bedrock key, `rootpasswd`).

use super::formats::{jwt, onepassword_claims};
use super::rng::{BASE32, DIGITS, LOWER, Rng, UPPER, base64, base64url};

/// Where a case puts its secret.
pub(crate) enum Context {
    /// Three samples, each in the next of [`SYNTAXES`], under keys made of this
    /// identifier (`{i}Token`, `{i}_token`, `{I}_TOKEN`).
    Syntaxes(&'static str),
    /// `{identifier}_api_token = "{secret}"`.
    Sample(&'static str),
    /// A text in which `{s}` stands for the secret.
    Text(&'static str),
}

/// A case's secret generator.
pub(crate) type MakeSecret = fn(&mut Rng) -> String;

use Context::{Sample, Syntaxes, Text};

/// The assignment syntaxes a keyed rule must read: INI, JSON (also a JSON string holding
/// an env file), XML, YAML, C#, Go, Java, Kotlin, PHP, Python, Java properties, Logstash
/// and Make. `{i}` is the identifier, `{I}` the same in upper case, `{s}` the secret.
pub(crate) const SYNTAXES: &[&str] = &[
    "{i}Token=\"{s}\"",
    "{i}Token = \"{s}\"",
    "{i}Token={s}",
    "{i}Token = {s}",
    "{\n    \"{i}_token\": \"{s}\"\n}",
    "{\"config.ini\": \"{I}_TOKEN={s}\\nBACKUP_ENABLED=true\"}",
    "<{i}Token>\n    {s}\n</{i}Token>",
    "{i}_token: {s}",
    "{i}_token: '{s}'",
    "{i}_token: \"{s}\"",
    "string {i}Token = \"{s}\";",
    "var {i}Token string = \"{s}\"",
    "{i}Token := \"{s}\"",
    "{i}Token := `{s}`",
    "String {i}Token = \"{s}\";",
    "var {i}Token = \"{s}\"",
    "${i}Token .= \"{s}\"",
    "{i}Token = '{s}'",
    "System.setProperty(\"{I}_TOKEN\", \"{s}\")",
    "  \"{i}Token\" => \"{s}\"",
    "{i}_TOKEN = \"{s}\"",
    "{i}_TOKEN := \"{s}\"",
    "{i}_TOKEN ::= \"{s}\"",
    "{i}_TOKEN :::= \"{s}\"",
    "{i}_TOKEN ?= \"{s}\"",
];

/// One syntax filled in.
pub(crate) fn in_syntax(syntax: &str, identifier: &str, secret: &str) -> String {
    syntax
        .replace("{I}", &identifier.to_uppercase())
        .replace("{i}", identifier)
        .replace("{s}", secret)
}

fn uuid_upper(r: &mut Rng) -> String {
    r.uuid().to_uppercase()
}

/// `len` characters of `[A-Za-z0-9_~.]`/`-` as Azure AD client secrets use them.
fn azure_client_secret(r: &mut Rng) -> String {
    let words = format!("{UPPER}{LOWER}{DIGITS}_~.");
    let tail = r.between(31, 34);
    format!(
        "{}{}Q~{}",
        r.chars(&words, 3),
        r.chars(DIGITS, 1),
        r.chars(&format!("{words}-"), tail)
    )
}

/// A password with the punctuation people put in them (`@`, `#`, `$`, `!`, `~`).
fn punctuated_password(r: &mut Rng) -> String {
    format!(
        "{}{}{}{}{}",
        r.alnum(4),
        r.pick(&["@", "#", "!", "~", "$"]),
        r.alnum(5),
        r.pick(&["@", "#", "!", "~", "$"]),
        r.digits(2)
    )
}

fn basic_credentials(r: &mut Rng) -> String {
    base64(
        format!("{}:{}", r.lower_alnum(8), r.alnum(20)).as_bytes(),
        true,
    )
}

fn pem_key(r: &mut Rng, label: &str, head: &str) -> String {
    let body = r.pem_body(head, 120, "\n");
    format!("-----BEGIN {label}-----\n{body}\n-----END {label}-----")
}

/// A Sentry organization token: `sntrys_`, base64 claims (`iat`, `url`, `region_url`,
/// `org`), `_`, 43 base64 characters.
fn sentry_org_token(r: &mut Rng) -> String {
    let claims = format!(
        r#"{{"iat":{}.{},"url":"https://{}","region_url":"https://{}","org":"{}"}}"#,
        1_700_000_000 + r.below(90_000_000),
        r.digits(5),
        r.lower_alnum(12),
        r.lower_alnum(24),
        r.lower_alnum(7)
    );
    format!("sntrys_{}_{}", base64(claims.as_bytes(), true), r.b64(43))
}

fn vault_batch(r: &mut Rng) -> String {
    format!("hvb.AAAAAQ{}", r.b64url(200))
}

/// A JWT with `alg: none` and no signature.
fn unsigned_jwt(r: &mut Rng) -> String {
    format!(
        "{}.{}.",
        base64url(br#"{"alg":"none"}"#),
        base64url(format!(r#"{{"sub":"{}","name":"{}"}}"#, r.uuid(), r.lower_alnum(8)).as_bytes())
    )
}

/// A JWT encoded once more in base64 (standard, URL-safe, or URL-safe without padding).
fn base64_jwt(r: &mut Rng) -> String {
    let header = r.pick(&[
        r#"{"alg":"HS256","typ":"JWT"}"#,
        r#"{"kid":"my_key_id","alg":"RS256"}"#,
        r#"{"typ":"JWT","alg":"ES384"}"#,
        r#"{"enc":"A256GCM","alg":"RSA-OAEP"}"#,
    ]);
    let token = format!(
        "{}.{}.{}",
        base64url(header.as_bytes()),
        base64url(format!(r#"{{"iss":"joe","sub":"{}","exp":1300819380}}"#, r.uuid()).as_bytes()),
        r.b64url(43)
    );
    match r.below(3) {
        0 => base64(token.as_bytes(), true),
        1 => base64url(token.as_bytes()) + "==",
        _ => base64url(token.as_bytes()),
    }
}

fn onepassword_service_token(r: &mut Rng) -> String {
    let claims = onepassword_claims(r, 13);
    format!("ops_{}", base64(claims.as_bytes(), false))
}

fn kubernetes_value(r: &mut Rng) -> String {
    let length = 12 + r.below(40);
    base64(r.alnum(length).as_bytes(), true)
}

fn slack_bot(r: &mut Rng) -> String {
    format!("xoxb-{}-{}-{}", r.digits(12), r.digits(13), r.alnum(24))
}

fn slack_user(r: &mut Rng) -> String {
    format!(
        "xoxp-{}-{}-{}-{}",
        r.digits(12),
        r.digits(13),
        r.digits(13),
        r.hex(32)
    )
}

/// Every case: `(kind, context, secret)`. Kinds are `gitleaks/<rule id>`.
pub(crate) const CASES: &[(&str, Context, MakeSecret)] = &[
    (
        "gitleaks/1password-secret-key",
        Syntaxes("1password"),
        |r| {
            format!(
                "A3-{}-{}-{}-{}-{}",
                r.upper_alnum(6),
                r.upper_alnum(11),
                r.upper_alnum(5),
                r.upper_alnum(5),
                r.upper_alnum(5)
            )
        },
    ),
    (
        "gitleaks/1password-secret-key",
        Syntaxes("1password"),
        |r| {
            format!(
                "A3-{}-{}-{}-{}-{}-{}",
                r.upper_alnum(6),
                r.upper_alnum(6),
                r.upper_alnum(5),
                r.upper_alnum(5),
                r.upper_alnum(5),
                r.upper_alnum(5)
            )
        },
    ),
    ("gitleaks/1password-secret-key", Text("{s}"), |r| {
        format!(
            "A3-{}-{}-{}-{}-{}",
            r.upper_alnum(6),
            r.upper_alnum(11),
            r.upper_alnum(5),
            r.upper_alnum(5),
            r.upper_alnum(5)
        )
    }),
    (
        "gitleaks/1password-service-account-token",
        Sample("1password"),
        onepassword_service_token,
    ),
    (
        "gitleaks/1password-service-account-token",
        Text("### 1Password System Vault Name\nexport OP_SERVICE_ACCOUNT_TOKEN={s}\n"),
        onepassword_service_token,
    ),
    (
        "gitleaks/1password-service-account-token",
        Text("PYTEST_SVC_ACCT_TOKEN={s}"),
        onepassword_service_token,
    ),
    (
        "gitleaks/1password-service-account-token",
        Text("    \"sourceContent\": \"{s}\""),
        onepassword_service_token,
    ),
    ("gitleaks/adafruit-api-key", Syntaxes("adafruit"), |r| {
        r.lower_ext_short(32)
    }),
    (
        "gitleaks/adobe-client-secret",
        Text("adobeClient := \"{s}\""),
        |r| format!("p8e-{}", r.hex(32)),
    ),
    ("gitleaks/age-secret-key", Syntaxes("age"), |r| {
        format!(
            "AGE-SECRET-KEY-1{}",
            r.chars("QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L", 58)
        )
    }),
    ("gitleaks/airtable-api-key", Syntaxes("airtable"), |r| {
        r.lower_alnum(17)
    }),
    (
        "gitleaks/airtable-personnal-access-token",
        Syntaxes("airtable"),
        |r| format!("pat{}.{}", r.lower_alnum(14), r.hex(64)),
    ),
    ("gitleaks/algolia-api-key", Syntaxes("algolia"), |r| {
        r.hex(32)
    }),
    (
        "gitleaks/alibaba-access-key-id",
        Text("alibabaKey := \"{s}\""),
        |r| format!("LTAI{}", r.hex(20)),
    ),
    ("gitleaks/alibaba-secret-key", Syntaxes("alibaba"), |r| {
        r.lower_alnum(30)
    }),
    ("gitleaks/anthropic-admin-api-key", Text("{s}"), |r| {
        format!("sk-ant-admin01-{}AA", r.lower_ext_short(93))
    }),
    (
        "gitleaks/anthropic-admin-api-key",
        Sample("anthropic"),
        |r| format!("sk-ant-admin01-{}AA", r.lower_ext_short(93)),
    ),
    ("gitleaks/anthropic-api-key", Text("{s}"), |r| {
        format!("sk-ant-api03-{}AA", r.b64url(93))
    }),
    ("gitleaks/anthropic-api-key", Sample("anthropic"), |r| {
        format!("sk-ant-api03-{}AA", r.lower_ext_short(93))
    }),
    (
        "gitleaks/artifactory-api-key",
        Text("artifactoryApiKey := \"{s}\""),
        |r| format!("AKCp{}", r.lower_alnum(69)),
    ),
    (
        "gitleaks/artifactory-reference-token",
        Text("artifactoryRefToken := \"{s}\""),
        |r| format!("cmVmd{}", r.lower_alnum(59)),
    ),
    ("gitleaks/asana-client-secret", Syntaxes("asana"), |r| {
        r.lower_alnum(32)
    }),
    ("gitleaks/atlassian-api-token", Syntaxes("atlassian"), |r| {
        format!("{}{}", r.lower_alnum(20), r.hex(4))
    }),
    (
        "gitleaks/atlassian-api-token",
        Syntaxes("confluence"),
        |r| format!("{}{}", r.lower_alnum(20), r.hex(4)),
    ),
    ("gitleaks/atlassian-api-token", Syntaxes("jira"), |r| {
        format!("{}{}", r.lower_alnum(20), r.hex(4))
    }),
    (
        "gitleaks/atlassian-api-token",
        Text("JIRA_API_TOKEN={s}"),
        |r| r.alnum(24),
    ),
    ("gitleaks/atlassian-api-token", Syntaxes("jira"), |r| {
        format!(
            "ATATT3xFfGF0{}={}",
            r.b64url(174),
            r.chars("0123456789ABCDEF", 8)
        )
    }),
    (
        "gitleaks/authress-service-client-access-key",
        Syntaxes("authress"),
        |r| {
            format!(
                "sc_{}.{}.acc_{}.{}",
                r.lower_alnum(10),
                r.lower_alnum(4),
                r.lower_alnum(10),
                r.lower_ext_short(40)
            )
        },
    ),
    ("gitleaks/aws-access-token", Syntaxes("AWS"), |r| {
        format!(
            "{}{}",
            r.pick(&["AKIA", "ASIA", "ABIA", "ACCA"]),
            r.chars(BASE32, 16)
        )
    }),
    (
        "gitleaks/aws-amazon-bedrock-api-key-long-lived",
        Sample("bedrock"),
        |r| format!("ABSKQmVkcm9ja0FQSUtleS1{}=", r.lower_alnum(108)),
    ),
    (
        "gitleaks/aws-amazon-bedrock-api-key-long-lived",
        Sample("bedrock"),
        |r| format!("ABSKQmVkcm9ja0FQSUtleS1{}", r.lower_alnum(246)),
    ),
    (
        "gitleaks/aws-amazon-bedrock-api-key-short-lived",
        Syntaxes("AmazonBedrockAPIKeyShortLived"),
        |r| {
            let url = format!(
                "bedrock.amazonaws.com/?Action=CallWithBearerToken&X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=ASIA{}%2F20250801%2Fus-east-1%2Fbedrock%2Faws4_request&X-Amz-Signature={}&Version=1",
                r.chars(BASE32, 16),
                r.hex(64)
            );
            format!("bedrock-api-key-{}", base64(url.as_bytes(), true))
        },
    ),
    (
        "gitleaks/azure-ad-client-secret",
        Text("client_secret={s}"),
        azure_client_secret,
    ),
    (
        "gitleaks/azure-ad-client-secret",
        Text("client_secret={s}\n"),
        azure_client_secret,
    ),
    (
        "gitleaks/azure-ad-client-secret",
        Text("client_secret: {s}"),
        azure_client_secret,
    ),
    (
        "gitleaks/azure-ad-client-secret",
        Text("AUTH_CLIENTSECRET = {s}"),
        azure_client_secret,
    ),
    (
        "gitleaks/azure-ad-client-secret",
        Text("<value xsi:type=\"xsd:string\">{s}</value>"),
        azure_client_secret,
    ),
    (
        "gitleaks/azure-ad-client-secret",
        Text("\"CLIENT_SECRET\": \"{s}\""),
        azure_client_secret,
    ),
    (
        "gitleaks/azure-ad-client-secret",
        Text(
            "Set-PSUAuthenticationMethod -Type 'OpenIDConnect' -CallbackPath '/auth/oidc' -ClientId 'fake' -ClientSecret '{s}'",
        ),
        azure_client_secret,
    ),
    (
        "gitleaks/azure-ad-client-secret",
        Text("client-secret: \"{s}\""),
        azure_client_secret,
    ),
    (
        "gitleaks/azure-ad-client-secret",
        Text("\"cas.authn.azure-active-directory.client-secret={s}\","),
        azure_client_secret,
    ),
    (
        "gitleaks/azure-ad-client-secret",
        Text("\"line\": \"client_srt = \\\"{s}\\\";\","),
        azure_client_secret,
    ),
    (
        "gitleaks/azure-ad-client-secret",
        Text(
            "\"client_secret\":       acctest.Representation{RepType: acctest.Required, Create: '{s}'},",
        ),
        azure_client_secret,
    ),
    (
        "gitleaks/azure-ad-client-secret",
        Text("Example= {s}"),
        azure_client_secret,
    ),
    (
        "gitleaks/azure-ad-client-secret",
        Text("\"the_value\": \"{s}\""),
        azure_client_secret,
    ),
    (
        "gitleaks/azure-ad-client-secret",
        Text("{s}"),
        azure_client_secret,
    ),
    (
        "gitleaks/azure-ad-client-secret",
        Text("(use the client secret: {s})"),
        azure_client_secret,
    ),
    (
        "gitleaks/azure-ad-client-secret",
        Text("({s})"),
        azure_client_secret,
    ),
    (
        "gitleaks/azure-ad-client-secret",
        Text("\\\"pass\\\": \\\"{s}"),
        azure_client_secret,
    ),
    ("gitleaks/beamer-api-token", Syntaxes("beamer"), |r| {
        format!("b_{}", r.lower_ext(44))
    }),
    (
        "gitleaks/bitbucket-client-secret",
        Syntaxes("bitbucket"),
        |r| r.lower_alnum(64),
    ),
    ("gitleaks/bittrex-access-key", Syntaxes("bittrex"), |r| {
        r.lower_alnum(32)
    }),
    ("gitleaks/bittrex-secret-key", Syntaxes("bittrex"), |r| {
        r.lower_alnum(32)
    }),
    ("gitleaks/cisco-meraki-api-key", Syntaxes("meraki"), |r| {
        r.hex(40)
    }),
    (
        "gitleaks/clickhouse-cloud-api-secret-key",
        Syntaxes("ClickHouse"),
        |r| format!("4b1d{}", r.alnum(38)),
    ),
    ("gitleaks/clojars-api-token", Syntaxes("clojars"), |r| {
        format!("CLOJARS_{}", r.lower_alnum(60))
    }),
    ("gitleaks/cloudflare-api-key", Syntaxes("cloudflare"), |r| {
        r.lower_ext_short(40)
    }),
    (
        "gitleaks/cloudflare-api-key",
        Text("cloudflare_api_key = \"{s}\""),
        |r| r.b64url(40),
    ),
    (
        "gitleaks/cloudflare-api-key",
        Text("CLOUDFLARE_API_KEY: {s}"),
        |r| r.alnum(40),
    ),
    (
        "gitleaks/cloudflare-api-key",
        Text("cloudflare: \"{s}\""),
        |r| r.alnum(40),
    ),
    (
        "gitleaks/cloudflare-global-api-key",
        Syntaxes("cloudflare"),
        |r| r.hex(37),
    ),
    (
        "gitleaks/cloudflare-global-api-key",
        Text("cloudflare_global_api_key = \"{s}\""),
        |r| r.hex(37),
    ),
    (
        "gitleaks/cloudflare-global-api-key",
        Text("CLOUDFLARE_GLOBAL_API_KEY: {s}"),
        |r| r.hex(37),
    ),
    (
        "gitleaks/cloudflare-global-api-key",
        Text("cloudflare: \"{s}\""),
        |r| r.hex(37),
    ),
    (
        "gitleaks/cloudflare-origin-ca-key",
        Syntaxes("cloudflare"),
        |r| format!("v1.0-{}-{}", r.hex(24), r.hex(146)),
    ),
    (
        "gitleaks/cloudflare-origin-ca-key",
        Text("CLOUDFLARE_ORIGIN_CA: {s}"),
        |r| format!("v1.0-{}-{}", r.hex(24), r.hex(146)),
    ),
    ("gitleaks/codecov-access-token", Syntaxes("codecov"), |r| {
        r.lower_alnum(32)
    }),
    ("gitleaks/cohere-api-token", Sample("cohere"), |r| {
        r.alnum(40)
    }),
    (
        "gitleaks/cohere-api-token",
        Text("export CO_API_KEY={s}"),
        |r| r.alnum(40),
    ),
    (
        "gitleaks/coinbase-access-token",
        Syntaxes("coinbase"),
        |r| r.lower_ext_short(64),
    ),
    (
        "gitleaks/confluent-access-token",
        Syntaxes("confluent"),
        |r| r.lower_alnum(16),
    ),
    (
        "gitleaks/confluent-secret-key",
        Syntaxes("confluent"),
        |r| r.lower_alnum(64),
    ),
    (
        "gitleaks/contentful-delivery-api-token",
        Syntaxes("contentful"),
        |r| r.lower_alnum(43),
    ),
    (
        "gitleaks/curl-auth-header",
        Text("curl --header  'Authorization:  {s}'"),
        |r| r.uuid(),
    ),
    (
        "gitleaks/curl-auth-header",
        Text("curl -H 'Authorization: Basic {s}' \\"),
        |r| base64(format!("svc-{}:", r.lower_alnum(5)).as_bytes(), true),
    ),
    (
        "gitleaks/curl-auth-header",
        Text(
            "curl -k -X POST --header \"Authorization: Basic {s}\" \"https://api-qa.example.com:8243/token\" -d \"grant_type=client_credentials\"",
        ),
        basic_credentials,
    ),
    (
        "gitleaks/curl-auth-header",
        Text(
            "curl -X POST -H \"Content-Type: application/json\" \\\n -H \"Authorization: Basic {s}\" \\\n  -d '{\"user\":{\"emailAddress\":\"test@example.com\"}, \"password\":\"password\"}' \\\n  'http://localhost:8080/oauth2-provider/v1.0/users'",
        ),
        basic_credentials,
    ),
    (
        "gitleaks/curl-auth-header",
        Text(
            "#curl -X POST \\\n#  https://api.mailgun.net/v3/sandbox7dbcabccd4314c123e8b23599d35f5b6.mailgun.org/messages \\\n#  -H 'Authorization: Basic {s}' \\\n#  -F from='Excited User <mailgun@sandbox.mailgun.org>' \\\n#  -F to='joe@example.com'",
        ),
        basic_credentials,
    ),
    (
        "gitleaks/curl-auth-header",
        Text(
            "# curl -X GET \"http://localhost:3000/api/cron/status\" -H \"Authorization: Bearer {s}\"",
        ),
        |r| r.hex(32),
    ),
    (
        "gitleaks/curl-auth-header",
        Text("curl -X PUT -H 'Authorization: Bearer {s}' -d 'user={\"ac\"}'"),
        |r| format!("{}==", r.b64(342)),
    ),
    (
        "gitleaks/curl-auth-header",
        Text(
            "curl https://api.openai.com/v1/chat/completions \\\n  -H \"Content-Type: application/json\" \\\n  -H \"Authorization: Bearer {s}\" \\",
        ),
        |r| format!("sk-{}T3BlbkFJ{}", r.alnum(20), r.alnum(20)),
    ),
    (
        "gitleaks/curl-auth-header",
        Text(
            "curl -X GET \"https://api.cloudflare.com/client/v4/user/tokens/verify\" \\\n     -H \"Authorization: Bearer {s}\" \\\n     -H \"Content-Type:application/json\"",
        ),
        |r| r.b64url(40),
    ),
    (
        "gitleaks/curl-auth-header",
        Text("curl -H \"Authorization: Bearer {s}\""),
        |r| format!("sha256~{}", r.b64url(43)),
    ),
    (
        "gitleaks/curl-auth-header",
        Text(
            "curl -H \"Authorization: Api-Token {s}\" --request PUT https://appsecclass.report/api/use/635",
        ),
        |r| r.lower_alnum(40),
    ),
    (
        "gitleaks/curl-auth-header",
        Text(
            "curl -H \"Authorization: Token {s}\" --request PUT https://appsecclass.report/api/use/635",
        ),
        |r| r.hex(40),
    ),
    (
        "gitleaks/curl-auth-header",
        Text("curl -L -H \"Authorization:{s}\" service1.local -> correct jwt "),
        |r| jwt(r, "HS256", 43),
    ),
    (
        "gitleaks/curl-auth-header",
        Text("curl -L -H \"Authorization: {s}\""),
        |r| format!("sha256~{}", r.chars("ABCDEFGHabcdefgh0123456789@=-.+/", 19)),
    ),
    (
        "gitleaks/curl-auth-header",
        Text("curl -X GET \\\n     -H \"apikey: {s}\" \\\n     -H \"Accept: application/json\" \\"),
        |r| r.uuid(),
    ),
    (
        "gitleaks/curl-auth-header",
        Text("curl -X POST --header \"Api-Token: {s}\""),
        |r| format!("{}{}{}", r.alnum(4), r.digits(1), r.alnum(6)),
    ),
    (
        "gitleaks/curl-auth-header",
        Text(
            "curl -XPOST http://localhost:8080/api/tasks -H \"Content-Type: application/x-www-form-urlencoded; charset=UTF-8\" -H \"Token: {s}\" -d \"content=hello-curl\"",
        ),
        |r| r.hex(16),
    ),
    (
        "gitleaks/curl-auth-header",
        Text("curl -X GET https://octopus.corp.net/\n     -H \"X-Octopus-ApiKey: {s}\" \\"),
        |r| r.uuid(),
    ),
    (
        "gitleaks/curl-auth-user",
        Text("curl --cacert ca.crt -u elastic:{s} https://localhost:9200"),
        punctuated_password,
    ),
    (
        "gitleaks/curl-auth-user",
        Text(
            "sh-5.0$ curl -k -X POST https://infinispan:11222/rest/v2/caches/default/hello \\\n  -H 'Content-type: text/plain' \\\n  -d 'world' \\\n  -u developer:{s}",
        ),
        |r| r.alnum(16),
    ),
    (
        "gitleaks/curl-auth-user",
        Text("curl -u \":{s}\" https://localhost:9200"),
        punctuated_password,
    ),
    (
        "gitleaks/curl-auth-user",
        Text("curl -u \"{s}:\" https://localhost:9200"),
        punctuated_password,
    ),
    (
        "gitleaks/curl-auth-user",
        Text(
            "curl -sw '%{http_code}' -X POST --user  'johns:{s}' $GItHUB_API_URL/$GIT_COMMIT --data",
        ),
        punctuated_password,
    ),
    (
        "gitleaks/curl-auth-user",
        Text(
            "curl --user roger23@gmail.com:{s} https://www.dropbox.com/cli_link?host_id=abcdefg -v",
        ),
        |r| r.alnum(10),
    ),
    (
        "gitleaks/curl-auth-user",
        Text(
            "curl -s --user 'api:{s}' \\\n    https://api.mailgun.net/v2/sandbox91d3515882ecfaa1c65be642.mailgun.org/messages",
        ),
        punctuated_password,
    ),
    (
        "gitleaks/curl-auth-user",
        Text("curl -s -v --user \"j.smith:{s}\" \"https://api.contoso.org/user/me\""),
        punctuated_password,
    ),
    (
        "gitleaks/curl-auth-user",
        Text(
            "curl -X POST --user \"{acd3c08b-74e8-4f44-a2d0-80694le24f46}\":\"{{s}}\" --header \"Accept: application/json\" --data \"{\\\"text\\\":\\\"Hello, world\\\"}\" https://gateway.watsonplatform.net/language-translator/api",
        ),
        |r| format!("{}{}{}", r.alnum(5), r.digits(1), r.alnum(8)),
    ),
    (
        "gitleaks/curl-auth-user",
        Text("curl --user kevin:'{s}' -iX PATCH -H \"Content-Type: application/json\" -d"),
        |r| r.alnum(16),
    ),
    (
        "gitleaks/curl-auth-user",
        Text(
            "$ curl https://api.dropbox.com/oauth2/token \\\n  --user c28wlsosanujy2z:{s} --data grant_type=authorization_code",
        ),
        |r| r.lower_alnum(15),
    ),
    (
        "gitleaks/databricks-api-token",
        Syntaxes("databricks"),
        |r| format!("dapi{}", r.hex(32)),
    ),
    ("gitleaks/databricks-api-token", Text("token = {s}"), |r| {
        format!("dapi{}-2", r.hex(32))
    }),
    ("gitleaks/datadog-access-token", Syntaxes("datadog"), |r| {
        r.lower_alnum(40)
    }),
    (
        "gitleaks/defined-networking-api-token",
        Syntaxes("dnkey"),
        |r| format!("dnkey-{}-{}", r.lower_ext(26), r.lower_ext(52)),
    ),
    ("gitleaks/digitalocean-pat", Syntaxes("do"), |r| {
        format!("dop_v1_{}", r.hex(64))
    }),
    ("gitleaks/digitalocean-access-token", Syntaxes("do"), |r| {
        format!("doo_v1_{}", r.hex(64))
    }),
    ("gitleaks/digitalocean-refresh-token", Syntaxes("do"), |r| {
        format!("dor_v1_{}", r.hex(64))
    }),
    ("gitleaks/discord-api-token", Syntaxes("discord"), |r| {
        r.hex(64)
    }),
    ("gitleaks/discord-client-secret", Syntaxes("discord"), |r| {
        r.chars(DIGITS, 32)
    }),
    ("gitleaks/doppler-api-token", Syntaxes("doppler"), |r| {
        format!("dp.pt.{}", r.lower_alnum(43))
    }),
    ("gitleaks/droneci-access-token", Syntaxes("droneci"), |r| {
        r.lower_alnum(32)
    }),
    ("gitleaks/dropbox-api-token", Syntaxes("dropbox"), |r| {
        r.lower_alnum(15)
    }),
    (
        "gitleaks/dropbox-short-lived-api-token",
        Syntaxes("dropbox"),
        |r| format!("sl.{}", r.lower_ext(135)),
    ),
    (
        "gitleaks/dropbox-long-lived-api-token",
        Syntaxes("dropbox"),
        |r| format!("{}AAAAAAAAAA{}", r.lower_alnum(11), r.lower_ext(43)),
    ),
    ("gitleaks/duffel-api-token", Syntaxes("duffel"), |r| {
        format!("duffel_test_{}", r.lower_ext(43))
    }),
    ("gitleaks/dynatrace-api-token", Syntaxes("dynatrace"), |r| {
        format!("dt0c01.{}.{}", r.lower_alnum(24), r.lower_alnum(64))
    }),
    ("gitleaks/easypost-api-token", Syntaxes("EZAK"), |r| {
        format!("EZAK{}", r.alnum(54))
    }),
    ("gitleaks/easypost-api-token", Text("{s}"), |r| {
        format!("EZAK{}", r.alnum(54))
    }),
    (
        "gitleaks/easypost-api-token",
        Text("example.com?t={s}&q=1"),
        |r| format!("EZAK{}", r.alnum(54)),
    ),
    ("gitleaks/easypost-test-api-token", Syntaxes("EZTK"), |r| {
        format!("EZTK{}", r.alnum(54))
    }),
    ("gitleaks/easypost-test-api-token", Text("{s}"), |r| {
        format!("EZTK{}", r.alnum(54))
    }),
    (
        "gitleaks/easypost-test-api-token",
        Text("example.com?t={s}&q=1"),
        |r| format!("EZTK{}", r.alnum(54)),
    ),
    ("gitleaks/etsy-access-token", Syntaxes("ETSY"), |r| {
        r.lower_alnum(24)
    }),
    ("gitleaks/etsy-access-token", Syntaxes("etsy"), |r| {
        r.lower_alnum(24)
    }),
    ("gitleaks/etsy-access-token", Syntaxes("Etsy"), |r| {
        r.lower_alnum(24)
    }),
    ("gitleaks/facebook-secret", Syntaxes("facebook"), |r| {
        r.hex(32)
    }),
    (
        "gitleaks/facebook-secret",
        Text("facebook_app_secret = \"{s}\""),
        |r| r.hex(32),
    ),
    (
        "gitleaks/facebook-secret",
        Text("facebook_client_access_token: {s}"),
        |r| r.hex(32),
    ),
    (
        "gitleaks/facebook-access-token",
        Text("{\"facebook access_token\":\"{s}\",\"token_type\":\"bearer\"}"),
        |r| format!("{}|{}", r.digits(15), r.b64url(27)),
    ),
    (
        "gitleaks/facebook-access-token",
        Text("facebook {s}"),
        |r| format!("{}|{}", r.digits(16), r.b64url(27)),
    ),
    ("gitleaks/facebook-page-access-token", Text("{s}"), |r| {
        format!("EAAM{}", r.alnum(180))
    }),
    (
        "gitleaks/facebook-page-access-token",
        Text("- name: FACEBOOK_TOKEN\n\t\tvalue: \"{s}\""),
        |r| format!("EAAC{}", r.alnum(110)),
    ),
    ("gitleaks/fastly-api-token", Syntaxes("fastly"), |r| {
        r.lower_ext(32)
    }),
    (
        "gitleaks/finicity-client-secret",
        Syntaxes("finicity"),
        |r| r.lower_alnum(20),
    ),
    ("gitleaks/finicity-api-token", Syntaxes("finicity"), |r| {
        r.hex(32)
    }),
    ("gitleaks/finnhub-access-token", Syntaxes("finnhub"), |r| {
        r.lower_alnum(20)
    }),
    ("gitleaks/flickr-access-token", Syntaxes("flickr"), |r| {
        r.lower_alnum(32)
    }),
    (
        "gitleaks/flutterwave-encryption-key",
        Syntaxes("flutterwavePubKey"),
        |r| format!("FLWSECK_TEST-{}", r.hex(12)),
    ),
    (
        "gitleaks/flutterwave-secret-key",
        Syntaxes("flutterwavePubKey"),
        |r| format!("FLWSECK_TEST-{}-X", r.hex(32)),
    ),
    ("gitleaks/flyio-access-token", Syntaxes("fly"), |r| {
        format!("fo1_{}", r.b64url(43))
    }),
    (
        "gitleaks/flyio-access-token",
        Text("Fly access token: {s}\n"),
        |r| format!("fo1_{}", r.b64url(43)),
    ),
    (
        "gitleaks/flyio-access-token",
        Text("==========================================\n{s}\nfly deploy"),
        |r| format!("fo1_{}", r.b64url(43)),
    ),
    ("gitleaks/flyio-access-token", Syntaxes("fly"), |r| {
        format!("fm1{}_{}", r.pick(&["a", "r"]), r.b64(120))
    }),
    (
        "gitleaks/flyio-access-token",
        Text("ENV FLY_API_TOKEN=\"FlyV1 {s}\""),
        |r| format!("fm1r_{}=", r.b64(300)),
    ),
    ("gitleaks/flyio-access-token", Syntaxes("fly"), |r| {
        format!("fm2_{}", r.b64(140))
    }),
    (
        "gitleaks/flyio-access-token",
        Text("#           FLY_API_TOKEN: FlyV1 {s}"),
        |r| format!("fm2_{}", r.b64(400)),
    ),
    (
        "gitleaks/flyio-access-token",
        Text("\"BindToParentToken\": \"FlyV1 {s}\","),
        |r| format!("fm2_{}", r.b64(160)),
    ),
    ("gitleaks/frameio-api-token", Syntaxes("frameio"), |r| {
        format!("fio-u-{}", r.lower_ext(64))
    }),
    (
        "gitleaks/freemius-secret-key",
        Text("$config = array(\n\t\t\t\"secret_key\" => \"{s}\",\n\t\t);"),
        |r| format!("sk_{}", r.chars("ABCDEFGHJKabcdefghjk0123456789#&@*$", 29)),
    ),
    (
        "gitleaks/freshbooks-access-token",
        Syntaxes("freshbooks"),
        |r| r.lower_alnum(64),
    ),
    ("gitleaks/gcp-api-key", Syntaxes("gcp"), |r| {
        format!("AIza{}", r.b64url(35))
    }),
    ("gitleaks/gcp-api-key", Text("{s}"), |r| {
        format!("AIzaSy{}", r.b64url(33))
    }),
    ("gitleaks/generic-api-key", Syntaxes("generic"), |r| {
        format!("CLOJARS_{}", r.lower_alnum(60))
    }),
    ("gitleaks/generic-api-key", Syntaxes("generic"), |r| {
        r.alnum(32)
    }),
    (
        "gitleaks/generic-api-key",
        Text("'access_token': '{s}'"),
        |r| format!("eyJ0{}==", r.alnum(18)),
    ),
    (
        "gitleaks/generic-api-key",
        Text("some_api_token_123 = \"{s}\""),
        |r| r.alnum(60),
    ),
    (
        "gitleaks/generic-api-key",
        Text("\"user_auth\": \"{s}\""),
        |r| format!("{}=", r.b64(55)),
    ),
    (
        "gitleaks/generic-api-key",
        Text("\"credentials\" : \"{s}\""),
        |r| r.hex(64),
    ),
    ("gitleaks/generic-api-key", Text("creds = {s}"), |r| {
        r.alnum(30)
    }),
    ("gitleaks/generic-api-key", Text("private-key: {s}"), |r| {
        format!(
            "{}{}",
            r.alnum(1),
            r.chars("ABCDEFabcdef0123456789-_.=", 99)
        )
    }),
    ("gitleaks/generic-api-key", Text("passwd = {s}"), |r| {
        format!(
            "{}{}",
            r.alnum(1),
            r.chars("ABCDEFabcdef0123456789-_.=", 29)
        )
    }),
    (
        "gitleaks/generic-api-key",
        Text("\"client_secret\" : \"{s}\","),
        |r| r.hex(64),
    ),
    (
        "gitleaks/generic-api-key",
        Text("mySecretString={s}"),
        |r| r.alnum(30),
    ),
    (
        "gitleaks/generic-api-key",
        Text("todo_secret_do_not_commit = {s}"),
        |r| r.alnum(30),
    ),
    (
        "gitleaks/generic-api-key",
        Text(" utils.GetEnvOrDefault(\"api_token\", \"{s}\")"),
        |r| r.uuid(),
    ),
    ("gitleaks/github-pat", Syntaxes("github"), |r| {
        format!("ghp_{}", r.lower_alnum(36))
    }),
    (
        "gitleaks/github-fine-grained-pat",
        Syntaxes("github"),
        |r| format!("github_pat_{}", r.lower_alnum(82)),
    ),
    ("gitleaks/github-oauth", Syntaxes("github"), |r| {
        format!("gho_{}", r.lower_alnum(36))
    }),
    ("gitleaks/github-app-token", Syntaxes("github"), |r| {
        format!("{}_{}", r.pick(&["ghs", "ghu"]), r.lower_alnum(36))
    }),
    ("gitleaks/github-refresh-token", Syntaxes("github"), |r| {
        format!("ghr_{}", r.lower_alnum(36))
    }),
    ("gitleaks/gitlab-cicd-job-token", Syntaxes("gitlab"), |r| {
        format!("glcbt-{}_{}", r.lower_alnum(5), r.lower_alnum(20))
    }),
    ("gitleaks/gitlab-deploy-token", Sample("gitlab"), |r| {
        format!("gldt-{}", r.lower_alnum(20))
    }),
    (
        "gitleaks/gitlab-feature-flag-client-token",
        Syntaxes("gitlab"),
        |r| format!("glffct-{}", r.lower_alnum(20)),
    ),
    ("gitleaks/gitlab-feed-token", Syntaxes("gitlab"), |r| {
        format!("glft-{}", r.lower_alnum(20))
    }),
    (
        "gitleaks/gitlab-incoming-mail-token",
        Syntaxes("gitlab"),
        |r| format!("glimt-{}", r.lower_alnum(25)),
    ),
    (
        "gitleaks/gitlab-kubernetes-agent-token",
        Syntaxes("gitlab"),
        |r| format!("glagent-{}", r.lower_alnum(50)),
    ),
    (
        "gitleaks/gitlab-oauth-app-secret",
        Syntaxes("gitlab"),
        |r| format!("gloas-{}", r.lower_alnum(64)),
    ),
    ("gitleaks/gitlab-pat", Syntaxes("gitlab"), |r| {
        format!("glpat-{}", r.lower_alnum(20))
    }),
    ("gitleaks/gitlab-pat-routable", Syntaxes("gitlab"), |r| {
        format!(
            "glpat-{}.{}{}",
            r.lower_alnum(27),
            r.lower_alnum(2),
            r.lower_alnum(7)
        )
    }),
    ("gitleaks/gitlab-ptt", Syntaxes("gitlab"), |r| {
        format!("glptt-{}", r.hex(40))
    }),
    ("gitleaks/gitlab-rrt", Syntaxes("gitlab"), |r| {
        format!("GR1348941{}", r.lower_alnum(20))
    }),
    (
        "gitleaks/gitlab-runner-authentication-token",
        Syntaxes("gitlab"),
        |r| format!("glrt-{}", r.lower_alnum(20)),
    ),
    (
        "gitleaks/gitlab-runner-authentication-token-routable",
        Syntaxes("gitlab"),
        |r| {
            format!(
                "glrt-t{}_{}.{}{}",
                r.below(10),
                r.lower_alnum(27),
                r.lower_alnum(2),
                r.lower_alnum(7)
            )
        },
    ),
    ("gitleaks/gitlab-scim-token", Syntaxes("gitlab"), |r| {
        format!("glsoat-{}", r.lower_alnum(20))
    }),
    ("gitleaks/gitlab-session-cookie", Syntaxes("gitlab"), |r| {
        format!("_gitlab_session={}", r.lower_alnum(32))
    }),
    ("gitleaks/gitter-access-token", Syntaxes("gitter"), |r| {
        r.lower_ext_short(40)
    }),
    (
        "gitleaks/gocardless-api-token",
        Syntaxes("gocardless"),
        |r| format!("live_{}", r.lower_ext(40)),
    ),
    (
        "gitleaks/grafana-api-key",
        Syntaxes("grafana-api-key"),
        |r| format!("eyJrIjoi{}", r.lower_alnum(70)),
    ),
    (
        "gitleaks/grafana-cloud-api-token",
        Syntaxes("grafana-cloud-api-token"),
        |r| format!("glc_{}", r.lower_alnum(32)),
    ),
    (
        "gitleaks/grafana-cloud-api-token",
        Sample("grafana-cloud-api-token"),
        |r| format!("glc_{}", r.lower_alnum(32)),
    ),
    (
        "gitleaks/grafana-cloud-api-token",
        Text("loki_key: {s}"),
        |r| {
            let claims = format!(
                r#"{{"o":"{}","n":"stack-{}-hl-write-handson","k":"{}","m":{{"r":"us"}}}}"#,
                r.digits(6),
                r.digits(6),
                r.alnum(24)
            );
            format!("glc_{}", base64(claims.as_bytes(), true))
        },
    ),
    (
        "gitleaks/grafana-service-account-token",
        Syntaxes("grafana-service-account-token"),
        |r| format!("glsa_{}_{}", r.lower_alnum(32), r.hex(8)),
    ),
    (
        "gitleaks/grafana-service-account-token",
        Text("'Authorization': 'Bearer {s}'"),
        |r| format!("glsa_{}_{}", r.alnum(32), r.hex(8)),
    ),
    ("gitleaks/harness-api-key", Syntaxes("harness"), |r| {
        format!(
            "{}.{}.{}.{}",
            r.pick(&["pat", "sat"]),
            r.lower_alnum(22),
            r.lower_alnum(24),
            r.lower_alnum(20)
        )
    }),
    (
        "gitleaks/hashicorp-tf-api-token",
        Syntaxes("hashicorpToken"),
        |r| {
            let tail = r.between(60, 70);
            format!("{}.atlasv1.{}", r.hex(14), r.lower_ext(tail))
        },
    ),
    (
        "gitleaks/hashicorp-tf-api-token",
        Text("#token = \"{s}\""),
        |r| format!("{}.atlasv1.{}", r.alnum(14), r.alnum(67)),
    ),
    (
        "gitleaks/hashicorp-tf-password",
        Text("administrator_login_password = \"{s}\""),
        |r| {
            format!(
                "{}Is{}{}",
                r.pick(&["this", "that", "what"]),
                r.pick(&["Dog", "Cat", "Owl"]),
                r.digits(2)
            )
        },
    ),
    ("gitleaks/heroku-api-key", Syntaxes("heroku"), |r| r.uuid()),
    (
        "gitleaks/heroku-api-key",
        Text("const HEROKU_KEY = \"{s}\""),
        uuid_upper,
    ),
    (
        "gitleaks/heroku-api-key",
        Text("heroku_api_key = \"{s}\""),
        |r| r.uuid(),
    ),
    ("gitleaks/heroku-api-key-v2", Syntaxes("heroku"), |r| {
        format!("HRKU-AA{}", r.b64url(58))
    }),
    (
        "gitleaks/heroku-api-key-v2",
        Text("const KEY = \"{s}\""),
        |r| format!("HRKU-AA{}", r.b64url(58)),
    ),
    (
        "gitleaks/heroku-api-key-v2",
        Text("API_Key = \"{s}\""),
        |r| format!("HRKU-AA{}", r.b64url(58)),
    ),
    ("gitleaks/hubspot-api-key", Syntaxes("hubspot"), |r| {
        r.uuid()
    }),
    (
        "gitleaks/hubspot-api-key",
        Text("const hubspotKey = \"{s}\""),
        uuid_upper,
    ),
    (
        "gitleaks/huggingface-access-token",
        Syntaxes("huggingface"),
        |r| format!("hf_{}", r.letters(34)),
    ),
    (
        "gitleaks/huggingface-access-token",
        Text("huggingface-cli login --token {s}"),
        |r| format!("hf_{}", r.letters(34)),
    ),
    (
        "gitleaks/huggingface-access-token",
        Text("-H \"Authorization: Bearer {s}\""),
        |r| format!("hf_{}", r.letters(34)),
    ),
    (
        "gitleaks/huggingface-access-token",
        Text("DEV=1 HF_TOKEN={s} poetry run python app.py"),
        |r| format!("hf_{}", r.letters(34)),
    ),
    (
        "gitleaks/huggingface-access-token",
        Text("use_auth_token='{s}')"),
        |r| format!("hf_{}", r.letters(34)),
    ),
    (
        "gitleaks/huggingface-access-token",
        Text("CI_HUB_USER_TOKEN = \"{s}\""),
        |r| format!("hf_{}", r.letters(34)),
    ),
    (
        "gitleaks/huggingface-access-token",
        Text(
            "- Change line 5 and add your Hugging Face token, that is, instead of 'hf_token = \"ADD_YOUR_HUGGING_FACE_TOKEN_HERE\"', you will need to change it to something like'hf_token = \"{s}\"'",
        ),
        |r| format!("hf_{}", r.letters(34)),
    ),
    (
        "gitleaks/huggingface-access-token",
        Text("# Not critical, only usable on the sandboxed CI instance.\n\t\tTOKEN = \"{s}\""),
        |r| format!("hf_{}", r.letters(34)),
    ),
    (
        "gitleaks/huggingface-access-token",
        Text(
            "    parser.add_argument(\"--hf_token\", type=str, default='{s}', help=\"Hugging Face Access Token to access PyAnnote gated models\")",
        ),
        |r| format!("hf_{}", r.letters(34)),
    ),
    (
        "gitleaks/huggingface-organization-api-token",
        Syntaxes("huggingface"),
        |r| format!("api_org_{}", r.letters(34)),
    ),
    (
        "gitleaks/huggingface-organization-api-token",
        Text("{s}"),
        |r| format!("api_org_{}", r.letters(34)),
    ),
    (
        "gitleaks/huggingface-organization-api-token",
        Text("`{s}`"),
        |r| format!("api_org_{}", r.letters(34)),
    ),
    (
        "gitleaks/huggingface-organization-api-token",
        Text("\\'{s}'\\"),
        |r| format!("api_org_{}", r.letters(34)),
    ),
    (
        "gitleaks/huggingface-organization-api-token",
        Text(
            "def test_private_space(self):\n        hf_token = \"{s}\"  # Intentionally revealing this key for testing purposes\n        io = gr.load(",
        ),
        |r| format!("api_org_{}", r.letters(34)),
    ),
    (
        "gitleaks/huggingface-organization-api-token",
        Text(
            "\"news_train_dataset = datasets.load_dataset('nlpHakdang/aihub-news30k',  data_files = \\\"train_news_text.csv\\\", use_auth_token='{s}')\\n\",",
        ),
        |r| format!("api_org_{}", r.letters(34)),
    ),
    (
        "gitleaks/huggingface-organization-api-token",
        Text("os.environ['HUGGINGFACEHUB_API_TOKEN'] = '{s}'"),
        |r| format!("api_org_{}", r.letters(34)),
    ),
    ("gitleaks/infracost-api-token", Syntaxes("ico"), |r| {
        format!("ico-{}", r.alnum(32))
    }),
    (
        "gitleaks/infracost-api-token",
        Text(
            "  variable {\n    name = \"INFRACOST_API_KEY\"\n    secret_value = \"{s}\"\n    is_secret = true\n  }",
        ),
        |r| format!("ico-{}", r.alnum(32)),
    ),
    ("gitleaks/intercom-api-key", Syntaxes("intercom"), |r| {
        r.lower_ext(60)
    }),
    (
        "gitleaks/intra42-client-secret",
        Text("clientSecret := \"{s}\""),
        |r| format!("s-s4t2{}-{}", r.pick(&["ud", "af"]), r.hex(64)),
    ),
    ("gitleaks/intra42-client-secret", Text("{s}"), |r| {
        format!("s-s4t2{}-{}", r.pick(&["ud", "af"]), r.hex(64))
    }),
    (
        "gitleaks/jfrog-api-key",
        Text("--set imagePullSecretJfrog.password={s}"),
        |r| r.lower_alnum(73),
    ),
    ("gitleaks/jfrog-identity-token", Syntaxes("jfrog"), |r| {
        r.lower_alnum(64)
    }),
    (
        "gitleaks/jfrog-identity-token",
        Syntaxes("artifactory"),
        |r| r.lower_alnum(64),
    ),
    ("gitleaks/jfrog-identity-token", Syntaxes("bintray"), |r| {
        r.lower_alnum(64)
    }),
    ("gitleaks/jfrog-identity-token", Syntaxes("xray"), |r| {
        r.lower_alnum(64)
    }),
    (
        "gitleaks/jfrog-identity-token",
        Text("\"artifactory\", \"{s}\""),
        |r| r.lower_alnum(64),
    ),
    ("gitleaks/jwt", Syntaxes("jwt"), |r| jwt(r, "HS256", 43)),
    ("gitleaks/jwt", Text("{s}"), |r| jwt(r, "RS256", 342)),
    ("gitleaks/jwt", Text("JWT := {s}"), |r| jwt(r, "HS256", 43)),
    ("gitleaks/jwt", Text("\"access_token\": \"{s}\""), |r| {
        jwt(r, "HS512", 86)
    }),
    (
        "gitleaks/jwt",
        Text(
            "https://dai2-playlistserver.aws.syncbak.com/cpl/20980038/dai2v5/1.0/7b2264657669636554797065223a387d/master.m3u8?access_token={s}",
        ),
        |r| jwt(r, "HS256", 43),
    ),
    ("gitleaks/jwt", Text("\"SessionToken\": \"{s}\""), |r| {
        jwt(r, "HS512", 86)
    }),
    (
        "gitleaks/jwt",
        Text("2020/11/04 21:08:40 Access Token:\n\t\t\"{s}\""),
        |r| jwt(r, "HS256", 43),
    ),
    ("gitleaks/jwt", Text("\"idToken\": \"{s}\""), |r| {
        jwt(r, "RS256", 342)
    }),
    ("gitleaks/jwt", Text("TokenIssuer1WithAzp = \"{s}\""), |r| {
        jwt(r, "RS256", 342)
    }),
    ("gitleaks/jwt", Text("python examples/cli.py {s}"), |r| {
        jwt(r, "HS256", 43)
    }),
    (
        "gitleaks/jwt",
        Text("\"Authorization\": \"Bearer {s}\""),
        |r| jwt(r, "HS256", 43),
    ),
    ("gitleaks/jwt", Text("\"value\": \"Bearer {s}\","), |r| {
        jwt(r, "HS256", 43)
    }),
    (
        "gitleaks/jwt",
        Text("//                  authorization: '{s}',"),
        |r| jwt(r, "HS512", 86),
    ),
    (
        "gitleaks/jwt",
        Text("const TestKubernetesJWT_A = \"{s}\""),
        |r| jwt(r, "RS256", 342),
    ),
    (
        "gitleaks/jwt",
        Text(
            "string: grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer&assertion={s}",
        ),
        |r| jwt(r, "RS256", 342),
    ),
    (
        "gitleaks/jwt",
        Text(
            "$ curl \"http://admin:password@127.0.0.1:8080/api/v2/token\"\n\t\t{\"access_token\":\"{s}\"}",
        ),
        |r| jwt(r, "HS256", 43),
    ),
    ("gitleaks/jwt", Text("{\"signatures\": [ \"{s}\" ]}"), |r| {
        jwt(r, "HS256", 43)
    }),
    ("gitleaks/jwt", Text("\"id_token\": \"{s}\""), |r| {
        jwt(r, "RS256", 342)
    }),
    (
        "gitleaks/jwt",
        Text(
            "      # The following default key is generated by the local Supabase start and doesn't change\n\t\t- SUPABASE_SERVICE_ROLE_KEY={s}",
        ),
        |r| jwt(r, "HS256", 43),
    ),
    ("gitleaks/jwt", Text("Authorization: Bearer {s}"), |r| {
        jwt(r, "HS256", 43)
    }),
    (
        "gitleaks/jwt",
        Text("--header 'Authorization: Bearer {s}'"),
        |r| jwt(r, "HS256", 43),
    ),
    (
        "gitleaks/jwt",
        Text("\"Cookie\": \"auth-token={s}\""),
        |r| jwt(r, "HS256", 43),
    ),
    (
        "gitleaks/jwt",
        Text(
            "<li> <a class=\"cbtn btn-grad-s btn-shadow btn-width\"\n\t\ttarget=\"_blank\"\n\t\thref=\"https://demo.kuboard.cn/dashboard?k8sToken={s}\">\n\t\t在线演示</a></li>",
        ),
        |r| jwt(r, "RS256", 342),
    ),
    (
        "gitleaks/jwt",
        Text("String tokenWithNoneAlg = \"{s}\";"),
        unsigned_jwt,
    ),
    (
        "gitleaks/jwt",
        Text(
            "# Req: Invoke-RestMethod -Uri 'http://localhost:8085/users' -Headers @{ 'X-API-KEY' = '{s}' }",
        ),
        unsigned_jwt,
    ),
    ("gitleaks/jwt-base64", Text("{s}"), base64_jwt),
    ("gitleaks/jwt-base64", Text("token: {s}"), base64_jwt),
    ("gitleaks/jwt-base64", Text("\"{s}\""), base64_jwt),
    (
        "gitleaks/kubernetes-secret-yaml",
        Text("\napiVersion: v1\nkind: Secret\ndata:\n\tpassword: {s}"),
        kubernetes_value,
    ),
    (
        "gitleaks/kubernetes-secret-yaml",
        Text(
            "\napiVersion: v1\nkind: Secret\nmetadata:\n  name: heketi-secret\n  namespace: default\ndata:\n  # base64 encoded password. E.g.: echo -n \"mypassword\" | base64\n  key: {s}",
        ),
        kubernetes_value,
    ),
    (
        "gitleaks/kubernetes-secret-yaml",
        Text(
            "apiVersion: v1\n data:\n \textra: {s}\n kind: secret\n metadata:\n\t name: secret-sa-sample\n\t annotations:\n\t \tkubernetes.io/service-account.name: 'sa-name'",
        ),
        kubernetes_value,
    ),
    (
        "gitleaks/kubernetes-secret-yaml",
        Text(
            "apiVersion: v1\ndata:\n\tpassword: {s}\n\tusername: YWRtaW4=\nkind: Secret\nmetadata:\n\tcreationTimestamp: '2022-06-28T17:44:13Z'\n\tname: db-user-pass\n\tnamespace: default\ntype: Opaque",
        ),
        kubernetes_value,
    ),
    (
        "gitleaks/kubernetes-secret-yaml",
        Text(
            "apiVersion: v1\ndata:\n\t# the data is abbreviated in this example\n\tpassword: {s}\n\tusername: YWRtaW4=\nkind: Secret\nmetadata:\n\tname: db-user-pass\ntype: Opaque",
        ),
        kubernetes_value,
    ),
    (
        "gitleaks/kubernetes-secret-yaml",
        Text(
            "apiVersion: 'v1'\ndata:\n\textra: '{s}'\nkind: 'Secret'\nmetadata:\n\tname: 'secret-sa-sample'",
        ),
        kubernetes_value,
    ),
    (
        "gitleaks/kubernetes-secret-yaml",
        Text(
            "apiVersion: \"v1\"\ndata:\n\textra: \"{s}\"\nkind: \"secret\"\nmetadata:\n\tname: \"secret-sa-sample\"",
        ),
        kubernetes_value,
    ),
    (
        "gitleaks/kubernetes-secret-yaml",
        Text(
            "apiVersion: v1\ndata:\n  .dockercfg: |\n    {s}\nmetadata:\n  name: secret-dockercfg\ntype: kubernetes.io/dockercfg\nkind: Secret\n",
        ),
        kubernetes_value,
    ),
    (
        "gitleaks/kubernetes-secret-yaml",
        Text(
            "apiVersion: v1\ndata:\n  .dockercfg: >\n    {s}\nmetadata:\n  name: secret-dockercfg\ntype: kubernetes.io/dockercfg\nkind: Secret",
        ),
        kubernetes_value,
    ),
    (
        "gitleaks/kubernetes-secret-yaml",
        Text(
            "apiVersion: v1\nkind: secret\ndata:\n\textra: {s}\nmetadata:\n\tname: secret-sa-sample\n\tannotations:\n\t\tkubernetes.io/service-account.name: 'sa-name'",
        ),
        kubernetes_value,
    ),
    (
        "gitleaks/kubernetes-secret-yaml",
        Text(
            "apiVersion: v1\nkind: Secret\nmetadata:\n  name: ca-secret\ntype: Opaque\ndata:\n  ca.pem: {s}\n",
        ),
        |r| r.b64(600),
    ),
    (
        "gitleaks/kubernetes-secret-yaml",
        Text(
            "apiVersion: v1\nkind: Secret\nmetadata:\n\tname: db-user-pass\ntype: Opaque\ndata:\n\t# the data is abbreviated in this example\n\tpassword: {s}\n\tusername: YWRtaW4=\n",
        ),
        kubernetes_value,
    ),
    (
        "gitleaks/kubernetes-secret-yaml",
        Text(
            "apiVersion: 'v1'\nkind: 'Secret'\ndata:\n\tpassword: '{s}'\n\tusername: 'YWRtaW4='\nmetadata:\n\tname: 'db-user-pass'",
        ),
        kubernetes_value,
    ),
    (
        "gitleaks/kubernetes-secret-yaml",
        Text(
            "apiVersion: \"v1\"\nkind: \"Secret\"\ndata:\n\tpassword: \"{s}\"\n\tusername: \"YWRtaW4=\"\nmetadata:\n\tname: \"db-user-pass\"",
        ),
        kubernetes_value,
    ),
    (
        "gitleaks/kubernetes-secret-yaml",
        Text(
            "apiVersion: v1\nkind: Secret\nmetadata:\n  name: secret-dockercfg\ntype: kubernetes.io/dockercfg\ndata:\n  .dockercfg: |\n    {s}\n",
        ),
        kubernetes_value,
    ),
    (
        "gitleaks/kubernetes-secret-yaml",
        Text(
            "apiVersion: v1\nkind: Secret\nmetadata:\n  name: secret-dockercfg\ntype: kubernetes.io/dockercfg\ndata:\n  .dockercfg: >\n    {s}",
        ),
        kubernetes_value,
    ),
    ("gitleaks/kraken-access-token", Syntaxes("kraken"), |r| {
        let n = r.between(80, 90);
        r.chars(&format!("{LOWER}{DIGITS}/=_+-"), n)
    }),
    ("gitleaks/kucoin-access-token", Syntaxes("kucoin"), |r| {
        r.hex(24)
    }),
    ("gitleaks/kucoin-secret-key", Syntaxes("kucoin"), |r| {
        r.uuid()
    }),
    (
        "gitleaks/launchdarkly-access-token",
        Syntaxes("launchdarkly"),
        |r| r.lower_ext(40),
    ),
    ("gitleaks/linear-api-key", Syntaxes("linear"), |r| {
        format!("lin_api_{}", r.lower_alnum(40))
    }),
    ("gitleaks/linear-client-secret", Syntaxes("linear"), |r| {
        r.hex(32)
    }),
    (
        "gitleaks/linkedin-client-secret",
        Syntaxes("linkedin"),
        |r| r.lower_alnum(16),
    ),
    ("gitleaks/lob-api-key", Syntaxes("lob"), |r| {
        format!("test_{}", r.hex(35))
    }),
    ("gitleaks/looker-client-secret", Syntaxes("looker"), |r| {
        r.lower_alnum(24)
    }),
    ("gitleaks/mailchimp-api-key", Syntaxes("mailchimp"), |r| {
        format!("{}-us20", r.hex(32))
    }),
    (
        "gitleaks/mailchimp-api-key",
        Text("mailchimp_api_key: {s}"),
        |r| format!("{}-us18", r.hex(32)),
    ),
    (
        "gitleaks/mailchimp-api-key",
        Text("MAILCHIMPE_KEY = \"{s}\""),
        |r| format!("{}-us18", r.hex(32)),
    ),
    (
        "gitleaks/mailgun-private-api-token",
        Syntaxes("mailgun"),
        |r| format!("key-{}", r.hex(32)),
    ),
    ("gitleaks/mailgun-signing-key", Syntaxes("mailgun"), |r| {
        format!("{}-00001111-22223333", r.hex(32))
    }),
    (
        "gitleaks/mattermost-access-token",
        Syntaxes("mattermost"),
        |r| r.lower_alnum(26),
    ),
    ("gitleaks/maxmind-license-key", Syntaxes("maxmind"), |r| {
        format!("{}_{}_mmk", r.alnum(6), r.alnum(29))
    }),
    (
        "gitleaks/messagebird-api-token",
        Syntaxes("messagebird"),
        |r| r.lower_alnum(25),
    ),
    (
        "gitleaks/messagebird-api-token",
        Syntaxes("message-bird"),
        |r| r.lower_alnum(25),
    ),
    (
        "gitleaks/messagebird-api-token",
        Syntaxes("message_bird"),
        |r| r.lower_alnum(25),
    ),
    ("gitleaks/microsoft-teams-webhook", Text("{s}"), |r| {
        format!(
            "https://mycompany.webhook.office.com/webhookb2/{}@{}/IncomingWebhook/{}/{}",
            r.uuid(),
            r.uuid(),
            r.lower_alnum(32),
            r.uuid()
        )
    }),
    ("gitleaks/netlify-access-token", Syntaxes("netlify"), |r| {
        let n = r.between(40, 46);
        r.lower_ext(n)
    }),
    (
        "gitleaks/new-relic-browser-api-token",
        Syntaxes("new-relic"),
        |r| format!("NRJS-{}", r.hex(19)),
    ),
    (
        "gitleaks/new-relic-insert-key",
        Syntaxes("new-relic"),
        |r| format!("NRII-{}", r.hex(32)),
    ),
    (
        "gitleaks/new-relic-user-api-key",
        Syntaxes("new-relic"),
        |r| format!("NRAK-{}", r.lower_alnum(27)),
    ),
    ("gitleaks/notion-api-token", Text("{s}"), |r| {
        format!("ntn_{}{}", r.digits(11), r.alnum(35))
    }),
    (
        "gitleaks/npm-access-token",
        Syntaxes("npmAccessToken"),
        |r| format!("npm_{}", r.lower_alnum(36)),
    ),
    (
        "gitleaks/nuget-config-password",
        Text("<add key=\"Password\" value=\"{s}\" />"),
        |r| format!("Cleartext{}{}", r.alnum(6), r.digits(1)),
    ),
    (
        "gitleaks/nuget-config-password",
        Text("<add key=\"ClearTextPassword\" value=\"{s}\" />"),
        |r| format!("TestSource-{}", r.alnum(8)),
    ),
    (
        "gitleaks/nuget-config-password",
        Text("<add key=\"ClearTextPassword\" value=\"{s}\" />"),
        |r| format!("TestSource%{}%", r.alnum(8)),
    ),
    ("gitleaks/nytimes-access-token", Syntaxes("nytimes"), |r| {
        r.lower_alnum(32)
    }),
    ("gitleaks/octopus-deploy-api-key", Sample("octopus"), |r| {
        format!("API-{}", r.upper_alnum(26))
    }),
    (
        "gitleaks/octopus-deploy-api-key",
        Text("set apikey=\"{s}\""),
        |r| format!("API-{}", r.upper_alnum(26)),
    ),
    ("gitleaks/okta-access-token", Syntaxes("okta"), |r| {
        format!("00{}", r.b64url(40))
    }),
    (
        "gitleaks/okta-access-token",
        Text("\"oktaApiToken\": \"{s}\","),
        |r| format!("00{}", r.b64url(40)),
    ),
    (
        "gitleaks/okta-access-token",
        Text("\t\t\tvar OktaApiToken = \"{s}\";"),
        |r| format!("00{}", r.b64url(40)),
    ),
    ("gitleaks/openai-api-key", Syntaxes("openaiApiKey"), |r| {
        format!("sk-{}T3BlbkFJ{}", r.lower_alnum(20), r.lower_alnum(20))
    }),
    ("gitleaks/openai-api-key", Text("{s}"), |r| {
        format!("sk-proj-{}T3BlbkFJ{}", r.b64url(74), r.b64url(74))
    }),
    ("gitleaks/openai-api-key", Text("{s}"), |r| {
        format!("sk-svcacct-{}T3BlbkFJ{}", r.b64url(74), r.b64url(74))
    }),
    ("gitleaks/openai-api-key", Text("{s}"), |r| {
        format!("sk-admin-{}T3BlbkFJ{}", r.b64url(58), r.b64url(58))
    }),
    ("gitleaks/openshift-user-token", Syntaxes("oc"), |r| {
        format!("sha256~{}", r.b64url(43))
    }),
    (
        "gitleaks/openshift-user-token",
        Text("Authorization: Bearer {s}"),
        |r| format!("sha256~{}", r.b64url(43)),
    ),
    (
        "gitleaks/openshift-user-token",
        Text("oc login --token={s} "),
        |r| format!("sha256~{}", r.b64url(43)),
    ),
    ("gitleaks/perplexity-api-key", Syntaxes("perplexity"), |r| {
        format!("pplx-{}", r.alnum(48))
    }),
    ("gitleaks/plaid-secret-key", Syntaxes("plaid"), |r| {
        r.lower_alnum(30)
    }),
    ("gitleaks/plaid-api-token", Syntaxes("plaid"), |r| {
        format!(
            "access-{}-{}",
            r.pick(&["sandbox", "development", "production"]),
            r.uuid()
        )
    }),
    (
        "gitleaks/planetscale-password",
        Syntaxes("planetScale"),
        |r| {
            let n = *r.pick(&[32, 43, 64]);
            format!("pscale_pw_{}", r.lower_ext(n))
        },
    ),
    (
        "gitleaks/planetscale-api-token",
        Syntaxes("planetScale"),
        |r| {
            let n = *r.pick(&[32, 43, 64]);
            format!("pscale_tkn_{}", r.lower_ext(n))
        },
    ),
    (
        "gitleaks/planetscale-oauth-token",
        Syntaxes("planetScale"),
        |r| {
            let n = *r.pick(&[32, 43, 64]);
            format!("pscale_oauth_{}", r.lower_ext(n))
        },
    ),
    (
        "gitleaks/postman-api-token",
        Syntaxes("postmanAPItoken"),
        |r| format!("PMAK-{}-{}", r.hex(24), r.hex(34)),
    ),
    ("gitleaks/prefect-api-token", Syntaxes("api-token"), |r| {
        format!("pnu_{}", r.lower_alnum(36))
    }),
    ("gitleaks/private-key", Text("{s}"), |r| {
        pem_key(r, "PRIVATE KEY", "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC")
    }),
    ("gitleaks/private-key", Text("{s}\n"), |r| {
        pem_key(r, "RSA PRIVATE KEY", "MIIEpQIBAAKCAQEA")
    }),
    ("gitleaks/private-key", Text("{s}"), |r| {
        let body = r.pem_body("lQWGBGSVV4YBDAC", 120, "\n");
        format!(
            "-----BEGIN PGP PRIVATE KEY BLOCK-----\n{body}\n={}\n-----END PGP PRIVATE KEY BLOCK-----",
            r.b64(4)
        )
    }),
    ("gitleaks/privateai-api-token", Sample("privateai"), |r| {
        r.lower_alnum(32)
    }),
    (
        "gitleaks/pulumi-api-token",
        Syntaxes("pulumi-api-token"),
        |r| format!("pul-{}", r.hex(40)),
    ),
    ("gitleaks/pypi-upload-token", Syntaxes("pypi"), |r| {
        format!("pypi-AgEIcHlwaS5vcmc{}", r.hex(64))
    }),
    (
        "gitleaks/rapidapi-access-token",
        Syntaxes("rapidapi"),
        |r| r.lower_ext_short(50),
    ),
    ("gitleaks/readme-api-token", Syntaxes("api-token"), |r| {
        format!("rdme_{}", r.lower_alnum(70))
    }),
    (
        "gitleaks/rubygems-api-token",
        Syntaxes("rubygemsAPIToken"),
        |r| format!("rubygems_{}", r.hex(48)),
    ),
    ("gitleaks/scalingo-api-token", Syntaxes("scalingo"), |r| {
        format!("tk-us-{}", r.lower_ext_short(48))
    }),
    (
        "gitleaks/scalingo-api-token",
        Text("scalingo_api_token = \"{s}\""),
        |r| format!("tk-us-{}", r.lower_ext_short(48)),
    ),
    (
        "gitleaks/sendbird-access-token",
        Syntaxes("sendbird"),
        |r| r.hex(40),
    ),
    (
        "gitleaks/sendgrid-api-token",
        Syntaxes("sengridAPIToken"),
        |r| format!("SG.{}", r.lower_ext(66)),
    ),
    (
        "gitleaks/sendinblue-api-token",
        Syntaxes("sendinblue"),
        |r| format!("xkeysib-{}-{}", r.hex(64), r.lower_alnum(16)),
    ),
    ("gitleaks/sentry-access-token", Syntaxes("sentry"), |r| {
        r.hex(64)
    }),
    (
        "gitleaks/sentry-org-token",
        Syntaxes("sentry"),
        sentry_org_token,
    ),
    ("gitleaks/sentry-org-token", Text(" {s}"), sentry_org_token),
    (
        "gitleaks/sentry-org-token",
        Text("<token>{s}</token>"),
        sentry_org_token,
    ),
    (
        "gitleaks/sentry-org-token",
        Text("https://example.com?token={s}&other=stuff"),
        sentry_org_token,
    ),
    ("gitleaks/sentry-user-token", Syntaxes("sentry"), |r| {
        format!("sntryu_{}", r.hex(64))
    }),
    (
        "gitleaks/settlemint-personal-access-token",
        Syntaxes("settlemintToken"),
        |r| format!("sm_pat_{}", r.lower_alnum(16)),
    ),
    (
        "gitleaks/settlemint-application-access-token",
        Syntaxes("settlemintToken"),
        |r| format!("sm_aat_{}", r.lower_alnum(16)),
    ),
    (
        "gitleaks/settlemint-service-access-token",
        Syntaxes("settlemintToken"),
        |r| format!("sm_sat_{}", r.lower_alnum(16)),
    ),
    ("gitleaks/shippo-api-token", Syntaxes("shippo"), |r| {
        format!("shippo_{}_{}", r.pick(&["live", "test"]), r.hex(40))
    }),
    ("gitleaks/shopify-shared-secret", Syntaxes("shopify"), |r| {
        format!("shpss_{}", r.hex(32))
    }),
    ("gitleaks/shopify-access-token", Syntaxes("shopify"), |r| {
        format!("shpat_{}", r.hex(32))
    }),
    (
        "gitleaks/shopify-custom-access-token",
        Syntaxes("shopify"),
        |r| format!("shpca_{}", r.hex(32)),
    ),
    (
        "gitleaks/shopify-private-app-access-token",
        Syntaxes("shopify"),
        |r| format!("shppa_{}", r.hex(32)),
    ),
    (
        "gitleaks/sidekiq-secret",
        Syntaxes("BUNDLE_ENTERPRISE__CONTRIBSYS__COM"),
        |r| format!("{}:{}", r.hex(8), r.hex(8)),
    ),
    (
        "gitleaks/sidekiq-secret",
        Syntaxes("BUNDLE_GEMS__CONTRIBSYS__COM"),
        |r| format!("{}:{}", r.hex(8), r.hex(8)),
    ),
    (
        "gitleaks/sidekiq-secret",
        Text("BUNDLE_ENTERPRISE__CONTRIBSYS__COM: {s}"),
        |r| format!("{}:{}", r.hex(8), r.hex(8)),
    ),
    (
        "gitleaks/sidekiq-secret",
        Text("export BUNDLE_ENTERPRISE__CONTRIBSYS__COM = {s}"),
        |r| format!("{}:{}", r.hex(8), r.hex(8)),
    ),
    (
        "gitleaks/sidekiq-secret",
        Text("BUNDLE_GEMS__CONTRIBSYS__COM: \"{s}\""),
        |r| format!("{}:{}", r.hex(8), r.hex(8)),
    ),
    (
        "gitleaks/sidekiq-secret",
        Text("export BUNDLE_GEMS__CONTRIBSYS__COM=\"{s}\""),
        |r| format!("{}:{}", r.hex(8), r.hex(8)),
    ),
    (
        "gitleaks/sidekiq-secret",
        Text("export BUNDLE_ENTERPRISE__CONTRIBSYS__COM={s};"),
        |r| format!("{}:{}", r.hex(8), r.hex(8)),
    ),
    (
        "gitleaks/sidekiq-secret",
        Text("export BUNDLE_ENTERPRISE__CONTRIBSYS__COM={s} && echo 'hello world'"),
        |r| format!("{}:{}", r.hex(8), r.hex(8)),
    ),
    (
        "gitleaks/sidekiq-sensitive-url",
        Text("https://{s}@gems.contribsys.com/"),
        |r| format!("{}:{}", r.hex(8), r.hex(8)),
    ),
    (
        "gitleaks/sidekiq-sensitive-url",
        Text("http://{s}@enterprise.contribsys.com"),
        |r| format!("{}:{}", r.hex(8), r.hex(8)),
    ),
    (
        "gitleaks/sidekiq-sensitive-url",
        Text("http://{s}@enterprise.contribsys.com#heading1"),
        |r| format!("{}:{}", r.hex(8), r.hex(8)),
    ),
    (
        "gitleaks/sidekiq-sensitive-url",
        Text("http://{s}@enterprise.contribsys.com?param1=true&param2=false"),
        |r| format!("{}:{}", r.hex(8), r.hex(8)),
    ),
    (
        "gitleaks/sidekiq-sensitive-url",
        Text("http://{s}@enterprise.contribsys.com:80/path?param1=true&param2=false#heading1"),
        |r| format!("{}:{}", r.hex(8), r.hex(8)),
    ),
    ("gitleaks/slack-bot-token", Syntaxes("bot"), slack_bot),
    (
        "gitleaks/slack-bot-token",
        Text("\"bot_token1\": \"{s}\""),
        slack_bot,
    ),
    ("gitleaks/slack-user-token", Syntaxes("user"), slack_user),
    (
        "gitleaks/slack-user-token",
        Text("\"user_token1\": \"{s}\""),
        slack_user,
    ),
    (
        "gitleaks/slack-user-token",
        Text(
            "\"url_private\": \"https:\\/\\/files.slack.com\\/files-pri\\/T04MCQMEXQ9-F04MAA1PKE3\\/image.png?t={s}\"",
        ),
        |r| {
            format!(
                "xoxe-{}-{}-{}-{}",
                r.digits(13),
                r.digits(13),
                r.digits(13),
                r.hex(32)
            )
        },
    ),
    ("gitleaks/slack-app-token", Syntaxes("slack"), |r| {
        format!(
            "xapp-1-A{}-{}-{}",
            r.upper_alnum(10),
            r.digits(13),
            r.hex(64)
        )
    }),
    (
        "gitleaks/slack-app-token",
        Text("\"token4\": \"{s}\""),
        |r| {
            format!(
                "xapp-1-A{}-{}-{}",
                r.digits(10),
                r.digits(13),
                r.lower_alnum(64)
            )
        },
    ),
    (
        "gitleaks/slack-config-access-token",
        Syntaxes("access"),
        |r| format!("xoxe.xoxp-1-{}", r.alnum(163)),
    ),
    (
        "gitleaks/slack-config-access-token",
        Text("\"access_token5\": \"{s}\""),
        |r| format!("xoxe.xoxb-1-{}", r.lower_alnum(165)),
    ),
    (
        "gitleaks/slack-config-refresh-token",
        Syntaxes("refresh"),
        |r| format!("xoxe-1-{}", r.alnum(146)),
    ),
    ("gitleaks/slack-legacy-bot-token", Syntaxes("slack"), |r| {
        format!("xoxb-{}-{}", r.digits(12), r.alnum(24))
    }),
    (
        "gitleaks/slack-legacy-bot-token",
        Text("\"bot_token9\": \"{s}\""),
        |r| format!("xoxb-{}-{}", r.digits(8), r.alnum(19)),
    ),
    (
        "gitleaks/slack-legacy-bot-token",
        Text("\"bot_token11\": \"{s}"),
        |r| format!("xoxb-{}-{}", r.digits(12), r.lower_alnum(23)),
    ),
    (
        "gitleaks/slack-legacy-workspace-token",
        Syntaxes("slack"),
        |r| {
            format!(
                "xoxa-2-{}-{}-{}-{}",
                r.digits(9),
                r.digits(11),
                r.digits(13),
                r.hex(18)
            )
        },
    ),
    (
        "gitleaks/slack-legacy-workspace-token",
        Text("\"access_token1\": \"{s}"),
        |r| format!("xoxa-{}-{}", r.below(10), r.lower_alnum(12)),
    ),
    (
        "gitleaks/slack-legacy-workspace-token",
        Text("\"refresh_token2\": \"{s}"),
        |r| format!("xoxr-{}", r.lower_alnum(12)),
    ),
    ("gitleaks/slack-legacy-token", Syntaxes("slack"), |r| {
        format!(
            "xoxs-{}-{}-{}-{}",
            r.digits(12),
            r.digits(9),
            r.digits(10),
            r.hex(10)
        )
    }),
    (
        "gitleaks/slack-legacy-token",
        Text("\"access_token7\": \"{s}\""),
        |r| {
            format!(
                "xoxo-{}-{}-{}-{}",
                r.digits(6),
                r.digits(6),
                r.digits(6),
                r.hex(18)
            )
        },
    ),
    ("gitleaks/slack-webhook-url", Text("{s}"), |r| {
        format!("hooks.slack.com/services/{}", r.lower_alnum(44))
    }),
    ("gitleaks/slack-webhook-url", Text("{s}"), |r| {
        format!("http://hooks.slack.com/services/{}", r.lower_alnum(45))
    }),
    ("gitleaks/slack-webhook-url", Text("{s}"), |r| {
        format!(
            "https://hooks.slack.com/services/T{}/B{}/{}",
            r.upper_alnum(8),
            r.upper_alnum(8),
            r.alnum(24)
        )
    }),
    ("gitleaks/slack-webhook-url", Text("{s}"), |r| {
        format!("https://hooks.slack.com/workflows/{}", r.lower_alnum(46))
    }),
    ("gitleaks/slack-webhook-url", Text("{s}"), |r| {
        format!(
            "https://hooks.slack.com/workflows/T{}/A{}/{}/{}",
            r.upper_alnum(10),
            r.upper_alnum(10),
            r.digits(18),
            r.alnum(24)
        )
    }),
    ("gitleaks/slack-webhook-url", Text("{s}"), |r| {
        format!("https://hooks.slack.com/triggers/{}", r.lower_alnum(56))
    }),
    ("gitleaks/snyk-api-token", Syntaxes("snyk"), uuid_upper),
    (
        "gitleaks/snyk-api-token",
        Text("const SNYK_KEY = \"{s}\""),
        uuid_upper,
    ),
    (
        "gitleaks/snyk-api-token",
        Text("SNYK_TOKEN ::= \"{s}\""),
        uuid_upper,
    ),
    (
        "gitleaks/snyk-api-token",
        Text("SNYK_API_KEY ?= \"{s}\""),
        uuid_upper,
    ),
    (
        "gitleaks/snyk-api-token",
        Text("SNYK_OAUTH_TOKEN = \"{s}\""),
        uuid_upper,
    ),
    ("gitleaks/sonar-api-token", Syntaxes("sonar"), |r| {
        r.upper_alnum(40)
    }),
    (
        "gitleaks/sonar-api-token",
        Text("const SONAR_LOGIN = \"{s}\""),
        |r| r.upper_alnum(40),
    ),
    (
        "gitleaks/sonar-api-token",
        Text("SONAR.LOGIN ::= \"{s}\""),
        |r| r.upper_alnum(40),
    ),
    (
        "gitleaks/sonar-api-token",
        Text("SONAR.LOGIN ?= \"{s}\""),
        |r| r.upper_alnum(40),
    ),
    (
        "gitleaks/sonar-api-token",
        Text("SONAR_LOGIN := \"{s}\""),
        |r| format!("sqp_{}", r.upper_alnum(40)),
    ),
    (
        "gitleaks/sonar-api-token",
        Text("SONAR.TOKEN = \"{s}\""),
        |r| format!("sqa_{}", r.upper_alnum(40)),
    ),
    ("gitleaks/sourcegraph-access-token", Text("{s}"), |r| {
        format!(
            "sgp_{}_{}",
            r.chars("0123456789abcdefABCDEF", 16),
            r.chars("0123456789abcdefABCDEF", 40)
        )
    }),
    (
        "gitleaks/sourcegraph-access-token",
        Text("sourcegraph: {s}"),
        |r| r.chars("0123456789abcdefABCDEF", 40),
    ),
    ("gitleaks/sourcegraph-access-token", Text("{s}"), |r| {
        format!("sgp_{}", r.chars("0123456789abcdefABCDEF", 40))
    }),
    ("gitleaks/sourcegraph-access-token", Text("{s}"), |r| {
        format!("sgp_local_{}", r.chars("0123456789abcdefABCDEF", 40))
    }),
    ("gitleaks/square-access-token", Syntaxes("square"), |r| {
        let n = r.between(22, 60);
        format!("{}{}", r.pick(&["EAAA", "sq0atp-"]), r.b64url(n))
    }),
    ("gitleaks/square-access-token", Text("ARG token={s}"), |r| {
        format!("sq0atp-{}", r.lower_alnum(22))
    }),
    ("gitleaks/square-access-token", Text("ARG token={s}"), |r| {
        format!("EAAA{}", r.b64url(60))
    }),
    ("gitleaks/square-secret", Syntaxes("square"), |r| {
        format!("sq0csp-{}", r.b64url(43))
    }),
    ("gitleaks/square-secret", Text("value: \"{s}\""), |r| {
        format!("sq0csp-{}-{}", r.lower_alnum(16), r.alnum(26))
    }),
    (
        "gitleaks/squarespace-access-token",
        Syntaxes("squarespace"),
        |r| r.uuid(),
    ),
    ("gitleaks/stripe-access-token", Syntaxes("stripe"), |r| {
        format!("sk_test_{}", r.lower_alnum(30))
    }),
    ("gitleaks/stripe-access-token", Syntaxes("stripe"), |r| {
        format!("sk_prod_{}", r.lower_alnum(99))
    }),
    ("gitleaks/stripe-access-token", Text("{s}"), |r| {
        format!("rk_prod_51{}", r.alnum(97))
    }),
    ("gitleaks/sumologic-access-token", Syntaxes("sumo"), |r| {
        r.lower_alnum(64)
    }),
    (
        "gitleaks/sumologic-access-token",
        Text("export SUMOLOGIC_ACCESSKEY=\"{s}\""),
        |r| r.alnum(64),
    ),
    (
        "gitleaks/sumologic-access-token",
        Text("SUMO_ACCESS_KEY: {s}"),
        |r| r.alnum(64),
    ),
    (
        "gitleaks/sumologic-access-token",
        Text("sumo_access_key = \"{s}\""),
        |r| r.alnum(64),
    ),
    (
        "gitleaks/telegram-bot-api-token",
        Syntaxes("telegram"),
        |r| {
            let n = *r.pick(&[5, 8, 16]);
            format!("{}:A{}", r.digits(n), r.lower_ext_short(34))
        },
    ),
    (
        "gitleaks/telegram-bot-api-token",
        Text("TELEGRAM_API_TOKEN = {s}"),
        |r| format!("{}:A{}", r.digits(8), r.lower_ext_short(34)),
    ),
    (
        "gitleaks/telegram-bot-api-token",
        Text("telegram bot: {s}"),
        |r| format!("{}:A{}", r.digits(8), r.lower_ext_short(34)),
    ),
    ("gitleaks/travisci-access-token", Syntaxes("travis"), |r| {
        r.lower_alnum(22)
    }),
    ("gitleaks/trello-access-token", Syntaxes("trello"), |r| {
        r.chars(&format!("{UPPER}{LOWER}{DIGITS}-"), 32)
    }),
    ("gitleaks/twilio-api-key", Syntaxes("twilio"), |r| {
        format!("SK{}", r.hex(32))
    }),
    ("gitleaks/twitch-api-token", Syntaxes("twitch"), |r| {
        r.lower_alnum(30)
    }),
    ("gitleaks/twitter-api-key", Syntaxes("twitter"), |r| {
        r.lower_alnum(25)
    }),
    ("gitleaks/twitter-api-secret", Syntaxes("twitter"), |r| {
        r.lower_alnum(50)
    }),
    ("gitleaks/twitter-bearer-token", Syntaxes("twitter"), |r| {
        let n = r.between(80, 100);
        format!(
            "AAAAAAAAAAAAAAAAAAAAA{}{}",
            r.pick(&["M", "F", "B"]),
            r.chars(&format!("{UPPER}{LOWER}{DIGITS}%"), n - 1)
        )
    }),
    ("gitleaks/twitter-access-token", Syntaxes("twitter"), |r| {
        let (id, tail) = (r.between(15, 25), r.between(20, 40));
        format!("{}-{}", r.digits(id), r.alnum(tail))
    }),
    ("gitleaks/twitter-access-secret", Syntaxes("twitter"), |r| {
        r.lower_alnum(45)
    }),
    (
        "gitleaks/typeform-api-token",
        Syntaxes("typeformAPIToken"),
        |r| format!("tfp_{}", r.chars(&format!("{LOWER}{DIGITS}-_.="), 59)),
    ),
    ("gitleaks/vault-batch-token", Syntaxes("vault"), |r| {
        format!("hvb.{}", r.lower_ext_short(138))
    }),
    ("gitleaks/vault-batch-token", Text("{s}"), vault_batch),
    ("gitleaks/vault-service-token", Sample("vault"), |r| {
        format!("s.{}{}", r.below(10), r.alnum(23))
    }),
    ("gitleaks/vault-service-token", Text("token: {s}"), |r| {
        format!("s.{}{}", r.alnum(12), r.digits(12))
    }),
    ("gitleaks/vault-service-token", Sample("vault"), |r| {
        format!("hvs.{}{}", r.below(10), r.b64url(89))
    }),
    (
        "gitleaks/vault-service-token",
        Text("-vaultToken {s}\""),
        |r| format!("hvs.CAESI{}", r.b64url(120)),
    ),
    (
        "gitleaks/yandex-aws-access-token",
        Syntaxes("yandex"),
        |r| format!("YC{}", r.b64url(38)),
    ),
    ("gitleaks/yandex-api-key", Syntaxes("yandex"), |r| {
        let n = r.between(35, 38);
        format!("AQVN{}", r.b64url(n))
    }),
    ("gitleaks/yandex-access-token", Syntaxes("yandex"), |r| {
        let n = r.between(20, 60);
        format!("t1.{}.{}", r.b64url(n), r.b64url(86))
    }),
    ("gitleaks/zendesk-secret-key", Syntaxes("zendesk"), |r| {
        r.lower_alnum(40)
    }),
];
