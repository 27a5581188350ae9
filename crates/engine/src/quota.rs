//! Abuse limits on create: per-workspace quotas (active sandboxes, their vCPUs and
//! memory) and a token bucket per workspace on the rate of creates.

use crate::error::{EngineError, ErrorCode};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// What one workspace may hold at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quota {
    pub max_sandboxes: u32,
    pub max_vcpu: u32,
    pub max_memory_mb: u64,
    /// Snapshots (recorded, or being taken) the workspace may keep: what bounds the
    /// share of the data dir its snapshots can take.
    pub max_snapshots: u32,
}

impl Default for Quota {
    fn default() -> Self {
        Self {
            max_sandboxes: 50,
            max_vcpu: 64,
            max_memory_mb: 64 * 1024,
            max_snapshots: 100,
        }
    }
}

impl Quota {
    /// This quota with each limit `over` sets replacing its own.
    pub fn with_override(self, over: Option<&sandboxd_store::QuotaOverrideRecord>) -> Quota {
        let Some(o) = over else { return self };
        Quota {
            max_sandboxes: o.max_sandboxes.unwrap_or(self.max_sandboxes),
            max_vcpu: o.max_vcpu.unwrap_or(self.max_vcpu),
            max_memory_mb: o.max_memory_mb.unwrap_or(self.max_memory_mb),
            max_snapshots: self.max_snapshots,
        }
    }
}

/// Token bucket on creates per workspace: `burst` at once, refilled `per_hour`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CreateRate {
    pub burst: u32,
    pub per_hour: u32,
}

impl Default for CreateRate {
    fn default() -> Self {
        Self {
            burst: 60,
            per_hour: 3600,
        }
    }
}

/// What a workspace already holds: active sandboxes, their vCPUs and memory.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub sandboxes: u64,
    pub vcpu: u64,
    pub memory_mb: u64,
}

/// `QuotaExceeded` when adding `vcpu`/`memory_mb` to `used` goes past `quota`.
pub fn check(quota: &Quota, used: Usage, vcpu: u32, memory_mb: u32) -> Result<(), EngineError> {
    let over = if used.sandboxes + 1 > u64::from(quota.max_sandboxes) {
        Some(format!("{} active sandboxes", quota.max_sandboxes))
    } else if used.vcpu + u64::from(vcpu) > u64::from(quota.max_vcpu) {
        Some(format!("{} vCPUs", quota.max_vcpu))
    } else if used.memory_mb + u64::from(memory_mb) > quota.max_memory_mb {
        Some(format!("{} MiB of memory", quota.max_memory_mb))
    } else {
        None
    };
    match over {
        Some(what) => Err(EngineError::new(
            ErrorCode::QuotaExceeded,
            format!("the workspace quota allows {what}"),
        )),
        None => Ok(()),
    }
}

/// Token buckets by workspace, kept in memory (a restart refills them).
#[derive(Default)]
pub struct RateLimiter {
    buckets: Mutex<HashMap<String, (f64, Instant)>>,
}

impl RateLimiter {
    /// Takes one token of `ws`'s bucket, or says when the next one is due.
    pub fn take(&self, ws: &str, rate: CreateRate) -> Result<(), EngineError> {
        self.take_at(ws, rate, Instant::now())
    }

    fn take_at(&self, ws: &str, rate: CreateRate, now: Instant) -> Result<(), EngineError> {
        let mut buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        let burst = f64::from(rate.burst);
        let per_sec = f64::from(rate.per_hour) / 3600.0;
        let (tokens, last) = buckets.entry(ws.to_owned()).or_insert((burst, now));
        *tokens =
            (*tokens + now.saturating_duration_since(*last).as_secs_f64() * per_sec).min(burst);
        *last = now;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            return Ok(());
        }
        let wait = match per_sec > 0.0 {
            true => Duration::from_secs_f64(((1.0 - *tokens) / per_sec).min(86_400.0)),
            false => Duration::from_secs(86_400),
        };
        let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
        Err(EngineError::new(
            ErrorCode::RateLimited,
            format!("too many sandbox creates; retry in {secs} s"),
        )
        .retry_after(Duration::from_secs(secs.max(1))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quota_names_the_exhausted_resource() {
        let q = Quota {
            max_sandboxes: 2,
            max_vcpu: 4,
            max_memory_mb: 1024,
            max_snapshots: 1,
        };
        assert!(check(
            &q,
            Usage {
                sandboxes: 1,
                vcpu: 2,
                memory_mb: 512
            },
            2,
            512
        )
        .is_ok());
        let e = check(
            &q,
            Usage {
                sandboxes: 2,
                vcpu: 0,
                memory_mb: 0,
            },
            1,
            1,
        )
        .unwrap_err();
        assert_eq!(
            (e.code, e.message.as_str()),
            (
                ErrorCode::QuotaExceeded,
                "the workspace quota allows 2 active sandboxes"
            )
        );
        assert!(check(
            &q,
            Usage {
                sandboxes: 0,
                vcpu: 3,
                memory_mb: 0
            },
            2,
            1
        )
        .unwrap_err()
        .message
        .contains("4 vCPUs"));
        assert!(check(
            &q,
            Usage {
                sandboxes: 0,
                vcpu: 0,
                memory_mb: 1000
            },
            1,
            100
        )
        .unwrap_err()
        .message
        .contains("1024 MiB"));
    }

    #[test]
    fn an_override_replaces_only_the_limits_it_sets() {
        let over = sandboxd_store::QuotaOverrideRecord {
            workspace: "w".into(),
            max_sandboxes: Some(3),
            max_vcpu: None,
            max_memory_mb: Some(512),
            updated_at: time::OffsetDateTime::UNIX_EPOCH,
        };
        let base = Quota::default();
        assert_eq!(base.with_override(None), base);
        let q = base.with_override(Some(&over));
        assert_eq!(
            (q.max_sandboxes, q.max_vcpu, q.max_memory_mb),
            (3, base.max_vcpu, 512)
        );
    }

    #[test]
    fn bucket_refuses_past_its_burst_and_refills() {
        let limiter = RateLimiter::default();
        let rate = CreateRate {
            burst: 2,
            per_hour: 3600,
        };
        let t0 = Instant::now();
        assert!(limiter.take_at("w", rate, t0).is_ok());
        assert!(limiter.take_at("w", rate, t0).is_ok());
        let e = limiter.take_at("w", rate, t0).unwrap_err();
        assert_eq!(
            (e.code, e.retry_after),
            (ErrorCode::RateLimited, Some(Duration::from_secs(1)))
        );
        assert!(
            limiter.take_at("other", rate, t0).is_ok(),
            "buckets are per workspace"
        );
        assert!(limiter
            .take_at("w", rate, t0 + Duration::from_secs(1))
            .is_ok());
        let slow = CreateRate {
            burst: 0,
            per_hour: 1,
        };
        assert_eq!(
            limiter.take_at("s", slow, t0).unwrap_err().retry_after,
            Some(Duration::from_secs(3600))
        );
    }
}
