//! Hardening applied to every command a sandbox runs.
