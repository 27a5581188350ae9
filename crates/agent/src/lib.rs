//! The agent: PID 1 inside each sandbox.
