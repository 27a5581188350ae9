//! Handlers, one file per resource group; each parses, validates, calls one engine
//! operation and renders. Unknown routes fall through to the server's shared fallback.

pub mod exec;
pub mod sandboxes;
pub mod terminal;
pub mod usage;
