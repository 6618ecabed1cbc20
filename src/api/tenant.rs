//! The tenant a request acts for: the one extractor every tenant route takes. It refuses
//! every request once shutdown has started (503 `RUNTIME_UNAVAILABLE`, before looking at
//! the key, so a draining server answers everyone alike), then requires a known tenant
//! API key (401 `UNAUTHORIZED`). An admitted request counts as in flight for the drain
//! until it is answered.

use super::drain::Admitted;
use super::{ApiError, ApiState};
use crate::actors::TenantRuntime;
use actix_web::http::header::{AUTHORIZATION, HeaderMap};
use actix_web::{FromRequest, HttpRequest, dev::Payload, web};
use sha2::{Digest, Sha256};
use std::future::{Ready, ready};
use std::ops::Deref;
use std::sync::Arc;

/// The authenticated tenant of a request to a serving ctxd. A route that must count a
/// refusal itself (turns) takes `Result<Tenant, ApiError>`.
pub(crate) struct Tenant {
    runtime: Arc<TenantRuntime>,
    /// Keeps the request counted as in flight while the route answers it.
    _admitted: Admitted,
}

impl Tenant {
    /// The tenant a local process acts for (`ctxd mcp` over stdio): named on its command
    /// line by whoever started it, not by a key; counted in flight like a request.
    pub(crate) fn local(runtime: Arc<TenantRuntime>, admitted: Admitted) -> Tenant {
        Tenant {
            runtime,
            _admitted: admitted,
        }
    }

    pub(crate) fn runtime(&self) -> &Arc<TenantRuntime> {
        &self.runtime
    }
}

impl Deref for Tenant {
    type Target = TenantRuntime;

    fn deref(&self) -> &TenantRuntime {
        &self.runtime
    }
}

impl FromRequest for Tenant {
    type Error = ApiError;
    type Future = Ready<Result<Tenant, ApiError>>;

    fn from_request(request: &HttpRequest, _: &mut Payload) -> Self::Future {
        ready(admit(request))
    }
}

fn admit(request: &HttpRequest) -> Result<Tenant, ApiError> {
    let Some(state) = request.app_data::<web::Data<ApiState>>() else {
        tracing::error!("tenant routes are served without the API state");
        return Err(ApiError::RuntimeUnavailable {
            message: "ctxd is not serving tenants".to_owned(),
        });
    };
    let registry = &state.registry;
    let runtime = checked(
        registry.is_shutting_down(),
        request.headers(),
        |key_sha256| registry.tenant_for_key(key_sha256),
    )?;
    Ok(Tenant {
        runtime,
        _admitted: state.drain.admit(),
    })
}

/// The tenant of a request that may carry a key (`/readyz`): `None` without an
/// `Authorization` header, 401 for a key no tenant has.
pub(crate) fn optional_tenant(
    request: &HttpRequest,
    state: &ApiState,
) -> Result<Option<Arc<TenantRuntime>>, ApiError> {
    if !request.headers().contains_key(AUTHORIZATION) {
        return Ok(None);
    }
    let key_sha256 = bearer_key_sha256(request.headers())?;
    state
        .registry
        .tenant_for_key(&key_sha256)
        .map(Some)
        .ok_or(ApiError::Unauthorized)
}

/// The checks in their order: shutting down, then the key, looked up by its hash.
fn checked(
    shutting_down: bool,
    headers: &HeaderMap,
    tenant_for_key: impl FnOnce(&[u8; 32]) -> Option<Arc<TenantRuntime>>,
) -> Result<Arc<TenantRuntime>, ApiError> {
    if shutting_down {
        return Err(ApiError::shutting_down());
    }
    let key_sha256 = bearer_key_sha256(headers)?;
    tenant_for_key(&key_sha256).ok_or(ApiError::Unauthorized)
}

/// SHA-256 of the key in `Authorization: Bearer <key>` (scheme in any case, the key
/// trimmed); tenants are configured by that hash, never the key.
pub(super) fn bearer_key_sha256(headers: &HeaderMap) -> Result<[u8; 32], ApiError> {
    let header = headers
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .ok_or(ApiError::Unauthorized)?;
    let (scheme, key) = header.split_once(' ').ok_or(ApiError::Unauthorized)?;
    if !scheme.eq_ignore_ascii_case("bearer") || key.trim().is_empty() {
        return Err(ApiError::Unauthorized);
    }
    Ok(Sha256::digest(key.trim().as_bytes()).into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use actix_web::http::header::HeaderValue;

    fn with_authorization(value: Option<&str>) -> HeaderMap {
        let mut headers = HeaderMap::new();
        if let Some(value) = value {
            headers.insert(AUTHORIZATION, HeaderValue::from_str(value).unwrap());
        }
        headers
    }

    fn acme() -> Arc<TenantRuntime> {
        Arc::new(TenantRuntime {
            id: "acme".to_owned(),
            key_sha256: Sha256::digest(b"acme-key").into(),
            max_in_flight: 1,
            in_flight: Default::default(),
            projects: Default::default(),
        })
    }

    /// The tenant whose key hashes to `key_sha256`, among acme only.
    fn lookup(key_sha256: &[u8; 32]) -> Option<Arc<TenantRuntime>> {
        let acme = acme();
        (acme.key_sha256 == *key_sha256).then_some(acme)
    }

    fn checked_id(shutting_down: bool, authorization: Option<&str>) -> Result<String, ApiError> {
        checked(shutting_down, &with_authorization(authorization), lookup)
            .map(|tenant| tenant.id.clone())
    }

    #[test]
    fn a_serving_ctxd_admits_a_known_key_only() {
        assert_eq!(
            checked_id(false, Some("Bearer acme-key")),
            Ok("acme".to_owned())
        );
        for refused in [None, Some("Bearer globex-key"), Some("Basic acme-key")] {
            assert_eq!(
                checked_id(false, refused),
                Err(ApiError::Unauthorized),
                "{refused:?}"
            );
        }
    }

    #[test]
    fn shutting_down_refuses_everyone_before_the_key_is_looked_at() {
        for authorization in [Some("Bearer acme-key"), Some("Bearer globex-key"), None] {
            let refused = checked(true, &with_authorization(authorization), |_| {
                panic!("no key is looked up while shutting down")
            });
            let error = refused.err().expect("refused");
            assert_eq!(error, ApiError::shutting_down(), "{authorization:?}");
            assert_eq!(
                error.to_string(),
                "RUNTIME_UNAVAILABLE: ctxd is shutting down"
            );
            assert_eq!(actix_web::ResponseError::status_code(&error), 503);
        }
    }

    #[test]
    fn the_bearer_key_is_hashed_whatever_the_scheme_case() {
        let expected: [u8; 32] = Sha256::digest(b"acme-key").into();
        for value in ["Bearer acme-key", "bearer acme-key", "BEARER  acme-key "] {
            assert_eq!(
                bearer_key_sha256(&with_authorization(Some(value))),
                Ok(expected),
                "{value}"
            );
        }
    }

    #[test]
    fn anything_but_a_bearer_key_is_unauthorized() {
        for value in [
            None,
            Some("acme-key"),
            Some("Basic acme-key"),
            Some("Bearer  "),
        ] {
            assert_eq!(
                bearer_key_sha256(&with_authorization(value)),
                Err(ApiError::Unauthorized),
                "{value:?}"
            );
        }
    }
}
