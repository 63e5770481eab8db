//! Who may reach an endpoint: a token (header, subprotocol or query — the control panel's
//! API takes the header only), or nobody asked on a loopback bind with auth explicitly off.
//! Browsers are also held to their own origin, and without a token to a loopback Host.

use axum::http::HeaderMap;
use axum::http::header::{AUTHORIZATION, HOST, ORIGIN, SEC_WEBSOCKET_PROTOCOL};
use subtle::ConstantTimeEq;

/// How clients authenticate to an endpoint (the WebSocket, `/metrics`, the panel).
#[derive(Clone)]
pub enum Auth {
    /// No token (allowed by the daemon only on a loopback bind). The page and `/ws` then
    /// answer only requests whose Host is a loopback name (or one the config lists): a web
    /// site whose name an attacker re-points at 127.0.0.1 (DNS rebinding) sends its own name
    /// as Host and is refused.
    None,
    /// Clients must present this token.
    Token(String),
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::None => f.write_str("None"),
            Self::Token(_) => f.write_str("Token(<redacted>)"),
        }
    }
}

/// The subprotocol a client names before its token: `Sec-WebSocket-Protocol: bearer, TOKEN`.
pub const BEARER_PROTOCOL: &str = "bearer";

impl Auth {
    /// Checks a connection attempt (or a `/metrics` scrape); the error is the reason given to
    /// the client.
    pub fn check(
        &self,
        headers: &HeaderMap,
        query_token: Option<&str>,
    ) -> Result<(), &'static str> {
        check_origin(headers)?;
        let Self::Token(expected) = self else {
            return Ok(());
        };
        let presented = bearer_header(headers)
            .or_else(|| subprotocol_token(headers))
            .or(query_token);
        match presented {
            None => Err(
                "a token is required: Authorization: Bearer, the `bearer` subprotocol, or ?token=",
            ),
            Some(token) if bool::from(token.as_bytes().ct_eq(expected.as_bytes())) => Ok(()),
            Some(_) => Err("the token is not valid"),
        }
    }

    /// Like [`check`](Self::check), but the token only in `Authorization: Bearer` (the
    /// control panel's API: no subprotocol, no query string, which end up in logs).
    pub fn check_header(&self, headers: &HeaderMap) -> Result<(), &'static str> {
        check_origin(headers)?;
        let Self::Token(expected) = self else {
            return Ok(());
        };
        match bearer_header(headers) {
            None => Err("a token is required in the Authorization: Bearer header"),
            Some(token) if bool::from(token.as_bytes().ct_eq(expected.as_bytes())) => Ok(()),
            Some(_) => Err("the token is not valid"),
        }
    }
}

/// The fewest characters a token has that are not whitespace.
pub const MIN_TOKEN_CHARS: usize = 16;

/// Whether a token is one a client can present and an attacker cannot guess: at least
/// [`MIN_TOKEN_CHARS`] characters, none of them whitespace (a header cannot carry it at
/// either end, and a token of spaces is no secret), not one character repeated.
pub fn check_token(token: &str) -> Result<(), String> {
    let make_one = "make one with e.g. `openssl rand -hex 24`";
    if token.chars().any(char::is_whitespace) {
        return Err(format!(
            "the token holds whitespace (a space, tab or line break), which clients cannot \
             send; {make_one}"
        ));
    }
    if token.chars().count() < MIN_TOKEN_CHARS {
        return Err(format!(
            "the token must be at least {MIN_TOKEN_CHARS} characters; {make_one}"
        ));
    }
    let distinct: std::collections::BTreeSet<char> = token.chars().collect();
    if distinct.len() < 4 {
        return Err(format!(
            "the token is too easy to guess (almost one character repeated); {make_one}"
        ));
    }
    Ok(())
}

fn bearer_header(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// `Sec-WebSocket-Protocol: bearer, TOKEN` (browsers cannot set headers on a WebSocket).
fn subprotocol_token(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(SEC_WEBSOCKET_PROTOCOL)?.to_str().ok()?;
    let mut parts = value.split(',').map(str::trim);
    while let Some(part) = parts.next() {
        if part.eq_ignore_ascii_case(BEARER_PROTOCOL) {
            return parts.next().filter(|token| !token.is_empty());
        }
    }
    None
}

/// A browser page may open the socket only from the server's own origin, so another site
/// open in the same browser cannot talk to the agent (cross-site WebSocket hijacking).
/// Clients that send no Origin (programs, not browsers) pass.
/// An Origin that is not `http(s)://host[:port]` (`null`, a bare host, a path) or sent
/// twice is refused: a browser sends exactly one, with a scheme.
fn check_origin(headers: &HeaderMap) -> Result<(), &'static str> {
    let mut origins = headers.get_all(ORIGIN).iter();
    let Some(origin) = origins.next() else {
        return Ok(());
    };
    if origins.next().is_some() {
        return Err("more than one Origin header");
    }
    let origin = origin
        .to_str()
        .map_err(|_| "the Origin header is not valid")?;
    let host = headers
        .get(HOST)
        .and_then(|h| h.to_str().ok())
        .ok_or("the Host header is missing")?;
    let origin_host = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"))
        .filter(|rest| !rest.is_empty() && !rest.contains('/'))
        .ok_or("the Origin header is not scheme://host")?;
    if origin_host.eq_ignore_ascii_case(host) {
        Ok(())
    } else {
        Err("cross-origin WebSocket connections are refused")
    }
}

/// Whether a request's Host header names this machine's loopback interface (`localhost`,
/// `*.localhost`, `127.0.0.0/8`, `::1`) or one of `allowed` (case-insensitive; a port is
/// ignored).
pub fn check_host(headers: &HeaderMap, allowed: &[String]) -> Result<(), &'static str> {
    let host = headers
        .get(HOST)
        .and_then(|h| h.to_str().ok())
        .ok_or("the Host header is missing")?;
    let name = host_name(host);
    let loopback_name =
        name.eq_ignore_ascii_case("localhost") || name.to_ascii_lowercase().ends_with(".localhost");
    let loopback_ip = name
        .parse::<std::net::IpAddr>()
        .is_ok_and(|ip| ip.is_loopback());
    if loopback_name || loopback_ip || allowed.iter().any(|a| a.eq_ignore_ascii_case(name)) {
        Ok(())
    } else {
        Err(
            "this Host is not served without a token (add it to http.allowed_hosts, or use auth = \"token\")",
        )
    }
}

/// The name of a Host header value: without its port, IPv6 brackets removed.
fn host_name(host: &str) -> &str {
    let host = host.trim();
    if let Some(rest) = host.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    match host.rsplit_once(':') {
        Some((name, port)) if port.chars().all(|c| c.is_ascii_digit()) => name,
        _ => host,
    }
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, HeaderValue::from_static(value));
        }
        map
    }

    #[test]
    fn token_is_accepted_three_ways() {
        let auth = Auth::Token("s3cret".into());
        assert!(
            auth.check(&headers(&[("authorization", "Bearer s3cret")]), None)
                .is_ok()
        );
        assert!(
            auth.check(
                &headers(&[("sec-websocket-protocol", "bearer, s3cret")]),
                None
            )
            .is_ok()
        );
        assert!(auth.check(&headers(&[]), Some("s3cret")).is_ok());
    }

    #[test]
    fn missing_or_wrong_tokens_are_refused() {
        let auth = Auth::Token("s3cret".into());
        assert!(auth.check(&headers(&[]), None).is_err());
        assert!(
            auth.check(&headers(&[("authorization", "Bearer nope")]), None)
                .is_err()
        );
        assert!(auth.check(&headers(&[]), Some("s3cre")).is_err());
    }

    #[test]
    fn browsers_must_come_from_the_same_origin() {
        let auth = Auth::None;
        let same = headers(&[
            ("host", "127.0.0.1:8080"),
            ("origin", "http://127.0.0.1:8080"),
        ]);
        let other = headers(&[
            ("host", "127.0.0.1:8080"),
            ("origin", "https://evil.example"),
        ]);
        assert!(auth.check(&same, None).is_ok());
        assert!(auth.check(&other, None).is_err());
        assert!(auth.check(&headers(&[]), None).is_ok());
        // No scheme, `null`, a path: refused, even where the host part would match.
        for origin in [
            "127.0.0.1:8080",
            "null",
            "http://127.0.0.1:8080/x",
            "http://",
        ] {
            let mut map = headers(&[("host", "127.0.0.1:8080")]);
            map.insert(ORIGIN, HeaderValue::from_static(origin));
            assert!(auth.check(&map, None).is_err(), "{origin}");
        }
        // Two Origin headers, the first of them right.
        let mut two = headers(&[("host", "127.0.0.1:8080")]);
        two.append(ORIGIN, HeaderValue::from_static("http://127.0.0.1:8080"));
        two.append(ORIGIN, HeaderValue::from_static("https://evil.example"));
        assert_eq!(auth.check(&two, None), Err("more than one Origin header"));
    }

    #[test]
    fn only_loopback_and_listed_hosts_pass_the_host_check() {
        let allowed = vec!["agent.home.arpa".to_owned()];
        for host in [
            "127.0.0.1:8080",
            "127.0.0.53",
            "[::1]:8080",
            "localhost",
            "LOCALHOST:8080",
            "chat.localhost:8080",
            "agent.home.arpa:8080",
        ] {
            let map = headers(&[("host", host)]);
            assert!(check_host(&map, &allowed).is_ok(), "{host}");
        }
        for host in [
            "evil.example:8080",
            "evil.example",
            "localhost.evil.example",
            "10.0.0.1:8080",
            "[::2]:8080",
            "127.0.0.1.nip.io:8080",
        ] {
            let map = headers(&[("host", host)]);
            assert!(check_host(&map, &allowed).is_err(), "{host}");
        }
        assert!(check_host(&headers(&[]), &allowed).is_err());
    }
}
