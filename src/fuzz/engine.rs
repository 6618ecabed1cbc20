//! The mutation engine: a seeded xorshift generator and byte-level and JSON-tree
//! mutations over seed inputs, and the runner that feeds a target and catches panics.

use serde_json::Value;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// xorshift64*: small, fast, and reproducible from its seed.
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }

    pub(crate) fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number in `0..n` (`n` > 0).
    pub(crate) fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    pub(crate) fn chance(&mut self, one_in: usize) -> bool {
        self.below(one_in) == 0
    }

    pub(crate) fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

/// Bytes that often break parsers.
const INTERESTING: &[u8] = &[
    0x00, 0x01, 0x07, 0x08, 0x0a, 0x0d, 0x1b, 0x20, 0x22, 0x27, 0x2c, 0x2d, 0x2e, 0x30, 0x3a, 0x3d,
    0x5b, 0x5c, 0x5d, 0x7b, 0x7d, 0x7f, 0x80, 0xc0, 0xe2, 0xef, 0xf0, 0xff,
];

/// Tokens of every format fuzzed here, inserted whole.
const COMMON_TOKENS: &[&[u8]] = &[
    b"null",
    b"true",
    b"false",
    b"-0",
    b"1e999",
    b"-1",
    b"18446744073709551616",
    b"9007199254740993",
    b"0.0000001",
    b"\"\"",
    b"\"\\u0000\"",
    b"\"\\ud800\"",
    b"\"\xe2\x80\xa8\"",
    b"[]",
    b"{}",
    b"\n",
    b"\r\n",
    b"\t",
    b"\x1b[2J",
    b"https://evil.example/x",
    b"ghp_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    b"AKIAIOSFODNN7EXAMPLE",
];

/// One mutation of `input`; `seeds` are the other inputs to splice from, `tokens` the
/// format's own dictionary. The result is capped at `max_len` bytes.
pub(crate) fn mutate(
    input: &[u8],
    seeds: &[Vec<u8>],
    tokens: &[&[u8]],
    max_len: usize,
    rng: &mut Rng,
) -> Vec<u8> {
    let mut out = input.to_vec();
    let rounds = 1 + rng.below(4);
    for _ in 0..rounds {
        let at = if out.is_empty() {
            0
        } else {
            rng.below(out.len() + 1)
        };
        match rng.below(9) {
            0 if !out.is_empty() => {
                let i = rng.below(out.len());
                out[i] ^= 1 << rng.below(8);
            }
            1 if !out.is_empty() => {
                let i = rng.below(out.len());
                out[i] = *rng.pick(INTERESTING);
            }
            2 if !out.is_empty() => {
                let end = (at + 1 + rng.below(16)).min(out.len());
                if at < end {
                    out.drain(at..end);
                }
            }
            3 if !out.is_empty() => {
                let start = rng.below(out.len());
                let end = (start + 1 + rng.below(32)).min(out.len());
                let chunk = out[start..end].to_vec();
                let times = 1 + rng.below(8);
                for _ in 0..times {
                    out.splice(at..at, chunk.iter().copied());
                }
            }
            4 => {
                let other = rng.pick(seeds);
                if !other.is_empty() {
                    let start = rng.below(other.len());
                    let end = (start + 1 + rng.below(64)).min(other.len());
                    out.splice(at..at, other[start..end].iter().copied());
                }
            }
            5 => {
                let token = if rng.chance(2) {
                    *rng.pick(tokens)
                } else {
                    *rng.pick(COMMON_TOKENS)
                };
                out.splice(at..at, token.iter().copied());
            }
            6 => {
                // Deep nesting: the classic stack exhaustion.
                let depth = 1 + rng.below(4_000);
                let (open, close) = if rng.chance(2) {
                    (b'[', b']')
                } else {
                    (b'{', b'}')
                };
                let mut nest = vec![open; depth];
                if open == b'[' && rng.chance(2) {
                    nest.extend(std::iter::repeat_n(close, depth));
                }
                out.splice(at..at, nest);
            }
            7 => out.truncate(at),
            _ => {
                let i = rng.below(out.len() + 1);
                out.insert(i, rng.next() as u8);
            }
        }
    }
    out.truncate(max_len);
    out
}

/// A structural mutation of a JSON document: a random node replaced, given a foreign
/// key, re-typed or nested; `None` when `input` is not JSON.
pub(crate) fn mutate_json(input: &[u8], tokens: &[&str], rng: &mut Rng) -> Option<Vec<u8>> {
    let mut value: Value = serde_json::from_slice(input).ok()?;
    let rounds = 1 + rng.below(3);
    for _ in 0..rounds {
        let node = pick_node(&mut value, rng);
        let replacement = match rng.below(8) {
            0 => Value::Null,
            1 => Value::from(rng.next() as i64),
            2 => Value::from(f64::from_bits(rng.next())),
            3 => Value::String(rng.pick(tokens).to_string()),
            4 => Value::String("x".repeat(rng.below(70_000))),
            5 => Value::Array(vec![node.clone(); 1 + rng.below(120)]),
            6 => {
                let mut object = serde_json::Map::new();
                object.insert(rng.pick(tokens).to_string(), node.clone());
                Value::Object(object)
            }
            _ => match &*node {
                Value::Object(map) => {
                    let mut map = map.clone();
                    map.insert(rng.pick(tokens).to_string(), Value::Bool(true));
                    Value::Object(map)
                }
                other => Value::Array(vec![other.clone()]),
            },
        };
        *node = replacement;
    }
    serde_json::to_vec(&value).ok()
}

fn pick_node<'a>(value: &'a mut Value, rng: &mut Rng) -> &'a mut Value {
    let descend = match value {
        Value::Array(items) => !items.is_empty() && rng.below(3) > 0,
        Value::Object(map) => !map.is_empty() && rng.below(3) > 0,
        _ => false,
    };
    if !descend {
        return value;
    }
    match value {
        Value::Array(items) => {
            let i = rng.below(items.len());
            pick_node(&mut items[i], rng)
        }
        Value::Object(map) => {
            let i = rng.below(map.len());
            let key = map.keys().nth(i).cloned().expect("index within the map");
            pick_node(map.get_mut(&key).expect("key present"), rng)
        }
        _ => value,
    }
}

/// One fuzz target: seeds, dictionary, and the check of one input.
pub(crate) struct Target {
    pub(crate) name: &'static str,
    pub(crate) seeds: Vec<Vec<u8>>,
    pub(crate) tokens: Vec<&'static str>,
    /// Inputs are JSON documents (structure-aware mutations apply).
    pub(crate) json: bool,
    pub(crate) max_len: usize,
    /// Parses one input and checks the parser's invariants; `Err` says which one broke.
    pub(crate) check: fn(&[u8]) -> Result<(), String>,
}

/// What a run did.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Stats {
    pub(crate) inputs: usize,
    pub(crate) elapsed: Duration,
}

impl Stats {
    pub(crate) fn per_second(&self) -> f64 {
        self.inputs as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// Feeds `inputs` mutated inputs to the target. A panic or a broken invariant saves
/// the input under `target/fuzz-findings/<target>/` and fails with its path.
pub(crate) fn run(target: &Target, inputs: usize, seed: u64) -> Result<Stats, String> {
    let mut rng = Rng::new(seed);
    let tokens: Vec<&[u8]> = target.tokens.iter().map(|t| t.as_bytes()).collect();
    let started = Instant::now();
    // The seeds themselves first: they must pass.
    for seed in &target.seeds {
        check_one(target, seed)?;
    }
    let mut pool: Vec<Vec<u8>> = target.seeds.clone();
    for n in 0..inputs {
        let base = rng.pick(&pool).clone();
        let input = if target.json && rng.chance(3) {
            mutate_json(&base, &target.tokens, &mut rng)
                .unwrap_or_else(|| mutate(&base, &pool, &tokens, target.max_len, &mut rng))
        } else {
            mutate(&base, &pool, &tokens, target.max_len, &mut rng)
        };
        check_one(target, &input)?;
        // Keep some mutants as bases, so mutations compound over the run.
        if n % 16 == 0 && input.len() <= target.max_len / 4 {
            if pool.len() < 256 {
                pool.push(input);
            } else {
                let i = rng.below(pool.len());
                pool[i] = input;
            }
        }
    }
    Ok(Stats {
        inputs,
        elapsed: started.elapsed(),
    })
}

/// Checks one input, catching a panic as a finding.
pub(crate) fn check_one(target: &Target, input: &[u8]) -> Result<(), String> {
    let verdict = catch_unwind(AssertUnwindSafe(|| (target.check)(input)));
    let problem = match verdict {
        Ok(Ok(())) => return Ok(()),
        Ok(Err(broken)) => broken,
        Err(panic) => format!(
            "panicked: {}",
            panic
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| panic.downcast_ref::<&str>().copied())
                .unwrap_or("(no message)")
        ),
    };
    let saved = save_finding(target.name, input);
    Err(format!(
        "{}: {problem}; input saved as {}",
        target.name,
        saved.display()
    ))
}

fn save_finding(target: &str, input: &[u8]) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("target/fuzz-findings")
        .join(target);
    let name = crate::digest::sha256_hex(input);
    let path = dir.join(format!("{}.bin", &name[..16]));
    let _ = std::fs::create_dir_all(&dir);
    let _ = std::fs::write(&path, input);
    path
}
