//! A client's request head: the target it names (`CONNECT host:port`, or a plain-HTTP request
//! in absolute form) and, for the latter, the head to send on.

use std::net::IpAddr;

/// What a client asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Target {
    pub(super) host: String,
    pub(super) port: u16,
    /// `CONNECT`: a tunnel; else the request head to send on, in origin form.
    pub(super) forward: Option<Vec<u8>>,
}

/// Splits `host:port` (`[v6]:port`); `default` when no port is given.
fn authority(text: &str, default: Option<u16>) -> Option<(String, u16)> {
    let (host, port) = if let Some(rest) = text.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        let port = match after.strip_prefix(':') {
            Some(port) => port.parse().ok()?,
            None if after.is_empty() => default?,
            None => return None,
        };
        (host.to_owned(), port)
    } else {
        match text.rsplit_once(':') {
            Some((host, port)) if !host.contains(':') => (host.to_owned(), port.parse().ok()?),
            None => (text.to_owned(), default?),
            Some(_) => return None,
        }
    };
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    (!host.is_empty()).then_some((host, port))
}

/// A target must be an address or a DNS name: anything else is refused before it is judged or
/// counted (a flood of invented hosts cannot grow the decisions).
fn valid_host(host: &str) -> Result<(), String> {
    if host.parse::<IpAddr>().is_ok() || sandbox_protocol::egress::is_host_name(host) {
        return Ok(());
    }
    let shown: String = host.chars().take(64).collect();
    Err(format!(
        "`{}`: not a host name or an address",
        shown.escape_default()
    ))
}

/// Reads the request head: the target, and what the client sent past the head.
pub(super) fn parse_head(head: &[u8]) -> Result<Target, String> {
    let text = std::str::from_utf8(head).map_err(|_| "the request head is not UTF-8".to_owned())?;
    let mut lines = text.split("\r\n");
    let first = lines.next().unwrap_or_default();
    let mut words = first.split(' ');
    let (Some(method), Some(target), Some(version)) = (words.next(), words.next(), words.next())
    else {
        return Err(format!("not a request line: `{first}`"));
    };
    if method == "CONNECT" {
        let (host, port) =
            authority(target, None).ok_or_else(|| format!("CONNECT {target}: not host:port"))?;
        valid_host(&host)?;
        return Ok(Target {
            host,
            port,
            forward: None,
        });
    }
    let Some(rest) = target.strip_prefix("http://") else {
        return Err(format!(
            "{method} {target}: a proxy request names an http:// URL (https goes through CONNECT)"
        ));
    };
    let (authority_text, path) = match rest.find('/') {
        Some(at) => (&rest[..at], &rest[at..]),
        None => (rest, "/"),
    };
    let (host, port) = authority(authority_text, Some(80))
        .ok_or_else(|| format!("{target}: no host in the URL"))?;
    valid_host(&host)?;
    // The request goes to the host the policy judged: its Host is the URL's, and it is the
    // connection's only request (no keep-alive: a second request would not be judged).
    let mut forward = format!("{method} {path} {version}\r\nHost: {authority_text}\r\n");
    for line in lines.filter(|l| !l.is_empty()) {
        let name = line.split(':').next().unwrap_or("").trim();
        let dropped = [
            "host",
            "connection",
            "keep-alive",
            "proxy-connection",
            "proxy-authorization",
        ];
        if dropped.iter().any(|d| name.eq_ignore_ascii_case(d)) {
            continue;
        }
        forward.push_str(line);
        forward.push_str("\r\n");
    }
    forward.push_str("Connection: close\r\n\r\n");
    Ok(Target {
        host,
        port,
        forward: Some(forward.into_bytes()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_heads_name_their_target() {
        let connect = parse_head(b"CONNECT Allowed.Test:443 HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        assert_eq!((connect.host.as_str(), connect.port), ("allowed.test", 443));
        assert!(connect.forward.is_none());
        let v6 = parse_head(b"CONNECT [fd00::1]:8443 HTTP/1.1\r\n\r\n").unwrap();
        assert_eq!((v6.host.as_str(), v6.port), ("fd00::1", 8443));
        // The Host sent on is the URL's (not another site's behind the same address), and the
        // connection carries this one judged request.
        let get = parse_head(
            b"GET http://web.test:8080/a?b=1 HTTP/1.1\r\nHost: evil.test\r\nProxy-Connection: keep-alive\r\nConnection: keep-alive\r\nAccept: */*\r\n\r\n",
        )
        .unwrap();
        assert_eq!((get.host.as_str(), get.port), ("web.test", 8080));
        assert_eq!(
            String::from_utf8(get.forward.unwrap()).unwrap(),
            "GET /a?b=1 HTTP/1.1\r\nHost: web.test:8080\r\nAccept: */*\r\nConnection: close\r\n\r\n"
        );
        let plain = parse_head(b"GET http://web.test HTTP/1.1\r\n\r\n").unwrap();
        assert_eq!(plain.port, 80);
        for bad in [
            &b"GET /direct HTTP/1.1\r\n\r\n"[..],
            b"GET https://x/ HTTP/1.1\r\n\r\n",
            b"CONNECT nohost HTTP/1.1\r\n\r\n",
            b"garbage\r\n\r\n",
            // Invented hosts are refused before they are judged or counted.
            b"CONNECT \x01\x01\x01:443 HTTP/1.1\r\n\r\n",
            b"CONNECT 10.1:443 HTTP/1.1\r\n\r\n",
            b"GET http://a_b.test/ HTTP/1.1\r\n\r\n",
        ] {
            assert!(parse_head(bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
    }
}
