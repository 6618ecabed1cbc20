//! Search cursors: opaque and authenticated. A cursor is the position of the next page —
//! a store row number — sealed with XChaCha20-Poly1305 under a key derived from the
//! deployment's digest key, a random nonce per cursor, and the search it continues (the
//! tenant scope and every filter) bound as associated data.
//!
//! So a cursor reveals nothing: not the row number, so not how many turns other tenants
//! wrote between two pages, and two cursors for the same position do not even compare
//! equal. And it opens only for the search that issued it: another tenant's cursor,
//! one of another query (other filters, another time window), an altered or a forged
//! one is [`InvalidCursor`]. The page size may change from page to page. Pure: no SQL.

use super::query::SearchQuery;
use crate::digest::DigestKey;
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{Key, XChaCha20Poly1305, XNonce};

/// Purpose string of the key that seals cursors.
const CURSOR_PURPOSE: &str = "ctxd-trace-cursor";
const NONCE_BYTES: usize = 24;
const SEQ_BYTES: usize = 8;
const TAG_BYTES: usize = 16;
/// Every cursor is this many lowercase hex digits: nonce, sealed row number, tag.
pub(crate) const CURSOR_LEN: usize = 2 * (NONCE_BYTES + SEQ_BYTES + TAG_BYTES);

/// A cursor no search of this scope and query issued under this key: malformed,
/// altered, forged, another tenant's or another query's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("not a cursor a trace search issued")]
pub(crate) struct InvalidCursor;

/// Seals and opens the cursors of one deployment key.
#[derive(Clone)]
pub(crate) struct CursorSeal(XChaCha20Poly1305);

impl CursorSeal {
    pub(crate) fn new(key: &DigestKey) -> CursorSeal {
        let derived = key.derive(CURSOR_PURPOSE);
        CursorSeal(XChaCha20Poly1305::new(Key::from_slice(&derived)))
    }

    /// The cursor of the page after the turn at `seq`, for `query` only.
    pub(crate) fn seal(&self, query: &SearchQuery, seq: i64) -> String {
        let mut nonce = [0u8; NONCE_BYTES];
        getrandom::fill(&mut nonce).expect("the operating system provides randomness");
        let aad = scope(query);
        let sealed = self
            .0
            .encrypt(
                XNonce::from_slice(&nonce),
                Payload {
                    msg: &seq.to_be_bytes(),
                    aad: &aad,
                },
            )
            .expect("XChaCha20-Poly1305 seals any message under 256 GiB");
        let mut bytes = Vec::with_capacity(NONCE_BYTES + sealed.len());
        bytes.extend_from_slice(&nonce);
        bytes.extend_from_slice(&sealed);
        hex::encode(bytes)
    }

    /// The row number a cursor of `query` stands for.
    pub(crate) fn open(&self, query: &SearchQuery, cursor: &str) -> Result<i64, InvalidCursor> {
        if !is_cursor_shaped(cursor) {
            return Err(InvalidCursor);
        }
        let bytes = hex::decode(cursor).map_err(|_| InvalidCursor)?;
        let (nonce, sealed) = bytes.split_at(NONCE_BYTES);
        let aad = scope(query);
        let plain = self
            .0
            .decrypt(
                XNonce::from_slice(nonce),
                Payload {
                    msg: sealed,
                    aad: &aad,
                },
            )
            .map_err(|_| InvalidCursor)?;
        let seq = i64::from_be_bytes(plain.try_into().map_err(|_| InvalidCursor)?);
        (seq > 0).then_some(seq).ok_or(InvalidCursor)
    }
}

/// Whether `text` has the shape of a cursor: [`CURSOR_LEN`] lowercase hex digits. What a
/// caller checks before the store is asked; only [`CursorSeal::open`] says it is one.
pub(crate) fn is_cursor_shaped(text: &str) -> bool {
    text.len() == CURSOR_LEN
        && text
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// The search a cursor belongs to, as associated data: the tenant scope and every
/// filter, each length-prefixed behind a presence byte so no two searches give the
/// same bytes. The limit and the cursor are not part of it.
fn scope(query: &SearchQuery) -> Vec<u8> {
    let mut aad = b"ctxd-cursor-v1".to_vec();
    let mut part = |value: Option<&[u8]>| match value {
        None => aad.push(0),
        Some(bytes) => {
            aad.push(1);
            aad.extend_from_slice(&(bytes.len() as u64).to_be_bytes());
            aad.extend_from_slice(bytes);
        }
    };
    part(query.tenant.as_deref().map(str::as_bytes));
    part(query.provider.as_deref().map(str::as_bytes));
    part(query.provider_status.map(|s| s.as_str().as_bytes()));
    part(query.layer.as_deref().map(str::as_bytes));
    part(query.layer_status.map(|s| s.as_str().as_bytes()));
    let since = query.since_ms.map(i64::to_be_bytes);
    part(since.as_ref().map(|b| &b[..]));
    let until = query.until_ms.map(i64::to_be_bytes);
    part(until.as_ref().map(|b| &b[..]));
    aad
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::ProviderStatus;

    fn seal() -> CursorSeal {
        CursorSeal::new(&DigestKey::from_bytes(vec![5u8; 32]).unwrap())
    }

    fn query(tenant: &str) -> SearchQuery {
        SearchQuery {
            tenant: Some(tenant.to_owned()),
            provider: Some("crm".to_owned()),
            limit: 20,
            ..SearchQuery::default()
        }
    }

    #[test]
    fn a_cursor_opens_for_its_own_search_only() {
        let seal = seal();
        let acme = query("acme");
        let cursor = seal.seal(&acme, 42);
        assert_eq!(cursor.len(), CURSOR_LEN);
        assert!(is_cursor_shaped(&cursor));
        assert_eq!(seal.open(&acme, &cursor), Ok(42));
        // Another page size continues the same search.
        let larger = SearchQuery {
            limit: 100,
            ..acme.clone()
        };
        assert_eq!(seal.open(&larger, &cursor), Ok(42));
        let others = [
            query("globex"),
            SearchQuery {
                tenant: None,
                ..acme.clone()
            },
            SearchQuery {
                provider: Some("orders".to_owned()),
                ..acme.clone()
            },
            SearchQuery {
                provider_status: Some(ProviderStatus::Timeout),
                ..acme.clone()
            },
            SearchQuery {
                since_ms: Some(0),
                ..acme.clone()
            },
            SearchQuery {
                until_ms: Some(1),
                ..acme.clone()
            },
        ];
        for other in &others {
            assert_eq!(seal.open(other, &cursor), Err(InvalidCursor), "{other:?}");
        }
        let other_key = CursorSeal::new(&DigestKey::from_bytes(vec![6u8; 32]).unwrap());
        assert_eq!(other_key.open(&acme, &cursor), Err(InvalidCursor));
    }

    #[test]
    fn a_cursor_reveals_no_position_and_resists_forgery() {
        let seal = seal();
        let acme = query("acme");
        let (a, b) = (seal.seal(&acme, 7), seal.seal(&acme, 7));
        assert_ne!(a, b, "two cursors of one position do not compare equal");
        assert!(!a.contains(&format!("{:016x}", 7)));
        let mut altered = a.clone().into_bytes();
        let last = altered.len() - 40;
        altered[last] = if altered[last] == b'0' { b'1' } else { b'0' };
        let altered = String::from_utf8(altered).unwrap();
        for forged in [
            String::new(),
            "0000000000000007".to_owned(),
            "0".repeat(CURSOR_LEN),
            a.to_uppercase(),
            format!("{a}0"),
            altered,
        ] {
            assert_eq!(seal.open(&acme, &forged), Err(InvalidCursor), "{forged}");
        }
    }
}
