//! Which host names picogent's web servers answer to: the defence against DNS rebinding (a page
//! of another site that points its own name at 127.0.0.1 and reads what the browser fetches)
//! and against posts from other sites. Shared by the run inspector and the board's page
//! ([`own_hosts_only`]) and by the MCP endpoint (its lists, [`LOOPBACK_HOSTS`] and
//! [`LOOPBACK_ORIGINS`], which rmcp's own check of `Host` and `Origin` is given).
//!
//! Invariants:
//! - a request whose `Host` is not one of the server's own names (the listener's address,
//!   `localhost`, the loopback addresses, and the names configured) gets `421 Misdirected
//!   Request` and an empty body: a rebinding page learns nothing, not even which page it hit;
//! - a request that may change something (any method but GET, HEAD and OPTIONS) with an
//!   `Origin` that is not the server's own (the same host and port the request was sent to) gets
//!   `403` and an empty body (`Origin: null` passes only with the browser's own `Sec-Fetch-Site:
//!   same-origin`). A change without `Origin` is let through unless the browser says
//!   (`Sec-Fetch-Site`) it came from another site: browsers send `Origin` with every POST, so
//!   its absence means a client that is not a browser (curl, a script), which no other site can
//!   drive and which could send any header it liked anyway. The pages' `Referrer-Policy:
//!   same-origin` keeps the browser sending their real origin with their own forms.

use std::net::IpAddr;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// The loopback names every server answers to, whatever it listens on.
pub const LOOPBACK_HOSTS: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

/// Loopback origins, any port, both schemes (for the MCP endpoint: a local tool such as the MCP
/// Inspector's web UI is fine).
pub const LOOPBACK_ORIGINS: [&str; 6] = [
    "http://localhost:*",
    "http://127.0.0.1:*",
    "http://[::1]:*",
    "https://localhost:*",
    "https://127.0.0.1:*",
    "https://[::1]:*",
];

/// A host and, when given, a port: a `Host` header, or an entry of the allowed list.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Authority {
    host: String,
    port: Option<u16>,
}

impl Authority {
    /// `example.com`, `example.com:8080`, `127.0.0.1:9464`, `[::1]:80`; `None` for anything else
    /// (a path, a scheme, user info, an empty value).
    fn parse(text: &str) -> Option<Authority> {
        let text = text.trim();
        if text.is_empty() || text.contains(['@', '/', '?', '#']) {
            return None;
        }
        let authority = axum::http::uri::Authority::try_from(text).ok()?;
        Some(Authority { host: normalize(authority.host()), port: authority.port_u16() })
    }
}

/// Lowercase, without IPv6 brackets or a trailing dot (`Localhost.` is `localhost`).
fn normalize(host: &str) -> String {
    host.trim_start_matches('[').trim_end_matches(']').trim_end_matches('.').to_ascii_lowercase()
}

/// Whether `entry` (of a server's own hosts) covers the request's `host`: the same name, and
/// the same port when the entry names one (as the MCP endpoint matches `mcp.allowed_hosts`).
fn covers(entry: &Authority, host: &Authority) -> bool {
    entry.host == host.host && entry.port.is_none_or(|port| host.port == Some(port))
}

/// The names a web server answers to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnHosts {
    names: Vec<Authority>,
}

impl OwnHosts {
    /// The listener's address (unless it listens on every address: `0.0.0.0` is no name a
    /// client uses), `localhost`, the loopback addresses, and `extra` (host names, with a port to
    /// allow only that port: `agent.example.com`, `agent.example.com:8443`). An entry that is
    /// not a host name is left out (the config's check refuses it before).
    pub fn new(listen: IpAddr, extra: &[String]) -> OwnHosts {
        let listener = (!listen.is_unspecified()).then(|| listen.to_string());
        let names = LOOPBACK_HOSTS
            .iter()
            .map(|host| host.to_string())
            .chain(listener)
            .chain(extra.iter().cloned())
            .filter_map(|name| Authority::parse(&name).or_else(|| bare_ipv6(&name)))
            .collect();
        OwnHosts { names }
    }

    /// Whether `host` (a `Host` header's value) is one of these names.
    pub fn allows(&self, host: &str) -> bool {
        Authority::parse(host).is_some_and(|host| self.names.iter().any(|entry| covers(entry, &host)))
    }
}

/// An IPv6 address written without brackets (`::1`), as an entry.
fn bare_ipv6(text: &str) -> Option<Authority> {
    text.trim().parse::<std::net::Ipv6Addr>().ok().map(|ip| Authority { host: ip.to_string(), port: None })
}

/// Whether `name` is something [`OwnHosts::new`] takes as an allowed host: a host name or
/// address, with an optional port, and nothing else (no scheme, path or user info). For the
/// config's check.
pub fn is_host_name(name: &str) -> bool {
    Authority::parse(name).or_else(|| bare_ipv6(name)).is_some()
}

/// Why a request was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Refusal {
    /// `Host` is not one of the server's names (or is missing): 421.
    Host(String),
    /// A change from another site: 403.
    Origin(String),
}

/// The checks of the module's header, on one request.
fn check(hosts: &OwnHosts, method: &Method, uri: &Uri, headers: &HeaderMap) -> Result<(), Refusal> {
    // HTTP/2 carries the host in `:authority`, which hyper gives as the URI's.
    let host = match headers.get(header::HOST) {
        Some(value) => value.to_str().unwrap_or_default().to_string(),
        None => uri.authority().map(|authority| authority.as_str().to_string()).unwrap_or_default(),
    };
    if !hosts.allows(&host) {
        return Err(Refusal::Host(host));
    }
    if matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS) {
        return Ok(());
    }
    // What the browser says of where the request comes from; no page's script can set it.
    let site = headers.get("sec-fetch-site").and_then(|value| value.to_str().ok()).unwrap_or_default();
    match headers.get(header::ORIGIN) {
        Some(origin) => {
            let origin = origin.to_str().unwrap_or_default();
            // `null` is what a browser sends for a page's own post when a referrer policy (the
            // user's, say) hides it; the browser's `same-origin` tells it from a sandboxed frame's.
            let own_hidden = origin.trim() == "null" && site.eq_ignore_ascii_case("same-origin");
            if same_origin(origin, &host) || own_hidden { Ok(()) } else { Err(Refusal::Origin(origin.to_string())) }
        }
        None if site.eq_ignore_ascii_case("cross-site") || site.eq_ignore_ascii_case("same-site") => {
            Err(Refusal::Origin(format!("(none; Sec-Fetch-Site: {site})")))
        }
        None => Ok(()),
    }
}

/// Whether `origin` (`http://localhost:8700`) is the origin of a page served under `host` (the
/// request's `Host`, `localhost:8700`): the same host and port (the scheme's default port when
/// either gives none). The scheme itself is not compared: behind a proxy that ends TLS the
/// server cannot know it, and one host and port serve one site. `null` (a sandboxed frame, a
/// file) is no page of this server.
fn same_origin(origin: &str, host: &str) -> bool {
    let Some((scheme, authority)) = origin.trim().split_once("://") else { return false };
    let default_port = match scheme.to_ascii_lowercase().as_str() {
        "http" => 80,
        "https" => 443,
        _ => return false,
    };
    let (Some(origin), Some(host)) = (Authority::parse(authority), Authority::parse(host)) else { return false };
    origin.host == host.host && origin.port.unwrap_or(default_port) == host.port.unwrap_or(default_port)
}

/// Middleware: lets a request through to the pages when it passes [`check`]; answers `421` (a
/// host that is not this server's) or `403` (a change from another site) with an empty body
/// otherwise, and logs which, with the setting that would allow it.
pub async fn own_hosts_only(State(hosts): State<Arc<OwnHosts>>, request: Request, next: Next) -> Response {
    match check(&hosts, request.method(), request.uri(), request.headers()) {
        Ok(()) => next.run(request).await,
        Err(Refusal::Host(host)) => {
            tracing::warn!(
                host = %host.chars().take(200).collect::<String>(),
                path = request.uri().path(),
                "refused a page request for a host name that is not this server's (DNS rebinding?); if it is \
                 one of its names, add it to http.allowed_hosts (picogent run) or --allowed-host (picogent board)"
            );
            empty(StatusCode::MISDIRECTED_REQUEST)
        }
        Err(Refusal::Origin(origin)) => {
            tracing::warn!(
                origin = %origin.chars().take(200).collect::<String>(),
                method = %request.method(),
                path = request.uri().path(),
                "refused a change sent from a page of another site"
            );
            empty(StatusCode::FORBIDDEN)
        }
    }
}

/// `status` and nothing else.
fn empty(status: StatusCode) -> Response {
    (status, [(header::CONTENT_LENGTH, "0")]).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(method: Method, host: Option<&str>, origin: Option<&str>) -> Result<(), Refusal> {
        let hosts = OwnHosts::new("127.0.0.1".parse().unwrap(), &["board.example.com".into(), "agent.lan:8443".into()]);
        let mut headers = HeaderMap::new();
        if let Some(host) = host {
            headers.insert(header::HOST, host.parse().unwrap());
        }
        if let Some(origin) = origin {
            headers.insert(header::ORIGIN, origin.parse().unwrap());
        }
        check(&hosts, &method, &Uri::from_static("/runs"), &headers)
    }

    #[test]
    fn only_the_servers_own_names_are_served() {
        for host in [
            "127.0.0.1:9464",
            "localhost:9464",
            "LOCALHOST",
            "localhost.:80",
            "[::1]:9464",
            "board.example.com",
            "board.example.com:8700",
            "agent.lan:8443",
        ] {
            assert_eq!(request(Method::GET, Some(host), None), Ok(()), "{host}");
        }
        for host in [
            "rebind.attacker.example",
            "rebind.attacker.example:9464",
            "127.0.0.1.attacker.example",
            "localhost.attacker.example",
            "agent.lan:9464",
            "user@localhost",
            "",
        ] {
            assert!(matches!(request(Method::GET, Some(host), None), Err(Refusal::Host(_))), "{host}");
        }
        assert!(matches!(request(Method::GET, None, None), Err(Refusal::Host(_))), "no Host at all");
    }

    #[test]
    fn a_listener_on_every_address_is_no_name_and_its_own_address_is() {
        let everywhere = OwnHosts::new("0.0.0.0".parse().unwrap(), &[]);
        assert!(everywhere.allows("127.0.0.1:80") && !everywhere.allows("0.0.0.0:80"));
        let lan = OwnHosts::new("192.168.1.20".parse().unwrap(), &[]);
        assert!(lan.allows("192.168.1.20:9464") && !lan.allows("192.168.1.21:9464"));
        let v6 = OwnHosts::new("::1".parse().unwrap(), &["fd00::7".into()]);
        assert!(v6.allows("[::1]:9464") && v6.allows("[fd00::7]:9464"));
    }

    #[test]
    fn a_change_from_another_origin_is_refused() {
        let own = Some("localhost:8700");
        assert_eq!(request(Method::POST, own, Some("http://localhost:8700")), Ok(()));
        assert_eq!(request(Method::POST, own, None), Ok(()), "a client that is not a browser");
        assert_eq!(request(Method::POST, Some("board.example.com"), Some("https://board.example.com")), Ok(()));
        // Behind a proxy that ends TLS the server sees `http` for a page the browser got by
        // `https`: the scheme is not compared, the host and port are.
        assert_eq!(request(Method::POST, own, Some("https://localhost:8700")), Ok(()));
        for origin in [
            "http://rebind.attacker.example",
            "http://localhost:3000",
            "https://localhost",
            "null",
            "localhost:8700",
            "ftp://localhost:8700",
        ] {
            assert!(matches!(request(Method::POST, own, Some(origin)), Err(Refusal::Origin(_))), "{origin}");
        }
        // A read is never refused for its Origin: a page's own GETs carry none that matter.
        assert_eq!(request(Method::GET, own, Some("http://rebind.attacker.example")), Ok(()));
    }

    #[test]
    fn a_change_a_browser_marks_as_cross_site_is_refused_without_an_origin() {
        let hosts = OwnHosts::new("127.0.0.1".parse().unwrap(), &[]);
        let mut headers = HeaderMap::new();
        headers.insert(header::HOST, "127.0.0.1:8700".parse().unwrap());
        headers.insert("sec-fetch-site", "cross-site".parse().unwrap());
        assert!(check(&hosts, &Method::POST, &Uri::from_static("/signin"), &headers).is_err());
        headers.insert("sec-fetch-site", "same-origin".parse().unwrap());
        assert!(check(&hosts, &Method::POST, &Uri::from_static("/signin"), &headers).is_ok());
        // `Origin: null` is the page's own post only when the browser says it is.
        headers.insert(header::ORIGIN, "null".parse().unwrap());
        assert!(check(&hosts, &Method::POST, &Uri::from_static("/signin"), &headers).is_ok());
        headers.insert("sec-fetch-site", "cross-site".parse().unwrap());
        assert!(check(&hosts, &Method::POST, &Uri::from_static("/signin"), &headers).is_err());
        headers.remove("sec-fetch-site");
        assert!(check(&hosts, &Method::POST, &Uri::from_static("/signin"), &headers).is_err());
    }

    #[test]
    fn host_names_for_the_config_are_names_and_nothing_else() {
        for good in ["agent.example.com", "agent.example.com:8443", "10.0.0.5", "::1", "[fd00::7]:80"] {
            assert!(is_host_name(good), "{good}");
        }
        for bad in ["", " ", "http://agent.example.com", "agent.example.com/inspector", "user@agent", "a b"] {
            assert!(!is_host_name(bad), "{bad}");
        }
    }
}
