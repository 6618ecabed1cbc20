//! Integration tests: the `ctxd` binary run as a user would, on real files.

mod api_limits;
mod cache;
mod cli_build;
mod cli_doctor;
mod cli_output;
mod cli_preview;
mod cli_provider_check;
mod cli_test;
mod cli_validate;
mod handles;
mod http_provider;
mod metrics;
mod prometheus;
mod provenance;
mod provider_server;
mod readme_demo;
mod redaction;
mod serve;
mod server;
mod sqlite_bounds;
mod sqlite_provider;
mod support;
mod trace_upkeep;
mod ui;
mod writing_a_provider;
