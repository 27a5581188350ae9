//! `escape-probe`: run inside a sandbox, tries every known way out and prints one JSON
//! line per attempt (`{"attempt":…,"result":…,"escaped":…}`); exits 0 after all ran.

mod attempts;
mod report;
mod targets;

use std::io::Write;

fn main() {
    let targets = match targets::Targets::from_args(std::env::args().skip(1)) {
        Ok(t) => t,
        Err(msg) => {
            eprintln!("escape-probe: {msg}");
            std::process::exit(2);
        }
    };
    let mut out = std::io::stdout().lock();
    for attempt in attempts::all(&targets) {
        let _ = writeln!(out, "{}", attempt.to_json());
    }
}
