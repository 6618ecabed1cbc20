//! Which file a SQLite binding entry may serve, and whether it opens.
//!
//! Confinement, decided from paths alone (symbolic links resolved, nothing opened): a
//! provider may never serve ctxd's own files — the trace store, its `-wal`, `-shm` and
//! `-journal` companions, or the generated digest key kept beside it — and, when the
//! binding sets `allowed_roots`, only a file inside one of those folders. `resolve`
//! applies it for every command, so `serve` refuses such an entry before opening it.
//!
//! Opening, for `validate`: the file opened read-only and the query prepared exactly as
//! `serve` does at start-up ([`sqlite::inspect`]), so that what `serve` would refuse,
//! `validate` reports — with the same words, at the same binding key.

use super::{Deployment, DeploymentProblem, ProblemKind, SetupError};
use crate::config::{ProviderKind, ServerConfig};
use crate::providers::sqlite;
use crate::validation::Problem;
use std::path::{Component, Path, PathBuf};

/// ctxd's own files, which no provider may serve.
pub(super) struct OwnFiles {
    /// Each file as a real path, with what it is.
    files: Vec<(PathBuf, String)>,
}

impl OwnFiles {
    pub(super) fn of(config: &ServerConfig) -> OwnFiles {
        // A PostgreSQL store has no file here to protect.
        let Some(store) = config.trace.store_path() else {
            return OwnFiles { files: Vec::new() };
        };
        let shown = store.display();
        let mut files = vec![(
            real_path(store),
            format!("the trace store of {} (trace.store)", config.file),
        )];
        for (suffix, what) in [
            ("-wal", "write-ahead log"),
            ("-shm", "shared-memory index"),
            ("-journal", "rollback journal"),
        ] {
            let mut companion = store.as_os_str().to_owned();
            companion.push(suffix);
            files.push((
                real_path(Path::new(&companion)),
                format!("the {what} of the trace store {shown}"),
            ));
        }
        files.push((
            real_path(&config.trace.digest_key_source().key_file()),
            format!("the digest key kept beside the trace store {shown}"),
        ));
        OwnFiles { files }
    }

    /// Why `database` may not be served, if it is one of ctxd's files or lies outside
    /// `roots` (when there are any).
    pub(super) fn refusal(&self, database: &Path, roots: &[PathBuf]) -> Option<String> {
        let real = real_path(database);
        if let Some((_, what)) = self
            .files
            .iter()
            .find(|(file, _)| *file == real || same_file(file, &real))
        {
            return Some(format!(
                "{} is {what}: a provider never serves ctxd's own records",
                real.display()
            ));
        }
        if !roots.is_empty() && !roots.iter().any(|root| real.starts_with(real_path(root))) {
            let roots: Vec<String> = roots.iter().map(|r| r.display().to_string()).collect();
            return Some(format!(
                "{} is outside allowed_roots ({}): move the database into one of them, or add its folder",
                real.display(),
                roots.join(", ")
            ));
        }
        None
    }
}

/// `path` as the file system resolves it: absolute, `.` and `..` gone, symbolic links
/// followed — as far as it exists (a file not created yet keeps the rest as written, so
/// the trace store's companions compare before they exist).
pub(super) fn real_path(path: &Path) -> PathBuf {
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let lexical = normalized(&absolute);
    let mut existing = lexical.as_path();
    let mut rest = Vec::new();
    loop {
        if let Ok(real) = std::fs::canonicalize(existing) {
            return rest.iter().rev().fold(real, |path, part| path.join(part));
        }
        match (existing.parent(), existing.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_owned());
                existing = parent;
            }
            _ => return lexical,
        }
    }
}

/// `.` and `..` removed without touching the file system.
fn normalized(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// Whether two existing paths are one file (a hard link has another name).
fn same_file(a: &Path, b: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        match (std::fs::metadata(a), std::fs::metadata(b)) {
            (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
            _ => false,
        }
    }
    #[cfg(not(unix))]
    {
        let _ = (a, b);
        false
    }
}

impl Deployment {
    /// Opens every SQLite file the tenants' bindings name (read-only, one connection,
    /// closed after) and prepares its query as `serve` does; each failure is a
    /// [`ProblemKind::Database`] problem at the entry's `database` or `query` key. Entries
    /// already refused by confinement are not opened.
    pub(crate) fn inspect_databases(&mut self) {
        let mut found = Vec::new();
        for tenant in &self.tenants {
            for binding in &tenant.bindings {
                for entry in binding.binding.providers.values() {
                    let ProviderKind::Sqlite { database, query } = &entry.kind else {
                        continue;
                    };
                    let refused = self.problems.iter().any(|p| {
                        matches!(&p.kind, ProblemKind::Database { binding: path, provider, .. }
                            if *path == binding.path && *provider == entry.id)
                    });
                    if refused {
                        continue;
                    }
                    if let Err(error) = sqlite::inspect(database, query) {
                        found.push(DeploymentProblem {
                            file: binding.path.display().to_string(),
                            problem: SetupError::Sqlite(error).problem(&entry.id),
                            tenant: Some(tenant.index),
                            kind: ProblemKind::Database {
                                binding: binding.path.clone(),
                                provider: entry.id.clone(),
                                served: tenant.serves(&binding.path, &entry.id),
                            },
                        });
                    }
                }
            }
        }
        self.problems.extend(found);
    }
}

/// A problem at a provider's key of a binding: `providers.<id>.<key>`.
pub(super) fn at_key(provider: &str, key: &str, message: impl Into<String>) -> Problem {
    let path = crate::config::key_path(&crate::config::key_path("providers", provider), key);
    Problem::new(path, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn real_paths_resolve_dots_and_links_as_far_as_the_path_exists() {
        let dir = tempfile::tempdir().unwrap();
        let real_dir = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir(dir.path().join("data")).unwrap();
        std::fs::write(dir.path().join("data/traces.db"), "").unwrap();
        assert_eq!(
            real_path(&dir.path().join("other/../data/./traces.db")),
            real_dir.join("data/traces.db")
        );
        assert_eq!(
            real_path(&dir.path().join("data/traces.db-wal")),
            real_dir.join("data/traces.db-wal")
        );
        #[cfg(unix)]
        {
            std::os::unix::fs::symlink(
                dir.path().join("data/traces.db"),
                dir.path().join("orders.db"),
            )
            .unwrap();
            assert_eq!(
                real_path(&dir.path().join("orders.db")),
                real_dir.join("data/traces.db")
            );
        }
        assert_eq!(
            crate::digest::keyed::GENERATED_KEY_FILE,
            "digest.key",
            "docs/CONFIGURATION.md names the file"
        );
    }
}
