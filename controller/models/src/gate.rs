//! Rate gates: one per model endpoint, shared by every session that uses it (`harness batch`).
//!
//! A gate bounds the requests in flight and spaces them to a requests-per-minute rate, and when
//! any request through it gets a 429 it closes for the wait the provider asked (or a backoff):
//! every session using that endpoint waits, not only the one that was told to. Each attempt of
//! a retried request passes the gate again.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

/// Limits for one endpoint: `None` is unbounded.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct GateLimits {
    pub concurrency: Option<u32>,
    pub per_minute: Option<u32>,
}

impl GateLimits {
    /// `N` (concurrent requests), `N,RPM`, or `,RPM`.
    pub fn parse(text: &str) -> Result<GateLimits, String> {
        let (concurrency, per_minute) = match text.split_once(',') {
            Some((c, r)) => (c.trim(), Some(r.trim())),
            None => (text.trim(), None),
        };
        let number = |part: &str, what: &str| -> Result<Option<u32>, String> {
            if part.is_empty() {
                return Ok(None);
            }
            match part.parse::<u32>() {
                Ok(0) | Err(_) => Err(format!(
                    "`{part}` is not a positive number of {what} (expected CONCURRENCY[,PER_MINUTE])"
                )),
                Ok(n) => Ok(Some(n)),
            }
        };
        let limits = GateLimits {
            concurrency: number(concurrency, "concurrent requests")?,
            per_minute: per_minute
                .map(|r| number(r, "requests per minute"))
                .transpose()?
                .flatten(),
        };
        if limits == GateLimits::default() {
            return Err(format!("`{text}` sets no limit"));
        }
        Ok(limits)
    }
}

/// One endpoint's gate.
#[derive(Debug)]
pub struct RateGate {
    endpoint: String,
    slots: Option<Arc<Semaphore>>,
    spacing: Option<Duration>,
    state: Mutex<GateState>,
}

#[derive(Debug)]
struct GateState {
    /// Closed until then after a 429.
    closed_until: Instant,
    /// The next request's earliest start under the per-minute rate.
    next_start: Instant,
    requests: u64,
    throttled: u64,
    waited: Duration,
}

/// Held while a request is in flight.
#[derive(Debug)]
pub struct Pass {
    _slot: Option<OwnedSemaphorePermit>,
}

/// What a gate saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GateStats {
    pub endpoint: String,
    pub requests: u64,
    pub throttled: u64,
    pub waited: Duration,
}

impl RateGate {
    pub fn new(endpoint: &str, limits: GateLimits) -> RateGate {
        let now = Instant::now();
        RateGate {
            endpoint: endpoint.to_owned(),
            slots: limits
                .concurrency
                .map(|n| Arc::new(Semaphore::new(n as usize))),
            spacing: limits
                .per_minute
                .map(|n| Duration::from_secs(60).div_f64(f64::from(n))),
            state: Mutex::new(GateState {
                closed_until: now,
                next_start: now,
                requests: 0,
                throttled: 0,
                waited: Duration::ZERO,
            }),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, GateState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits until a request may go: a free slot, the gate open, and its turn under the rate.
    pub async fn pass(&self) -> Pass {
        let asked = Instant::now();
        let slot = match &self.slots {
            Some(slots) => Some(
                slots
                    .clone()
                    .acquire_owned()
                    .await
                    .expect("a gate's semaphore is never closed"),
            ),
            None => None,
        };
        loop {
            // Reserve a start time under the lock, then sleep without it; a 429 that closes
            // the gate meanwhile is seen on the next pass through the loop.
            let start = {
                let mut state = self.state();
                let now = Instant::now();
                let mut start = now.max(state.closed_until);
                if let Some(spacing) = self.spacing {
                    start = start.max(state.next_start);
                    if start <= now {
                        state.next_start = now + spacing;
                    }
                }
                if start <= now {
                    state.requests += 1;
                    state.waited += now - asked;
                    harness_telemetry::metrics().gate_waited(&self.endpoint, now - asked);
                    return Pass { _slot: slot };
                }
                start
            };
            tokio::time::sleep_until(start).await;
        }
    }

    /// A request got a 429: close the gate for `wait`, for everyone.
    pub fn throttle(&self, wait: Duration) {
        let mut state = self.state();
        state.throttled += 1;
        let until = Instant::now() + wait;
        if until > state.closed_until {
            state.closed_until = until;
        }
        tracing::warn!(
            endpoint = %self.endpoint,
            wait_ms = wait.as_millis() as u64,
            "the model endpoint is rate limiting; every session using it waits"
        );
    }

    pub fn stats(&self) -> GateStats {
        let state = self.state();
        GateStats {
            endpoint: self.endpoint.clone(),
            requests: state.requests,
            throttled: state.throttled,
            waited: state.waited,
        }
    }
}

/// The gates of a batch: one per endpoint, made on first use with the limits that match it.
#[derive(Debug, Default)]
pub struct Gates {
    /// (key, limits): a key matches an endpoint by its provider (`openai`), its base URL, or `*`.
    rules: Vec<(String, GateLimits)>,
    made: Mutex<HashMap<String, Arc<RateGate>>>,
}

impl Gates {
    pub fn new(rules: Vec<(String, GateLimits)>) -> Gates {
        Gates {
            rules,
            made: Mutex::new(HashMap::new()),
        }
    }

    /// Parses `KEY=CONCURRENCY[,PER_MINUTE]`.
    pub fn parse_rule(text: &str) -> Result<(String, GateLimits), String> {
        let (key, limits) = text.split_once('=').ok_or_else(|| {
            format!("--rate-limit `{text}`: expected ENDPOINT=CONCURRENCY[,PER_MINUTE], e.g. openai=8,500")
        })?;
        let limits =
            GateLimits::parse(limits).map_err(|why| format!("--rate-limit `{text}`: {why}"))?;
        Ok((key.trim().trim_end_matches('/').to_owned(), limits))
    }

    /// The gate of `provider` at `base_url`.
    pub fn gate(&self, provider: &str, base_url: &str) -> Arc<RateGate> {
        let base = base_url.trim_end_matches('/');
        let endpoint = format!("{provider} {base}");
        let mut made = self.made.lock().unwrap_or_else(|p| p.into_inner());
        made.entry(endpoint.clone())
            .or_insert_with(|| {
                let limits = self
                    .rules
                    .iter()
                    .find(|(key, _)| key == base)
                    .or_else(|| self.rules.iter().find(|(key, _)| key == provider))
                    .or_else(|| self.rules.iter().find(|(key, _)| key == "*"))
                    .map(|(_, limits)| *limits)
                    .unwrap_or_default();
                Arc::new(RateGate::new(&endpoint, limits))
            })
            .clone()
    }

    /// Every gate made so far, by endpoint.
    pub fn stats(&self) -> Vec<GateStats> {
        let made = self.made.lock().unwrap_or_else(|p| p.into_inner());
        let mut stats: Vec<GateStats> = made.values().map(|gate| gate.stats()).collect();
        stats.sort_by(|a, b| a.endpoint.cmp(&b.endpoint));
        stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_parse_and_bad_ones_are_named() {
        assert_eq!(
            GateLimits::parse("8,600"),
            Ok(GateLimits {
                concurrency: Some(8),
                per_minute: Some(600)
            })
        );
        assert_eq!(
            GateLimits::parse(",60"),
            Ok(GateLimits {
                concurrency: None,
                per_minute: Some(60)
            })
        );
        assert!(GateLimits::parse("0").unwrap_err().contains("`0`"));
        assert!(GateLimits::parse("x,5").unwrap_err().contains("`x`"));
        assert!(
            Gates::parse_rule("openai")
                .unwrap_err()
                .contains("ENDPOINT=")
        );
        let (key, _) = Gates::parse_rule("http://h:1/v1/=2").unwrap();
        assert_eq!(key, "http://h:1/v1");
    }

    #[test]
    fn rules_match_by_url_then_provider_then_star() {
        let gates = Gates::new(vec![
            ("openai".to_owned(), GateLimits::parse("1").unwrap()),
            ("http://h/v1".to_owned(), GateLimits::parse("2").unwrap()),
            ("*".to_owned(), GateLimits::parse("3").unwrap()),
        ]);
        let permits = |gate: &RateGate| gate.slots.as_ref().map(|s| s.available_permits());
        assert_eq!(
            permits(&gates.gate("openai-compat", "http://h/v1/")),
            Some(2)
        );
        assert_eq!(
            permits(&gates.gate("openai", "https://api.openai.com/v1")),
            Some(1)
        );
        assert_eq!(permits(&gates.gate("anthropic", "https://a")), Some(3));
        // One gate per endpoint, shared.
        assert!(Arc::ptr_eq(
            &gates.gate("openai-compat", "http://h/v1"),
            &gates.gate("openai-compat", "http://h/v1/")
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn a_throttle_holds_every_caller_and_the_rate_spaces_requests() {
        let gate = Arc::new(RateGate::new(
            "test",
            GateLimits {
                concurrency: Some(2),
                per_minute: Some(600),
            },
        ));
        let start = Instant::now();
        drop(gate.pass().await);
        drop(gate.pass().await);
        // 600 a minute: the second waited 100 ms.
        assert_eq!(start.elapsed(), Duration::from_millis(100));
        gate.throttle(Duration::from_secs(5));
        let waiters: Vec<_> = (0..2)
            .map(|_| {
                let gate = gate.clone();
                tokio::spawn(async move {
                    drop(gate.pass().await);
                    Instant::now()
                })
            })
            .collect();
        for waiter in waiters {
            assert!(waiter.await.unwrap() - start >= Duration::from_millis(5100));
        }
        let stats = gate.stats();
        assert_eq!((stats.requests, stats.throttled), (4, 1));
    }
}
