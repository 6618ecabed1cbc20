//! The trace explorer: a small page (plain ES modules, one stylesheet) embedded in the
//! binary and served at `GET /ui/`, with a strict Content-Security-Policy. It needs no
//! key to load; the page asks for the tenant's key, keeps it in memory and sends it as
//! the bearer on its calls to the trace and handle routes, which check it as always.

use super::ApiError;
use actix_web::http::header::{self, HeaderValue};
use actix_web::{HttpRequest, HttpResponse, guard, web};
use sha2::{Digest, Sha256};
use std::sync::OnceLock;

/// Scripts, styles, images and API calls from this origin only; no inline script or
/// style, no plugins, no framing, no `<base>`, no form posts anywhere.
pub(crate) const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; \
     style-src 'self'; img-src 'self'; connect-src 'self'; font-src 'self'; \
     object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// One embedded file of the page.
pub(crate) struct Asset {
    pub(crate) name: &'static str,
    pub(crate) content_type: &'static str,
    pub(crate) body: &'static str,
}

/// Every file the page is made of; `index.html` is served at `/ui/`.
pub(crate) const ASSETS: [Asset; 6] = [
    Asset {
        name: "index.html",
        content_type: "text/html; charset=utf-8",
        body: include_str!("ui/index.html"),
    },
    Asset {
        name: "style.css",
        content_type: "text/css; charset=utf-8",
        body: include_str!("ui/style.css"),
    },
    Asset {
        name: "app.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_str!("ui/app.js"),
    },
    Asset {
        name: "api.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_str!("ui/api.js"),
    },
    Asset {
        name: "dom.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_str!("ui/dom.js"),
    },
    Asset {
        name: "views.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_str!("ui/views.js"),
    },
];

pub(crate) fn configure(config: &mut web::ServiceConfig) {
    config
        .route("/ui", get_or_head().to(redirect_to_index))
        .route("/ui/", get_or_head().to(index))
        .route("/ui/{file}", get_or_head().to(file));
}

/// `GET`, and `HEAD` (the same answer without its body).
fn get_or_head() -> actix_web::Route {
    web::route().guard(guard::Any(guard::Get()).or(guard::Head()))
}

/// `/ui` → `/ui/`, so that the page's relative module URLs resolve under `/ui/`.
#[utoipa::path(
    method(get, head),
    path = "/ui",
    summary = "Redirect to the trace explorer",
    tag = "ui",
    responses((status = 308, description = "To `/ui/`, so that the page's relative URLs resolve", headers(("Location" = String, description = "`/ui/`"))))
)]
async fn redirect_to_index() -> HttpResponse {
    HttpResponse::PermanentRedirect()
        .insert_header((header::LOCATION, "/ui/"))
        .finish()
}

#[utoipa::path(
    method(get, head),
    path = "/ui/",
    summary = "The trace explorer page (docs/TRACE_EXPLORER.md)",
    tag = "ui",
    responses(
        (status = 200, description = "The trace explorer page, with a strict Content-Security-Policy; no key needed", content_type = "text/html", body = String),
        (status = 304, description = "`If-None-Match` names the page's entity tag"),
    )
)]
async fn index(request: HttpRequest) -> Result<HttpResponse, ApiError> {
    serve(&request, "index.html")
}

#[utoipa::path(
    method(get, head),
    path = "/ui/{file}",
    summary = "A file of the trace explorer page",
    tag = "ui",
    params(("file" = String, Path, pattern = "^(index\\.html|style\\.css|app\\.js|api\\.js|dom\\.js|views\\.js)$", description = "One of the page's files; any other is 404")),
    responses(
        (status = 200, description = "The file", content(
            (String = "text/html"),
            (String = "text/css"),
            (String = "text/javascript"),
        )),
        (status = 304, description = "`If-None-Match` names the file's entity tag"),
        (status = 404, description = "No such file in the trace explorer (`NOT_FOUND`)", body = crate::contract::ErrorBody),
    )
)]
async fn file(request: HttpRequest, path: web::Path<String>) -> Result<HttpResponse, ApiError> {
    serve(&request, &path.into_inner())
}

/// Each asset's strong entity tag: a hash of its bytes, computed once.
fn entity_tags() -> &'static [String] {
    static TAGS: OnceLock<Vec<String>> = OnceLock::new();
    TAGS.get_or_init(|| {
        ASSETS
            .iter()
            .map(|asset| {
                let digest = Sha256::digest(asset.body.as_bytes());
                format!("\"{}\"", hex::encode(&digest[..12]))
            })
            .collect()
    })
}

/// Whether an `If-None-Match` header names this tag (or `*`).
fn matches_tag(if_none_match: Option<&HeaderValue>, tag: &str) -> bool {
    if_none_match
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| {
            value
                .split(',')
                .map(|candidate| candidate.trim().trim_start_matches("W/"))
                .any(|candidate| candidate == tag || candidate == "*")
        })
}

/// An asset with the page's security headers; revalidated on every load (`no-cache`
/// with an entity tag), so a new binary's page is seen at once and an unchanged one
/// costs a 304.
fn serve(request: &HttpRequest, name: &str) -> Result<HttpResponse, ApiError> {
    let Some(position) = ASSETS.iter().position(|asset| asset.name == name) else {
        return Err(ApiError::NotFound {
            message: format!("no such file in the trace explorer: {name:?}"),
        });
    };
    let asset = &ASSETS[position];
    let tag = &entity_tags()[position];
    let not_modified = matches_tag(request.headers().get(header::IF_NONE_MATCH), tag);
    let mut response = if not_modified {
        HttpResponse::NotModified()
    } else {
        HttpResponse::Ok()
    };
    response
        .insert_header((header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY))
        .insert_header((header::X_CONTENT_TYPE_OPTIONS, "nosniff"))
        .insert_header((header::X_FRAME_OPTIONS, "DENY"))
        .insert_header((header::REFERRER_POLICY, "no-referrer"))
        .insert_header(("Cross-Origin-Opener-Policy", "same-origin"))
        .insert_header(("Cross-Origin-Resource-Policy", "same-origin"))
        .insert_header((header::CACHE_CONTROL, "no-cache"))
        .insert_header((header::ETAG, tag.as_str()));
    if not_modified {
        return Ok(response.finish());
    }
    Ok(response
        .insert_header((header::CONTENT_TYPE, asset.content_type))
        .body(asset.body))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A URL with a scheme or a scheme-relative `//host` in an asset would load
    /// something from elsewhere (the policy would refuse it, and the page would break).
    fn external_references(text: &str) -> Vec<String> {
        let lower = text.to_ascii_lowercase();
        let mut found = Vec::new();
        for marker in [
            "http://",
            "https://",
            "src=\"//",
            "href=\"//",
            "url(//",
            "@import",
        ] {
            let mut from = 0;
            while let Some(at) = lower[from..].find(marker) {
                let start = from + at;
                found.push(text[start..(start + 40).min(text.len())].to_owned());
                from = start + marker.len();
            }
        }
        found
    }

    #[test]
    fn no_asset_loads_anything_from_elsewhere() {
        for asset in &ASSETS {
            assert_eq!(
                external_references(asset.body),
                Vec::<String>::new(),
                "{} references another origin",
                asset.name
            );
        }
        assert!(!external_references("<script src=\"https://cdn.example/x.js\">").is_empty());
        assert!(!external_references("<link href=\"//fonts.example/f.css\">").is_empty());
        assert!(has_event_attribute("<body onload=\"x()\">"));
        assert!(!has_event_attribute("<p>turns on time</p>"));
    }

    /// Whether some ` on<letters>=` attribute is in the markup.
    fn has_event_attribute(markup: &str) -> bool {
        markup.match_indices(" on").any(|(at, _)| {
            let rest = &markup[at + 3..];
            let name_len = rest.chars().take_while(char::is_ascii_alphabetic).count();
            name_len > 0 && rest[name_len..].starts_with('=')
        })
    }

    #[test]
    fn no_asset_has_inline_script_or_style() {
        let index = ASSETS[0].body.to_ascii_lowercase();
        assert!(!index.contains("<style"), "inline style in index.html");
        assert!(
            !index.contains(" style="),
            "inline style attribute in index.html"
        );
        assert!(
            !has_event_attribute(&index),
            "inline event handler in index.html"
        );
        for script in index.split("<script").skip(1) {
            assert!(script.contains("src=\""), "inline script in index.html");
        }
        for asset in &ASSETS {
            assert!(
                !asset.body.contains("innerHTML") && !asset.body.contains("outerHTML"),
                "{} writes HTML from strings",
                asset.name
            );
            assert!(
                !asset.body.contains("eval("),
                "{} evaluates code",
                asset.name
            );
        }
    }

    #[test]
    fn every_module_the_page_imports_is_served() {
        for asset in ASSETS.iter().filter(|a| a.name.ends_with(".js")) {
            for line in asset.body.lines().filter(|l| l.starts_with("import ")) {
                let target = line
                    .rsplit("from ")
                    .next()
                    .and_then(|rest| rest.trim().trim_end_matches(';').strip_prefix("\"./"))
                    .and_then(|rest| rest.strip_suffix('"'))
                    .unwrap_or_else(|| panic!("{}: unexpected import {line:?}", asset.name));
                assert!(
                    ASSETS.iter().any(|a| a.name == target),
                    "{} imports {target}, which is not served",
                    asset.name
                );
            }
        }
    }

    #[test]
    fn entity_tags_match_as_http_says() {
        let tag = "\"0123\"";
        let header = |s: &'static str| HeaderValue::from_static(s);
        assert!(matches_tag(Some(&header("\"0123\"")), tag));
        assert!(matches_tag(Some(&header("\"x\", W/\"0123\"")), tag));
        assert!(matches_tag(Some(&header("*")), tag));
        assert!(!matches_tag(Some(&header("\"0124\"")), tag));
        assert!(!matches_tag(None, tag));
        let tags = entity_tags();
        assert_eq!(tags.len(), ASSETS.len());
        assert!(tags.iter().all(|t| t.len() == 26 && t.starts_with('"')));
    }
}
