//! Project loading tests: every error names its JSON path; refusals; normalization;
//! the Build's digest and its verification.

use super::build::{BUILD_FORMAT, BuildEntry};
use super::validate::DEFAULT_MAX_ITEMS;
use super::*;
use serde_json::{Value, json};

fn minimal() -> Value {
    json!({
        "id": "support", "version": "1.0.0",
        "providers": [
            {"id": "customer-data", "name": "Customer data",
             "lookup": {"input": "customerId", "pattern": "^CUST-[0-9]{4}$"}, "maxItems": 2}
        ],
        "layers": [
            {"id": "policy", "name": "Policy", "content": "Refunds over 500 EUR need approval."},
            {"id": "customer-profile", "name": "Customer profile",
             "bindings": [{"provider": "customer-data"}], "required": true}
        ],
        "profiles": [{"id": "default"}, {"id": "lite", "exclude": ["customer-profile"]}]
    })
}

fn errors_of(document: &Value) -> Vec<(String, String)> {
    match Project::from_json(&document.to_string()) {
        Ok(_) => Vec::new(),
        Err(errors) => errors.0.into_iter().map(|e| (e.path, e.message)).collect(),
    }
}

/// The JSON path (`$.providers[0].id`) of a JSON pointer (`/providers/0/id`).
fn json_path_of(pointer: &str) -> String {
    let parts: String = pointer
        .split('/')
        .skip(1)
        .map(|part| {
            if part.chars().all(|c| c.is_ascii_digit()) {
                format!("[{part}]")
            } else {
                format!(".{part}")
            }
        })
        .collect();
    format!("${parts}")
}

/// Sets (or adds) the value at a JSON pointer.
fn with(mut document: Value, pointer: &str, value: Value) -> Value {
    let (parent, key) = pointer.rsplit_once('/').expect("a pointer");
    let parent = document.pointer_mut(parent).expect("parent exists");
    match parent {
        Value::Array(items) => items[key.parse::<usize>().expect("an index")] = value,
        other => other[key] = value,
    }
    document
}

#[test]
fn the_minimal_project_loads() {
    let project = Project::from_json(&minimal().to_string()).unwrap();
    assert_eq!(project.id(), "support");
    assert_eq!(project.providers[0].max_items, 2);
    assert!(project.layers[1].required);
}

#[test]
fn each_problem_names_its_path() {
    type Case = (&'static str, Value, &'static str, &'static str);
    let cases: Vec<Case> = vec![
        (
            "unknown key",
            with(minimal(), "/layers/0/colour", json!("red")),
            "$.layers[0].colour",
            "unknown field `colour`",
        ),
        (
            "unknown key nested",
            with(minimal(), "/providers/0/lookup/flags", json!("i")),
            "$.providers[0].lookup.flags",
            "unknown field `flags`",
        ),
        (
            "wrong type",
            with(minimal(), "/providers/0/maxItems", json!("two")),
            "$.providers[0].maxItems",
            "must be a whole number (found a string)",
        ),
        (
            "maxItems over 100",
            with(minimal(), "/providers/0/maxItems", json!(101)),
            "$.providers[0].maxItems",
            "101 is out of range: use 1..=100",
        ),
        (
            "maxItems zero",
            with(minimal(), "/providers/0/maxItems", json!(0)),
            "$.providers[0].maxItems",
            "out of range",
        ),
        (
            "invalid regex",
            with(
                minimal(),
                "/providers/0/lookup/pattern",
                json!("^CUST-[0-9"),
            ),
            "$.providers[0].lookup.pattern",
            "invalid regex",
        ),
        (
            "binding to an undeclared provider",
            with(minimal(), "/layers/1/bindings/0/provider", json!("crm")),
            "$.layers[1].bindings[0].provider",
            "binds undeclared provider \"crm\"",
        ),
        (
            "unknown layer in a profile",
            with(minimal(), "/profiles/1/exclude/0", json!("orders")),
            "$.profiles[1].exclude[0]",
            "unknown layer \"orders\"",
        ),
        (
            "duplicate layer id",
            with(minimal(), "/layers/1/id", json!("policy")),
            "$.layers[1].id",
            "duplicate layer id \"policy\"",
        ),
        (
            "invalid id",
            with(minimal(), "/layers/0/id", json!("has space")),
            "$.layers[0].id",
            "layer id \"has space\" is invalid",
        ),
        (
            "content and bindings",
            with(
                minimal(),
                "/layers/0/bindings",
                json!([{"provider": "customer-data"}]),
            ),
            "$.layers[0]",
            "either static content or bindings",
        ),
        (
            "currentness on a static layer",
            with(minimal(), "/layers/0/currentness", json!("required")),
            "$.layers[0].currentness",
            "only to layers with bindings",
        ),
        (
            "handles on a static layer",
            with(minimal(), "/layers/0/handles", json!(true)),
            "$.layers[0].handles",
            "handles apply only to layers with bindings",
        ),
        (
            "unknown currentness",
            with(minimal(), "/layers/1/currentness", json!("sometimes")),
            "$.layers[1].currentness",
            "must be one of \"required\", \"preferred\" (found \"sometimes\")",
        ),
        (
            "budget too small",
            with(minimal(), "/budget", json!({"maxBytes": 10})),
            "$.budget.maxBytes",
            "out of range",
        ),
        (
            "invalid input name",
            with(minimal(), "/providers/0/lookup/input", json!("customer id")),
            "$.providers[0].lookup.input",
            "input name \"customer id\" is invalid",
        ),
        (
            "profile with include and exclude",
            with(minimal(), "/profiles/1/include", json!(["policy"])),
            "$.profiles[1]",
            "either include or exclude",
        ),
        (
            "empty scope list",
            with(minimal(), "/layers/1/scope", json!({"objectives": []})),
            "$.layers[1].scope.objectives",
            "at least one value",
        ),
    ];
    for (name, document, path, message) in cases {
        let errors = errors_of(&document);
        assert!(
            errors.iter().any(|(p, m)| p == path && m.contains(message)),
            "{name}: expected {path}: …{message}…, got {errors:?}"
        );
    }
}

#[test]
fn duplicate_provider_ids() {
    let mut document = minimal();
    let provider = document["providers"][0].clone();
    document["providers"].as_array_mut().unwrap().push(provider);
    let errors = errors_of(&document);
    assert_eq!(errors.len(), 1);
    assert_eq!(errors[0].0, "$.providers[1].id");
    assert!(errors[0].1.contains("duplicate provider id"));
}

#[test]
fn every_problem_is_reported_at_once() {
    let mut document = minimal();
    document["providers"][0]["maxItems"] = json!(500);
    document["providers"][0]["lookup"]["pattern"] = json!("(");
    document["profiles"][1]["exclude"] = json!(["nope"]);
    let errors = errors_of(&document);
    assert_eq!(errors.len(), 3, "{errors:?}");
}

#[test]
fn refusals_unknown_keys_types_and_meaning_are_reported_in_one_run() {
    let mut document = minimal();
    document["providers"][0]["endpoint"] = json!("https://crm.internal/context");
    document["layers"][1]
        .as_object_mut()
        .unwrap()
        .remove("required");
    document["layers"][1]["requried"] = json!(true);
    document["budget"] = json!({"maxBytes": "4096"});
    document["providers"][0]["lookup"]["pattern"] = json!("^CUST-[0-9");
    let errors = errors_of(&document);
    let paths: Vec<&str> = errors.iter().map(|(path, _)| path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "$.providers[0].endpoint",
            "$.budget.maxBytes",
            "$.layers[1].requried",
            "$.providers[0].lookup.pattern",
        ],
        "{errors:#?}"
    );
    assert!(errors[0].1.contains(refusal::BELONGS_IN_BINDING));
    assert_eq!(errors[1].1, "must be a whole number (found a string)");
    assert!(
        errors[2]
            .1
            .starts_with("unknown field `requried`, expected one of `id`, `name`"),
        "{errors:#?}"
    );
    assert!(
        errors[2].1.ends_with("(did you mean `required`?)"),
        "{errors:#?}"
    );
    assert!(errors[3].1.starts_with("invalid regex"), "{errors:#?}");
}

#[test]
fn types_are_said_in_words_and_stand_ins_raise_no_second_problem() {
    type Case = (&'static str, Value, &'static str, &'static str);
    let cases: Vec<Case> = vec![
        (
            "/id",
            json!(5),
            "$.id",
            "must be a string (found a whole number)",
        ),
        (
            "/layers",
            json!({"id": "x"}),
            "$.layers",
            "must be a list of objects (found an object)",
        ),
        (
            "/layers/0/required",
            json!("yes"),
            "$.layers[0].required",
            "must be true or false (found a string)",
        ),
        (
            "/providers/0/maxItems",
            json!(-2),
            "$.providers[0].maxItems",
            "must be a whole number (found a negative number)",
        ),
        (
            "/providers/0/maxItems",
            json!(2.5),
            "$.providers[0].maxItems",
            "must be a whole number (found a number with a fraction)",
        ),
        (
            "/providers/0/maxItems",
            json!(5_000_000_000u64),
            "$.providers[0].maxItems",
            "must be a whole number from 0 to 4294967295 (found 5000000000)",
        ),
        (
            "/providers/0/lookup",
            json!("customerId"),
            "$.providers[0].lookup",
            "must be an object (found a string)",
        ),
        (
            "/layers/1/bindings/0",
            json!("customer-data"),
            "$.layers[1].bindings[0]",
            "must be an object (found a string)",
        ),
        (
            "/profiles/1/exclude",
            json!("customer-profile"),
            "$.profiles[1].exclude",
            "must be a list of strings (found a string)",
        ),
        (
            // The profile `lite` names this layer: not reported as unknown.
            "/layers/1/id",
            json!(5),
            "$.layers[1].id",
            "must be a string (found a whole number)",
        ),
        (
            "/layers/0/name",
            Value::Null,
            "$.layers[0].name",
            "must be a string (found null)",
        ),
    ];
    for (pointer, value, path, message) in cases {
        let errors = errors_of(&with(minimal(), pointer, value));
        assert_eq!(errors, [(path.to_owned(), message.to_owned())], "{pointer}");
    }
    // A missing required key is named at its own path.
    let mut document = minimal();
    document["providers"][0]
        .as_object_mut()
        .unwrap()
        .remove("name");
    assert_eq!(
        errors_of(&document),
        [(
            "$.providers[0].name".to_owned(),
            "is required: a string".to_owned()
        )]
    );
    // Optional keys may be null; lists that default to empty may not.
    assert!(errors_of(&with(minimal(), "/layers/0/required", Value::Null)).is_empty());
    assert_eq!(
        errors_of(&with(minimal(), "/profiles", Value::Null)),
        [(
            "$.profiles".to_owned(),
            "must be a list of objects (found null)".to_owned()
        )]
    );
}

/// A document with every key of the model set, so the shapes can be checked against it.
fn complete() -> Value {
    let mut document = minimal();
    document["name"] = json!("Support");
    document["description"] = json!("Everything");
    document["budget"] = json!({"maxBytes": 4096});
    document["layers"][1]["requiresInput"] = json!(["customerId"]);
    document["layers"][1]["scope"] = json!({"objectives": ["support"], "consumers": ["agent"]});
    document["layers"][1]["currentness"] = json!("required");
    document["layers"][1]["handles"] = json!(true);
    document["tests"] = json!([{
        "id": "t1", "description": "all keys",
        "request": {"profile": "default", "objective": "support", "consumer": "agent",
                    "inputs": {"customerId": "CUST-1042"}, "budget": {"maxBytes": 4096}},
        "providers": {"customer-data": {"items": [{"id": "1", "title": "T", "content": "C",
            "metadata": {"plan": "Gold", "n": [1, {"x": null}]}, "updatedAt": "2026-01-01"}],
            "currentness": "STALE", "version": "5", "revision": "r"}},
        "expect": {"blocked": false, "layers": {"policy": "INCLUDED"},
                   "providers": {"customer-data": "OK"}, "contains": ["x"],
                   "notContains": ["y"], "equals": "z"}
    }, {
        "id": "t2", "request": {},
        "providers": {"customer-data": {"status": "TIMEOUT", "detail": "slow"}}
    }]);
    document
}

/// Every path to a value in `value`, as JSON pointers, with the value.
fn leaves(value: &Value, pointer: String, out: &mut Vec<(String, Value)>) {
    out.push((pointer.clone(), value.clone()));
    match value {
        Value::Object(map) => {
            for (key, child) in map {
                leaves(child, format!("{pointer}/{key}"), out);
            }
        }
        Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                leaves(child, format!("{pointer}/{i}"), out);
            }
        }
        _ => {}
    }
}

#[test]
fn the_shapes_agree_with_the_model() {
    assert!(
        errors_of(&complete()).is_empty(),
        "{:?}",
        errors_of(&complete())
    );
    let statuses: Vec<&str> = crate::contract::ProviderStatus::ALL
        .iter()
        .map(|s| s.as_str())
        .collect();
    assert_eq!(shape::PROVIDER_STATUSES, statuses);
    let statuses: Vec<&str> = crate::contract::LayerStatus::ALL
        .iter()
        .map(|s| s.as_str())
        .collect();
    assert_eq!(shape::LAYER_STATUSES, statuses);

    // Any value replaced by one of another type is a problem at its own path, found by
    // the shape check (typed parsing, the backstop, would say `invalid type`)...
    let mut all = Vec::new();
    leaves(&complete(), String::new(), &mut all);
    for (pointer, value) in all.into_iter().skip(1) {
        if pointer.contains("/metadata/") {
            continue; // any value is allowed there
        }
        let other = match value {
            Value::String(_) => json!(7),
            _ => json!("text"),
        };
        let path = json_path_of(&pointer);
        let errors = errors_of(&with(complete(), &pointer, other));
        assert!(
            errors
                .iter()
                .any(|(p, m)| *p == path && m.starts_with("must be")),
            "{pointer}: {errors:?}"
        );
        assert!(
            !errors.iter().any(|(_, m)| m.contains("invalid type")),
            "{pointer}: {errors:?}"
        );
    }
    // ...and an unknown key anywhere is one problem at its path.
    let mut objects = Vec::new();
    leaves(&complete(), String::new(), &mut objects);
    for (pointer, value) in objects {
        let Value::Object(_) = value else { continue };
        if pointer.contains("/metadata") || pointer.ends_with("/inputs") {
            continue;
        }
        let id_keyed = ["/providers", "/layers"]
            .iter()
            .any(|suffix| pointer.ends_with(suffix) && pointer.contains("/tests/"));
        if id_keyed {
            continue;
        }
        let errors = errors_of(&with(complete(), &format!("{pointer}/colour"), json!(1)));
        assert_eq!(errors.len(), 1, "{pointer}: {errors:?}");
        assert!(
            errors[0].1.starts_with("unknown field `colour`"),
            "{errors:?}"
        );
    }
}

#[test]
fn deployment_details_are_refused() {
    let cases = [
        (
            "/providers/0/endpoint",
            json!("https://crm.internal/context"),
        ),
        ("/providers/0/secret", json!("s3cr3t")),
        ("/providers/0/token", json!("abc")),
        ("/providers/0/password", json!("hunter2")),
        ("/providers/0/dsn", json!("postgres://db/app")),
        ("/providers/0/database", json!("data/orders.db")),
        ("/providers/0/apiKey", json!("k")),
        ("/layers/1/bindings/0/url", json!("https://crm.internal")),
        ("/providers/0/name", json!("https://crm.internal/context")),
        ("/providers/0/name", json!("orders.sqlite")),
    ];
    for (pointer, value) in cases {
        let mut document = minimal();
        let (parent, key) = pointer.rsplit_once('/').unwrap();
        document.pointer_mut(parent).unwrap()[key] = value.clone();
        let errors = errors_of(&document);
        assert_eq!(errors.len(), 1, "{pointer}: {errors:?}");
        let expected_path = json_path_of(pointer);
        assert_eq!(errors[0].0, expected_path, "{pointer}");
        assert!(
            errors[0].1.contains(refusal::BELONGS_IN_BINDING),
            "{pointer}: {}",
            errors[0].1
        );
        if let Value::String(secret) = &value {
            assert!(!errors[0].1.contains(secret.as_str()), "values never echo");
        }
    }
}

#[test]
fn a_secret_in_static_text_is_refused_but_a_link_is_not() {
    let key = format!("{}{}", "AKIA", "Z".repeat(16));
    let document = with(
        minimal(),
        "/layers/0/content",
        json!(format!("Use {key} for uploads.")),
    );
    let errors = errors_of(&document);
    assert_eq!(errors[0].0, "$.layers[0].content");
    assert!(errors[0].1.contains("belongs in a Deployment Binding"));
    assert!(!errors[0].1.contains(&key));
    let document = with(
        minimal(),
        "/layers/0/content",
        json!("The refund policy is at https://example.com/policy."),
    );
    assert!(errors_of(&document).is_empty());
}

#[test]
fn normalization_fills_defaults_and_adds_a_default_profile() {
    let mut document = minimal();
    document["providers"][0]
        .as_object_mut()
        .unwrap()
        .remove("maxItems");
    document["profiles"] = json!([{"id": "lite", "exclude": ["customer-profile"]}]);
    let project = Project::from_json(&document.to_string()).unwrap();
    assert_eq!(project.doc.providers[0].max_items, Some(DEFAULT_MAX_ITEMS));
    assert_eq!(project.doc.layers[0].required, Some(false));
    assert_eq!(
        project.doc.layers[1].currentness,
        Some(CurrentnessRule::Preferred)
    );
    assert_eq!(project.doc.budget.unwrap().max_bytes, DEFAULT_MAX_BYTES);
    let default = project
        .profile("default")
        .expect("implicit default profile");
    assert_eq!(default.includes, [true, true]);
    assert_eq!(project.profile("lite").unwrap().includes, [true, false]);
}

#[test]
fn the_digest_ignores_key_order_and_whitespace() {
    let compact = minimal().to_string();
    let pretty = serde_json::to_string_pretty(&minimal()).unwrap();
    // Same content, keys in another order.
    let reordered = r#"{"layers":[{"name":"Policy","id":"policy","content":"Refunds over 500 EUR need approval."},
        {"required":true,"bindings":[{"provider":"customer-data"}],"name":"Customer profile","id":"customer-profile"}],
        "profiles":[{"id":"default"},{"exclude":["customer-profile"],"id":"lite"}],
        "providers":[{"maxItems":2,"lookup":{"pattern":"^CUST-[0-9]{4}$","input":"customerId"},"name":"Customer data","id":"customer-data"}],
        "version":"1.0.0","id":"support"}"#;
    let digests: Vec<String> = [compact.as_str(), pretty.as_str(), reordered]
        .iter()
        .map(|text| Project::from_json(text).unwrap().digest)
        .collect();
    assert_eq!(digests[0], digests[1]);
    assert_eq!(digests[0], digests[2]);
    let changed = with(
        minimal(),
        "/layers/0/content",
        json!("Refunds over 600 EUR need approval."),
    );
    assert_ne!(
        Project::from_json(&changed.to_string()).unwrap().digest,
        digests[0]
    );
}

#[test]
fn defaults_written_out_do_not_change_the_digest() {
    let mut explicit = minimal();
    explicit["layers"][0]["required"] = json!(false);
    explicit["layers"][1]["currentness"] = json!("preferred");
    explicit["budget"] = json!({"maxBytes": DEFAULT_MAX_BYTES});
    assert_eq!(
        Project::from_json(&explicit.to_string()).unwrap().digest,
        Project::from_json(&minimal().to_string()).unwrap().digest
    );
}

#[test]
fn the_build_pins_static_layers_and_lists_runtime_providers() {
    let project = Project::from_json(&minimal().to_string()).unwrap();
    let build = project.build();
    assert_eq!(build.format, BUILD_FORMAT);
    assert_eq!(build.digest, project.digest);
    assert_eq!(
        build.entries,
        [
            BuildEntry::StaticLayer {
                layer: "policy".into(),
                pinned: true,
                digest: crate::digest::sha256_tagged(b"Refunds over 500 EUR need approval."),
                bytes: 35,
            },
            BuildEntry::RuntimeProvider {
                provider: "customer-data".into(),
                pinned: false,
                lookup_input: "customerId".into(),
                max_items: 2,
                layers: vec!["customer-profile".into()],
            },
        ]
    );
    let json: Value = serde_json::from_str(&build.to_json_pretty()).unwrap();
    assert_eq!(json["entries"][1]["kind"], "RUNTIME_PROVIDER");
    assert_eq!(json["entries"][0]["kind"], "STATIC_LAYER");
}

#[test]
fn a_build_loads_like_its_project() {
    let project = Project::from_json(&minimal().to_string()).unwrap();
    let text = project.build().to_json_pretty();
    let loaded = Project::from_json(&text).unwrap();
    assert_eq!(loaded.digest, project.digest);
    assert_eq!(loaded.doc, project.doc);
    // Building a Build again gives the same Build.
    assert_eq!(loaded.build().to_json_pretty(), text);
}

#[test]
fn an_edited_build_is_refused() {
    let project = Project::from_json(&minimal().to_string()).unwrap();
    let mut build: Value = serde_json::from_str(&project.build().to_json_pretty()).unwrap();
    build["project"]["layers"][0]["content"] = json!("Refunds are always fine.");
    let errors = errors_of(&build);
    assert_eq!(errors[0].0, "$.digest");
    assert!(errors[0].1.contains("digest mismatch"));

    let mut build: Value = serde_json::from_str(&project.build().to_json_pretty()).unwrap();
    build["entries"][1]["maxItems"] = json!(100);
    assert_eq!(errors_of(&build)[0].0, "$.entries");

    let mut build: Value = serde_json::from_str(&project.build().to_json_pretty()).unwrap();
    build["project"]["providers"][0]["endpoint"] = json!("https://x");
    let errors = errors_of(&build);
    assert_eq!(errors[0].0, "$.project.providers[0].endpoint");
}

#[test]
fn test_fixtures_are_checked() {
    let mut document = minimal();
    document["tests"] = json!([
        {"id": "t1", "request": {"inputs": {"customerId": "CUST-1042"}},
         "providers": {"customer-data": {"items": [], "status": "TIMEOUT"}}},
        {"id": "t2", "request": {"profile": "nope"},
         "providers": {"orders": {"status": "TIMEOUT"}}},
        {"id": "t3", "request": {}, "providers": {"customer-data": {"status": "OK"}},
         "expect": {"layers": {"ghost": "INCLUDED"}, "providers": {"ghost": "OK"}}},
        {"id": "t4", "request": {}, "providers": {"customer-data": {"items": [
            {"id": "1"}, {"id": "2"}, {"id": "3"}]}}},
        {"id": "t1", "request": {}}
    ]);
    let paths: Vec<String> = errors_of(&document).into_iter().map(|(p, _)| p).collect();
    assert_eq!(
        paths,
        [
            "$.tests[0].providers.customer-data",
            "$.tests[1].request.profile",
            "$.tests[1].providers.orders",
            "$.tests[2].providers.customer-data.status",
            "$.tests[2].expect.layers.ghost",
            "$.tests[2].expect.providers.ghost",
            "$.tests[3].providers.customer-data.items",
            "$.tests[4].id",
        ]
    );
}

#[test]
fn unreadable_and_malformed_files_say_so() {
    let error = Project::load(std::path::Path::new("/nonexistent/project.json")).unwrap_err();
    assert!(
        error
            .to_string()
            .contains("cannot read /nonexistent/project.json")
    );
    let errors = Project::from_json("{\"id\": ").unwrap_err();
    assert!(errors.0[0].message.contains("not valid JSON"));
    assert!(errors.0[0].message.contains("line 1"));
}

#[test]
fn ids_that_others_refer_to_are_declared_at_these_paths() {
    for (path, declares) in [
        ("$.providers", true),
        ("$.layers[3]", true),
        ("$.profiles[0].id", true),
        ("$.project.layers[1].id", false),
        ("$.layers[1].name", false),
        ("$.layers[x]", false),
        ("$.layersx", false),
        ("$.tests[0].providers", false),
    ] {
        assert_eq!(declares_ids(path, "$"), declares, "{path}");
    }
    assert!(declares_ids("$.project.layers[1].id", "$.project"));
}
