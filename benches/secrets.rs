//! The secret scanner's throughput: `scan` (is there a secret, which detector) and
//! `scan_all` (every secret with its range, what redaction uses) over 1 MiB of clean
//! provider content and over 1 MiB with a secret every ~300 bytes; and its cost per
//! provider item as the turn path scans one (every field, metadata entries also as
//! `key: value`), for an item with no keyword and for one whose prose holds several.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use ctxd::secrets;
use serde_json::{Map, Value, json};
use std::hint::black_box;
use std::time::Duration;

const SIZE: usize = 1024 * 1024;

/// A small deterministic generator (SplitMix64) for the varying parts.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn chars(&mut self, alphabet: &str, n: usize) -> String {
        let alphabet = alphabet.as_bytes();
        (0..n)
            .map(|_| alphabet[(self.next() % alphabet.len() as u64) as usize] as char)
            .collect()
    }

    fn hex(&mut self, n: usize) -> String {
        self.chars("0123456789abcdef", n)
    }

    fn alnum(&mut self, n: usize) -> String {
        self.chars(
            "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789",
            n,
        )
    }
}

/// Provider content without secrets: prose (with the words key, token, password and
/// secret now and then), JSON records, URLs, UUIDs, digests, log lines.
fn clean_text(rng: &mut Rng, bytes: usize) -> String {
    let mut text = String::with_capacity(bytes + 512);
    let mut line = 0u64;
    while text.len() < bytes {
        line += 1;
        let piece = match line % 8 {
            0 => format!(
                "Customer reported that the pallet sensors arrived on 2026-11-{:02} and were installed. ",
                1 + line % 28
            ),
            1 => format!(
                "{{\"orderId\": \"ORD-{}\", \"status\": \"shipped\", \"totalEur\": {}.50, \"carrier\": \"DHL Freight\", \"updatedAt\": \"2026-11-24T16:02:00Z\"}}\n",
                10_000 + line,
                line % 4000
            ),
            2 => format!(
                "See https://support.example.com/articles/{}?lang=en#steps for the reset steps; the key point is to reboot first.\n",
                line
            ),
            3 => format!(
                "request_id={}-{}-4{}-a{}-{} trace={} duration_ms={}\n",
                rng.hex(8),
                rng.hex(4),
                rng.hex(3),
                rng.hex(3),
                rng.hex(12),
                rng.hex(16),
                line % 900
            ),
            4 => "The account is on the Enterprise plan; the admin resets a password or a token from the portal, never by email. ".to_owned(),
            5 => format!(
                "commit {} (build sha256:{}) deployed to eu-central-1.\n",
                rng.hex(40),
                rng.hex(64)
            ),
            6 => "Support ticket 5531: firmware update scheduled; keep the secret of a good rollout: small batches. ".to_owned(),
            _ => format!(
                "2026-11-24T10:15:{:02}Z INFO GET /api/orders/{} 200 {}ms user=alice@example.com\n",
                line % 60,
                line,
                line % 300
            ),
        };
        text.push_str(&piece);
    }
    text.truncate(text.floor_char_boundary(bytes));
    text
}

/// A secret of one of several formats, in context.
fn secret_line(rng: &mut Rng, which: u64) -> String {
    match which % 8 {
        0 => format!("export GITHUB_TOKEN=ghp_{}\n", rng.alnum(36)),
        1 => format!(
            "aws_access_key_id = AKIA{}\n",
            rng.chars("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", 16)
        ),
        2 => format!(
            "DATABASE_URL=postgres://app:{}@db.internal:5432/app\n",
            rng.alnum(16)
        ),
        3 => format!("{{\"client_secret\": \"{}\"}}\n", rng.alnum(32)),
        4 => format!("SLACK_BOT_TOKEN=xoxb-{}-{}\n", rng.hex(12), rng.alnum(24)),
        5 => format!(
            "Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiI{}.{}\n",
            rng.alnum(20),
            rng.alnum(43)
        ),
        6 => format!("stripe: sk_live_{}\n", rng.alnum(24)),
        _ => format!(
            "-----BEGIN {} PRIVATE KEY-----\nMIIE{}\n-----END {} PRIVATE KEY-----\n",
            "RSA",
            rng.alnum(60),
            "RSA"
        ),
    }
}

/// Clean content with a secret about every 300 bytes.
fn dense_text(rng: &mut Rng, bytes: usize) -> String {
    let mut text = String::with_capacity(bytes + 512);
    let mut which = 0;
    while text.len() < bytes {
        text.push_str(&clean_text(rng, 220));
        text.push('\n');
        text.push_str(&secret_line(rng, which));
        which += 1;
    }
    text
}

/// A provider item's fields, as the turn path's bounds step scans them.
struct ItemFields {
    id: &'static str,
    title: &'static str,
    content: &'static str,
    metadata: Map<String, Value>,
    updated_at: &'static str,
}

impl ItemFields {
    /// Every field scanned in the bounds step's order; the first detector found.
    fn scan(&self) -> Option<secrets::Detector> {
        secrets::scan(self.id)
            .or_else(|| secrets::scan(self.title))
            .or_else(|| secrets::scan(self.content))
            .or_else(|| secrets::scan_map(&self.metadata))
            .or_else(|| secrets::scan(self.updated_at))
    }
}

fn object(value: Value) -> Map<String, Value> {
    value.as_object().expect("an object").clone()
}

/// The load bench's item: no word or prefix that any rule looks for.
fn clean_item() -> ItemFields {
    ItemFields {
        id: "REC-0001",
        title: "Account state",
        content: "Enterprise customer since 2021; 240 seats in EU-Central; renewal due 2027-01-31; no open escalations.",
        metadata: object(json!({"plan": "Enterprise", "region": "EU-Central"})),
        updated_at: "2026-11-28T09:14:00Z",
    }
}

/// An item about credentials without one: the words password, token, secret and key,
/// and a URL, each a keyword whose precheck or pattern then runs.
fn keyword_item() -> ItemFields {
    ItemFields {
        id: "TCK-5531",
        title: "Password reset",
        content: "The admin resets a password or an API token from the portal at https://support.example.com/articles/88?lang=en; the secret key is never sent by email.",
        metadata: object(json!({"category": "account", "token_type": "bearer"})),
        updated_at: "2026-11-28T09:14:00Z",
    }
}

fn benches(c: &mut Criterion) {
    let mut rng = Rng(0x5EC2_E75C_A11E_D000);
    let clean = clean_text(&mut rng, SIZE);
    let dense = dense_text(&mut rng, SIZE);
    assert!(secrets::scan(&clean).is_none(), "the clean text is clean");
    let found = secrets::scan_all(&dense).count();
    assert!(found > SIZE / 400, "the dense text holds {found} secrets");

    let mut group = c.benchmark_group("secrets");
    group
        .sample_size(20)
        .measurement_time(Duration::from_secs(4))
        .warm_up_time(Duration::from_secs(1));
    group.throughput(Throughput::Bytes(clean.len() as u64));
    group.bench_function("scan clean 1 MiB", |b| {
        b.iter(|| secrets::scan(black_box(&clean)))
    });
    group.bench_function("scan_all clean 1 MiB", |b| {
        b.iter(|| secrets::scan_all(black_box(&clean)).count())
    });
    group.throughput(Throughput::Bytes(dense.len() as u64));
    group.bench_function("scan dense 1 MiB (a secret per ~300 B)", |b| {
        b.iter(|| secrets::scan(black_box(&dense)))
    });
    group.bench_function("scan_all dense 1 MiB (a secret per ~300 B)", |b| {
        b.iter(|| secrets::scan_all(black_box(&dense)).count())
    });
    group.finish();

    let (clean_item, keyword_item) = (clean_item(), keyword_item());
    assert!(clean_item.scan().is_none() && keyword_item.scan().is_none());
    let mut group = c.benchmark_group("secrets");
    group
        .sample_size(40)
        .measurement_time(Duration::from_secs(4))
        .warm_up_time(Duration::from_secs(1));
    group.throughput(Throughput::Elements(1));
    group.bench_function("item without a keyword", |b| {
        b.iter(|| black_box(&clean_item).scan())
    });
    group.bench_function("item with keywords", |b| {
        b.iter(|| black_box(&keyword_item).scan())
    });
    group.finish();
}

criterion_group!(secrets_benches, benches);
criterion_main!(secrets_benches);
