//! `sandboxd sandbox top`: a live table of the workspace's sandboxes and their usage
//! (CPU %, memory, tasks, disk, network), refreshed like `top`, sorted by CPU or memory;
//! `--once` prints one table and exits (for scripts).

use crate::cli_http::Target;
use anyhow::Result;
use clap::{Args, ValueEnum};
use serde_json::Value;
use std::process::ExitCode;
use std::time::Duration;

#[derive(Args)]
pub struct TopArgs {
    /// Order by CPU percent or by memory, highest first.
    #[arg(long, value_enum, default_value = "cpu")]
    sort: SortKey,
    /// Seconds between refreshes.
    #[arg(long, default_value_t = 2.0)]
    interval: f64,
    /// Print one table and exit.
    #[arg(long)]
    once: bool,
    #[command(flatten)]
    target: Target,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum SortKey {
    Cpu,
    Memory,
}

/// One row: a sandbox and its usage.
struct Row {
    id: String,
    state: String,
    usage: Value,
}

pub async fn run(args: TopArgs) -> Result<ExitCode> {
    let interval = Duration::from_secs_f64(args.interval.clamp(0.2, 3600.0));
    loop {
        let rows = read(&args.target).await?;
        let table = render(rows, args.sort);
        if args.once {
            if args.target.json {
                return Ok(ExitCode::SUCCESS);
            }
            print!("{table}");
            return Ok(ExitCode::SUCCESS);
        }
        // Clear the screen and home the cursor, then draw.
        print!("\x1b[2J\x1b[H{table}");
        use std::io::Write;
        let _ = std::io::stdout().flush();
        tokio::select! {
            () = tokio::time::sleep(interval) => {}
            _ = tokio::signal::ctrl_c() => return Ok(ExitCode::SUCCESS),
        }
    }
}

/// The active sandboxes and, for the running and paused ones, their usage (read
/// concurrently; one that ended meanwhile is left out).
async fn read(target: &Target) -> Result<Vec<Row>> {
    let list = target.call("GET", "/v1/sandboxes?limit=100", None).await?;
    let sandboxes: Vec<(String, String)> = list["sandboxes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| {
            Some((
                s["id"].as_str()?.to_owned(),
                s["state"].as_str()?.to_owned(),
            ))
        })
        .collect();
    let reads = sandboxes.into_iter().map(|(id, state)| async move {
        let path = format!("/v1/sandboxes/{id}/metrics");
        let usage = target.call("GET", &path, None).await.ok()?;
        Some(Row { id, state, usage })
    });
    let rows: Vec<Row> = futures_util::future::join_all(reads)
        .await
        .into_iter()
        .flatten()
        .collect();
    if target.json {
        for r in &rows {
            println!(
                "{}",
                serde_json::json!({"id": r.id, "state": r.state, "metrics": r.usage})
            );
        }
    }
    Ok(rows)
}

fn render(mut rows: Vec<Row>, sort: SortKey) -> String {
    let key = |r: &Row| match sort {
        SortKey::Cpu => r.usage["cpuPercent"].as_f64().unwrap_or(0.0),
        SortKey::Memory => r.usage["memoryBytes"].as_f64().unwrap_or(0.0),
    };
    rows.sort_by(|a, b| key(b).total_cmp(&key(a)));
    let mut out = format!(
        "{:<36} {:<8} {:>7} {:>9} {:>9} {:>9} {:>5} {:>9} {:>9} {:>9} {:>9}\n",
        "ID",
        "STATE",
        "CPU%",
        "CPU-S",
        "MEM",
        "PEAK",
        "PIDS",
        "DISK",
        "DISK-MAX",
        "NET-RX",
        "NET-TX"
    );
    for r in rows {
        let u = &r.usage;
        let bytes = |field: &str| u[field].as_u64().map_or_else(|| "-".to_owned(), human);
        out.push_str(&format!(
            "{:<36} {:<8} {:>7.1} {:>9.2} {:>9} {:>9} {:>5} {:>9} {:>9} {:>9} {:>9}\n",
            r.id,
            r.state,
            u["cpuPercent"].as_f64().unwrap_or(0.0),
            u["cpuSeconds"].as_f64().unwrap_or(0.0),
            bytes("memoryBytes"),
            bytes("memoryPeakBytes"),
            u["pids"].as_u64().unwrap_or(0),
            bytes("diskUsedBytes"),
            bytes("diskLimitBytes"),
            bytes("networkRxBytes"),
            bytes("networkTxBytes"),
        ));
    }
    out
}

/// Bytes in binary units with one decimal (`512B`, `1.5K`, `20.0M`, `3.2G`).
fn human(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "K", "M", "G", "T"];
    let mut v = n as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit < UNITS.len() - 1 {
        v /= 1024.0;
        unit += 1;
    }
    match unit {
        0 => format!("{n}B"),
        _ => format!("{v:.1}{}", UNITS[unit]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn row(id: &str, cpu: f64, mem: u64) -> Row {
        Row {
            id: id.into(),
            state: "running".into(),
            usage: json!({"cpuPercent": cpu, "memoryBytes": mem}),
        }
    }

    #[test]
    fn sorts_by_cpu_or_memory_highest_first() {
        let rows = || vec![row("a", 5.0, 900), row("b", 90.0, 10), row("c", 50.0, 5000)];
        let order =
            |t: String| -> Vec<String> { t.lines().skip(1).map(|l| l[..1].to_owned()).collect() };
        assert_eq!(order(render(rows(), SortKey::Cpu)), ["b", "c", "a"]);
        assert_eq!(order(render(rows(), SortKey::Memory)), ["c", "a", "b"]);
    }

    #[test]
    fn human_sizes() {
        assert_eq!(human(512), "512B");
        assert_eq!(human(1536), "1.5K");
        assert_eq!(human(20 * 1024 * 1024), "20.0M");
    }
}
