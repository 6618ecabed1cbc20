//! `ctxd mcp --config F --tenant ID`: ctxd as an MCP server on standard input/output,
//! for MCP clients that launch their servers as subprocesses. The same tools as `/mcp`,
//! for the one tenant named, on the runtime `serve` would start; it stops when the client
//! closes the stream.

use crate::config::{EnvVars, ServerConfig};
use crate::telemetry::LogFormat;
use anyhow::anyhow;
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Debug, Args)]
pub(crate) struct McpArgs {
    /// The server config: trace store, tenants with their Projects and Bindings
    #[arg(long, default_value = "config/ctxd.toml")]
    pub(crate) config: PathBuf,
    /// The tenant (its `id` in the config) the tools act for
    #[arg(long)]
    pub(crate) tenant: String,
    /// Log lines on standard error (standard output carries only MCP messages)
    #[arg(long, value_enum, env = "CTXD_LOG_FORMAT", ignore_case = true, default_value_t = LogFormat::Text)]
    pub(crate) log_format: LogFormat,
}

pub(crate) fn run(args: &McpArgs) -> anyhow::Result<ExitCode> {
    crate::telemetry::init_logging(args.log_format);
    let env = EnvVars::from_process();
    let config = ServerConfig::load(&args.config).map_err(|e| anyhow!("{e}"))?;
    actix_rt::System::new()
        .block_on(async { crate::api::serve_mcp_stdio(&config, &env, &args.tenant).await })?;
    Ok(ExitCode::SUCCESS)
}
