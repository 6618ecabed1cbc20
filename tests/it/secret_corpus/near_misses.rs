//! Near-miss negatives: text that looks like a credential to a careless pattern and is
//! not one — documented example keys, placeholders, empty key markers, public keys and
//! certificates, hashes, UUIDs, commit ids, base64 images, identifiers that share a
//! prefix, prose about tokens and passwords, low-entropy assignments, URLs without a
//! password. Each template is drawn several times with fresh random parts.

use super::rng::{BASE32, Rng, base64};

/// Every near-miss template: `(what it is, generator)`.
/// A near miss's generator.
pub(crate) type MakeNearMiss = fn(&mut Rng) -> String;

pub(crate) const NEAR_MISSES: &[(&str, MakeNearMiss)] = &[
    // Documented example keys.
    ("aws_doc_access_key", |_| {
        "aws_access_key_id = AKIAIOSFODNN7EXAMPLE".to_owned()
    }),
    ("aws_doc_secret_key", |_| {
        "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY".to_owned()
    }),
    ("aws_doc_env", |_| {
        "export AWS_ACCESS_KEY_ID=AKIAIOSFODNN7EXAMPLE\nexport AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY".to_owned()
    }),
    ("aws_doc_other_example", |r| {
        format!(
            "aws_access_key_id={}EXAMPLE",
            r.pick(&["AKIAI44QH8DHB", "AKIAJZ5OCVW6FX", "ASIAIOSFODNN7"])
        )
    }),
    ("example_suffixed_token", |r| {
        format!("GITHUB_TOKEN=ghp_{}EXAMPLE{}", r.alnum(20), r.alnum(9))
    }),
    // Placeholders.
    ("x_placeholder_github", |r| {
        format!("token: ghp_{}", "x".repeat(36 + r.below(3)))
    }),
    ("x_placeholder_stripe", |_| {
        "STRIPE_SECRET_KEY=sk_live_XXXXXXXXXXXXXXXXXXXXXXXX".to_owned()
    }),
    ("x_placeholder_slack", |_| {
        "SLACK_BOT_TOKEN=xoxb-XXXXXXXXXXXX-XXXXXXXXXXXXX-XXXXXXXXXXXXXXXXXXXXXXXX".to_owned()
    }),
    ("x_placeholder_aws", |_| {
        "aws_access_key_id = AKIAXXXXXXXXXXXXXXXX".to_owned()
    }),
    ("x_placeholder_aws_secret", |_| {
        "aws_secret_access_key = XXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXX".to_owned()
    }),
    ("your_placeholder", |r| {
        format!(
            "{} = \"{}\"",
            r.pick(&["api_key", "OPENAI_API_KEY", "client_secret", "auth_token"]),
            r.pick(&[
                "your-api-key-here",
                "your_api_key",
                "YOUR_SECRET_KEY_HERE",
                "your-openai-key"
            ])
        )
    }),
    ("your_prefixed_placeholder", |r| {
        format!(
            "{}{}",
            r.pick(&["sk-", "sk-proj-", "ghp_", "xoxb-", "glpat-"]),
            r.pick(&[
                "your-api-key-goes-here",
                "YOUR_TOKEN_HERE_PLEASE_REPLACE",
                "your_personal_access_token"
            ])
        )
    }),
    ("angle_placeholder", |r| {
        format!(
            "{}: <{}>",
            r.pick(&["password", "api_key", "token", "secret"]),
            r.pick(&[
                "your-password",
                "API_KEY",
                "insert token here",
                "paste-secret-here"
            ])
        )
    }),
    ("angle_in_url", |_| {
        "postgres://app:<password>@db.internal:5432/app".to_owned()
    }),
    ("env_reference", |r| {
        format!(
            "{} = \"${{{}}}\"",
            r.pick(&["password", "api_key", "token", "client_secret"]),
            r.pick(&["DB_PASSWORD", "API_KEY", "GITHUB_TOKEN", "CLIENT_SECRET"])
        )
    }),
    ("env_reference_url", |_| {
        "DATABASE_URL=postgres://app:${DB_PASSWORD}@db:5432/app".to_owned()
    }),
    ("template_reference", |r| {
        format!(
            "token: {{{{ secrets.{} }}}}",
            r.pick(&["GITHUB_TOKEN", "NPM_TOKEN", "DEPLOY_KEY"])
        )
    }),
    ("shell_variable", |r| {
        format!(
            "curl -H \"Authorization: Bearer ${}\" https://api.example.com",
            r.pick(&["TOKEN", "GITHUB_TOKEN", "API_KEY"])
        )
    }),
    ("stars", |r| {
        format!(
            "{}: {}",
            r.pick(&["password", "api_key", "secret", "token"]),
            "*".repeat(8 + r.below(24))
        )
    }),
    ("stars_in_url", |_| {
        "mysql://root:********@localhost:3306/shop".to_owned()
    }),
    ("redacted_marker", |r| {
        format!(
            "{}={}",
            r.pick(&["password", "token", "api_key"]),
            r.pick(&[
                "[REDACTED]",
                "[redacted]",
                "REDACTED",
                "[FILTERED]",
                "<redacted>"
            ])
        )
    }),
    ("changeme", |r| {
        format!(
            "{}: {}",
            r.pick(&["password", "admin_password", "DB_PASSWORD"]),
            r.pick(&["changeme", "change-me", "CHANGEME", "changeit"])
        )
    }),
    ("placeholder_word_in_url", |r| {
        format!(
            "{}://{}:{}@localhost/db",
            r.pick(&["postgres", "mysql", "amqp", "redis"]),
            r.pick(&["user", "app"]),
            r.pick(&["password", "pass", "secret", "PASSWORD", "changeme", "xxx"])
        )
    }),
    ("ellipsis_token", |r| {
        format!(
            "{} Use the token ghp_... from settings, or sk-... for OpenAI.",
            r.pick(&["Note:", "Hint:"])
        )
    }),
    ("dummy_key", |r| {
        format!(
            "api_key = \"{}\"",
            r.pick(&[
                "dummy",
                "test",
                "dummy-api-key",
                "fake-key-for-tests",
                "placeholder"
            ])
        )
    }),
    // Key markers and public material.
    ("empty_key_markers", |r| {
        let l = r.pick(&[
            "RSA PRIVATE KEY",
            "PRIVATE KEY",
            "EC PRIVATE KEY",
            "OPENSSH PRIVATE KEY",
        ]);
        format!("-----BEGIN {l}-----\n-----END {l}-----")
    }),
    ("placeholder_key_markers", |r| {
        let l = r.pick(&["RSA PRIVATE KEY", "PRIVATE KEY", "OPENSSH PRIVATE KEY"]);
        format!(
            "-----BEGIN {l}-----\n{}\n-----END {l}-----",
            r.pick(&["...", "<your key here>", "(paste key)", "…"])
        )
    }),
    ("prose_about_key_markers", |_| {
        "A PEM file starts with a line like -----BEGIN PRIVATE KEY----- and ends with the matching END line.".to_owned()
    }),
    ("public_key_pem", |r| {
        format!(
            "-----BEGIN PUBLIC KEY-----\n{}\n-----END PUBLIC KEY-----",
            r.pem_body("MIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEA", 392, "\n")
        )
    }),
    ("certificate_pem", |r| {
        format!(
            "-----BEGIN CERTIFICATE-----\n{}\n-----END CERTIFICATE-----",
            r.pem_body("MIIDdzCCAl+gAwIBAgIE", 1200, "\n")
        )
    }),
    ("ssh_public_key", |r| {
        format!(
            "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI{} deploy@ci",
            r.b64(43)
        )
    }),
    ("ssh_rsa_public_key", |r| {
        format!(
            "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQ{} alice@laptop",
            r.b64(340)
        )
    }),
    ("pgp_public_key", |r| {
        format!(
            "-----BEGIN PGP PUBLIC KEY BLOCK-----\n\n{}\n-----END PGP PUBLIC KEY BLOCK-----",
            r.pem_body("mQINBF", 700, "\n")
        )
    }),
    // Hashes, ids, digests.
    ("sha1_hash", |r| format!("{}  release.tar.gz", r.hex(40))),
    ("sha256_hash", |r| format!("sha256: {}", r.hex(64))),
    ("sha512_hash", |r| {
        format!("checksum = \"sha512:{}\"", r.hex(128))
    }),
    ("md5_hash", |r| format!("ETag: \"{}\"", r.hex(32))),
    ("docker_digest", |r| {
        format!("image: ghcr.io/acme/api@sha256:{}", r.hex(64))
    }),
    ("git_commit", |r| {
        format!(
            "commit {}\nAuthor: Dev <dev@example.com>\n\n    Fix retry loop",
            r.hex(40)
        )
    }),
    ("git_short_log", |r| {
        format!(
            "{} Merge pull request #{} from acme/fix",
            r.hex(7),
            r.below(9000)
        )
    }),
    ("uuid_ids", |r| {
        format!("request_id={} trace_id={}", r.uuid(), r.uuid())
    }),
    ("uuid_json", |r| {
        format!(
            "{{\"id\": \"{}\", \"tenantId\": \"{}\"}}",
            r.uuid(),
            r.uuid()
        )
    }),
    ("ulid", |r| {
        format!(
            "order 01H{} created",
            r.chars("0123456789ABCDEFGHJKMNPQRSTVWXYZ", 23)
        )
    }),
    ("sri_hash", |r| {
        format!(
            "<script src=\"app.js\" integrity=\"sha384-{}\"></script>",
            r.b64(64)
        )
    }),
    ("npm_lock_integrity", |r| {
        format!("\"integrity\": \"sha512-{}==\"", r.b64(86))
    }),
    ("ethereum_address", |r| format!("send to 0x{}", r.hex(40))),
    ("aws_arn", |r| {
        format!(
            "arn:aws:iam::{}:role/deploy-{}",
            r.digits(12),
            r.lower_alnum(6)
        )
    }),
    ("aws_request_id", |r| {
        format!("x-amz-request-id: {}", r.chars(BASE32, 16))
    }),
    ("twilio_account_sid", |r| {
        format!("TWILIO_ACCOUNT_SID=AC{}", r.hex(32))
    }),
    ("stripe_publishable_key", |r| {
        format!("STRIPE_PUBLISHABLE_KEY=pk_live_{}", r.alnum(24))
    }),
    ("stripe_object_ids", |r| {
        format!("charge ch_{} for customer cus_{}", r.alnum(24), r.alnum(14))
    }),
    ("slack_ids", |r| {
        format!(
            "channel C{} user U{} team T{}",
            r.chars("0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ", 10),
            r.chars("0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ", 10),
            r.chars("0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ", 10)
        )
    }),
    ("google_client_id", |r| {
        format!(
            "client_id: {}-{}.apps.googleusercontent.com",
            r.digits(12),
            r.lower_alnum(32)
        )
    }),
    ("base64_png_data_uri", |r| {
        let n = 600 + r.below(600);
        format!(
            "<img src=\"data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAA{}\">",
            r.b64(n)
        )
    }),
    ("base64_jpeg_data_uri", |r| {
        format!(
            "background: url(data:image/jpeg;base64,/9j/4AAQSkZJRgABAQ{});",
            r.b64(800)
        )
    }),
    ("base64_text", |r| {
        format!(
            "payload: {}",
            base64(
                format!(
                    "hello from order {} shipped to warehouse {}",
                    r.digits(6),
                    r.digits(3)
                )
                .as_bytes(),
                true
            )
        )
    }),
    ("jwt_header_only", |_| {
        "The header eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9 decodes to {\"alg\":\"HS256\"}.".to_owned()
    }),
    // Prefixes in ordinary words and too-short tokens.
    ("prefix_in_prose", |_| {
        "Personal access tokens start with ghp_, fine-grained ones with github_pat_, GitLab's with glpat-.".to_owned()
    }),
    ("short_prefixed_token", |r| {
        format!(
            "{}{}",
            r.pick(&[
                "ghp_", "glpat-", "xoxb-", "npm_", "sk_live_", "AKIA", "hf_", "gsk_"
            ]),
            r.alnum(6)
        )
    }),
    ("sk_in_words", |_| {
        "We use scikit-learn (sk-learn) and task-runner; desk-booking and risk-scores too."
            .to_owned()
    }),
    ("key_dash_words", |r| {
        format!(
            "See key-{} of the glossary and api-{} for details.",
            r.pick(&["value", "rotation", "management"]),
            r.pick(&["design", "reference"])
        )
    }),
    ("snake_case_identifiers", |_| {
        "fn rotate_secret_key(secret_name: &str, token_count: usize) -> Result<(), Error>"
            .to_owned()
    }),
    ("css_and_paths", |r| {
        format!(
            "/static/js/main.{}.chunk.js /assets/fonts/inter-{}.woff2",
            r.hex(8),
            r.hex(8)
        )
    }),
    // Prose and settings with the words.
    ("prose_token", |r| {
        format!(
            "{} The token expired; request a new token from the portal.",
            r.pick(&["FYI:", "Update:"])
        )
    }),
    ("prose_secret", |_| {
        "The secret to a good deploy is small changes. Keep your secrets in the vault.".to_owned()
    }),
    ("prose_password", |r| {
        format!(
            "To reset your password, click the link. Password: {}.",
            r.pick(&["at least 12 characters", "see the policy", "not set"])
        )
    }),
    ("prose_api_key", |_| {
        "Your API key is shown once on the settings page; the client secret is hidden.".to_owned()
    }),
    ("token_settings", |r| {
        format!(
            "max_tokens: {}\ntoken_type: bearer\ntokenizer: cl100k_base",
            256 * (1 + r.below(16))
        )
    }),
    ("secret_names", |r| {
        format!(
            "secret_name: prod-db-password\nsecret_ref: {}\npassword_min_length: 12",
            r.pick(&["vault/data/app", "arn-ref"])
        )
    }),
    ("password_file_paths", |r| {
        format!(
            "password_file: /run/secrets/db_password\ntoken_path: {}",
            r.pick(&[
                "~/.config/gh/hosts.yml",
                "/var/run/secrets/kubernetes.io/serviceaccount/token"
            ])
        )
    }),
    ("env_var_names", |_| {
        "token_env = \"GITHUB_TOKEN\"\npassword_env = \"PGPASSWORD\"\napi_key_env = \"OPENAI_API_KEY\"".to_owned()
    }),
    ("code_lookups", |r| {
        format!(
            "password = {}",
            r.pick(&[
                "os.environ[\"DB_PASSWORD\"]",
                "process.env.DB_PASSWORD",
                "config.get(\"password\")",
                "settings.DATABASE_PASSWORD"
            ])
        )
    }),
    ("booleans_and_nulls", |r| {
        format!(
            "password: {}\ntoken: {}",
            r.pick(&["null", "~", "false", "''"]),
            r.pick(&["none", "n/a", "\"\"", "true"])
        )
    }),
    // Low-entropy assignments: a word with digits is not treated as a generated secret.
    ("low_entropy_password", |r| {
        format!(
            "password={}",
            r.pick(&[
                "password123",
                "hunter2",
                "letmein",
                "admin",
                "qwerty123",
                "welcome1"
            ])
        )
    }),
    ("low_entropy_token", |r| {
        format!(
            "token: {}",
            r.pick(&["abc", "testtoken", "aaaaaaaaaaaaaaaa", "1234567890"])
        )
    }),
    // URLs without a password.
    ("url_user_only", |r| {
        format!(
            "git clone https://{}@github.com/acme/app.git",
            r.pick(&["alice", "git", "ci-bot"])
        )
    }),
    ("url_no_credentials", |r| {
        format!(
            "{}://db.internal:{}/orders",
            r.pick(&["postgres", "mysql", "redis", "mongodb", "amqp"]),
            1000 + r.below(9000)
        )
    }),
    ("url_at_in_path", |r| {
        format!(
            "https://example.com/users/@{}/posts?ref=a:b",
            r.lower_alnum(6)
        )
    }),
    ("url_port_and_query", |r| {
        format!(
            "Visit https://shop.example.com:8443/account?next=/orders&sig={}",
            r.hex(8)
        )
    }),
    ("email_addresses", |r| {
        format!(
            "Contact {}@example.com or mailto:support@example.com",
            r.lower_alnum(6)
        )
    }),
    ("mongodb_replica_hosts", |_| {
        "mongodb://mongo-0:27017,mongo-1:27017/app?replicaSet=rs0".to_owned()
    }),
    ("ipv6_url", |_| {
        "http://[::1]:8080/health and http://[fe80::1%25en0]:9090/".to_owned()
    }),
    ("slack_doc_url", |_| {
        "Create an incoming webhook at https://api.slack.com/messaging/webhooks then paste the hooks.slack.com URL.".to_owned()
    }),
    ("azure_sas_without_sig", |r| {
        format!(
            "https://acct.blob.core.windows.net/c/file.txt?sv=2022-11-02&se=2026-0{}-01",
            1 + r.below(9)
        )
    }),
    ("account_key_prose", |_| {
        "Accounts: AccountKey is rotated monthly; SharedAccessKeyName=RootManageSharedAccessKey."
            .to_owned()
    }),
    ("ordinary_json", |r| {
        format!(
            "{{\"orderId\": \"ORD-{}\", \"status\": \"shipped\", \"total\": {}.{}, \"currency\": \"EUR\"}}",
            r.digits(5),
            r.below(900),
            r.below(99)
        )
    }),
    ("ordinary_log", |r| {
        format!(
            "2024-03-05T10:15:{}Z INFO GET /api/orders/{} 200 {}ms",
            10 + r.below(49),
            r.digits(6),
            r.below(900)
        )
    }),
    ("hex_color_and_numbers", |r| {
        format!(
            "color: #{}; phone +1-555-{}; card ending {}",
            r.hex(6),
            r.digits(4),
            r.digits(4)
        )
    }),
    ("random_hex_in_non_secret_key", |r| {
        format!("build_id={} cache_key={}", r.hex(32), r.hex(40))
    }),
    ("pagination_tokens", |r| {
        format!(
            "{{\"items\": [], \"nextPageToken\": \"{}\", \"continuation_token\": \"{}\"}}",
            r.b64(32),
            r.b64url(40)
        )
    }),
    ("credential_metadata_keys", |r| {
        format!(
            "{{\"private_key_id\": \"{}\", \"secretArn\": \"arn:aws:secretsmanager:eu-west-1:{}:secret:prod/db-{}\", \"client_secret_expires_at\": 0, \"publicKey\": \"{}\"}}",
            r.hex(40),
            r.digits(12),
            r.alnum(6),
            r.b64(44)
        )
    }),
    ("password_hash", |r| {
        format!(
            "password_hash: \"$2b$12${}\"",
            r.chars(
                "./ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789",
                53
            )
        )
    }),
    ("password_policy", |_| {
        "PASSWORD_PATTERN = \"^(?=.*[A-Z])(?=.*[0-9]).{12,}$\"\npassword_min_length = 12".to_owned()
    }),
    ("code_calls", |r| {
        format!(
            "{} = {}",
            r.pick(&["token", "secret", "api_key"]),
            r.pick(&[
                "generate_token(32)",
                "hmac.new(key, msg, sha256)",
                "os.Getenv(\"TOKEN\")",
                "secrets.token_hex(16)",
                "read_secret(path)"
            ])
        )
    }),
    ("go_env_lookup", |_| {
        "token := os.Getenv(\"GITHUB_TOKEN\")\nsecret := viper.GetString(\"app.secret\")".to_owned()
    }),
    ("templated_secret", |r| {
        format!(
            "password: \"{{{{ vault_{}_password }}}}\"",
            r.pick(&["db", "redis", "admin"])
        )
    }),
    ("markdown_param_table", |_| {
        "| name | type | description |\n|---|---|---|\n| password | string | The user's password |\n| token | string | A session token |".to_owned()
    }),
    ("react_keys", |r| {
        format!(
            "<li key={{\"item-{}\"}} className=\"sk-fading-circle\">",
            r.hex(8)
        )
    }),
    ("long_uppercase_with_akia", |r| {
        format!("SERIAL=AKIA{}", r.upper_alnum(20))
    }),
    ("kubernetes_secret_ref", |_| {
        "secretKeyRef:\n  name: db-credentials\n  key: password\nsecretName: tls-cert".to_owned()
    }),
    ("netrc_without_password", |_| {
        "machine api.github.com\n  login ci-bot\n  password ${GITHUB_TOKEN}\nThe machine learning team owns it.".to_owned()
    }),
    ("docker_config_empty_auth", |_| {
        "{\"auths\": {\"ghcr.io\": {\"auth\": \"\"}}, \"credsStore\": \"desktop\"}".to_owned()
    }),
    ("aws_key_id_and_account", |r| {
        format!(
            "AKIA{},{},eu-west-1",
            r.chars(BASE32, 16).replace(['A', 'E', 'I'], "Z") + "EXAMPLE",
            r.digits(12)
        )
    }),
    // URL-shaped text whose `user:…@` part is no credential.
    ("url_host_and_port_before_at", |r| {
        format!(
            "{}://{}:{}@{}/login",
            r.pick(&["http", "https"]),
            r.pick(&["localhost", "127.0.0.1", "10.0.0.5", "shop.example.com"]),
            r.pick(&["8080", "3000", "8443", "80"]),
            r.pick(&["evil.example", "phish.example.net", "internal.example"])
        )
    }),
    ("url_port_then_path_with_at", |r| match r.below(3) {
        0 => format!(
            "https://social.example.com:8443/@{}/posts",
            r.lower_alnum(6)
        ),
        1 => format!("docker://registry.local:5000/team/app@sha256:{}", r.hex(64)),
        _ => format!("http://10.1.2.3:9000/files/@{}?v=2", r.lower_alnum(5)),
    }),
    ("url_placeholder_passwords", |r| {
        format!(
            "{}://{}:{}@{}",
            r.pick(&["https", "ftp", "postgres", "mysql", "amqp", "smtp", "redis"]),
            r.pick(&["user", "admin", "deploy", "username", "app"]),
            r.pick(&[
                "password",
                "<password>",
                "{password}",
                "[PASSWORD]",
                "$PASSWORD",
                "%(password)s",
                "********",
                "xxxxxx",
                "p@ssw0rd",
                "YOUR_PASSWORD",
                "your-password",
                "changeme",
                "secret",
                "pass",
                "PASSWORD123",
                "mypassword"
            ]),
            r.pick(&[
                "db.example.com:5432/app",
                "ftp.example.org/",
                "localhost",
                "host:25"
            ])
        )
    }),
    ("url_same_user_and_password", |r| {
        r.pick(&[
            "amqp://guest:guest@localhost:5672/",
            "postgres://postgres:postgres@localhost:5432/test",
            "http://admin:admin@127.0.0.1:8080/",
            "ftp://anonymous:anonymous@ftp.example.org/pub",
        ])
        .to_string()
    }),
    ("url_user_without_password", |r| {
        r.pick(&[
            "ssh://git@github.com:22/acme/app.git",
            "https://deploy@git.example.com:8443/acme/app.git",
            "git+ssh://git@gitlab.com/acme/app.git",
            "sftp://backup@10.0.0.7:2222/srv/backups",
        ])
        .to_string()
    }),
    ("url_at_in_path_or_query", |r| match r.below(3) {
        0 => format!(
            "https://maps.example.com/@51.{},-0.{},12z",
            r.digits(4),
            r.digits(4)
        ),
        1 => format!("https://medium.com/@alice/hello-{}", r.lower_alnum(10)),
        _ => "https://example.com/login?next=https://app.example.com/@me".to_owned(),
    }),
    // Context words without a secret after them.
    ("aws_secret_words_without_a_key", |r| match r.below(3) {
        0 => "The AWS secret access key is shown only once; rotate it from the IAM console."
            .to_owned(),
        1 => format!("aws: rotated the secret, see commit {}", r.hex(40)),
        _ => format!(
            "aws secretsmanager get-secret-value --secret-id arn:aws:secretsmanager:eu-west-1:{}:secret:prod/db-{}",
            r.digits(12),
            r.alnum(6)
        ),
    }),
    ("storage_word_near_an_integrity_hash", |r| {
        format!(
            "\"storage-engine\": {{\"version\": \"2.1.0\", \"integrity\": \"sha512-{}==\"}}",
            r.b64(86)
        )
    }),
    ("cloudflare_identifiers", |r| match r.below(3) {
        0 => format!("cloudflare zone_id: {}", r.hex(32)),
        1 => format!("CLOUDFLARE_ACCOUNT_ID={}", r.hex(32)),
        _ => format!("cf-ray: {}-AMS (served by cloudflare)", r.hex(16)),
    }),
    ("telegram_like_identifiers", |r| match r.below(3) {
        0 => format!("chat_id: -100{}", r.digits(10)),
        1 => format!("https://t.me/{}_bot", r.lower_alnum(8)),
        _ => format!("job {}:ArchiveNightlyBackupsForTenantEurop", r.digits(6)),
    }),
    ("env_list_name_value_without_secrets", |r| {
        match r.below(3) {
            0 => "env:\n  - name: LOG_LEVEL\n    value: debug\n  - name: API_TOKEN_TTL\n    value: \"3600\"".to_owned(),
            1 => format!(
                "[{{\"name\": \"password_policy\", \"value\": \"min-length-12\"}}, {{\"name\": \"token_issuer\", \"value\": \"https://auth.example.com/{}\"}}]",
                r.lower_alnum(6)
            ),
            _ => "- name: API_TOKEN\n  valueFrom:\n    secretKeyRef:\n      name: api-token\n      key: token".to_owned(),
        }
    }),
    ("url_long_user_without_password", |r| {
        r.pick(&[
            "https://deployment-automation-bot@git.example.com/acme/app.git",
            "https://firstname.lastname.example@dev.example.com/repo",
            "ssh://release-manager-account@build.example.net:2222/srv",
        ])
        .to_string()
    }),
    ("base32_otp_prose", |_| {
        "Scan the QR code with your authenticator app to enable two-factor login.".to_owned()
    }),
];
