//! Keyed digests (HMAC-SHA256 with the deployment key): item locators
//! `<provider>/item-<16 hex>` that never reveal a record id, and request digests that
//! let a replay verify its inputs without storing them.

use super::tagged_hex;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
use std::fmt;
use std::path::{Path, PathBuf};

type HmacSha256 = Hmac<Sha256>;

/// Shortest key accepted from the environment, in bytes.
pub(crate) const MIN_KEY_BYTES: usize = 32;
/// File name of a generated key, beside the trace store.
pub(crate) const GENERATED_KEY_FILE: &str = "digest.key";

/// The deployment's HMAC key, kept as HMAC's keyed state (the key's inner and outer
/// pads already hashed), so a digest costs only its own message's blocks. Never printed.
#[derive(Clone)]
pub struct DigestKey(HmacSha256);

impl fmt::Debug for DigestKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("DigestKey(<redacted>)")
    }
}

#[derive(Debug, thiserror::Error)]
pub enum DigestKeyError {
    #[error(
        "the digest key env var {0} is not set; set it (at least {MIN_KEY_BYTES} bytes, the same on every replica) or opt into a generated key with generate_digest_key = true"
    )]
    Missing(String),
    #[error("the digest key in {0} is shorter than {MIN_KEY_BYTES} bytes")]
    TooShort(String),
    #[error("cannot read or create the generated digest key {path}: {source}")]
    File {
        path: PathBuf,
        source: std::io::Error,
    },
}

impl DigestKey {
    pub fn from_bytes(bytes: impl Into<Vec<u8>>) -> Result<DigestKey, DigestKeyError> {
        let bytes = bytes.into();
        if bytes.len() < MIN_KEY_BYTES {
            return Err(DigestKeyError::TooShort("the key".to_owned()));
        }
        Ok(DigestKey::with_key(&bytes))
    }

    /// The key from `env_name`; when unset and `generate` is allowed, the key kept in
    /// `key_dir`, created there (mode 0600) on first use.
    pub(crate) fn resolve(
        env_value: Option<&str>,
        env_name: &str,
        generate: bool,
        key_dir: &Path,
    ) -> Result<DigestKey, DigestKeyError> {
        match env_value {
            Some(value) if value.len() >= MIN_KEY_BYTES => {
                Ok(DigestKey::with_key(value.as_bytes()))
            }
            Some(_) => Err(DigestKeyError::TooShort(env_name.to_owned())),
            None if generate => Self::generated(&key_dir.join(GENERATED_KEY_FILE)),
            None => Err(DigestKeyError::Missing(env_name.to_owned())),
        }
    }

    fn generated(path: &Path) -> Result<DigestKey, DigestKeyError> {
        let file_error = |source| DigestKeyError::File {
            path: path.to_owned(),
            source,
        };
        match std::fs::read(path) {
            Ok(bytes) if bytes.len() >= MIN_KEY_BYTES => return Ok(DigestKey::with_key(&bytes)),
            Ok(_) => return Err(DigestKeyError::TooShort(path.display().to_string())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(file_error(e)),
        }
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(file_error)?;
        }
        let mut raw = [0u8; 32];
        getrandom::fill(&mut raw).expect("the operating system provides randomness");
        let key = hex::encode(raw).into_bytes();
        write_new_private_file(path, &key).map_err(file_error)?;
        // Another process may have won the race: the file on disk is the key.
        let bytes = std::fs::read(path).map_err(file_error)?;
        Ok(DigestKey::with_key(&bytes))
    }

    fn with_key(bytes: &[u8]) -> DigestKey {
        DigestKey(
            <HmacSha256 as KeyInit>::new_from_slice(bytes).expect("HMAC accepts any key length"),
        )
    }

    fn mac(&self) -> HmacSha256 {
        self.0.clone()
    }

    /// HMAC-SHA256 over length-prefixed parts.
    fn keyed(&self, parts: &[&[u8]]) -> [u8; 32] {
        let mut mac = self.mac();
        for part in parts {
            mac.update(&(part.len() as u64).to_be_bytes());
            mac.update(part);
        }
        mac.finalize().into_bytes().into()
    }

    /// `<provider>/item-<16 hex>`: stable for the same provider and record id under one
    /// key, and reveals nothing of the id.
    pub fn locator(&self, provider: &str, item_id: &str) -> String {
        let digest = self.keyed(&[b"ctxd-locator", provider.as_bytes(), item_id.as_bytes()]);
        tagged_hex(&format!("{provider}/item-"), &digest[..8])
    }

    /// `hmac-sha256:<hex>` of one turn input (key name and value): a replay proves it
    /// has the original inputs without the store ever holding them.
    pub fn input_digest(&self, key: &str, value: &str) -> String {
        let digest = self.keyed(&[b"ctxd-input", key.as_bytes(), value.as_bytes()]);
        tagged_hex("hmac-sha256:", &digest)
    }

    /// A 32-byte key derived for one purpose (e.g. `ctxd-retention` encrypts retained
    /// content at rest), so one deployment key serves several uses independently.
    pub(crate) fn derive(&self, purpose: &str) -> [u8; 32] {
        let mut mac = self.mac();
        mac.update(b"ctxd-derive");
        mac.update(purpose.as_bytes());
        mac.finalize().into_bytes().into()
    }

    /// `hmac-sha256:<hex>` of one lookup request (provider, key name, value).
    pub fn request_digest(&self, provider: &str, key: &str, value: &str) -> String {
        let digest = self.keyed(&[
            b"ctxd-request",
            provider.as_bytes(),
            key.as_bytes(),
            value.as_bytes(),
        ]);
        tagged_hex("hmac-sha256:", &digest)
    }
}

#[cfg(unix)]
fn write_new_private_file(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    {
        Ok(mut file) => {
            file.write_all(bytes)?;
            file.sync_all()
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(not(unix))]
fn write_new_private_file(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
    {
        Ok(mut file) => {
            use std::io::Write;
            file.write_all(bytes)?;
            file.sync_all()
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(byte: u8) -> DigestKey {
        DigestKey::from_bytes(vec![byte; 32]).unwrap()
    }

    #[test]
    fn locators_are_keyed_stable_and_opaque() {
        let a = key(1).locator("customer-data", "CUST-1042");
        assert_eq!(a, key(1).locator("customer-data", "CUST-1042"));
        assert_ne!(a, key(2).locator("customer-data", "CUST-1042"));
        assert_ne!(a, key(1).locator("customer-data", "CUST-1043"));
        assert!(a.starts_with("customer-data/item-"));
        assert_eq!(a.len(), "customer-data/item-".len() + 16);
        assert!(!a.contains("1042"));
    }

    #[test]
    fn derived_keys_differ_by_purpose_and_key() {
        assert_ne!(key(5).derive("a"), key(5).derive("b"));
        assert_ne!(key(5).derive("a"), key(6).derive("a"));
        assert_eq!(key(5).derive("a"), key(5).derive("a"));
        assert_ne!(
            key(5).input_digest("customerId", "CUST-1"),
            key(5).request_digest("crm", "customerId", "CUST-1")
        );
    }

    #[test]
    fn parts_are_length_prefixed() {
        let k = key(3);
        assert_ne!(k.keyed(&[b"ab", b"c"]), k.keyed(&[b"a", b"bc"]));
    }

    #[test]
    fn request_digests_hide_the_value() {
        let digest = key(4).request_digest("crm", "customerId", "CUST-1042");
        assert!(digest.starts_with("hmac-sha256:"));
        assert!(!digest.contains("CUST"));
        assert_ne!(
            digest,
            key(4).request_digest("crm", "customerId", "CUST-1043")
        );
    }

    #[test]
    fn resolve_from_env_or_generated_file() {
        let dir = tempfile::tempdir().unwrap();
        let long = "k".repeat(32);
        assert!(DigestKey::resolve(Some(&long), "K", false, dir.path()).is_ok());
        assert!(matches!(
            DigestKey::resolve(Some("short"), "K", true, dir.path()),
            Err(DigestKeyError::TooShort(_))
        ));
        let error = DigestKey::resolve(None, "CTXD_DIGEST_KEY", false, dir.path()).unwrap_err();
        assert!(error.to_string().contains("CTXD_DIGEST_KEY is not set"));
        let first = DigestKey::resolve(None, "K", true, dir.path()).unwrap();
        let second = DigestKey::resolve(None, "K", true, dir.path()).unwrap();
        assert_eq!(
            first.locator("p", "1"),
            second.locator("p", "1"),
            "the generated key is kept"
        );
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(dir.path().join(GENERATED_KEY_FILE))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        assert!(!format!("{first:?}").contains('k'));
    }
}
