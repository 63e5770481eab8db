//! Files and voice on the WebSocket channel and in the daemon: a file the agent sends
//! arrives as a `file` frame whose link serves its bytes (and nothing but it, and not after
//! it expired), a file that cannot be shown safely is offered as a download that runs nothing.

use serde_json::json;
use switchboard_testkit::Reply;

use crate::util::{self, Harness};

/// A PNG: its signature, then bytes no other file of the test has.
fn png() -> Vec<u8> {
    let mut bytes = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR".to_vec();
    bytes.extend((0..1500u32).map(|n| (n * 11 % 241) as u8));
    bytes
}

/// What `GET path` answered: its status, headers (lowercase names) and body bytes.
pub(crate) struct Fetched {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Fetched {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }
}

/// `GET path` over a plain socket, the body read whole (binary safe).
pub(crate) async fn fetch(addr: std::net::SocketAddr, path: &str) -> Fetched {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.expect("write");
    let mut response = Vec::new();
    tokio::time::timeout(util::PATIENCE, stream.read_to_end(&mut response))
        .await
        .expect("response in time")
        .expect("read");
    let split = response
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a head");
    let head = String::from_utf8_lossy(&response[..split]).into_owned();
    let mut body = response[split + 4..].to_vec();
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|line| line.split(' ').nth(1))
        .and_then(|code| code.parse().ok())
        .expect("a status");
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(key, value)| (key.trim().to_ascii_lowercase(), value.trim().to_owned()))
        .collect();
    if headers
        .iter()
        .any(|(key, value)| key == "transfer-encoding" && value == "chunked")
    {
        body = dechunk(&body);
    }
    Fetched {
        status,
        headers,
        body,
    }
}

fn dechunk(mut body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let Some(end) = body.windows(2).position(|w| w == b"\r\n") else {
            return out;
        };
        let size =
            usize::from_str_radix(String::from_utf8_lossy(&body[..end]).trim(), 16).unwrap_or(0);
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&body[end + 2..end + 2 + size]);
        body = &body[end + 2 + size + 2..];
    }
}

#[tokio::test]
async fn a_file_the_agent_sends_arrives_as_a_frame_whose_link_serves_its_bytes() {
    let mut t = Harness::start("").await;
    let workspace = t.dir.path().join("workspace");
    std::fs::write(workspace.join("chart.png"), png()).expect("write");
    std::fs::write(
        workspace.join("page.html"),
        "<script>alert(document.cookie)</script>",
    )
    .expect("write");
    t.llm.push(Reply::tools([
        (
            "send_file",
            json!({"path": "chart.png", "caption": "**the** chart"}),
        ),
        ("send_file", json!({"path": "page.html"})),
    ]));
    t.llm.push(Reply::text("Here they are."));
    let turn = t.client.say("c1", "show me").await;
    let files = turn.of_type("file");
    assert_eq!(files.len(), 2, "{:?}", turn.frames);
    let chart = files
        .iter()
        .find(|f| f["name"] == "chart.png")
        .expect("the chart's frame");
    assert_eq!(chart["kind"], "image");
    assert_eq!(chart["mime"], "image/png");
    assert_eq!(chart["bytes"], png().len());
    assert_eq!(chart["caption"], "**the** chart");
    let url = chart["url"].as_str().expect("a url");
    let served = fetch(t.daemon.addr(), url).await;
    assert_eq!(served.status, 200);
    assert_eq!(served.body, png(), "the same bytes");
    assert_eq!(served.header("content-type"), Some("image/png"));
    assert_eq!(served.header("content-disposition"), Some("inline"));

    // A page offered as a download, under a policy that runs nothing.
    let page = files
        .iter()
        .find(|f| f["name"] == "page.html")
        .expect("the page's frame");
    assert_eq!(page["kind"], "document");
    let served = fetch(t.daemon.addr(), page["url"].as_str().expect("url")).await;
    assert_eq!(served.status, 200);
    assert!(
        served
            .header("content-disposition")
            .is_some_and(|d| d.starts_with("attachment")),
        "{:?}",
        served.headers
    );
    assert!(
        served
            .header("content-security-policy")
            .is_some_and(|csp| csp.contains("sandbox")),
        "{:?}",
        served.headers
    );

    // A link changed by hand serves nothing.
    let forged = url.replace("type=image%2Fpng", "type=text%2Fhtml");
    assert_ne!(forged, url);
    assert_eq!(fetch(t.daemon.addr(), &forged).await.status, 403);
    let other = url.replacen("chart.png", "chart2.png", 1);
    assert_eq!(fetch(t.daemon.addr(), &other).await.status, 403);
    // The tool told the model it was sent.
    let results = util::tool_results(&t.llm.requests()[1]);
    assert!(
        results[0].starts_with("chart.png (image, 1.5 KB): sent to this chat"),
        "{results:?}"
    );
    t.daemon.shutdown().await;
}
