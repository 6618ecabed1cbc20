//! The GitHub, GitLab and Jira presets against fake APIs on 127.0.0.1 answering with the
//! real APIs' documented shapes (nested `user` and `labels`, Jira's `fields`, pagination
//! headers): the request each receives, and the items each answer maps to.

use crate::provider_server::{Behaviour, ProviderServer, RecordedRequest, RunningProvider};
use crate::rest_provider::{lookup_with, origin, raw, rest_provider, rest_spec, value_once};
use ctxd::contract::ProviderStatus;
use ctxd::secrets::redact::SecretHandling;
use serde_json::{Value, json};

const TOKEN: &str = "tok-7be41c09aa53";

fn query_pairs(request: &RecordedRequest) -> Vec<(String, String)> {
    url::form_urlencoded::parse(request.query.as_deref().unwrap_or("").as_bytes())
        .into_owned()
        .collect()
}

/// A lookup of `value` through the preset binding `keys` at `endpoint`, which must
/// answer items.
async fn preset_lookup(
    endpoint: &str,
    keys: &str,
    secret: Option<&str>,
    value: &str,
    limit: u32,
) -> ctxd::outcome::Outcome {
    let spec = rest_spec(endpoint, keys);
    let outcome = lookup_with(
        &rest_provider(&spec, secret),
        value,
        limit,
        SecretHandling::Refuse,
    )
    .await;
    assert_eq!(outcome.status(), ProviderStatus::Ok, "{outcome:?}");
    outcome
}

fn only_request(server: &RunningProvider) -> RecordedRequest {
    let requests = server.requests();
    assert_eq!(requests.len(), 1, "{requests:?}");
    requests.into_iter().next().unwrap()
}

/// An issue as GitHub's REST API documents it (`GET /repos/{owner}/{repo}/issues/{n}`).
fn github_issue(number: u64, labels: &[&str]) -> Value {
    json!({
        "id": 1_000_000 + number,
        "node_id": "MDU6SXNzdWUx",
        "url": format!("https://api.github.com/repos/acme/widgets/issues/{number}"),
        "repository_url": "https://api.github.com/repos/acme/widgets",
        "html_url": format!("https://github.com/acme/widgets/issues/{number}"),
        "number": number,
        "state": "open",
        "title": "Export to CSV drops the last row",
        "body": "Steps: export any report with more than 100 rows.",
        "user": {"login": "octocat", "id": 1, "type": "User", "site_admin": false},
        "labels": labels.iter().enumerate().map(|(i, name)| json!({
            "id": 208_045_946 + i, "node_id": "MDU6TGFiZWwyMDgwNDU5NDY=",
            "url": format!("https://api.github.com/repos/acme/widgets/labels/{name}"),
            "name": name, "description": null, "color": "f29513", "default": false
        })).collect::<Vec<_>>(),
        "assignee": null,
        "assignees": [],
        "milestone": null,
        "locked": false,
        "comments": 3,
        "pull_request": null,
        "closed_at": null,
        "created_at": "2026-11-01T09:12:00Z",
        "updated_at": "2026-11-28T16:40:00Z",
        "author_association": "CONTRIBUTOR"
    })
}

#[tokio::test]
async fn github_issue_reads_one_issue_with_its_labels() {
    let server = ProviderServer::new()
        .behaviour(Behaviour::Json(200, github_issue(42, &["bug", "export"])))
        .start()
        .await;
    let outcome = preset_lookup(
        &origin(&server),
        "preset = \"github.issue\"\nrepository = \"acme/widgets\"\ntoken_env = \"GITHUB_TOKEN\"\n",
        Some(TOKEN),
        "42",
        5,
    )
    .await;
    let item = &outcome.items_found()[0];
    assert_eq!(item.id, "42");
    assert_eq!(
        item.title.as_deref(),
        Some("Export to CSV drops the last row")
    );
    assert_eq!(
        item.content,
        "Steps: export any report with more than 100 rows."
    );
    assert_eq!(item.updated_at.as_deref(), Some("2026-11-28T16:40:00Z"));
    assert_eq!(
        Value::Object(item.metadata.clone()),
        json!({
            "state": "open", "labels": ["bug", "export"], "author": "octocat",
            "page": "https://github.com/acme/widgets/issues/42"
        })
    );
    let request = only_request(&server);
    assert_eq!(request.method, "GET");
    assert_eq!(request.path, "/repos/acme/widgets/issues/42");
    assert_eq!(request.query, None);
    assert_eq!(
        request.header("authorization"),
        Some(format!("Bearer {TOKEN}").as_str())
    );
    assert_eq!(
        request.header("accept"),
        Some("application/vnd.github+json")
    );
    assert_eq!(request.header("x-github-api-version"), Some("2022-11-28"));
}

#[tokio::test]
async fn github_issues_lists_by_label_and_leaves_pagination_to_the_limit() {
    let issues: Vec<Value> = (1..=30).map(|n| github_issue(n, &["CUST-1042"])).collect();
    let link = "<https://api.github.com/repositories/1300192/issues?labels=CUST-1042&page=2>; rel=\"next\", <https://api.github.com/repositories/1300192/issues?labels=CUST-1042&page=4>; rel=\"last\"";
    let server = ProviderServer::new()
        .behaviour(raw(200, &[("link", link)], &Value::Array(issues)))
        .start()
        .await;
    let outcome = preset_lookup(
        &origin(&server),
        "preset = \"github.issues\"\nrepository = \"acme/widgets\"\n",
        None,
        "CUST-1042",
        3,
    )
    .await;
    let ids: Vec<&str> = outcome
        .items_found()
        .iter()
        .map(|i| i.id.as_str())
        .collect();
    assert_eq!(ids, ["1", "2", "3"]);
    assert_eq!(outcome.items_dropped, 27);
    let request = only_request(&server);
    assert_eq!(request.path, "/repos/acme/widgets/issues");
    assert_eq!(
        query_pairs(&request),
        [
            ("labels".to_owned(), "CUST-1042".to_owned()),
            ("state".to_owned(), "all".to_owned()),
            ("sort".to_owned(), "updated".to_owned()),
            ("per_page".to_owned(), "3".to_owned()),
        ]
    );
    assert_eq!(request.header("authorization"), None);
    value_once(&request, "CUST-1042");
}

/// An issue as GitLab's REST API documents it (`GET /projects/:id/issues/:iid`).
fn gitlab_issue(iid: u64) -> Value {
    json!({
        "id": 84_000 + iid, "iid": iid, "project_id": 278_964,
        "title": "Webhook retries never stop",
        "description": "After a 500 the webhook is retried every minute forever.",
        "state": "opened",
        "created_at": "2026-10-30T11:02:05.170Z", "updated_at": "2026-11-29T08:15:44.901Z",
        "closed_at": null, "closed_by": null,
        "labels": ["bug", "customer::acme"],
        "milestone": null,
        "assignees": [{"id": 9, "username": "jdoe", "name": "Jane Doe", "state": "active"}],
        "author": {
            "id": 1, "username": "root", "name": "Administrator", "state": "active",
            "avatar_url": null, "web_url": "https://gitlab.example.com/root"
        },
        "user_notes_count": 2, "upvotes": 4, "downvotes": 0,
        "web_url": format!("https://gitlab.example.com/group/widgets/-/issues/{iid}"),
        "references": {"short": format!("#{iid}"), "full": format!("group/widgets#{iid}")}
    })
}

#[tokio::test]
async fn gitlab_issue_encodes_the_project_path_as_one_segment() {
    let server = ProviderServer::new()
        .behaviour(Behaviour::Json(200, gitlab_issue(6)))
        .start()
        .await;
    let outcome = preset_lookup(
        &format!("{}/api/v4", origin(&server)),
        "preset = \"gitlab.issue\"\nproject = \"group/widgets\"\ntoken_env = \"GITLAB_TOKEN\"\n",
        Some(TOKEN),
        "6",
        5,
    )
    .await;
    let item = &outcome.items_found()[0];
    assert_eq!(item.id, "6");
    assert_eq!(
        item.content,
        "After a 500 the webhook is retried every minute forever."
    );
    assert_eq!(
        Value::Object(item.metadata.clone()),
        json!({
            "state": "opened", "labels": ["bug", "customer::acme"], "author": "root",
            "page": "https://gitlab.example.com/group/widgets/-/issues/6"
        })
    );
    let request = only_request(&server);
    assert_eq!(request.path, "/api/v4/projects/group%2Fwidgets/issues/6");
    assert_eq!(request.header("private-token"), Some(TOKEN));
    assert_eq!(request.header("authorization"), None);
}

#[tokio::test]
async fn gitlab_merge_requests_search_with_pagination_headers() {
    let merge_requests: Vec<Value> = (1..=4)
        .map(|iid| {
            let mut mr = gitlab_issue(iid);
            mr["source_branch"] = json!(format!("fix/cust-1042-{iid}"));
            mr["target_branch"] = json!("main");
            mr["merge_status"] = json!("can_be_merged");
            mr
        })
        .collect();
    let server = ProviderServer::new()
        .behaviour(raw(
            200,
            &[
                ("x-total", "4"),
                ("x-total-pages", "1"),
                ("x-per-page", "2"),
                ("x-page", "1"),
                ("x-next-page", ""),
            ],
            &Value::Array(merge_requests),
        ))
        .start()
        .await;
    let outcome = preset_lookup(
        &format!("{}/api/v4", origin(&server)),
        "preset = \"gitlab.merge_requests\"\nproject = \"278964\"\ntoken_env = \"GITLAB_TOKEN\"\n",
        Some(TOKEN),
        "CUST-1042",
        2,
    )
    .await;
    assert_eq!(outcome.items_found().len(), 2);
    assert_eq!(outcome.items_dropped, 2);
    assert_eq!(
        outcome.items_found()[1].metadata["source_branch"],
        json!("fix/cust-1042-2")
    );
    let request = only_request(&server);
    assert_eq!(request.path, "/api/v4/projects/278964/merge_requests");
    assert_eq!(
        query_pairs(&request),
        [
            ("search".to_owned(), "CUST-1042".to_owned()),
            ("state".to_owned(), "all".to_owned()),
            ("order_by".to_owned(), "updated_at".to_owned()),
            ("per_page".to_owned(), "2".to_owned()),
        ]
    );
    value_once(&request, "CUST-1042");
}

/// An issue as Jira's REST API v2 documents it: the data under `fields`.
fn jira_issue(key: &str) -> Value {
    json!({
        "expand": "renderedFields,names,schema,operations,editmeta,changelog,versionedRepresentations",
        "id": "10002",
        "self": "https://acme.atlassian.net/rest/api/2/issue/10002",
        "key": key,
        "fields": {
            "summary": "Invoice PDF shows the wrong VAT rate",
            "description": "Customer CUST-1042 reports 19% instead of 7% on books.",
            "updated": "2026-11-29T10:21:07.000+0100",
            "labels": ["billing", "support"],
            "status": {"self": "https://acme.atlassian.net/rest/api/2/status/3", "name": "In Progress", "id": "3",
                       "statusCategory": {"id": 4, "key": "indeterminate", "name": "In Progress"}},
            "assignee": {"accountId": "5b10a2844c20165700ede21g", "displayName": "Mia Krystof", "active": true},
            "priority": {"name": "High", "id": "2"}
        }
    })
}

#[tokio::test]
async fn jira_issue_reads_fields_with_basic_auth() {
    let server = ProviderServer::new()
        .behaviour(Behaviour::Json(200, jira_issue("SUP-17")))
        .start()
        .await;
    let outcome = preset_lookup(
        &origin(&server),
        "preset = \"jira.issue\"\nemail = \"ctxd@acme.example\"\ntoken_env = \"JIRA_TOKEN\"\n",
        Some(TOKEN),
        "SUP-17",
        5,
    )
    .await;
    let item = &outcome.items_found()[0];
    assert_eq!(item.id, "SUP-17");
    assert_eq!(
        item.title.as_deref(),
        Some("Invoice PDF shows the wrong VAT rate")
    );
    assert_eq!(
        item.updated_at.as_deref(),
        Some("2026-11-29T10:21:07.000+0100")
    );
    assert_eq!(
        Value::Object(item.metadata.clone()),
        json!({"status": "In Progress", "labels": ["billing", "support"], "assignee": "Mia Krystof"})
    );
    let request = only_request(&server);
    assert_eq!(request.path, "/rest/api/2/issue/SUP-17");
    assert_eq!(
        query_pairs(&request),
        [(
            "fields".to_owned(),
            "summary,description,updated,labels,status,assignee".to_owned()
        )]
    );
    // Basic base64("ctxd@acme.example:tok-7be41c09aa53").
    assert_eq!(
        request.header("authorization"),
        Some("Basic Y3R4ZEBhY21lLmV4YW1wbGU6dG9rLTdiZTQxYzA5YWE1Mw==")
    );
}

#[tokio::test]
async fn jira_search_puts_the_value_only_in_a_quoted_jql_literal() {
    let server = ProviderServer::new()
        .behaviour(Behaviour::Json(
            200,
            json!({
                "issues": [jira_issue("SUP-17"), jira_issue("SUP-18"), jira_issue("SUP-19")],
                "nextPageToken": "CAEaAggD",
                "isLast": false
            }),
        ))
        .start()
        .await;
    let outcome = preset_lookup(
        &origin(&server),
        "preset = \"jira.search\"\nproject = \"SUP\"\ntoken_env = \"JIRA_TOKEN\"\n",
        Some(TOKEN),
        "CUST-1042",
        2,
    )
    .await;
    assert_eq!(outcome.items_found().len(), 2);
    assert_eq!(outcome.items_dropped, 1);
    let request = only_request(&server);
    assert_eq!(request.path, "/rest/api/2/search/jql");
    let pairs = query_pairs(&request);
    assert_eq!(
        pairs[0],
        (
            "jql".to_owned(),
            "project = \"SUP\" AND text ~ \"CUST-1042\" ORDER BY updated DESC".to_owned()
        )
    );
    assert_eq!(pairs[1], ("maxResults".to_owned(), "2".to_owned()));
    assert_eq!(
        request.header("authorization"),
        Some(format!("Bearer {TOKEN}").as_str())
    );
    value_once(&request, "CUST-1042");
}

#[tokio::test]
async fn a_preset_api_that_is_down_or_refuses_the_token_says_so() {
    for (code, status, detail) in [
        (401, ProviderStatus::Unavailable, Some("UNAUTHORIZED")),
        (404, ProviderStatus::NotFound, None),
        (502, ProviderStatus::Unavailable, Some("HTTP_502")),
    ] {
        let server = ProviderServer::new()
            .behaviour(Behaviour::Json(code, json!({"message": "Bad credentials", "documentation_url": "https://docs.github.com/rest"})))
            .start()
            .await;
        let spec = rest_spec(
            &origin(&server),
            "preset = \"github.issue\"\nrepository = \"acme/widgets\"\ntoken_env = \"GITHUB_TOKEN\"\n",
        );
        let outcome = lookup_with(
            &rest_provider(&spec, Some(TOKEN)),
            "7",
            5,
            SecretHandling::Refuse,
        )
        .await;
        assert_eq!(
            (outcome.status(), outcome.detail()),
            (status, detail),
            "{code}"
        );
    }
}
