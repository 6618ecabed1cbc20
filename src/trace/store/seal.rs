//! Sealing retained content: XChaCha20-Poly1305 under
//! `DigestKey::derive("ctxd-retention")`, a random nonce per row, and the tenant and
//! fingerprint as associated data, so a row moved to another tenant or fingerprint no
//! longer opens. Pure: no SQL.

use crate::contract::Item;
use crate::digest::keyed::DigestKey;
use crate::digest::{canonical_digest, canonical_json_of};
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{Key, XChaCha20Poly1305, XNonce};

/// Purpose string of the key that seals retained content.
const RETENTION_PURPOSE: &str = "ctxd-retention";
const NONCE_BYTES: usize = 24;
const TAG_BYTES: usize = 16;

/// XChaCha20-Poly1305 under `DigestKey::derive("ctxd-retention")`.
#[derive(Clone)]
pub(super) struct RetentionCipher(XChaCha20Poly1305);

impl RetentionCipher {
    pub(super) fn new(key: &DigestKey) -> RetentionCipher {
        let derived = key.derive(RETENTION_PURPOSE);
        RetentionCipher(XChaCha20Poly1305::new(Key::from_slice(&derived)))
    }

    /// Nonce ‖ ciphertext of the item's canonical JSON, bound to tenant and fingerprint.
    pub(super) fn seal(&self, tenant: &str, fingerprint: &str, item: &Item) -> Vec<u8> {
        let plaintext = canonical_json_of(item);
        let mut nonce = [0u8; NONCE_BYTES];
        getrandom::fill(&mut nonce).expect("the operating system provides randomness");
        let aad = associated_data(tenant, fingerprint);
        let sealed = self
            .0
            .encrypt(
                XNonce::from_slice(&nonce),
                Payload {
                    msg: plaintext.as_bytes(),
                    aad: &aad,
                },
            )
            .expect("XChaCha20-Poly1305 seals any message under 256 GiB");
        let mut blob = Vec::with_capacity(NONCE_BYTES + sealed.len());
        blob.extend_from_slice(&nonce);
        blob.extend_from_slice(&sealed);
        blob
    }

    /// The item, if the blob opens under this tenant and fingerprint, parses, and its
    /// canonical digest is the fingerprint. `None` for anything tampered with.
    pub(super) fn open(&self, tenant: &str, fingerprint: &str, blob: &[u8]) -> Option<Item> {
        if blob.len() < NONCE_BYTES + TAG_BYTES {
            return None;
        }
        let (nonce, sealed) = blob.split_at(NONCE_BYTES);
        let aad = associated_data(tenant, fingerprint);
        let plaintext = self
            .0
            .decrypt(
                XNonce::from_slice(nonce),
                Payload {
                    msg: sealed,
                    aad: &aad,
                },
            )
            .ok()?;
        let item: Item = serde_json::from_slice(&plaintext).ok()?;
        (canonical_digest(&item) == fingerprint).then_some(item)
    }
}

/// Length-prefixed tenant and fingerprint, so no two pairs give the same bytes.
fn associated_data(tenant: &str, fingerprint: &str) -> Vec<u8> {
    let mut aad = Vec::with_capacity(32 + tenant.len() + fingerprint.len());
    aad.extend_from_slice(b"ctxd-retained-v1");
    for part in [tenant, fingerprint] {
        aad.extend_from_slice(&(part.len() as u64).to_be_bytes());
        aad.extend_from_slice(part.as_bytes());
    }
    aad
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::store::testing::{item, key};

    #[test]
    fn a_sealed_item_opens_only_under_its_tenant_fingerprint_and_key() {
        let cipher = RetentionCipher::new(&key());
        let record = item("CUST-1", "Account", "Enterprise plan");
        let fingerprint = canonical_digest(&record);
        let blob = cipher.seal("acme", &fingerprint, &record);
        assert_eq!(
            cipher.open("acme", &fingerprint, &blob),
            Some(record.clone())
        );
        assert_ne!(
            blob,
            cipher.seal("acme", &fingerprint, &record),
            "a nonce per seal"
        );
        assert_eq!(cipher.open("globex", &fingerprint, &blob), None);
        assert_eq!(cipher.open("acme", "sha256:other", &blob), None);
        let other = RetentionCipher::new(&DigestKey::from_bytes(vec![9u8; 32]).unwrap());
        assert_eq!(other.open("acme", &fingerprint, &blob), None);
        assert_eq!(
            cipher.open("acme", &fingerprint, &blob[..NONCE_BYTES]),
            None
        );
    }

    #[test]
    fn associated_data_is_length_prefixed() {
        assert_ne!(associated_data("ab", "c"), associated_data("a", "bc"));
    }
}
