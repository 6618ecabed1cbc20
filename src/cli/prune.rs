//! `ctxd traces prune --older-than D`: deletes turn records (with their layer decisions
//! and provider records) and handle operations that started more than D ago, per tenant,
//! oldest first, in the same small transactions the trace writer uses for `[trace] keep`
//! — so it can run beside a serving ctxd. `--dry-run` counts instead of deleting.

use super::store::{PRUNE_IS_SQLITE_ONLY, StoreArgs, locate};
use crate::trace::store::Pruned;
use crate::trace::store::prune::{
    count_past, open_for_pruning, prune_batch, release_free_pages, tenants,
};
use crate::trace::writer::PRUNE_BATCH;
use anyhow::{Context, bail};
use clap::Args;
use std::io::Write;
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Free pages given back at the end of a prune, at most (all of them, in practice).
const RELEASE_ALL_PAGES: u32 = u32::MAX >> 1;

#[derive(Debug, Args)]
pub(crate) struct PruneArgs {
    #[command(flatten)]
    pub(crate) location: StoreArgs,
    /// Delete what started more than this long ago (e.g. 30d, 12h, 90m)
    #[arg(long, value_name = "DURATION", value_parser = parse_age)]
    pub(crate) older_than: Duration,
    /// Only this tenant's records (default: every tenant in the store)
    #[arg(long)]
    pub(crate) tenant: Option<String>,
    /// Count what would be deleted; delete nothing
    #[arg(long)]
    pub(crate) dry_run: bool,
}

fn parse_age(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text.trim())
        .map_err(|error| format!("not a duration ({error}): write e.g. 30d, 12h or 90m"))
}

pub(crate) fn run(args: &PruneArgs, out: &mut impl Write) -> anyhow::Result<ExitCode> {
    let (path, _) = locate(&args.location, PRUNE_IS_SQLITE_ONLY)?;
    let mut conn = open_for_pruning(&path).context("cannot prune traces")?;
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    let cutoff_ms =
        now_ms.saturating_sub(i64::try_from(args.older_than.as_millis()).unwrap_or(i64::MAX));
    let mut tenants = tenants(&conn, &path)?;
    if let Some(tenant) = &args.tenant {
        if !tenants.contains(tenant) {
            bail!(
                "--tenant {tenant:?}: the trace store {} holds no records of this tenant",
                super::shown_path(&path)
            );
        }
        tenants = vec![tenant.clone()];
    }
    let verb = if args.dry_run {
        "would be deleted"
    } else {
        "deleted"
    };
    let mut total = Pruned::default();
    for tenant in &tenants {
        let pruned = if args.dry_run {
            count_past(&conn, &path, tenant, cutoff_ms)?
        } else {
            let mut pruned = Pruned::default();
            loop {
                let batch = prune_batch(&mut conn, &path, tenant, cutoff_ms, PRUNE_BATCH)?;
                if batch == Pruned::default() {
                    break;
                }
                pruned.add(batch);
            }
            pruned
        };
        writeln!(
            out,
            "{}: {} {verb}",
            super::output::printable(tenant),
            counts(&pruned)
        )?;
        total.add(pruned);
    }
    if !args.dry_run && total != Pruned::default() {
        release_free_pages(&conn, &path, RELEASE_ALL_PAGES)?;
    }
    writeln!(out, "total: {} {verb}", counts(&total))?;
    Ok(ExitCode::SUCCESS)
}

fn counts(pruned: &Pruned) -> String {
    format!(
        "{} turn records, {} provider records, {} handle operations",
        pruned.turns, pruned.provider_records, pruned.handle_operations
    )
}
