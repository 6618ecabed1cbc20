//! `POST /admin/reload`: the reload SIGHUP starts, for a caller with the admin key
//! (`[server] admin_key_sha256` or `admin_key_env`), compared in constant time. Without
//! an admin key in the config `POST` answers `404` like an unknown route (other methods `405`); a wrong or
//! missing key is `401`; while shutting down, `503`. The answer is `200` with what
//! changed, or `422 RELOAD_REFUSED` with every problem, as `ctxd validate` prints them.

use super::tenant::bearer_key_sha256;
use super::{ApiError, ApiState};
use crate::actors::ReloadRequests;
use actix_web::{HttpRequest, HttpResponse, web};
use serde_json::json;
use subtle::ConstantTimeEq;

/// Who may reload, and where reloads are asked for.
pub(crate) struct AdminAccess {
    /// SHA-256 of the admin key; the key itself is never kept.
    key_sha256: [u8; 32],
    reloads: ReloadRequests,
}

impl AdminAccess {
    pub(crate) fn new(key_sha256: [u8; 32], reloads: ReloadRequests) -> AdminAccess {
        AdminAccess {
            key_sha256,
            reloads,
        }
    }

    fn admits(&self, key_sha256: &[u8; 32]) -> bool {
        bool::from(self.key_sha256.ct_eq(key_sha256))
    }
}

pub(crate) fn configure(config: &mut web::ServiceConfig) {
    config
        .route("/admin/reload", web::post().to(reload))
        .route("/admin/reload", web::to(other_method));
}

fn no_admin_route() -> ApiError {
    ApiError::NotFound {
        message: "no such route".to_owned(),
    }
}

#[utoipa::path(
    post,
    path = "/admin/reload",
    summary = "Reload the config, Projects and Bindings (docs/OPERATIONS.md, Reload)",
    tag = "operations",
    security(("tenantKey" = [])),
    responses(
        (status = 200, description = "Reloaded: `status` and what changed (tenants, projects, bindings added, removed, changed, kept)", content_type = "application/json", body = Object),
        (status = 401, description = "The admin key is missing or wrong (`UNAUTHORIZED`)", body = crate::contract::ErrorBody),
        (status = 404, description = "The config sets no admin key: no such route (`NOT_FOUND`)", body = crate::contract::ErrorBody),
        (status = 422, description = "The new config does not validate (`RELOAD_REFUSED`, with every problem in `problems`); the running set keeps serving", content_type = "application/json", body = Object),
        (status = 503, description = "Shutting down (`RUNTIME_UNAVAILABLE`)", body = crate::contract::ErrorBody),
    )
)]
pub(super) async fn reload(
    request: HttpRequest,
    state: web::Data<ApiState>,
) -> Result<HttpResponse, ApiError> {
    let admin = state.admin.as_ref().ok_or_else(no_admin_route)?;
    if state.registry.is_shutting_down() {
        return Err(ApiError::shutting_down());
    }
    let key_sha256 = bearer_key_sha256(request.headers())?;
    if !admin.admits(&key_sha256) {
        return Err(ApiError::Unauthorized);
    }
    match admin.reloads.reload().await {
        None => Err(ApiError::shutting_down()),
        Some(Ok(changes)) => Ok(HttpResponse::Ok().json(json!({
            "status": "reloaded",
            "changes": changes,
        }))),
        Some(Err(problems)) => Ok(HttpResponse::UnprocessableEntity().json(json!({
            "error": {
                "code": "RELOAD_REFUSED",
                "message": format!(
                    "the reload was refused ({} problem{}): the running set keeps serving",
                    problems.len(),
                    if problems.len() == 1 { "" } else { "s" }
                ),
            },
            "problems": problems,
        }))),
    }
}

/// 405 with `Allow: POST`, with or without an admin key: the path is in the API (and its
/// document) either way; only `POST` depends on the key.
async fn other_method() -> Result<HttpResponse, ApiError> {
    Err(ApiError::MethodNotAllowed)
}
