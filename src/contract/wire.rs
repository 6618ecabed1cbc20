//! `context-provider.v1` request and response bodies, exactly as seed 000 defines them.

use super::{Currentness, Item};
use serde::{Deserialize, Serialize};

/// The contract identifier carried by every request and expected in every response.
pub const CONTRACT: &str = "context-provider.v1";

/// `POST` body of a lookup. The lookup value travels only here, never in the URL.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LookupRequest {
    pub contract: String,
    pub capability: String,
    pub provider: String,
    pub key: String,
    pub value: String,
    pub limit: u32,
}

impl LookupRequest {
    pub fn new(provider: &str, key: &str, value: &str, limit: u32) -> Self {
        LookupRequest {
            contract: CONTRACT.to_owned(),
            capability: "lookup".to_owned(),
            provider: provider.to_owned(),
            key: key.to_owned(),
            value: value.to_owned(),
            limit,
        }
    }
}

/// A provider's answer to a lookup.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LookupResponse {
    pub contract: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    #[serde(default)]
    pub currentness: Currentness,
    pub items: Vec<WireItem>,
}

/// Items on the wire have exactly the shape of [`Item`].
pub type WireItem = Item;

/// `POST` body of the readiness probe.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DescribeRequest {
    pub contract: String,
    pub capability: String,
}

impl Default for DescribeRequest {
    fn default() -> Self {
        DescribeRequest {
            contract: CONTRACT.to_owned(),
            capability: "describe".to_owned(),
        }
    }
}

/// A provider's description of itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DescribeResponse {
    pub contract: String,
    #[serde(default)]
    pub version: Option<String>,
    #[serde(default)]
    pub capabilities: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup_request_matches_the_seed_wire() {
        let request = LookupRequest::new("customer-data", "customerId", "CUST-1042", 2);
        assert_eq!(
            serde_json::to_string(&request).unwrap(),
            r#"{"contract":"context-provider.v1","capability":"lookup","provider":"customer-data","key":"customerId","value":"CUST-1042","limit":2}"#
        );
    }

    #[test]
    fn lookup_response_from_the_seed_parses() {
        let body = r#"{"contract":"context-provider.v1","version":"5.0.1","revision":"crm-r9","currentness":"CURRENT",
            "items":[{"id":"CUST-1042","title":"Current account state","content":"…","metadata":{"plan":"Enterprise"},"updatedAt":"2026-10-08"}]}"#;
        let response: LookupResponse = serde_json::from_str(body).unwrap();
        assert_eq!(response.currentness, Currentness::Current);
        assert_eq!(response.items[0].updated_at.as_deref(), Some("2026-10-08"));
        assert_eq!(response.items[0].metadata["plan"], "Enterprise");
    }

    #[test]
    fn describe_request_matches_the_seed_wire() {
        assert_eq!(
            serde_json::to_string(&DescribeRequest::default()).unwrap(),
            r#"{"contract":"context-provider.v1","capability":"describe"}"#
        );
    }
}
