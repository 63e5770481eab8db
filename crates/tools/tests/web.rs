//! `web_fetch` and `web_search` against the testkit's fake web server over 127.0.0.1. The
//! fake's own address is allowed explicitly; every other private address is refused before
//! any connection, also behind a hostname and behind a redirect.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::json;
use switchboard_testkit::FakeWeb;
use switchboard_testkit::web::{BRAVE_KEY, SEARCH_RESULTS};
use switchboard_tools::builtin::{
    SearchProvider, WebFetch, WebFetchOptions, WebSearch, WebSearchOptions,
};
use switchboard_tools::netguard::Resolver;
use switchboard_tools::{Tool, ToolContext, ToolError, Workspace};

/// DNS from a table: names the tests make up.
#[derive(Debug)]
struct Table(HashMap<&'static str, &'static str>);

#[async_trait]
impl Resolver for Table {
    async fn lookup(&self, host: &str, port: u16) -> std::io::Result<Vec<SocketAddr>> {
        match self.0.get(host) {
            Some(ip) => Ok(vec![SocketAddr::new(ip.parse().expect("ip"), port)]),
            None => Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "no such host",
            )),
        }
    }
}

fn fetcher(allow: Vec<String>) -> WebFetch {
    WebFetch::new(WebFetchOptions {
        max_bytes: 4096,
        timeout: Duration::from_secs(10),
        max_redirects: 5,
        allow_private: allow,
        resolver: Arc::new(Table(HashMap::from([
            ("intranet.test", "10.0.0.1"),
            ("fake.test", "127.0.0.1"),
            ("metadata.test", "169.254.169.254"),
        ]))),
    })
}

fn context(dir: &tempfile::TempDir) -> ToolContext {
    ToolContext::new(
        Arc::new(Workspace::new(dir.path(), &[], true).expect("workspace")),
        "test_1".into(),
    )
}

async fn fetch(tool: &WebFetch, url: &str, ctx: &ToolContext) -> Result<String, ToolError> {
    tool.call(json!({"url": url}), ctx)
        .await
        .map(|output| output.text)
}

#[tokio::test]
async fn a_page_comes_back_as_markdown_marked_untrusted() {
    let web = FakeWeb::start().await.expect("fake web");
    web.html(
        "/page",
        "<html><head><script>steal()</script></head><body><h1>Tea</h1>\
         <p>Brew <em>green</em> tea at <b>80 °C</b>.</p><ul><li>one</li><li>two</li></ul></body></html>",
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let ctx = context(&dir);
    let tool = fetcher(vec![web.addr().to_string()]);
    let text = fetch(&tool, &web.url("/page"), &ctx)
        .await
        .expect("fetched");
    assert!(text.starts_with("<untrusted_content source=\""), "{text}");
    assert!(text.ends_with("</untrusted_content>"), "{text}");
    assert!(text.contains("# Tea"), "{text}");
    assert!(text.contains("**80 °C**"), "{text}");
    assert!(
        text.contains("_green_") || text.contains("*green*"),
        "{text}"
    );
    assert!(!text.contains("steal"), "{text}");

    // An allowed hostname is connected to at the address it was checked at.
    let by_name = format!("http://fake.test:{}/page", web.addr().port());
    let tool = fetcher(vec![format!("fake.test:{}", web.addr().port())]);
    assert!(
        fetch(&tool, &by_name, &ctx)
            .await
            .expect("fetched")
            .contains("# Tea")
    );
}

#[tokio::test]
async fn private_addresses_are_refused_and_never_contacted() {
    let allowed = FakeWeb::start().await.expect("fake web");
    let other = FakeWeb::start().await.expect("fake web");
    other.html("/secret", "<p>internal secret</p>");
    allowed.redirect("/to-other", &other.url("/secret"));
    allowed.redirect("/to-metadata", "http://169.254.169.254/latest/meta-data/");
    allowed.redirect("/to-intranet", "http://intranet.test/admin");
    let dir = tempfile::tempdir().expect("tempdir");
    let ctx = context(&dir);
    let tool = fetcher(vec![allowed.addr().to_string()]);

    for url in [
        "http://127.0.0.1/".to_owned(),
        other.url("/secret"),
        "http://169.254.169.254/latest/meta-data/".to_owned(),
        "http://metadata.test/".to_owned(),
        "http://intranet.test/".to_owned(),
        "http://[::1]/".to_owned(),
        "http://[::ffff:127.0.0.1]/".to_owned(),
        allowed.url("/to-other"),
        allowed.url("/to-metadata"),
        allowed.url("/to-intranet"),
        "file:///etc/passwd".to_owned(),
    ] {
        match fetch(&tool, &url, &ctx).await {
            Err(ToolError::Denied(message)) => assert!(!message.contains("internal secret")),
            other => panic!("{url}: expected a refusal, got {other:?}"),
        }
    }
    assert!(
        other.requests().is_empty(),
        "contacted: {:?}",
        other.requests()
    );
    assert_eq!(
        allowed.requests(),
        ["/to-other", "/to-metadata", "/to-intranet"],
        "the allowed server saw only the redirecting requests"
    );
}

#[tokio::test]
async fn bodies_are_capped_and_non_text_is_not_shown() {
    let web = FakeWeb::start().await.expect("fake web");
    web.body("/big", "text/plain", &"x".repeat(100_000));
    web.body("/image", "image/png", "\u{89}PNG");
    let dir = tempfile::tempdir().expect("tempdir");
    let ctx = context(&dir);
    let tool = fetcher(vec![web.addr().to_string()]);
    let big = fetch(&tool, &web.url("/big"), &ctx).await.expect("fetched");
    assert!(big.len() < 4096 + 400, "{} bytes", big.len());
    assert!(big.contains("[… cut at 4096 bytes]"));
    match fetch(&tool, &web.url("/image"), &ctx).await {
        Err(ToolError::Failed(message)) => assert!(message.contains("image/png"), "{message}"),
        other => panic!("{other:?}"),
    }
    match fetch(&tool, &web.url("/missing"), &ctx).await {
        Err(ToolError::Failed(message)) => assert!(message.contains("404"), "{message}"),
        other => panic!("{other:?}"),
    }
}

fn searcher(provider: SearchProvider, base_url: String, key: Option<&str>) -> WebSearch {
    WebSearch::new(WebSearchOptions {
        provider,
        base_url,
        api_key: key.map(str::to_owned),
        max_results: 5,
        timeout: Duration::from_secs(10),
    })
    .expect("client")
}

#[tokio::test]
async fn brave_and_searxng_give_titles_urls_and_snippets() {
    let web = FakeWeb::start().await.expect("fake web");
    let dir = tempfile::tempdir().expect("tempdir");
    let ctx = context(&dir);
    for provider in [SearchProvider::Brave, SearchProvider::Searxng] {
        let tool = searcher(provider, web.url(""), Some(BRAVE_KEY));
        let text = tool
            .call(json!({"query": "green tea"}), &ctx)
            .await
            .expect("results")
            .text;
        for (n, (title, url, snippet)) in SEARCH_RESULTS.iter().enumerate() {
            let expected = format!("{}. {title}\n   {url}\n   {snippet}\n", n + 1);
            assert!(text.contains(&expected), "{provider:?}: {text}");
        }
        assert!(text.starts_with("<untrusted_content"));
    }
    let requests = web.requests();
    assert!(
        requests[0].starts_with("/res/v1/web/search?q=green+tea&count=5"),
        "{requests:?}"
    );
    assert!(
        requests[1].starts_with("/search?q=green+tea&format=json"),
        "{requests:?}"
    );

    let wrong_key = searcher(SearchProvider::Brave, web.url(""), Some("wrong"));
    match wrong_key.call(json!({"query": "tea"}), &ctx).await {
        Err(ToolError::Failed(message)) => assert!(message.contains("401"), "{message}"),
        other => panic!("{other:?}"),
    }
}
