//! What the two web pages picogent serves share — the reference board's page (`board::web`) and
//! the run inspector (`inspector`): the security headers of every answer, the embedded assets
//! (one stylesheet, one small script), the template environment with its filters (status labels
//! and times, [`readable`]), the live updates, and the host names they answer to ([`hosts`]).
//!
//! Invariants: every page is rendered by minijinja with HTML autoescape (templates end in
//! `.html`), so tracker and model text shows as text; every answer carries
//! [`CONTENT_SECURITY_POLICY`], which allows no inline script and nothing from another origin;
//! pages are complete without the script, which only swaps in fresh server-rendered fragments
//! from a server-sent events stream (`data-live` on an element names its stream) and keeps
//! relative times fresh; a request for a host name that is not the server's own gets an empty
//! `421`, and a change sent from another site an empty `403` ([`hosts`]); each listener serves
//! at most its cap of live streams ([`LiveStreams`]): past it a new one gets `503` with
//! `Retry-After`, and the page stays what it is (the script tries again later), and a closed
//! stream gives its place and its memory back at once. The listeners' own limits (headers,
//! connections) are [`serve`]'s; sessions and sign-ins are [`sessions`]'.
//!
//! Where things are: `lib.rs` (the security headers, `CONTENT_SECURITY_POLICY`, the embedded
//! `base.html`, `live.js` and `style.css`, the template environment, live fragments over
//! server-sent events and their cap, `LiveStreams`); `readable.rs` (the `label` and `when`
//! filters); `hosts.rs` (`OwnHosts`, `own_hosts_only`, the loopback names the MCP endpoint shares);
//! `sessions.rs` (`Sessions`: capped, the one used longest ago put out first, ending idle or old;
//! `SignInRate`); `serve.rs` (`serve`, `DoorLimits`: HTTP/1.1 on hyper with tokio's timer, a header
//! deadline, a cap on open connections with a quarter per peer, a connection's place held by its
//! socket).

pub mod hosts;
pub mod readable;
pub mod serve;
pub mod sessions;

pub use serve::DoorLimits;
pub use sessions::{SessionLimits, Sessions, SignInRate};

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use minijinja::Environment;
use tokio::sync::{Semaphore, mpsc};

/// Sent with every page, fragment, stream and asset.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
     connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

const LIVE_JS: &str = include_str!("live.js");
const STYLE_CSS: &str = include_str!("style.css");
const BASE_HTML: &str = include_str!("base.html");

/// A template environment with the shared layout (`base.html`) and `templates`, each a name
/// (ending in `.html`, so autoescaped) and its text. A template that does not parse is a bug of
/// this binary, caught by the tests that render every page.
pub fn environment(templates: &[(&'static str, &'static str)]) -> Environment<'static> {
    let mut env = Environment::new();
    env.set_undefined_behavior(minijinja::UndefinedBehavior::Strict);
    readable::add_filters(&mut env);
    let all = std::iter::once(&("base.html", BASE_HTML)).chain(templates);
    for (name, text) in all {
        if let Err(error) = env.add_template(name, text) {
            tracing::error!(%error, template = name, "a built-in template does not parse");
        }
    }
    env
}

/// A template's context from anything serializable.
pub fn view(value: impl serde::Serialize) -> minijinja::Value {
    minijinja::Value::from(minijinja::value::Serde(value))
}

/// Renders `name` with `context`; a failure (a bug of a built-in template) is logged and gives
/// `None`, which [`render_failed`] answers.
pub fn render(env: &Environment<'_>, name: &str, context: minijinja::Value) -> Option<String> {
    let rendered = env.get_template(name).and_then(|template| template.render(context));
    rendered.map_err(|error| tracing::error!(%error, template = name, "cannot render a page")).ok()
}

/// The answer when a page could not be rendered: a 500 that says nothing of the cause.
pub fn render_failed() -> Response {
    html_page(
        StatusCode::INTERNAL_SERVER_ERROR,
        "<!doctype html><title>error</title><p>The page could not be rendered; see the log.</p>".into(),
    )
}

/// An HTML answer with the security headers.
pub fn html_page(status: StatusCode, html: String) -> Response {
    with_headers((status, [(header::CONTENT_TYPE, "text/html; charset=utf-8")], html).into_response())
}

/// Adds the headers every answer of the web pages carries.
pub fn with_headers(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CONTENT_SECURITY_POLICY));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    // `same-origin`, not `no-referrer`: under `no-referrer` a browser sends `Origin: null` with
    // the page's own form posts, which the check of changes (`hosts`) could not tell from another
    // site's. Other sites still get no referrer.
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("same-origin"));
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// `/assets/live.js` and `/assets/style.css`, from the binary.
pub fn asset_routes<S: Clone + Send + Sync + 'static>() -> axum::Router<S> {
    axum::Router::new()
        .route("/assets/live.js", get(|| async { asset("text/javascript; charset=utf-8", LIVE_JS) }))
        .route("/assets/style.css", get(|| async { asset("text/css; charset=utf-8", STYLE_CSS) }))
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    with_headers(([(header::CONTENT_TYPE, content_type)], body).into_response())
}

/// What wakes a live stream: a change worth re-rendering for, or the end (`false`: the server
/// is shutting down, so the stream ends and graceful shutdown is not held up by it).
pub trait Wake: Send + 'static {
    fn wait(&mut self) -> impl Future<Output = bool> + Send;
}

/// The live streams one listener serves at once, with the cap that bounds them. Cheap to clone:
/// clones count together.
#[derive(Debug, Clone)]
pub struct LiveStreams {
    open: Arc<Semaphore>,
    max: usize,
}

impl LiveStreams {
    /// `http.max_live_streams`'s default, and the board's.
    pub const DEFAULT_MAX: usize = 64;
    /// What a stream refused for the cap is told to wait, in seconds.
    pub const RETRY_AFTER_SECS: u64 = 30;

    pub fn new(max: usize) -> LiveStreams {
        LiveStreams { open: Arc::new(Semaphore::new(max)), max }
    }
}

/// A server-sent events stream of `render`'s fragment: sent at once, then again after each wake
/// whenever it changed. `render` returning `None` (the thing is gone, or cannot be read) skips
/// that turn. The stream ends when the client goes or `wake` says so, and gives its place in
/// `streams` back then; past the cap it is a `503` with `Retry-After` instead.
pub fn live<W, R, F>(streams: &LiveStreams, mut wake: W, render: R) -> Response
where
    W: Wake,
    R: Fn() -> F + Send + 'static,
    F: Future<Output = Option<String>> + Send,
{
    let Ok(place) = streams.open.clone().try_acquire_owned() else {
        tracing::debug!(max = streams.max, "refused a live stream: the listener's cap is reached");
        let words = format!(
            "too many live updates are open on this server (its cap is {}): the page works without them, reload it \
             to see changes; live updates start again by themselves",
            streams.max
        );
        let retry_after = [(header::RETRY_AFTER, HeaderValue::from(LiveStreams::RETRY_AFTER_SECS))];
        return with_headers((StatusCode::SERVICE_UNAVAILABLE, retry_after, words).into_response());
    };
    let (sender, receiver) = mpsc::channel::<String>(4);
    tokio::spawn(async move {
        // Held for as long as the stream is served.
        let _place = place;
        let mut last: Option<String> = None;
        loop {
            if let Some(html) = render().await
                && last.as_ref() != Some(&html)
            {
                if sender.send(html.clone()).await.is_err() {
                    return;
                }
                last = Some(html);
            }
            tokio::select! {
                _ = sender.closed() => return,
                more = wake.wait() => if !more { return },
            }
        }
    });
    let events = futures::stream::unfold(receiver, |mut receiver| async move {
        let html = receiver.recv().await?;
        Some((Ok::<Event, Infallible>(Event::default().data(html)), receiver))
    });
    with_headers(Sse::new(events).keep_alive(KeepAlive::default()).into_response())
}

/// The value of the cookie `name` in the request, if it has one.
pub fn cookie<'a>(headers: &'a axum::http::HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value)
        .filter(|value| !value.is_empty())
}

/// The `Set-Cookie` value that keeps `session` under `name` (or, empty, forgets it).
pub fn session_cookie(name: &str, session: &str) -> HeaderValue {
    let max_age = if session.is_empty() { "; Max-Age=0" } else { "" };
    HeaderValue::from_str(&format!("{name}={session}; Path=/; HttpOnly; SameSite=Strict{max_age}"))
        .unwrap_or_else(|_| HeaderValue::from_static("session=; Path=/; Max-Age=0"))
}
