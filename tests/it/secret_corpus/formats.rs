//! Positive samples: one generator per credential format, built from the format's
//! public description (prefix, length, alphabet, checksum or structure), then placed in
//! a realistic context — an env line, a config file, JSON, a log line, prose, a header.

use super::rng::{BASE32, DIGITS, HEX_UPPER, LOWER, Rng, UPPER, base62, base64url, crc32};

/// What a format generator makes: a bare token (placed in one of the shared contexts
/// under the variable name `var`) or a text that carries its own context.
pub(crate) enum Shape {
    Token { var: &'static str, secret: String },
    Framed { text: String, secret: String },
}

fn token(var: &'static str, secret: String) -> Shape {
    Shape::Token { var, secret }
}

fn framed(text: String, secret: String) -> Shape {
    Shape::Framed { text, secret }
}

/// A GitHub token: prefix, 30 base62 characters and the CRC32 of those, in base62.
fn github(r: &mut Rng, prefix: &str) -> String {
    let random = r.alnum(30);
    let check = base62(u64::from(crc32(random.as_bytes())), 6);
    format!("{prefix}{random}{check}")
}

/// A JWT with the given header and claims, and a random signature of `sig` characters.
pub(crate) fn jwt(r: &mut Rng, alg: &str, sig: usize) -> String {
    let header = format!(r#"{{"alg":"{alg}","typ":"JWT"}}"#);
    let claims = format!(
        r#"{{"sub":"{}","iat":{},"exp":{},"scope":"read write"}}"#,
        r.uuid(),
        1_700_000_000 + r.below(50_000_000),
        1_800_000_000 + r.below(50_000_000)
    );
    format!(
        "{}.{}.{}",
        base64url(header.as_bytes()),
        base64url(claims.as_bytes()),
        r.b64url(sig)
    )
}

/// A password a person or a generator would set: mixed classes, not a word.
fn password(r: &mut Rng) -> String {
    let length = 12 + r.below(12);
    let mut value = r.chars(
        "ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz23456789!#%^*-_",
        length,
    );
    value.insert(r.below(length), r.pick(&['7', '3', '9']).to_owned());
    value
}

fn pem(r: &mut Rng, label: &str, head: &str, chars: usize) -> String {
    let body = r.pem_body(head, chars, "\n");
    format!("-----BEGIN {label}-----\n{body}\n-----END {label}-----")
}

/// Every format: `(kind, generator)`. Kinds are the corpus's own names (one per
/// format), not the detector's.
/// A format's generator.
pub(crate) type MakeFormat = fn(&mut Rng) -> Shape;

pub(crate) const FORMATS: &[(&str, MakeFormat)] = &[
    // Cloud providers.
    ("aws_access_key_id", |r| {
        token("AWS_ACCESS_KEY_ID", format!("AKIA{}", r.chars(BASE32, 16)))
    }),
    ("aws_temporary_access_key_id", |r| {
        token("AWS_ACCESS_KEY_ID", format!("ASIA{}", r.chars(BASE32, 16)))
    }),
    ("aws_secret_access_key", |r| {
        let secret = r.b64(40);
        let text = match r.below(4) {
            0 => format!(
                "[default]\naws_access_key_id = AKIA{}\naws_secret_access_key = {secret}\nregion = eu-west-1",
                r.chars(BASE32, 16)
            ),
            1 => format!("export AWS_SECRET_ACCESS_KEY=\"{secret}\""),
            2 => format!(
                "{{\"AccessKeyId\": \"ASIA{}\", \"SecretAccessKey\": \"{secret}\", \"Expiration\": \"2025-01-01T00:00:00Z\"}}",
                r.chars(BASE32, 16)
            ),
            _ => format!("s3:\n  aws_secret_key: '{secret}'\n  bucket: media-prod"),
        };
        framed(text, secret)
    }),
    ("aws_credentials_csv", |r| {
        let secret = r.b64(40);
        let text = format!(
            "User name,Password,Access key ID,Secret access key,Console login link\nci-deploy,,AKIA{},{secret},https://{}.signin.aws.amazon.com/console",
            r.chars(BASE32, 16),
            r.digits(12)
        );
        framed(text, secret)
    }),
    ("netrc_password", |r| {
        let secret = password(r);
        framed(
            format!("machine api.github.com\n  login ci-bot\n  password {secret}\n"),
            secret,
        )
    }),
    ("docker_config_auth", |r| {
        let secret = super::rng::base64(format!("deploy:{}", password(r)).as_bytes(), true);
        framed(
            format!("{{\"auths\": {{\"registry.example.com\": {{\"auth\": \"{secret}\"}}}}}}"),
            secret,
        )
    }),
    ("aws_session_token", |r| {
        let secret = format!("IQoJb3JpZ2luX2Vj{}", r.b64(300));
        framed(format!("aws_session_token = {secret}"), secret)
    }),
    ("azure_storage_account_key", |r| {
        let secret = r.b64_bytes(64);
        framed(
            format!(
                "DefaultEndpointsProtocol=https;AccountName=stprod{};AccountKey={secret};EndpointSuffix=core.windows.net",
                r.lower_alnum(6)
            ),
            secret,
        )
    }),
    ("azure_sas_token", |r| {
        let sig = format!("{}%3D", r.b64(43).replace('+', "%2B").replace('/', "%2F"));
        let text = format!(
            "https://stprod{}.blob.core.windows.net/backups/db.bak?sv=2022-11-02&ss=b&srt=co&sp=rl&se=2026-01-01T00:00:00Z&st=2025-01-01T00:00:00Z&spr=https&sig={sig}",
            r.lower_alnum(5)
        );
        framed(text, sig)
    }),
    ("azure_service_bus_shared_access_key", |r| {
        let secret = r.b64_bytes(32);
        framed(
            format!(
                "Endpoint=sb://orders-{}.servicebus.windows.net/;SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey={secret}",
                r.lower_alnum(4)
            ),
            secret,
        )
    }),
    ("azure_ad_client_secret", |r| {
        let secret = format!(
            "{}{}Q~{}",
            r.chars(
                "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789",
                3
            ),
            r.chars(DIGITS, 1),
            r.chars(
                "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_~.-",
                34
            )
        );
        token("AZURE_CLIENT_SECRET", secret)
    }),
    ("azure_devops_pat", |r| {
        token(
            "AZURE_DEVOPS_EXT_PAT",
            format!("{}AZDO{}", r.alnum(76), r.alnum(4)),
        )
    }),
    ("gcp_service_account_json", |r| {
        let body = r.pem_body("MIIEvQIBADANBgkqhkiG9w0BAQEFAASC", 1620, "\\n");
        let secret = format!("-----BEGIN PRIVATE KEY-----\\n{body}\\n-----END PRIVATE KEY-----");
        let text = format!(
            "{{\n  \"type\": \"service_account\",\n  \"project_id\": \"billing-{p}\",\n  \"private_key_id\": \"{id}\",\n  \"private_key\": \"{secret}\\n\",\n  \"client_email\": \"ci@billing-{p}.iam.gserviceaccount.com\",\n  \"client_id\": \"{cid}\"\n}}",
            p = r.lower_alnum(6),
            id = r.hex(40),
            cid = r.digits(21)
        );
        framed(text, secret)
    }),
    ("gcp_api_key", |r| {
        token("GOOGLE_API_KEY", format!("AIza{}", r.b64url(35)))
    }),
    ("gcp_oauth_client_secret", |r| {
        token("GOOGLE_CLIENT_SECRET", format!("GOCSPX-{}", r.b64url(28)))
    }),
    ("google_oauth_access_token", |r| {
        token("GOOGLE_ACCESS_TOKEN", format!("ya29.{}", r.b64url(150)))
    }),
    ("alibaba_access_key_id", |r| {
        token(
            "ALIBABA_CLOUD_ACCESS_KEY_ID",
            format!("LTAI{}", r.alnum(20)),
        )
    }),
    ("tencent_secret_id", |r| {
        token("TENCENTCLOUD_SECRET_ID", format!("AKID{}", r.alnum(32)))
    }),
    ("digitalocean_pat", |r| {
        token("DIGITALOCEAN_TOKEN", format!("dop_v1_{}", r.hex(64)))
    }),
    ("digitalocean_oauth_token", |r| {
        token("DO_OAUTH_TOKEN", format!("doo_v1_{}", r.hex(64)))
    }),
    ("digitalocean_refresh_token", |r| {
        token("DO_REFRESH_TOKEN", format!("dor_v1_{}", r.hex(64)))
    }),
    ("heroku_api_key", |r| {
        token("HEROKU_API_KEY", format!("HRKU-AA{}", r.b64url(58)))
    }),
    ("ibm_cloud_api_key", |r| {
        let secret = r.b64url(44);
        framed(
            format!(
                "{{\"name\": \"deploy\", \"apikey\": \"{secret}\", \"iam_apikey_name\": \"auto-generated\"}}"
            ),
            secret,
        )
    }),
    ("okta_api_token", |r| {
        let secret = format!("00{}", r.b64url(40));
        framed(
            format!("curl -H \"Authorization: SSWS {secret}\" https://acme.okta.com/api/v1/users"),
            secret,
        )
    }),
    ("databricks_token", |r| {
        token("DATABRICKS_TOKEN", format!("dapi{}", r.hex(32)))
    }),
    ("terraform_cloud_token", |r| {
        token(
            "TFE_TOKEN",
            format!("{}.atlasv1.{}", r.alnum(14), r.alnum(67)),
        )
    }),
    ("pulumi_access_token", |r| {
        token("PULUMI_ACCESS_TOKEN", format!("pul-{}", r.hex(40)))
    }),
    ("planetscale_token", |r| {
        token(
            "PLANETSCALE_SERVICE_TOKEN",
            format!("pscale_tkn_{}", r.b64url(43)),
        )
    }),
    ("planetscale_password", |r| {
        token(
            "PLANETSCALE_PASSWORD",
            format!("pscale_pw_{}", r.b64url(43)),
        )
    }),
    ("supabase_access_token", |r| {
        token("SUPABASE_ACCESS_TOKEN", format!("sbp_{}", r.hex(40)))
    }),
    ("supabase_secret_key", |r| {
        token("SUPABASE_SECRET_KEY", format!("sb_secret_{}", r.b64url(31)))
    }),
    ("mapbox_secret_token", |r| {
        let claims = base64url(
            format!(
                "{{\"u\":\"acme{}\",\"a\":\"{}\"}}",
                r.lower_alnum(4),
                r.lower_alnum(25)
            )
            .as_bytes(),
        );
        token(
            "MAPBOX_SECRET_TOKEN",
            format!("sk.{claims}.{}", r.b64url(22)),
        )
    }),
    ("netlify_token", |r| {
        token("NETLIFY_AUTH_TOKEN", format!("nfp_{}", r.alnum(36)))
    }),
    ("fastly_api_token", |r| {
        let secret = r.b64url(32);
        framed(
            format!("curl -H \"Fastly-Key: {secret}\" https://api.fastly.com/service"),
            secret,
        )
    }),
    // Version control and dev platforms.
    ("github_classic_pat", |r| {
        token("GITHUB_TOKEN", github(r, "ghp_"))
    }),
    ("github_oauth_token", |r| {
        token("GH_OAUTH_TOKEN", github(r, "gho_"))
    }),
    ("github_user_to_server_token", |r| {
        token("GH_USER_TOKEN", github(r, "ghu_"))
    }),
    ("github_server_to_server_token", |r| {
        token("GITHUB_APP_TOKEN", github(r, "ghs_"))
    }),
    ("github_refresh_token", |r| {
        token("GH_REFRESH_TOKEN", github(r, "ghr_"))
    }),
    ("github_fine_grained_pat", |r| {
        token(
            "GH_TOKEN",
            format!("github_pat_11{}_{}", r.upper_alnum(20), r.alnum(59)),
        )
    }),
    ("gitlab_pat", |r| {
        token("GITLAB_TOKEN", format!("glpat-{}", r.b64url(20)))
    }),
    ("gitlab_pat_routable", |r| {
        token(
            "GITLAB_TOKEN",
            format!("glpat-{}.01.{}", r.b64url(36), r.lower_alnum(9)),
        )
    }),
    ("gitlab_deploy_token", |r| {
        token("CI_DEPLOY_PASSWORD", format!("gldt-{}", r.b64url(20)))
    }),
    ("gitlab_runner_token", |r| {
        token("RUNNER_TOKEN", format!("glrt-{}", r.b64url(20)))
    }),
    ("gitlab_pipeline_trigger_token", |r| {
        token("TRIGGER_TOKEN", format!("glptt-{}", r.hex(40)))
    }),
    ("gitlab_runner_registration_token", |r| {
        token("REGISTRATION_TOKEN", format!("GR1348941{}", r.b64url(20)))
    }),
    ("gitlab_job_token", |r| {
        token(
            "CI_JOB_TOKEN",
            format!("glcbt-{}_{}", r.hex(2), r.b64url(20)),
        )
    }),
    ("gitlab_feed_token", |r| {
        token("FEED_TOKEN", format!("glft-{}", r.b64url(20)))
    }),
    ("gitlab_oauth_app_secret", |r| {
        token("GITLAB_APP_SECRET", format!("gloas-{}", r.hex(64)))
    }),
    ("gitlab_incoming_mail_token", |r| {
        token(
            "INCOMING_MAIL_TOKEN",
            format!("glimt-{}", r.lower_alnum(25)),
        )
    }),
    ("gitlab_agent_token", |r| {
        token("AGENT_TOKEN", format!("glagent-{}", r.b64url(50)))
    }),
    ("gitlab_scim_token", |r| {
        token("SCIM_TOKEN", format!("glsoat-{}", r.b64url(20)))
    }),
    ("gitlab_feature_flag_client_token", |r| {
        token("UNLEASH_TOKEN", format!("glffct-{}", r.b64url(20)))
    }),
    ("bitbucket_app_password", |r| {
        token(
            "BITBUCKET_APP_PASSWORD",
            format!("ATBB{}{}", r.alnum(24), r.chars(HEX_UPPER, 8)),
        )
    }),
    ("bitbucket_access_token", |r| {
        token("BITBUCKET_TOKEN", format!("ATCTT3xFfGN0{}", r.b64url(180)))
    }),
    ("atlassian_api_token", |r| {
        token(
            "JIRA_API_TOKEN",
            format!("ATATT3xFfGF0{}={}", r.b64url(170), r.chars(HEX_UPPER, 8)),
        )
    }),
    ("huggingface_token", |r| {
        token(
            "HF_TOKEN",
            format!("hf_{}", r.chars(&format!("{UPPER}{LOWER}"), 34)),
        )
    }),
    ("huggingface_org_token", |r| {
        token(
            "HF_ORG_TOKEN",
            format!("api_org_{}", r.chars(&format!("{UPPER}{LOWER}"), 34)),
        )
    }),
    ("linear_api_key", |r| {
        token("LINEAR_API_KEY", format!("lin_api_{}", r.alnum(40)))
    }),
    ("notion_integration_secret", |r| {
        token("NOTION_TOKEN", format!("secret_{}", r.alnum(43)))
    }),
    ("notion_token", |r| {
        token(
            "NOTION_API_KEY",
            format!("ntn_{}{}", r.digits(11), r.alnum(35)),
        )
    }),
    ("figma_pat", |r| {
        token("FIGMA_TOKEN", format!("figd_{}", r.b64url(40)))
    }),
    ("airtable_pat", |r| {
        token(
            "AIRTABLE_TOKEN",
            format!("pat{}.{}", r.alnum(14), r.hex(64)),
        )
    }),
    ("postman_api_key", |r| {
        token(
            "POSTMAN_API_KEY",
            format!("PMAK-{}-{}", r.hex(24), r.hex(34)),
        )
    }),
    ("contentful_pat", |r| {
        token(
            "CONTENTFUL_MANAGEMENT_TOKEN",
            format!("CFPAT-{}", r.b64url(43)),
        )
    }),
    ("sonarqube_token", |r| {
        token(
            "SONAR_TOKEN",
            format!("{}_{}", r.pick(&["squ", "sqp", "sqa"]), r.hex(40)),
        )
    }),
    ("typeform_token", |r| {
        token(
            "TYPEFORM_TOKEN",
            format!("tfp_{}_{}", r.b64url(44), r.alnum(14)),
        )
    }),
    ("dropbox_access_token", |r| {
        token("DROPBOX_TOKEN", format!("sl.{}", r.b64url(136)))
    }),
    ("readme_api_key", |r| {
        token("README_API_KEY", format!("rdme_{}", r.lower_alnum(70)))
    }),
    ("adafruit_io_key", |r| {
        token("AIO_KEY", format!("aio_{}", r.alnum(28)))
    }),
    // CI and deployment.
    ("circleci_personal_token", |r| {
        token(
            "CIRCLECI_TOKEN",
            format!("CCIPAT_{}_{}", r.alnum(22), r.hex(40)),
        )
    }),
    ("circleci_project_token", |r| {
        token(
            "CIRCLE_PROJECT_TOKEN",
            format!("CCIPRJ_{}_{}", r.alnum(22), r.hex(40)),
        )
    }),
    ("buildkite_api_token", |r| {
        token("BUILDKITE_API_TOKEN", format!("bkua_{}", r.hex(40)))
    }),
    ("harness_pat", |r| {
        token(
            "HARNESS_API_KEY",
            format!("pat.{}.{}.{}", r.b64url(22), r.hex(24), r.alnum(20)),
        )
    }),
    ("octopus_deploy_api_key", |r| {
        token("OCTOPUS_API_KEY", format!("API-{}", r.upper_alnum(26)))
    }),
    ("prefect_api_key", |r| {
        token("PREFECT_API_KEY", format!("pnu_{}", r.alnum(36)))
    }),
    ("scalingo_api_token", |r| {
        token("SCALINGO_API_TOKEN", format!("tk-us-{}", r.b64url(48)))
    }),
    ("frameio_token", |r| {
        token("FRAMEIO_TOKEN", format!("fio-u-{}", r.b64url(64)))
    }),
    // Package registries.
    ("npm_access_token", |r| {
        let random = r.alnum(30);
        let check = base62(u64::from(crc32(random.as_bytes())), 6);
        token("NPM_TOKEN", format!("npm_{random}{check}"))
    }),
    ("npmrc_auth_token", |r| {
        let secret = r.uuid();
        framed(format!("//registry.npmjs.org/:_authToken={secret}"), secret)
    }),
    ("pypi_upload_token", |r| {
        token(
            "TWINE_PASSWORD",
            format!("pypi-AgEIcHlwaS5vcmc{}", r.b64url(140)),
        )
    }),
    ("rubygems_api_key", |r| {
        token("GEM_HOST_API_KEY", format!("rubygems_{}", r.hex(48)))
    }),
    ("nuget_api_key", |r| {
        token("NUGET_API_KEY", format!("oy2{}", r.lower_alnum(43)))
    }),
    ("crates_io_token", |r| {
        token("CARGO_REGISTRY_TOKEN", format!("cio{}", r.alnum(32)))
    }),
    ("docker_hub_pat", |r| {
        token("DOCKERHUB_TOKEN", format!("dckr_pat_{}", r.b64url(27)))
    }),
    ("docker_hub_org_token", |r| {
        token("DOCKER_ORG_TOKEN", format!("dckr_oat_{}", r.b64url(32)))
    }),
    ("artifactory_api_key", |r| {
        token("ARTIFACTORY_API_KEY", format!("AKCp{}", r.alnum(69)))
    }),
    ("clojars_token", |r| {
        token("CLOJARS_PASSWORD", format!("CLOJARS_{}", r.lower_alnum(60)))
    }),
    // Chat.
    ("slack_bot_token", |r| {
        token(
            "SLACK_BOT_TOKEN",
            format!("xoxb-{}-{}-{}", r.digits(12), r.digits(13), r.alnum(24)),
        )
    }),
    ("slack_user_token", |r| {
        token(
            "SLACK_USER_TOKEN",
            format!(
                "xoxp-{}-{}-{}-{}",
                r.digits(12),
                r.digits(12),
                r.digits(13),
                r.hex(32)
            ),
        )
    }),
    ("slack_app_token", |r| {
        token(
            "SLACK_APP_TOKEN",
            format!(
                "xapp-1-A{}-{}-{}",
                r.upper_alnum(10),
                r.digits(13),
                r.hex(64)
            ),
        )
    }),
    ("slack_config_token", |r| {
        token(
            "SLACK_CONFIG_TOKEN",
            format!("xoxe.xoxp-1-{}", r.b64url(140)),
        )
    }),
    ("slack_webhook", |r| {
        let secret = format!(
            "https://hooks.slack.com/services/T{}/B{}/{}",
            r.upper_alnum(10),
            r.upper_alnum(10),
            r.alnum(24)
        );
        token("SLACK_WEBHOOK_URL", secret)
    }),
    ("slack_workflow_webhook", |r| {
        let secret = format!(
            "https://hooks.slack.com/triggers/T{}/{}/{}",
            r.upper_alnum(10),
            r.digits(13),
            r.hex(32)
        );
        token("SLACK_TRIGGER_URL", secret)
    }),
    ("discord_webhook", |r| {
        let secret = format!(
            "https://discord.com/api/webhooks/{}/{}",
            r.digits(19),
            r.b64url(68)
        );
        token("DISCORD_WEBHOOK", secret)
    }),
    ("discord_bot_token", |r| {
        let id = super::rng::base64(r.digits(18).as_bytes(), false);
        token(
            "DISCORD_TOKEN",
            format!("{id}.{}.{}", r.b64url(6), r.b64url(38)),
        )
    }),
    ("teams_webhook", |r| {
        let secret = format!(
            "https://acme.webhook.office.com/webhookb2/{}@{}/IncomingWebhook/{}/{}",
            r.uuid(),
            r.uuid(),
            r.hex(32),
            r.uuid()
        );
        token("TEAMS_WEBHOOK_URL", secret)
    }),
    ("telegram_bot_token", |r| {
        token(
            "TELEGRAM_BOT_TOKEN",
            format!("{}:AA{}", r.digits(10), r.b64url(33)),
        )
    }),
    ("google_chat_webhook", |r| {
        let secret = format!(
            "https://chat.googleapis.com/v1/spaces/AAAA{}/messages?key=AIza{}&token={}%3D",
            r.b64url(7),
            r.b64url(35),
            r.b64url(43)
        );
        token("GCHAT_WEBHOOK", secret)
    }),
    // Payments and commerce.
    ("stripe_live_secret_key", |r| {
        token("STRIPE_SECRET_KEY", format!("sk_live_51{}", r.alnum(97)))
    }),
    ("stripe_test_secret_key", |r| {
        token("STRIPE_SECRET_KEY", format!("sk_test_51{}", r.alnum(97)))
    }),
    ("stripe_restricted_key", |r| {
        token("STRIPE_KEY", format!("rk_live_{}", r.alnum(24)))
    }),
    ("stripe_webhook_secret", |r| {
        token("STRIPE_WEBHOOK_SECRET", format!("whsec_{}", r.alnum(32)))
    }),
    ("square_access_token", |r| {
        token("SQUARE_ACCESS_TOKEN", format!("EAAA{}", r.b64url(60)))
    }),
    ("square_oauth_secret", |r| {
        token("SQUARE_APP_SECRET", format!("sq0csp-{}", r.b64url(43)))
    }),
    ("paypal_braintree_access_token", |r| {
        token(
            "BRAINTREE_TOKEN",
            format!(
                "access_token$production${}${}",
                r.lower_alnum(16),
                r.hex(32)
            ),
        )
    }),
    ("shopify_admin_token", |r| {
        token("SHOPIFY_ACCESS_TOKEN", format!("shpat_{}", r.hex(32)))
    }),
    ("shopify_shared_secret", |r| {
        token("SHOPIFY_API_SECRET", format!("shpss_{}", r.hex(32)))
    }),
    ("shopify_custom_app_token", |r| {
        token("SHOPIFY_TOKEN", format!("shpca_{}", r.hex(32)))
    }),
    ("shopify_private_app_password", |r| {
        token("SHOPIFY_PASSWORD", format!("shppa_{}", r.hex(32)))
    }),
    ("flutterwave_secret_key", |r| {
        token("FLW_SECRET_KEY", format!("FLWSECK_TEST-{}-X", r.hex(32)))
    }),
    ("shippo_token", |r| {
        token("SHIPPO_TOKEN", format!("shippo_live_{}", r.hex(40)))
    }),
    ("easypost_api_key", |r| {
        token("EASYPOST_API_KEY", format!("EZAK{}", r.lower_alnum(54)))
    }),
    ("duffel_token", |r| {
        token("DUFFEL_TOKEN", format!("duffel_live_{}", r.b64url(43)))
    }),
    // Email.
    ("sendgrid_api_key", |r| {
        token(
            "SENDGRID_API_KEY",
            format!("SG.{}.{}", r.b64url(22), r.b64url(43)),
        )
    }),
    ("mailgun_api_key", |r| {
        token("MAILGUN_API_KEY", format!("key-{}", r.hex(32)))
    }),
    ("mailchimp_api_key", |r| {
        token(
            "MAILCHIMP_API_KEY",
            format!("{}-us{}", r.hex(32), 1 + r.below(20)),
        )
    }),
    ("postmark_server_token", |r| {
        let secret = r.uuid();
        let text = match r.below(2) {
            0 => format!("X-Postmark-Server-Token: {secret}"),
            _ => format!("POSTMARK_API_TOKEN={secret}"),
        };
        framed(text, secret)
    }),
    ("resend_api_key", |r| {
        token(
            "RESEND_API_KEY",
            format!("re_{}_{}", r.alnum(8), r.alnum(24)),
        )
    }),
    ("mailersend_token", |r| {
        token("MAILERSEND_API_KEY", format!("mlsn.{}", r.hex(64)))
    }),
    ("brevo_api_key", |r| {
        token(
            "BREVO_API_KEY",
            format!("xkeysib-{}-{}", r.hex(64), r.alnum(16)),
        )
    }),
    // Observability.
    ("datadog_api_key", |r| {
        let secret = r.hex(32);
        let text = match r.below(3) {
            0 => format!("DD_API_KEY={secret}"),
            1 => format!("datadog:\n  api_key: {secret}\n  site: datadoghq.eu"),
            _ => format!(
                "curl -H \"DD-API-KEY: {secret}\" https://api.datadoghq.com/api/v1/validate"
            ),
        };
        framed(text, secret)
    }),
    ("datadog_app_key", |r| {
        let secret = r.hex(40);
        framed(format!("export DD_APP_KEY=\"{secret}\""), secret)
    }),
    ("new_relic_user_key", |r| {
        token("NEW_RELIC_API_KEY", format!("NRAK-{}", r.upper_alnum(27)))
    }),
    ("new_relic_insert_key", |r| {
        token("NEW_RELIC_INSERT_KEY", format!("NRII-{}", r.b64url(32)))
    }),
    ("new_relic_license_key", |r| {
        token("NEW_RELIC_LICENSE_KEY", format!("{}NRAL", r.hex(36)))
    }),
    ("sentry_user_token", |r| {
        token("SENTRY_AUTH_TOKEN", format!("sntryu_{}", r.hex(64)))
    }),
    ("sentry_org_token", |r| {
        let claims = format!(
            r#"{{"iat":{},"url":"https://sentry.io","region_url":"https://us.sentry.io","org":"acme-{}"}}"#,
            1_700_000_000 + r.below(9_000_000),
            r.lower_alnum(5)
        );
        token(
            "SENTRY_AUTH_TOKEN",
            format!("sntrys_{}_{}", base64url(claims.as_bytes()), r.b64url(43)),
        )
    }),
    ("sentry_dsn", |r| {
        let secret = format!(
            "https://{}@o{}.ingest.sentry.io/{}",
            r.hex(32),
            r.digits(6),
            r.digits(7)
        );
        token("SENTRY_DSN", secret)
    }),
    ("grafana_cloud_token", |r| {
        let claims = format!(
            r#"{{"o":"{}","n":"stack-{}-read","k":"{}","m":{{"r":"prod-eu-west-0"}}}}"#,
            r.digits(6),
            r.digits(6),
            r.alnum(24)
        );
        token(
            "GRAFANA_CLOUD_TOKEN",
            format!("glc_{}", base64url(claims.as_bytes())),
        )
    }),
    ("grafana_service_account_token", |r| {
        token(
            "GRAFANA_TOKEN",
            format!("glsa_{}_{}", r.alnum(32), r.hex(8)),
        )
    }),
    ("honeycomb_ingest_key", |r| {
        token(
            "HONEYCOMB_API_KEY",
            format!("hcaik_01{}", r.lower_alnum(56)),
        )
    }),
    ("honeycomb_configuration_key", |r| {
        let secret = r.alnum(22);
        framed(
            format!(
                "curl -H \"X-Honeycomb-Team: {secret}\" https://api.honeycomb.io/1/events/prod"
            ),
            secret,
        )
    }),
    ("dynatrace_token", |r| {
        token(
            "DT_API_TOKEN",
            format!("dt0c01.{}.{}", r.upper_alnum(24), r.upper_alnum(64)),
        )
    }),
    ("splunk_hec_token", |r| {
        let secret = r.uuid().to_uppercase();
        framed(
            format!(
                "curl -H \"Authorization: Splunk {secret}\" https://splunk:8088/services/collector"
            ),
            secret,
        )
    }),
    // Feature flags.
    ("launchdarkly_api_key", |r| {
        token("LD_API_KEY", format!("api-{}", r.uuid()))
    }),
    ("launchdarkly_sdk_key", |r| {
        token("LAUNCHDARKLY_SDK_KEY", format!("sdk-{}", r.uuid()))
    }),
    ("statsig_server_secret", |r| {
        token("STATSIG_SERVER_SECRET", format!("secret-{}", r.alnum(43)))
    }),
    // Secrets managers.
    ("vault_service_token", |r| {
        token("VAULT_TOKEN", format!("hvs.{}", r.b64url(90)))
    }),
    ("vault_batch_token", |r| {
        token("VAULT_TOKEN", format!("hvb.{}", r.b64url(138)))
    }),
    ("doppler_personal_token", |r| {
        token("DOPPLER_TOKEN", format!("dp.pt.{}", r.alnum(43)))
    }),
    ("doppler_service_token", |r| {
        token("DOPPLER_TOKEN", format!("dp.st.prd.{}", r.alnum(43)))
    }),
    ("doppler_service_account_token", |r| {
        token("DOPPLER_TOKEN", format!("dp.sa.{}", r.alnum(43)))
    }),
    ("onepassword_service_account_token", |r| {
        let claims = onepassword_claims(r, 14);
        token(
            "OP_SERVICE_ACCOUNT_TOKEN",
            format!("ops_{}", base64url(claims.as_bytes())),
        )
    }),
    ("onepassword_secret_key", |r| {
        token(
            "OP_SECRET_KEY",
            format!(
                "A3-{}-{}-{}-{}-{}-{}",
                r.upper_alnum(6),
                r.upper_alnum(6),
                r.upper_alnum(5),
                r.upper_alnum(5),
                r.upper_alnum(5),
                r.upper_alnum(5)
            ),
        )
    }),
    ("infisical_service_token", |r| {
        token(
            "INFISICAL_TOKEN",
            format!("st.{}.{}.{}", r.uuid(), r.hex(32), r.hex(32)),
        )
    }),
    ("age_secret_key", |r| {
        token(
            "SOPS_AGE_KEY",
            format!(
                "AGE-SECRET-KEY-1{}",
                r.chars("QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L", 58)
            ),
        )
    }),
    // AI APIs.
    ("openai_project_key", |r| {
        token(
            "OPENAI_API_KEY",
            format!("sk-proj-{}T3BlbkFJ{}", r.b64url(74), r.b64url(74)),
        )
    }),
    ("openai_legacy_key", |r| {
        token(
            "OPENAI_API_KEY",
            format!("sk-{}T3BlbkFJ{}", r.alnum(20), r.alnum(20)),
        )
    }),
    ("openai_service_account_key", |r| {
        token(
            "OPENAI_API_KEY",
            format!("sk-svcacct-{}T3BlbkFJ{}", r.b64url(74), r.b64url(74)),
        )
    }),
    ("openai_admin_key", |r| {
        token(
            "OPENAI_ADMIN_KEY",
            format!("sk-admin-{}T3BlbkFJ{}", r.b64url(58), r.b64url(58)),
        )
    }),
    ("anthropic_api_key", |r| {
        token(
            "ANTHROPIC_API_KEY",
            format!("sk-ant-api03-{}AA", r.b64url(93)),
        )
    }),
    ("anthropic_admin_key", |r| {
        token(
            "ANTHROPIC_ADMIN_KEY",
            format!("sk-ant-admin01-{}AA", r.b64url(93)),
        )
    }),
    ("groq_api_key", |r| {
        token("GROQ_API_KEY", format!("gsk_{}", r.alnum(52)))
    }),
    ("replicate_token", |r| {
        token("REPLICATE_API_TOKEN", format!("r8_{}", r.alnum(37)))
    }),
    ("perplexity_api_key", |r| {
        token("PERPLEXITY_API_KEY", format!("pplx-{}", r.alnum(48)))
    }),
    ("xai_api_key", |r| {
        token("XAI_API_KEY", format!("xai-{}", r.alnum(80)))
    }),
    ("openrouter_api_key", |r| {
        token("OPENROUTER_API_KEY", format!("sk-or-v1-{}", r.hex(64)))
    }),
    ("langsmith_api_key", |r| {
        token(
            "LANGSMITH_API_KEY",
            format!("lsv2_{}_{}_{}", r.pick(&["pt", "sk"]), r.hex(32), r.hex(10)),
        )
    }),
    ("pinecone_api_key", |r| {
        token(
            "PINECONE_API_KEY",
            format!("pcsk_{}_{}", r.alnum(6), r.alnum(63)),
        )
    }),
    ("cohere_api_key", |r| {
        let secret = r.alnum(40);
        framed(format!("co = cohere.Client(api_key=\"{secret}\")"), secret)
    }),
    ("deepseek_api_key", |r| {
        token("DEEPSEEK_API_KEY", format!("sk-{}", r.hex(32)))
    }),
    // Identity and communications.
    ("twilio_api_key", |r| {
        token("TWILIO_API_KEY", format!("SK{}", r.hex(32)))
    }),
    ("twilio_auth_token", |r| {
        let secret = r.hex(32);
        framed(
            format!(
                "TWILIO_ACCOUNT_SID=AC{}\nTWILIO_AUTH_TOKEN={secret}",
                r.hex(32)
            ),
            secret,
        )
    }),
    ("jwt_hs256", |r| token("SESSION", jwt(r, "HS256", 43))),
    ("jwt_rs256", |r| token("ID_TOKEN", jwt(r, "RS256", 342))),
    // Webhooks.
    ("zapier_webhook", |r| {
        token(
            "ZAPIER_HOOK",
            format!(
                "https://hooks.zapier.com/hooks/catch/{}/{}/",
                r.digits(7),
                r.lower_alnum(7)
            ),
        )
    }),
    ("ifttt_webhook", |r| {
        token(
            "IFTTT_URL",
            format!(
                "https://maker.ifttt.com/trigger/deploy/with/key/{}",
                r.b64url(22)
            ),
        )
    }),
    // Context-dependent formats: a value that only its surroundings make a secret.
    ("aws_secret_in_cli_transcript", |r| {
        let secret = r.b64(40);
        framed(
            format!(
                "$ aws configure\nAWS Access Key ID [None]: AKIA{}\nAWS Secret Access Key [None]: {secret}\nDefault region name [None]: eu-west-1",
                r.chars(BASE32, 16)
            ),
            secret,
        )
    }),
    ("aws_secret_in_prose", |r| {
        let secret = r.b64(40);
        let text = match r.below(3) {
            0 => format!(
                "Here are the AWS credentials for the ci user: access key AKIA{}, secret {secret}",
                r.chars(BASE32, 16)
            ),
            1 => format!("aws secret: {secret} (rotate after the migration)"),
            _ => format!(
                "The AWS secret key for the backup job is {secret}, keep it out of the wiki."
            ),
        };
        framed(text, secret)
    }),
    ("aws_secret_cli_flags", |r| {
        let secret = r.b64(40);
        let text = match r.below(2) {
            0 => format!("aws configure set aws_secret_access_key {secret} --profile ci"),
            _ => format!(
                "s3cmd --access_key=AKIA{} --secret_key={secret} ls s3://media-prod",
                r.chars(BASE32, 16)
            ),
        };
        framed(text, secret)
    }),
    ("aws_secret_unlabelled_pair", |r| {
        let secret = r.b64(40);
        let text = match r.below(3) {
            0 => format!(
                "{{\"key\": \"AKIA{}\", \"value\": \"{secret}\"}}",
                r.chars(BASE32, 16)
            ),
            1 => format!(
                "provider \"aws\" {{\n  access_key = \"AKIA{}\"\n  secret_key = \"{secret}\"\n}}",
                r.chars(BASE32, 16)
            ),
            _ => format!(
                "boto3.client(\"s3\", aws_access_key_id=\"AKIA{}\", aws_secret_access_key=\"{secret}\")",
                r.chars(BASE32, 16)
            ),
        };
        framed(text, secret)
    }),
    ("aws_secret_access_key_phrase", |r| {
        let secret = r.b64(40);
        let text = match r.below(3) {
            0 => format!("Your secret access key is {secret} and it is shown only once."),
            1 => format!(
                "Access key ID: AKIA{}\nSecret access key: {secret}",
                r.chars(BASE32, 16)
            ),
            _ => format!("- name: AWS_SECRET_ACCESS_KEY\n  value: {secret}"),
        };
        framed(text, secret)
    }),
    ("azure_storage_key_env", |r| {
        let secret = r.b64_bytes(64);
        framed(format!("export AZURE_STORAGE_KEY=\"{secret}\""), secret)
    }),
    ("azure_storage_key_cli_flag", |r| {
        let secret = r.b64_bytes(64);
        framed(
            format!(
                "az storage blob upload --account-name stprod{} --account-key {secret} --container-name backups --file db.bak",
                r.lower_alnum(5)
            ),
            secret,
        )
    }),
    ("azure_storage_keys_list_json", |r| {
        let secret = r.b64_bytes(64);
        framed(
            format!(
                "[\n  {{\n    \"creationTime\": \"2025-01-0{}T10:00:00.000000+00:00\",\n    \"keyName\": \"key1\",\n    \"permissions\": \"FULL\",\n    \"value\": \"{secret}\"\n  }}\n]",
                1 + r.below(9)
            ),
            secret,
        )
    }),
    ("azure_storage_key_powershell", |r| {
        let secret = r.b64_bytes(64);
        framed(
            format!(
                "$storageKey = \"{secret}\"\nNew-AzStorageContext -StorageAccountName stprod -StorageAccountKey $storageKey"
            ),
            secret,
        )
    }),
    ("cloudflare_user_api_token", |r| {
        token(
            "CLOUDFLARE_API_TOKEN",
            format!("cfut_{}{}", r.alnum(40), r.hex(8)),
        )
    }),
    ("cloudflare_account_api_token", |r| {
        token(
            "CF_ACCOUNT_TOKEN",
            format!("cfat_{}{}", r.alnum(40), r.hex(8)),
        )
    }),
    ("cloudflare_global_api_key", |r| {
        token(
            "CLOUDFLARE_API_KEY",
            format!("cfk_{}{}", r.alnum(40), r.hex(8)),
        )
    }),
    ("cloudflare_legacy_api_token", |r| {
        let secret = r.b64url(40);
        let text = match r.below(3) {
            0 => format!("CLOUDFLARE_API_TOKEN={secret}"),
            1 => format!("[cloudflare]\ntoken = \"{secret}\"\nzone = \"example.com\""),
            _ => format!("cloudflare: {secret}"),
        };
        framed(text, secret)
    }),
    ("cloudflare_legacy_global_api_key", |r| {
        let secret = r.hex(37);
        let text = match r.below(3) {
            0 => format!("CLOUDFLARE_GLOBAL_API_KEY={secret}\nCLOUDFLARE_EMAIL=ops@example.com"),
            1 => format!("cloudflare_api_key: \"{secret}\""),
            _ => format!("dns_cloudflare_api_key = {secret}"),
        };
        framed(text, secret)
    }),
    ("cloudflare_origin_ca_key", |r| {
        token(
            "CF_ORIGIN_CA_KEY",
            format!("v1.0-{}-{}", r.hex(24), r.hex(146)),
        )
    }),
    ("ftp_url_password", |r| {
        let secret = password(r).replace(['#', '%', '^'], "x");
        framed(
            format!("mirror: ftp://deploy:{secret}@ftp.example.net/releases/"),
            secret,
        )
    }),
    // Unencoded `@`, `/`, `#`, `?`, `:` in a password. A `/` after an `@` reads as a
    // path, as it does to any URL parser (`u:ab@host/cd@…`), so none is put there.
    ("url_password_with_reserved_characters", |r| {
        let first = *r.pick(&["@", "/", "#", "?", ":"]);
        let second = if first == "@" {
            *r.pick(&["@", "#", "!", "$"])
        } else {
            *r.pick(&["@", "/", "#", "!", "$"])
        };
        let secret = format!("{}{first}{}{second}{}", r.alnum(5), r.alnum(4), r.alnum(4));
        framed(
            format!(
                "{}://svc_{}:{secret}@{}",
                r.pick(&["https", "postgresql", "mysql", "sftp"]),
                r.lower_alnum(4),
                r.pick(&[
                    "db.internal:5432/app",
                    "files.example.net/in",
                    "registry.example.com"
                ])
            ),
            secret,
        )
    }),
    ("git_clone_url_credentials", |r| {
        let secret = r.alnum(24);
        framed(
            format!(
                "git clone https://{}:{secret}@git.example.com/acme/app.git",
                r.pick(&["ci-bot", "x-access-token", "oauth2", "deploy"])
            ),
            secret,
        )
    }),
    ("smtp_url_encoded_user", |r| {
        let secret = password(r).replace(['#', '%', '^'], "x");
        framed(
            format!("MAILER_DSN=smtps://alerts%40example.com:{secret}@smtp.example.com:465"),
            secret,
        )
    }),
    ("url_password_in_prose", |r| {
        let secret = password(r).replace(['#', '%', '^'], "x");
        framed(
            format!(
                "For the upload use sftp://admin:{secret}@10.0.{}.{}:22 and delete it afterwards.",
                r.below(255),
                1 + r.below(254)
            ),
            secret,
        )
    }),
    ("url_email_as_user", |r| {
        let secret = password(r).replace(['#', '%', '^'], "x");
        framed(
            format!(
                "SMTP_URL=smtp://alerts@{}.example.com:{secret}@smtp.example.com:587",
                r.lower_alnum(5)
            ),
            secret,
        )
    }),
    ("url_token_as_user", |r| {
        let secret = r.hex(40);
        framed(
            format!("git remote add origin https://{secret}@github.com/acme/app.git"),
            secret,
        )
    }),
    ("env_list_name_value", |r| {
        let secret = r.b64url(40);
        let text = match r.below(3) {
            0 => format!(
                "env:\n  - name: CLOUDFLARE_API_TOKEN\n    value: {secret}\n  - name: ZONE\n    value: example.com"
            ),
            1 => {
                format!("\"environment\": [{{\"name\": \"DD_API_KEY\", \"value\": \"{secret}\"}}]")
            }
            _ => format!("- name: API_TOKEN\n  value: \"{secret}\""),
        };
        framed(text, secret)
    }),
    ("telegram_bot_token_any_second_letter", |r| {
        let id_length = 9 + r.below(2);
        token(
            "TELEGRAM_TOKEN",
            format!(
                "{}:A{}{}",
                r.digits(id_length),
                r.pick(&["B", "C", "E", "F", "G", "H"]),
                r.b64url(33)
            ),
        )
    }),
    ("telegram_bot_api_url", |r| {
        let secret = format!("{}:AA{}", r.digits(10), r.b64url(33));
        framed(
            format!("curl -s https://api.telegram.org/bot{secret}/sendMessage -d chat_id=42"),
            secret,
        )
    }),
    // Connection strings and URLs with passwords.
    ("postgres_url", |r| {
        conn(r, "postgresql", "db.internal:5432/orders?sslmode=require")
    }),
    ("mysql_url", |r| {
        conn(r, "mysql", "mysql-primary.prod:3306/shop")
    }),
    ("mongodb_url", |r| {
        conn(
            r,
            "mongodb",
            "mongo-0.mongo:27017,mongo-1.mongo:27017/app?replicaSet=rs0&authSource=admin",
        )
    }),
    ("mongodb_srv_url", |r| {
        conn(
            r,
            "mongodb+srv",
            "cluster0.ab1cd.mongodb.net/?retryWrites=true&w=majority",
        )
    }),
    ("redis_url", |r| {
        let secret = password(r).replace(['#', '%', '^'], "x");
        framed(
            format!("REDIS_URL=rediss://:{secret}@cache.internal:6380/0"),
            secret,
        )
    }),
    ("amqp_url", |r| {
        conn(r, "amqps", "rabbit.internal:5671/vhost")
    }),
    ("http_basic_url", |r| {
        conn(r, "https", "registry.internal.example/v2/")
    }),
    ("jdbc_password_parameter", |r| {
        let secret = password(r);
        framed(
            format!(
                "spring.datasource.url=jdbc:postgresql://db:5432/app?user=app&password={secret}&ssl=true"
            ),
            secret,
        )
    }),
    ("ado_net_connection_string", |r| {
        let secret = password(r);
        framed(
            format!(
                "\"ConnectionStrings\": {{ \"Default\": \"Server=tcp:sql-prod.database.windows.net,1433;Database=app;User ID=app;Password={secret};Encrypt=True;\" }}"
            ),
            secret,
        )
    }),
    // Private keys.
    ("rsa_private_key", |r| {
        let k = pem(r, "RSA PRIVATE KEY", "MIIEpAIBAAKCAQEA", 1580);
        framed(format!("key.pem:\n{k}\n"), k)
    }),
    ("ec_private_key", |r| {
        let k = pem(r, "EC PRIVATE KEY", "MHcCAQEEI", 160);
        framed(format!("server_key: |\n{k}"), k)
    }),
    ("dsa_private_key", |r| {
        let k = pem(r, "DSA PRIVATE KEY", "MIIBuwIBAAKBgQ", 590);
        framed(k.clone(), k)
    }),
    ("pkcs8_private_key", |r| {
        let k = pem(r, "PRIVATE KEY", "MIIEvgIBADANBgkqhkiG9w0BAQEFAASC", 1620);
        framed(
            format!("Here is the key you asked for:\n\n{k}\n\nDelete this message."),
            k,
        )
    }),
    ("pkcs8_encrypted_private_key", |r| {
        let k = pem(r, "ENCRYPTED PRIVATE KEY", "MIIFHzBJBgkqhkiG9w0BBQ0w", 1700);
        framed(k.clone(), k)
    }),
    ("openssh_private_key", |r| {
        let k = pem(r, "OPENSSH PRIVATE KEY", "b3BlbnNzaC1rZXktdjEAAAAA", 380);
        framed(format!("$ cat ~/.ssh/id_ed25519\n{k}"), k)
    }),
    ("pgp_private_key_block", |r| {
        let body = r.pem_body("lQdGBF", 2400, "\n");
        let k = format!(
            "-----BEGIN PGP PRIVATE KEY BLOCK-----\n\n{body}\n={}\n-----END PGP PRIVATE KEY BLOCK-----",
            r.b64(4)
        );
        framed(k.clone(), k)
    }),
    ("legacy_encrypted_rsa_key", |r| {
        let body = r.pem_body("", 1600, "\n");
        let k = format!(
            "-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\nDEK-Info: AES-128-CBC,{}\n\n{body}\n-----END RSA PRIVATE KEY-----",
            r.chars(HEX_UPPER, 32)
        );
        framed(k.clone(), k)
    }),
    ("ssh2_encrypted_private_key", |r| {
        let body = r.pem_body("P2/56wAAA", 900, "\n");
        let k = format!(
            "---- BEGIN SSH2 ENCRYPTED PRIVATE KEY ----\nComment: \"rsa-key-20240101\"\n{body}\n---- END SSH2 ENCRYPTED PRIVATE KEY ----"
        );
        framed(k.clone(), k)
    }),
    ("putty_private_key", |r| {
        let public = r.pem_body("AAAAB3NzaC1yc2EAAAADAQABAAABAQ", 360, "\n");
        let private = r.pem_body("AAABAQ", 880, "\n");
        let k = format!(
            "PuTTY-User-Key-File-3: ssh-rsa\nEncryption: none\nComment: deploy@ci\nPublic-Lines: 6\n{public}\nPrivate-Lines: 14\n{private}\nPrivate-MAC: {}",
            r.hex(64)
        );
        framed(k.clone(), k)
    }),
    // Generic credential assignments with secret-like values.
    ("generic_password_env", |r| {
        let s = password(r);
        framed(format!("DB_PASSWORD={s}"), s)
    }),
    ("generic_password_yaml", |r| {
        let s = password(r);
        framed(
            format!("database:\n  user: app\n  password: \"{s}\"\n  host: db"),
            s,
        )
    }),
    ("generic_password_json", |r| {
        let s = password(r);
        framed(
            format!("{{\"username\": \"svc-reports\", \"password\": \"{s}\"}}"),
            s,
        )
    }),
    ("generic_password_properties", |r| {
        let s = password(r);
        framed(format!("spring.datasource.password={s}"), s)
    }),
    ("generic_secret_assignment", |r| {
        let s = r.b64url(40);
        framed(format!("SECRET_KEY = '{s}'"), s)
    }),
    ("generic_client_secret", |r| {
        let s = r.alnum(32);
        framed(
            format!("oauth:\n  client_id: reports\n  client_secret: {s}"),
            s,
        )
    }),
    ("generic_token_assignment", |r| {
        let s = r.b64url(32);
        framed(format!("auth_token = \"{s}\""), s)
    }),
    ("generic_refresh_token_json", |r| {
        let s = r.b64url(64);
        framed(
            format!(
                "{{\"access_token\": \"{}\", \"refresh_token\": \"{s}\", \"token_type\": \"bearer\"}}",
                r.b64url(48)
            ),
            s,
        )
    }),
    ("generic_api_key_header", |r| {
        let s = r.alnum(32);
        framed(
            format!("curl -H 'X-API-Key: {s}' https://api.example.com/v2/orders"),
            s,
        )
    }),
    ("generic_api_key_code", |r| {
        let s = r.hex(40);
        framed(format!("const apiKey = \"{s}\";"), s)
    }),
    ("generic_webhook_secret", |r| {
        let s = r.b64(44);
        framed(format!("webhook_secret: {s}"), s)
    }),
    ("kubernetes_secret_data", |r| {
        let s = r.b64_bytes(24);
        framed(
            format!("apiVersion: v1\nkind: Secret\ndata:\n  password: {s}"),
            s,
        )
    }),
    ("bearer_authorization_header", |r| {
        let s = r.b64url(48);
        framed(
            format!("GET /v1/me HTTP/1.1\nAuthorization: Bearer {s}\nAccept: */*"),
            s,
        )
    }),
    ("basic_authorization_header", |r| {
        let s = super::rng::base64(
            format!("svc-{}:{}", r.lower_alnum(5), password(r)).as_bytes(),
            true,
        );
        framed(format!("Authorization: Basic {s}"), s)
    }),
];

/// A URL `scheme://user:password@rest` with the password as the secret.
fn conn(r: &mut Rng, scheme: &str, rest: &str) -> Shape {
    let secret = password(r).replace(['#', '%', '^'], "x");
    let user = format!("svc_{}", r.lower_alnum(4));
    let url = format!("{scheme}://{user}:{secret}@{rest}");
    let text = match r.below(3) {
        0 => format!("DATABASE_URL={url}"),
        1 => format!("connecting to {url} failed: timeout after 30s"),
        _ => format!("{{\"dsn\": \"{url}\"}}"),
    };
    framed(text, secret)
}

/// Places a bare token in context number `which` (of the shared contexts).
pub(crate) fn in_context(var: &str, secret: &str, which: usize, r: &mut Rng) -> String {
    let lower = var.to_lowercase();
    match which % 12 {
        0 => format!("export {var}={secret}"),
        1 => format!("[deploy]\n{lower} = \"{secret}\"\ntimeout = 30"),
        2 => format!("env:\n  - name: {var}\n    value: {secret}\n"),
        3 => format!("{{\"service\": \"billing\", \"{lower}\": \"{secret}\", \"retries\": 3}}"),
        4 => format!(
            "2024-0{}-1{}T08:1{}:22.481Z WARN worker-{} rejected credential {secret} (status=401)",
            1 + r.below(9),
            r.below(10),
            r.below(10),
            r.below(40)
        ),
        5 => format!("hey, the build is broken again, try {secret} until I rotate it"),
        6 => format!("client = Client(\"{secret}\", timeout=10)"),
        7 => format!("| {lower} | {secret} | prod |"),
        8 => format!("Set `{var}` to `{secret}` in the CI settings."),
        9 => format!("curl 'https://api.example.com/v1/items?key={secret}&page=2'"),
        10 => format!("The new one is {secret}. Please rotate the old one."),
        _ => format!("settings = {{'{lower}': '{secret}', 'debug': False}}"),
    }
}

/// The claims of a 1Password service account token, its e-mail's local part
/// `email_chars` long.
pub(super) fn onepassword_claims(r: &mut Rng, email_chars: usize) -> String {
    format!(
        r#"{{"signInAddress":"my.1password.com","userAuth":{{"method":"SRPg-4096","alg":"PBES2g-HS256","iterations":650000,"salt":"{}"}},"email":"{}@1passwordserviceaccounts.com","srpX":"{}","muk":{{"alg":"A256GCM","ext":true,"k":"{}","key_ops":["encrypt","decrypt"],"kty":"oct","kid":"mp"}},"secretKey":"A3-{}","throttleSecret":{{"seed":"{}","deviceUuid":"{}"}},"deviceUuid":"{}"}}"#,
        r.b64url(22),
        r.lower_alnum(email_chars),
        r.hex(64),
        r.b64url(43),
        r.upper_alnum(32),
        r.hex(64),
        r.lower_alnum(26),
        r.lower_alnum(26)
    )
}
