//! The isolation tiers a sandbox can run on, by their names in configs and APIs.

use serde::{Deserialize, Serialize};

/// The isolation tier of a sandbox.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Isolation {
    /// Linux namespaces, overlayfs and cgroups on the host kernel.
    #[default]
    Container,
    /// gVisor (`runsc`, ptrace platform): the sandbox's syscalls meet gVisor's kernel.
    Gvisor,
}

impl Isolation {
    /// Every tier, in the order they are listed to users.
    pub const ALL: [Isolation; 2] = [Isolation::Container, Isolation::Gvisor];

    /// Its name in configs, APIs and the store.
    pub fn as_str(self) -> &'static str {
        match self {
            Isolation::Container => "container",
            Isolation::Gvisor => "gvisor",
        }
    }

    /// The tier named `name` (exactly as [`Isolation::as_str`] gives it).
    pub fn parse(name: &str) -> Option<Isolation> {
        Isolation::ALL.into_iter().find(|i| i.as_str() == name)
    }
}

impl std::fmt::Display for Isolation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An unknown tier name ([`Isolation`]'s `FromStr`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is no isolation tier (container or gvisor)")]
pub struct UnknownIsolation(pub String);

impl std::str::FromStr for Isolation {
    type Err = UnknownIsolation;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Isolation::parse(s).ok_or_else(|| UnknownIsolation(s.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::Isolation;

    #[test]
    fn names_round_trip_and_unknown_ones_are_refused() {
        for i in Isolation::ALL {
            assert_eq!(i.as_str().parse::<Isolation>(), Ok(i));
            assert_eq!(serde_json::to_value(i).unwrap(), i.as_str());
        }
        let err = "vm".parse::<Isolation>().unwrap_err();
        assert!(err.to_string().contains("container or gvisor"), "{err}");
        assert!(Isolation::parse("GVISOR").is_none());
    }
}
