//! The sandbox lifecycle state machine and its guards.

use serde::{Deserialize, Serialize};

/// Lifecycle of a sandbox. Transitions are only made through [`SandboxStatus::can`].
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Hash)]
#[serde(rename_all = "UPPERCASE")]
pub enum SandboxStatus {
    Pending,
    Starting,
    Running,
    Pausing,
    Paused,
    Resuming,
    Terminating,
    Terminated,
    Failed,
}

/// Every status whose sandbox holds host resources, as stored names.
pub const ACTIVE_STATUSES: [&str; 7] = [
    "PENDING",
    "STARTING",
    "RUNNING",
    "PAUSING",
    "PAUSED",
    "RESUMING",
    "TERMINATING",
];

impl SandboxStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            SandboxStatus::Pending => "PENDING",
            SandboxStatus::Starting => "STARTING",
            SandboxStatus::Running => "RUNNING",
            SandboxStatus::Pausing => "PAUSING",
            SandboxStatus::Paused => "PAUSED",
            SandboxStatus::Resuming => "RESUMING",
            SandboxStatus::Terminating => "TERMINATING",
            SandboxStatus::Terminated => "TERMINATED",
            SandboxStatus::Failed => "FAILED",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "PENDING" => SandboxStatus::Pending,
            "STARTING" => SandboxStatus::Starting,
            "RUNNING" => SandboxStatus::Running,
            "PAUSING" => SandboxStatus::Pausing,
            "PAUSED" => SandboxStatus::Paused,
            "RESUMING" => SandboxStatus::Resuming,
            "TERMINATING" => SandboxStatus::Terminating,
            "TERMINATED" => SandboxStatus::Terminated,
            "FAILED" => SandboxStatus::Failed,
            _ => return None,
        })
    }

    /// Terminal states never change again.
    pub fn is_terminal(self) -> bool {
        matches!(self, SandboxStatus::Terminated | SandboxStatus::Failed)
    }

    /// Whether the sandbox holds resources on the host (counts against capacity and
    /// holds its name).
    pub fn is_active(self) -> bool {
        !self.is_terminal()
    }

    /// The guard: may a sandbox in `self` move to `next`?
    pub fn can(self, next: SandboxStatus) -> bool {
        use SandboxStatus::*;
        matches!(
            (self, next),
            (Pending, Starting)
                | (Pending, Failed)
                | (Pending, Terminating)
                | (Starting, Running)
                | (Starting, Failed)
                | (Starting, Terminating)
                | (Running, Pausing)
                | (Running, Terminating)
                | (Running, Failed)
                | (Pausing, Paused)
                | (Pausing, Running)
                | (Pausing, Terminating)
                | (Paused, Resuming)
                | (Paused, Terminating)
                | (Resuming, Running)
                | (Resuming, Paused)
                | (Resuming, Terminating)
                | (Terminating, Terminated)
                | (Terminating, Failed)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::SandboxStatus::{self, *};

    const ALL: [SandboxStatus; 9] = [
        Pending,
        Starting,
        Running,
        Pausing,
        Paused,
        Resuming,
        Terminating,
        Terminated,
        Failed,
    ];

    #[test]
    fn terminal_states_are_final() {
        for s in ALL {
            assert!(!Terminated.can(s));
            assert!(!Failed.can(s));
        }
    }

    #[test]
    fn runtime_path() {
        assert!(Pending.can(Starting) && Starting.can(Running) && Running.can(Pausing));
        assert!(Pausing.can(Paused) && Paused.can(Resuming) && Resuming.can(Running));
        assert!(Running.can(Terminating) && Terminating.can(Terminated));
        assert!(!Paused.can(Running), "resume must pass through RESUMING");
        assert!(
            !Running.can(Terminated),
            "destroy must pass through TERMINATING"
        );
    }

    #[test]
    fn active_statuses_are_the_non_terminal_ones() {
        for s in ALL {
            assert_eq!(super::ACTIVE_STATUSES.contains(&s.as_str()), s.is_active());
        }
    }

    #[test]
    fn round_trips_names() {
        for s in ALL {
            assert_eq!(super::SandboxStatus::parse(s.as_str()), Some(s));
        }
    }
}
