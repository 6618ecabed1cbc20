//! Project and binding texts that tests of the deployment and of `ctxd validate` share.

/// A project requiring `customer-data` and `orders`, with one static layer.
pub(crate) const PROJECT: &str = r#"{
    "id": "support", "version": "1.0.0",
    "providers": [
        { "id": "customer-data", "name": "Customer data", "lookup": { "input": "customerId" } },
        { "id": "orders", "name": "Orders", "lookup": { "input": "customerId" } }
    ],
    "layers": [
        { "id": "policy", "name": "Policy", "content": "Refunds over 500 EUR need approval." },
        { "id": "profile", "name": "Profile", "bindings": [{ "provider": "customer-data" }] },
        { "id": "orders", "name": "Orders", "bindings": [{ "provider": "orders" }] }
    ]
}"#;

/// An HTTP entry for `customer-data`, authenticated by `CRM_TOKEN`.
pub(crate) const CUSTOMER_DATA: &str = "[providers.customer-data]\ntype = \"http\"\nendpoint = \"https://crm.internal/context\"\nsecret_env = \"CRM_TOKEN\"\n";
/// A SQLite entry for `orders`.
pub(crate) const ORDERS: &str = "[providers.orders]\ntype = \"sqlite\"\ndatabase = \"orders.db\"\nquery = \"SELECT id FROM orders WHERE customer_id = ?1\"\nversion = \"v1\"\n";
