//! Whom a loopback HTTP program answers, shared by the sandbox server and the log viewer: a
//! web page on another site must not drive either through the user's browser. Without a
//! token, only a `Host` that is an IP address or `localhost` is answered (a page's DNS name
//! rebound to 127.0.0.1 is not); with or without one, a request that carries an `Origin` must
//! come from the program's own.

/// Why a request with these headers is refused, or `None` when it may in: [`refusal`] of its
/// `Host` and `Origin` (a header that is not text counts as empty).
pub fn refusal_of(
    headers: &http::HeaderMap,
    token_required: bool,
    program: &str,
) -> Option<String> {
    let text = |name| {
        headers
            .get(name)
            .map(|value: &http::HeaderValue| value.to_str().unwrap_or_default())
    };
    let host = text(http::header::HOST).unwrap_or_default();
    refusal(host, text(http::header::ORIGIN), token_required, program)
}

/// Why a request with the `Host` header `host` and the `Origin` header `origin` is refused, or
/// `None` when it may in; `program` names the answerer in the reason (`server`, `viewer`).
pub fn refusal(
    host: &str,
    origin: Option<&str>,
    token_required: bool,
    program: &str,
) -> Option<String> {
    if !token_required && !names_this_machine(host) {
        return Some(format!(
            "Host `{host}` is not an IP address or localhost; a {program} without a token answers only those (a web page's DNS name rebound to it is refused)"
        ));
    }
    let origin = origin?;
    if origin == format!("http://{host}") || origin == format!("https://{host}") {
        return None;
    }
    Some(format!(
        "Origin `{origin}` is not this {program}'s: requests from other sites' web pages are refused"
    ))
}

/// `127.0.0.1:8080`, `[::1]:8080`, `localhost`, `10.0.0.5`: an address, not a DNS name.
fn names_this_machine(host: &str) -> bool {
    if let Some(rest) = host.strip_prefix('[') {
        return rest
            .split(']')
            .next()
            .is_some_and(|ip| ip.parse::<std::net::Ipv6Addr>().is_ok());
    }
    let name = host.rsplit_once(':').map_or(host, |(name, _)| name);
    name.eq_ignore_ascii_case("localhost") || name.parse::<std::net::Ipv4Addr>().is_ok()
}

#[cfg(test)]
mod tests {
    use super::refusal;

    #[test]
    fn addresses_pass_and_names_need_a_token() {
        for host in [
            "127.0.0.1:8080",
            "[::1]:9",
            "localhost",
            "LOCALHOST:1",
            "10.0.0.5",
        ] {
            assert_eq!(refusal(host, None, false, "server"), None, "{host}");
        }
        for host in ["evil.example:8080", "[not-an-ip]:1", "", "127.0.0.1.nip.io"] {
            let said = refusal(host, None, false, "viewer").unwrap();
            assert!(said.contains("a viewer without a token"), "{host}: {said}");
            assert_eq!(refusal(host, None, true, "viewer"), None, "{host}");
        }
    }

    #[test]
    fn an_origin_must_be_the_programs_own() {
        let host = "127.0.0.1:8080";
        for own in ["http://127.0.0.1:8080", "https://127.0.0.1:8080"] {
            assert_eq!(refusal(host, Some(own), false, "server"), None);
        }
        for other in ["http://evil.example", "null", "http://127.0.0.1:8081"] {
            let said = refusal(host, Some(other), true, "server").unwrap();
            assert!(said.contains("not this server's"), "{other}: {said}");
        }
    }
}
