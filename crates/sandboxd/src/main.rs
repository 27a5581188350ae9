//! The `sandboxd` binary: server, in-process runner, agent entry point and tools.

fn main() {
    println!("sandboxd");
}
