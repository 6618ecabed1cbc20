//! What a reload changes, decided without I/O: the settings a reload cannot change (they
//! need a restart, and a reload that changes one is refused), and — from the provider
//! bindings of the running set and of the new one — which provider actors are kept
//! (same binding: same actor, pool, breaker and cache), started and stopped, with a
//! summary of the tenants, projects and bindings added, removed, changed and kept.

use crate::config::ServerConfig;
use serde::Serialize;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

/// One provider actor's place: tenant × binding file × provider id.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct ProviderKey {
    pub(crate) tenant: String,
    /// The binding file as the config names it (relative to the config's folder).
    pub(crate) binding: String,
    pub(crate) provider: String,
}

impl fmt::Display for ProviderKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}#{}", self.tenant, self.binding, self.provider)
    }
}

/// What a reload compares of one deployment: the running one or the one just read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct DeploymentShape {
    /// Every setting only a restart changes, by its config key, as comparable text.
    pub(crate) restart_settings: BTreeMap<String, String>,
    /// Each tenant's own entry (key, limit, trace keep, project list) as a digest, by id.
    pub(crate) tenants: BTreeMap<String, String>,
    /// Each served project's Build and binding digests, by `tenant/project`.
    pub(crate) projects: BTreeMap<String, String>,
    /// Each provider actor's binding digest ([`binding_digest`]).
    pub(crate) providers: BTreeMap<ProviderKey, String>,
}

/// What to do to go from the running set to the new one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ReloadPlan {
    /// Same binding: the running actor (pool, breaker, cache) serves the new set too.
    pub(crate) keep: Vec<ProviderKey>,
    /// New or changed binding: a new actor.
    pub(crate) start: Vec<ProviderKey>,
    /// Removed or changed binding: the running actor stops once its turns are done.
    pub(crate) stop: Vec<ProviderKey>,
    /// Settings that changed but only take effect on a restart: the reload is refused.
    pub(crate) refused: Vec<RestartNeeded>,
    pub(crate) summary: ReloadSummary,
}

/// A setting a reload cannot change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RestartNeeded {
    /// The config key, e.g. `server.listen`.
    pub(crate) key: String,
}

impl fmt::Display for RestartNeeded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: changed, and it takes effect only on a restart (the running value stays until then)",
            self.key
        )?;
        if self.key.ends_with(".max_tenant_bytes") || self.key.ends_with(".max_tenant_tombstones") {
            // Unset, the share follows the number of tenants.
            write!(
                f,
                "; unset, it is an equal share per tenant, so adding or removing a tenant changes it — set it explicitly to add or remove tenants by reload"
            )?;
        }
        Ok(())
    }
}

/// Names added, removed, changed and kept between two maps.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub(crate) struct Changes {
    pub(crate) added: Vec<String>,
    pub(crate) removed: Vec<String>,
    pub(crate) changed: Vec<String>,
    pub(crate) kept: Vec<String>,
}

impl Changes {
    fn between<K: Ord + fmt::Display, V: PartialEq>(
        old: &BTreeMap<K, V>,
        new: &BTreeMap<K, V>,
    ) -> Changes {
        let mut changes = Changes::default();
        for (key, value) in new {
            match old.get(key) {
                None => changes.added.push(key.to_string()),
                Some(before) if before == value => changes.kept.push(key.to_string()),
                Some(_) => changes.changed.push(key.to_string()),
            }
        }
        changes.removed = old
            .keys()
            .filter(|key| !new.contains_key(*key))
            .map(ToString::to_string)
            .collect();
        changes
    }

    /// `1 added, 0 removed, 2 changed, 3 kept`.
    fn counts(&self) -> String {
        format!(
            "{} added, {} removed, {} changed, {} kept",
            self.added.len(),
            self.removed.len(),
            self.changed.len(),
            self.kept.len()
        )
    }
}

/// What a reload changed: the body of `200` to `POST /admin/reload`, and the log line.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub(crate) struct ReloadSummary {
    pub(crate) tenants: Changes,
    pub(crate) projects: Changes,
    /// Provider bindings, as `tenant/binding file#provider`.
    pub(crate) bindings: Changes,
}

impl fmt::Display for ReloadSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "tenants: {}; projects: {}; bindings: {}",
            self.tenants.counts(),
            self.projects.counts(),
            self.bindings.counts()
        )
    }
}

/// The plan from `old` (running) to `new`. Refused when a restart setting differs; the
/// actor lists are filled either way, so a refusal can still say what would have changed.
pub(crate) fn plan_reload(old: &DeploymentShape, new: &DeploymentShape) -> ReloadPlan {
    let mut plan = ReloadPlan::default();
    let mut keys: Vec<&String> = old
        .restart_settings
        .keys()
        .chain(new.restart_settings.keys())
        .collect();
    keys.sort();
    keys.dedup();
    let differing: Vec<&String> = keys
        .into_iter()
        .filter(|key| old.restart_settings.get(*key) != new.restart_settings.get(*key))
        .collect();
    // A section is named only when none of its listed keys explains the difference.
    plan.refused = differing
        .iter()
        .filter(
            |key| match key.strip_prefix('[').and_then(|k| k.strip_suffix(']')) {
                Some(section) => !differing
                    .iter()
                    .any(|other| other.starts_with(&format!("{section}."))),
                None => true,
            },
        )
        .map(|key| RestartNeeded {
            key: (*key).clone(),
        })
        .collect();
    for (key, digest) in &new.providers {
        match old.providers.get(key) {
            Some(running) if running == digest => plan.keep.push(key.clone()),
            Some(_) => {
                plan.stop.push(key.clone());
                plan.start.push(key.clone());
            }
            None => plan.start.push(key.clone()),
        }
    }
    plan.stop.extend(
        old.providers
            .keys()
            .filter(|key| !new.providers.contains_key(*key))
            .cloned(),
    );
    plan.stop.sort();
    plan.summary = ReloadSummary {
        tenants: Changes::between(&old.tenants, &new.tenants),
        projects: Changes::between(&old.projects, &new.projects),
        bindings: Changes::between(&old.providers, &new.providers),
    };
    plan
}

/// SHA-256 (hex) of a value's `Debug` text: a binding's merged settings (env var names,
/// never values), a tenant's entry. Stable within one build of ctxd, which is all a
/// reload compares.
pub(crate) fn debug_digest(value: &impl fmt::Debug) -> String {
    hex::encode(Sha256::digest(format!("{value:?}").as_bytes()))
}

/// A binding file as the config names it: relative to the config's folder when inside it.
pub(crate) fn binding_name(config: &ServerConfig, binding: &Path) -> String {
    binding
        .strip_prefix(&config.base_dir)
        .unwrap_or(binding)
        .display()
        .to_string()
}

/// Every setting only a restart changes, by config key: everything outside
/// `[[tenants]]` (the listener and request bounds, the trace store and digest key, the
/// metrics recorder, limits, the handle store, the cache memory) and a tenant's own
/// `trace_keep` (the trace writer's keeping is fixed at start). A section whose value
/// differs in a way no listed key shows is named as a whole, so no change is missed.
pub(crate) fn restart_settings(config: &ServerConfig) -> BTreeMap<String, String> {
    let mut settings = BTreeMap::new();
    let mut put = |key: &str, value: &dyn fmt::Debug| {
        settings.insert(key.to_owned(), format!("{value:?}"));
    };
    let server = &config.server;
    put("server.listen", &server.listen);
    put("server.max_body_bytes", &server.max_body_bytes);
    put("server.shutdown_grace_ms", &server.shutdown_grace);
    put("server.header_timeout_ms", &server.header_timeout);
    put("server.body_timeout_ms", &server.body_timeout);
    put("server.keep_alive_ms", &server.keep_alive);
    put("server.drain_quiet_ms", &server.drain_quiet);
    put("server.admin_key", &server.admin_key);
    let trace = &config.trace;
    put("trace.store", &trace.store);
    put("trace.digest_key_env", &trace.digest_key_env);
    put("trace.generate_digest_key", &trace.generate_digest_key);
    put("trace.queue_capacity", &trace.queue_capacity);
    put("trace.batch_size", &trace.batch_size);
    put("trace.batch_ms", &trace.batch_delay);
    put("trace.backpressure_ms", &trace.backpressure_wait);
    put("trace.keep", &trace.keep);
    put("trace.max_store_bytes", &trace.max_store_bytes);
    put("trace.min_free_bytes", &trace.min_free_bytes);
    let metrics = &config.metrics;
    put("metrics.enabled", &metrics.enabled);
    put("metrics.tenant_label", &metrics.tenant_label);
    put("metrics.duration_buckets_ms", &metrics.duration_buckets_ms);
    let limits = &config.limits;
    put("limits.max_turn_ms", &limits.max_turn);
    put("limits.max_input_keys", &limits.max_input_keys);
    put("limits.replays_per_minute", &limits.replays_per_minute);
    put("limits.replay_burst", &limits.replay_burst);
    let handles = &config.handles;
    put("handles.ttl", &handles.ttl);
    put("handles.max_total_bytes", &handles.max_total_bytes);
    put("handles.max_tenant_bytes", &handles.max_tenant_bytes);
    put("handles.max_tombstones", &handles.max_tombstones);
    put(
        "handles.max_tenant_tombstones",
        &handles.max_tenant_tombstones,
    );
    let operations = &handles.limits;
    put(
        "handles.default_max_results",
        &operations.default_max_results,
    );
    put("handles.max_results_cap", &operations.max_results_cap);
    put("handles.default_max_bytes", &operations.default_max_bytes);
    put("handles.max_bytes_cap", &operations.max_bytes_cap);
    put(
        "handles.default_time_limit_ms",
        &operations.default_time_limit,
    );
    put("handles.time_limit_cap_ms", &operations.time_limit_cap);
    put("cache.max_total_bytes", &config.cache.max_total_bytes);
    put("cache.max_tenant_bytes", &config.cache.max_tenant_bytes);
    for tenant in &config.tenants {
        if let Some(keep) = &tenant.trace_keep {
            put(&format!("tenants[id={:?}].trace_keep", tenant.id), keep);
        }
    }
    // Whole sections: a key added to a section later is still compared.
    put("[server]", &config.server);
    put("[trace]", &config.trace);
    put("[metrics]", &config.metrics);
    put("[limits]", &config.limits);
    put("[handles]", &config.handles);
    put("[cache]", &config.cache);
    settings
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(tenant: &str, provider: &str) -> ProviderKey {
        ProviderKey {
            tenant: tenant.to_owned(),
            binding: format!("{tenant}.toml"),
            provider: provider.to_owned(),
        }
    }

    fn shape(providers: &[(&str, &str, &str)]) -> DeploymentShape {
        let mut shape = DeploymentShape::default();
        for (tenant, provider, digest) in providers {
            shape
                .providers
                .insert(key(tenant, provider), (*digest).to_owned());
            shape
                .tenants
                .insert((*tenant).to_owned(), format!("{tenant}-entry"));
        }
        shape
    }

    fn names(keys: &[ProviderKey]) -> Vec<String> {
        keys.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn providers_are_kept_started_or_stopped_by_their_binding_digest() {
        struct Case {
            name: &'static str,
            old: Vec<(&'static str, &'static str, &'static str)>,
            new: Vec<(&'static str, &'static str, &'static str)>,
            keep: Vec<&'static str>,
            start: Vec<&'static str>,
            stop: Vec<&'static str>,
        }
        let cases = [
            Case {
                name: "nothing changed",
                old: vec![("acme", "crm", "d1"), ("acme", "orders", "d2")],
                new: vec![("acme", "crm", "d1"), ("acme", "orders", "d2")],
                keep: vec!["acme/acme.toml#crm", "acme/acme.toml#orders"],
                start: vec![],
                stop: vec![],
            },
            Case {
                name: "one binding changed",
                old: vec![("acme", "crm", "d1"), ("acme", "orders", "d2")],
                new: vec![("acme", "crm", "d1"), ("acme", "orders", "d3")],
                keep: vec!["acme/acme.toml#crm"],
                start: vec!["acme/acme.toml#orders"],
                stop: vec!["acme/acme.toml#orders"],
            },
            Case {
                name: "a tenant added",
                old: vec![("acme", "crm", "d1")],
                new: vec![("acme", "crm", "d1"), ("globex", "crm", "d1")],
                keep: vec!["acme/acme.toml#crm"],
                start: vec!["globex/globex.toml#crm"],
                stop: vec![],
            },
            Case {
                name: "a tenant removed",
                old: vec![("acme", "crm", "d1"), ("globex", "crm", "d1")],
                new: vec![("acme", "crm", "d1")],
                keep: vec!["acme/acme.toml#crm"],
                start: vec![],
                stop: vec!["globex/globex.toml#crm"],
            },
            Case {
                name: "everything replaced",
                old: vec![("acme", "crm", "d1")],
                new: vec![("acme", "orders", "d1")],
                keep: vec![],
                start: vec!["acme/acme.toml#orders"],
                stop: vec!["acme/acme.toml#crm"],
            },
            Case {
                name: "from nothing",
                old: vec![],
                new: vec![("acme", "crm", "d1")],
                keep: vec![],
                start: vec!["acme/acme.toml#crm"],
                stop: vec![],
            },
        ];
        for case in cases {
            let plan = plan_reload(&shape(&case.old), &shape(&case.new));
            assert_eq!(names(&plan.keep), case.keep, "{}", case.name);
            assert_eq!(names(&plan.start), case.start, "{}", case.name);
            assert_eq!(names(&plan.stop), case.stop, "{}", case.name);
            assert!(plan.refused.is_empty(), "{}", case.name);
        }
    }

    #[test]
    fn the_summary_names_what_was_added_removed_changed_and_kept() {
        let mut old = shape(&[("acme", "crm", "d1"), ("globex", "crm", "d1")]);
        old.projects.insert("acme/support".into(), "b1".into());
        old.projects.insert("globex/support".into(), "b1".into());
        let mut new = shape(&[("acme", "crm", "d2"), ("initech", "crm", "d1")]);
        new.projects.insert("acme/support".into(), "b2".into());
        new.projects.insert("initech/support".into(), "b1".into());
        let summary = plan_reload(&old, &new).summary;
        assert_eq!(summary.tenants.added, ["initech"]);
        assert_eq!(summary.tenants.removed, ["globex"]);
        assert_eq!(summary.tenants.kept, ["acme"]);
        assert!(summary.tenants.changed.is_empty());
        assert_eq!(summary.projects.changed, ["acme/support"]);
        assert_eq!(summary.projects.added, ["initech/support"]);
        assert_eq!(summary.projects.removed, ["globex/support"]);
        assert_eq!(summary.bindings.changed, ["acme/acme.toml#crm"]);
        assert_eq!(
            summary.to_string(),
            "tenants: 1 added, 1 removed, 0 changed, 1 kept; projects: 1 added, 1 removed, 1 changed, 0 kept; bindings: 1 added, 1 removed, 1 changed, 0 kept"
        );
    }

    fn config(text: &str) -> ServerConfig {
        ServerConfig::parse(text, Path::new("/srv/ctxd")).expect("a valid config")
    }

    const TENANT: &str = "[[tenants]]\nid = \"acme\"\napi_key_env = \"ACME_KEY\"\n[[tenants.projects]]\npath = \"p.json\"\nbinding = \"b.toml\"\n";

    fn refused_between(old: &str, new: &str) -> Vec<String> {
        let shape_of = |text: &str| DeploymentShape {
            restart_settings: restart_settings(&config(text)),
            ..DeploymentShape::default()
        };
        plan_reload(&shape_of(old), &shape_of(new))
            .refused
            .into_iter()
            .map(|refused| refused.key)
            .collect()
    }

    #[test]
    fn settings_outside_the_tenants_need_a_restart_and_each_is_named() {
        let cases: [(&str, &str, &str, &[&str]); 7] = [
            ("same file", "", "", &[]),
            (
                "listen",
                "[server]\nlisten = \"127.0.0.1:8080\"\n",
                "[server]\nlisten = \"127.0.0.1:9090\"\n",
                &["server.listen"],
            ),
            (
                "trace store and digest key",
                "[trace]\nstore = \"sqlite:a.db\"\n",
                "[trace]\nstore = \"sqlite:b.db\"\ndigest_key_env = \"OTHER_KEY\"\n",
                &["trace.digest_key_env", "trace.store"],
            ),
            (
                "metrics",
                "",
                "[metrics]\nenabled = false\n",
                &["metrics.enabled"],
            ),
            (
                "admin key",
                "",
                "[server]\nadmin_key_env = \"CTXD_ADMIN_KEY\"\n",
                &["server.admin_key"],
            ),
            (
                "turn deadline",
                "[limits]\nmax_turn_ms = 1000\n",
                "[limits]\nmax_turn_ms = 2000\n",
                &["limits.max_turn_ms"],
            ),
            (
                "a default written out is no change",
                "",
                "[server]\nlisten = \"127.0.0.1:8080\"\n[limits]\nmax_turn_ms = 10000\n",
                &[],
            ),
        ];
        for (name, old, new, expected) in cases {
            let refused = refused_between(&format!("{old}{TENANT}"), &format!("{new}{TENANT}"));
            assert_eq!(refused, expected, "{name}");
        }
    }

    #[test]
    fn a_tenant_added_changes_a_defaulted_share_but_not_an_explicit_one() {
        let two = format!(
            "{TENANT}[[tenants]]\nid = \"globex\"\napi_key_env = \"GLOBEX_KEY\"\n[[tenants.projects]]\npath = \"p.json\"\nbinding = \"c.toml\"\n"
        );
        assert_eq!(
            refused_between(TENANT, &two),
            [
                "cache.max_tenant_bytes",
                "handles.max_tenant_bytes",
                "handles.max_tenant_tombstones"
            ]
        );
        let shares = "[cache]\nmax_tenant_bytes = 1024\n[handles]\nmax_tenant_bytes = 4096\nmax_tenant_tombstones = 100\n";
        assert!(
            refused_between(&format!("{shares}{TENANT}"), &format!("{shares}{two}")).is_empty()
        );
        let message = RestartNeeded {
            key: "cache.max_tenant_bytes".into(),
        }
        .to_string();
        assert!(message.contains("set it explicitly"), "{message}");
    }

    #[test]
    fn a_tenant_trace_keep_needs_a_restart() {
        let kept = TENANT.replace("api_key_env", "trace_keep = \"7d\"\napi_key_env");
        assert_eq!(
            refused_between(TENANT, &kept),
            ["tenants[id=\"acme\"].trace_keep"]
        );
    }

    #[test]
    fn the_digest_of_a_value_is_stable_and_tells_values_apart() {
        assert_eq!(debug_digest(&("a", 1)), debug_digest(&("a", 1)));
        assert_ne!(debug_digest(&("a", 1)), debug_digest(&("a", 2)));
        assert_eq!(debug_digest(&1).len(), 64);
    }
}
