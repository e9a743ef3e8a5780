//! The network a benchmark task's phase may reach, as Harbor's `network_mode` and
//! `allowed_hosts` say it, and the policy file the controller hands the egress proxy
//! (`sandbox-server egress-proxy`) for it. Both sides parse an allow list entry here, so they
//! agree on what it means.
//!
//! An entry is a host name (`pypi.org`), a wildcard for the names below a domain
//! (`*.github.com`: `api.github.com`, not `github.com` itself), an IPv4 or IPv6 address, or a
//! CIDR block (`140.82.112.0/20`, its host bits zero). Names are compared lower-cased without a
//! trailing dot; anything else (a URL, a port, a path, `*` elsewhere) is refused with why.

use std::net::IpAddr;

use serde::{Deserialize, Serialize};

/// One entry of an allow list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AllowedHost {
    Name(String),
    /// `*.suffix`: any name ending in `.suffix`.
    Below(String),
    Address(IpAddr),
    Block(IpAddr, u8),
}

impl AllowedHost {
    /// Parses an entry as Harbor validates it.
    pub fn parse(entry: &str) -> Result<AllowedHost, String> {
        let text = entry.trim().to_ascii_lowercase();
        let text = text.strip_suffix('.').unwrap_or(&text);
        let refuse = |why: &str| Err(format!("allowed_hosts: `{entry}` {why}"));
        if text.is_empty() {
            return refuse("is empty");
        }
        if text.contains("://") || text.contains('[') || text.contains(']') {
            return refuse("is not a host (give the host name alone, not a URL)");
        }
        if let Some((address, bits)) = text.split_once('/') {
            let (Ok(address), Ok(bits)) = (address.parse::<IpAddr>(), bits.parse::<u8>()) else {
                return refuse("is not a host (a path?) nor a CIDR block like 10.0.0.0/8");
            };
            let max = if address.is_ipv4() { 32 } else { 128 };
            if bits > max {
                return refuse(&format!("has a prefix longer than {max} bits"));
            }
            if network(address, bits) != address {
                return refuse("has host bits set: a CIDR block names its network address");
            }
            return Ok(AllowedHost::Block(address, bits));
        }
        if let Ok(address) = text.parse::<IpAddr>() {
            return Ok(AllowedHost::Address(address));
        }
        if text.contains(':') {
            return refuse("has a port: an entry allows a host on every port");
        }
        if let Some(suffix) = text.strip_prefix("*.") {
            if suffix.parse::<IpAddr>().is_ok() {
                return refuse("is a wildcard over an address: wildcards take a domain");
            }
            return match is_host_name(suffix) {
                true => Ok(AllowedHost::Below(suffix.to_owned())),
                false => refuse("is not a wildcard over a host name (*.example.com)"),
            };
        }
        if text.contains('*') {
            return refuse("has `*` where only a leading `*.` may be");
        }
        match is_host_name(text) {
            true => Ok(AllowedHost::Name(text.to_owned())),
            false => refuse("is not a host name (letters, digits and `-` between dots)"),
        }
    }

    /// Whether this entry lets a connection to `host` (a name, lower-cased, or an address
    /// literal) through.
    pub fn allows(&self, host: &str) -> bool {
        let host = host.trim_end_matches('.');
        let address = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<IpAddr>()
            .ok()
            // `::ffff:10.0.0.1` is the IPv4 address it reaches.
            .map(|address| address.to_canonical());
        match (self, address) {
            (AllowedHost::Address(allowed), Some(address)) => *allowed == address,
            (AllowedHost::Block(base, bits), Some(address)) => {
                base.is_ipv4() == address.is_ipv4() && network(address, *bits) == *base
            }
            (AllowedHost::Name(name), None) => host.eq_ignore_ascii_case(name),
            (AllowedHost::Below(suffix), None) => {
                let host = host.to_ascii_lowercase();
                host.len() > suffix.len() + 1
                    && host.ends_with(suffix.as_str())
                    && host.as_bytes()[host.len() - suffix.len() - 1] == b'.'
            }
            _ => false,
        }
    }

    /// The entry as written, normalised.
    pub fn text(&self) -> String {
        match self {
            AllowedHost::Name(name) => name.clone(),
            AllowedHost::Below(suffix) => format!("*.{suffix}"),
            AllowedHost::Address(address) => address.to_string(),
            AllowedHost::Block(base, bits) => format!("{base}/{bits}"),
        }
    }
}

/// A DNS name: labels of letters, digits and `-`, at most 253 bytes; the last label not all
/// digits (`10.1` and `192.168.1` are addresses to a resolver, not names).
pub fn is_host_name(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= 253
        && !text
            .rsplit('.')
            .next()
            .is_some_and(|last| last.bytes().all(|b| b.is_ascii_digit()))
        && text.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        })
}

/// `address` with all but its first `bits` bits cleared.
fn network(address: IpAddr, bits: u8) -> IpAddr {
    match address {
        IpAddr::V4(v4) => {
            let mask = if bits == 0 {
                0
            } else {
                u32::MAX << (32 - u32::from(bits.min(32)))
            };
            IpAddr::V4((u32::from(v4) & mask).into())
        }
        IpAddr::V6(v6) => {
            let mask = if bits == 0 {
                0
            } else {
                u128::MAX << (128 - u32::from(bits.min(128)))
            };
            IpAddr::V6((u128::from(v6) & mask).into())
        }
    }
}

/// What the egress proxy lets through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EgressMode {
    /// Everything: the phase is public.
    All,
    /// Nothing: the phase has no network.
    Nothing,
    /// The hosts of the list only.
    Listed,
}

/// The proxy's policy for a phase, set by the controller (`PUT /policy` on the control port).
/// A new generation ends every tunnel the last one let through.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EgressPolicy {
    /// Increases with each policy; `GET /policy` answers it once in force.
    pub generation: u64,
    pub mode: EgressMode,
    /// The allow list's entries (`mode: listed`).
    #[serde(default)]
    pub allowed_hosts: Vec<String>,
}

impl EgressPolicy {
    /// Whether a connection to `host` is let through: for a listed policy, a host an entry
    /// allows. A name that resolves to a loopback or link-local address (a cloud's metadata
    /// service) is refused unless an address entry names it: see [`EgressPolicy::reaches`].
    pub fn allows(&self, host: &str) -> Result<bool, String> {
        Ok(match self.mode {
            EgressMode::All => true,
            EgressMode::Nothing => false,
            EgressMode::Listed => self.entries()?.iter().any(|entry| entry.allows(host)),
        })
    }

    /// Whether an allowed name may be connected at `address`, where it resolved to: not a
    /// loopback, link-local or unspecified address, unless an address entry names it.
    pub fn reaches(&self, address: IpAddr) -> Result<bool, String> {
        if self.mode == EgressMode::All {
            return Ok(true);
        }
        // An IPv4-mapped IPv6 address (`::ffff:127.0.0.1`) is judged as the IPv4 it reaches.
        let address = address.to_canonical();
        let special = address.is_loopback()
            || address.is_unspecified()
            || match address {
                IpAddr::V4(v4) => {
                    v4.is_link_local()
                        || v4.is_broadcast()
                        // Alibaba Cloud's metadata service.
                        || v4 == std::net::Ipv4Addr::new(100, 100, 100, 200)
                }
                IpAddr::V6(v6) => {
                    (v6.segments()[0] & 0xffc0) == 0xfe80
                        // AWS's IPv6 metadata service.
                        || v6 == std::net::Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254)
                }
            };
        if !special {
            return Ok(true);
        }
        let literal = address.to_string();
        Ok(self.entries()?.iter().any(|entry| {
            matches!(entry, AllowedHost::Address(_) | AllowedHost::Block(..))
                && entry.allows(&literal)
        }))
    }

    /// The parsed entries.
    pub fn entries(&self) -> Result<Vec<AllowedHost>, String> {
        self.allowed_hosts
            .iter()
            .map(|entry| AllowedHost::parse(entry))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mapped_addresses_and_numeric_names_are_judged_as_the_addresses_they_are() {
        let listed = EgressPolicy {
            generation: 1,
            mode: EgressMode::Listed,
            allowed_hosts: vec!["10.0.0.0/8".to_owned()],
        };
        assert!(listed.allows("::ffff:10.1.2.3").unwrap());
        assert!(!listed.reaches("::ffff:127.0.0.1".parse().unwrap()).unwrap());
        assert!(
            !listed
                .reaches("::ffff:169.254.169.254".parse().unwrap())
                .unwrap()
        );
        assert!(!listed.reaches("fd00:ec2::254".parse().unwrap()).unwrap());
        assert!(!listed.reaches("100.100.100.200".parse().unwrap()).unwrap());
        assert!(listed.reaches("10.1.2.3".parse().unwrap()).unwrap());
        assert!(!is_host_name("10.1") && !is_host_name("192.168.1") && is_host_name("a1.b2"));
        assert!(
            AllowedHost::parse("10.1").is_err(),
            "an address in disguise is no name"
        );
    }

    #[test]
    fn entries_parse_as_harbor_validates_them_and_bad_ones_say_why() {
        assert_eq!(
            AllowedHost::parse(" PyPI.org. "),
            Ok(AllowedHost::Name("pypi.org".into()))
        );
        assert_eq!(
            AllowedHost::parse("*.github.com"),
            Ok(AllowedHost::Below("github.com".into()))
        );
        assert!(matches!(
            AllowedHost::parse("140.82.112.0/20"),
            Ok(AllowedHost::Block(_, 20))
        ));
        assert!(matches!(
            AllowedHost::parse("::1"),
            Ok(AllowedHost::Address(_))
        ));
        for (bad, why) in [
            ("https://pypi.org", "URL"),
            ("pypi.org:443", "port"),
            ("10.0.0.1/8", "host bits"),
            ("a.*.com", "`*`"),
            ("*.10.0.0.1", "address"),
            ("pypi.org/simple", "CIDR"),
            ("under_score.com", "host name"),
            ("", "empty"),
        ] {
            let err = AllowedHost::parse(bad).unwrap_err();
            assert!(err.contains(why), "{bad}: {err}");
        }
    }

    #[test]
    fn entries_match_names_below_domains_and_addresses_in_blocks() {
        let below = AllowedHost::parse("*.github.com").unwrap();
        assert!(below.allows("api.github.com") && below.allows("A.B.GitHub.com"));
        assert!(!below.allows("github.com") && !below.allows("evilgithub.com"));
        let block = AllowedHost::parse("10.1.0.0/16").unwrap();
        assert!(block.allows("10.1.200.3") && !block.allows("10.2.0.1"));
        assert!(!block.allows("fd00::1"));
        let name = AllowedHost::parse("pypi.org").unwrap();
        assert!(name.allows("pypi.org.") && !name.allows("files.pypi.org"));
        assert!(!name.allows("151.101.0.223"), "an address is not its name");
        let policy = EgressPolicy {
            generation: 1,
            mode: EgressMode::Listed,
            allowed_hosts: vec!["allowed.test".into(), "169.254.169.254".into()],
        };
        assert_eq!(policy.allows("allowed.test"), Ok(true));
        assert_eq!(policy.allows("blocked.test"), Ok(false));
        assert_eq!(policy.reaches("10.0.0.5".parse().unwrap()), Ok(true));
        assert_eq!(policy.reaches("127.0.0.1".parse().unwrap()), Ok(false));
        assert_eq!(policy.reaches("169.254.169.254".parse().unwrap()), Ok(true));
        let nothing = EgressPolicy {
            mode: EgressMode::Nothing,
            ..policy
        };
        assert_eq!(nothing.allows("allowed.test"), Ok(false));
    }
}
