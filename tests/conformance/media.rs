//! The conformance runs of files: what the agent sends with `send_file` arrives as the
//! platform shows it (a picture as a picture, the rest as documents) with the same bytes, and
//! the model is told "sent" with the platform's id only once the platform took it; what the
//! platform would refuse, or what lies outside the workspace, is refused before any upload.

use serde_json::json;
use switchboard_testkit::Reply;

use super::{ADA, Platform, Run, Shown};
use crate::util;

/// A PNG: its signature, then bytes no other file of the test has.
pub(crate) fn png() -> Vec<u8> {
    let mut bytes = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR".to_vec();
    bytes.extend((0..2048u32).map(|n| (n * 7 % 251) as u8));
    bytes
}

/// A PDF's first bytes and some more.
pub(crate) fn pdf() -> Vec<u8> {
    let mut bytes = b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n".to_vec();
    bytes.extend((0..4096u32).map(|n| (n * 13 % 253) as u8));
    bytes
}

pub(crate) async fn a_picture_and_a_document_the_agent_sends_arrive_with_their_bytes<
    P: Platform,
>() {
    let t = Run::<P>::start(false).await;
    let workspace = t.dir.path().join("workspace");
    std::fs::write(workspace.join("chart.png"), png()).expect("write");
    std::fs::create_dir_all(workspace.join("out")).expect("dir");
    std::fs::write(workspace.join("out/report.pdf"), pdf()).expect("write");
    t.llm.push(Reply::tools([
        (
            "send_file",
            json!({"path": "chart.png", "caption": "the chart"}),
        ),
        ("send_file", json!({"path": "out/report.pdf"})),
    ]));
    t.llm.push(Reply::text("Both are in the chat."));
    let said = t.fake.dm(ADA, "send me the chart and the report");
    t.fake
        .wait("two files and the answer", |f| {
            f.files(&said.chat).len() == 2
                && super::replies(f, &said)
                    .iter()
                    .any(|post| post.text == "Both are in the chat.")
        })
        .await;
    let mut files = t.fake.files(&said.chat);
    files.sort_by(|a, b| a.name.cmp(&b.name));
    assert_eq!(files[0].name, "chart.png");
    assert_eq!(files[0].shown, Shown::Picture, "{:?}", files[0].shown);
    assert_eq!(files[0].bytes, png(), "the picture's bytes");
    assert_eq!(files[0].caption.as_deref(), Some("the chart"));
    assert_eq!(files[1].name, "report.pdf");
    assert_eq!(files[1].shown, Shown::Document);
    assert_eq!(files[1].bytes, pdf(), "the document's bytes");
    // The model was told each went out, with the platform's id of it.
    let results = util::tool_results(&t.llm.requests()[1]);
    assert_eq!(results.len(), 2, "{results:?}");
    for (result, file) in results.iter().zip(["chart.png", "report.pdf"]) {
        assert!(
            result.starts_with(file) && result.contains("sent to this chat (message "),
            "{result}"
        );
    }
    t.daemon.shutdown().await;
}

pub(crate) async fn a_file_outside_the_workspace_or_over_the_platforms_limit_is_not_uploaded<
    P: Platform,
>() {
    let t = Run::<P>::start(false).await;
    let workspace = t.dir.path().join("workspace");
    std::fs::write(t.dir.path().join("secret.txt"), "not the agent's").expect("write");
    // Sparse: one byte over the platform's limit without writing it.
    let big = std::fs::File::create(workspace.join("huge.bin")).expect("create");
    big.set_len(P::DOCUMENT_LIMIT + 1).expect("size");
    t.llm.push(Reply::tools([
        ("send_file", json!({"path": "../secret.txt"})),
        ("send_file", json!({"path": "huge.bin"})),
    ]));
    t.llm.push(Reply::text("I could not send them."));
    let said = t.fake.dm(ADA, "send me those");
    t.fake
        .wait("the answer", |f| !super::replies(f, &said).is_empty())
        .await;
    let results = util::tool_results(&t.llm.requests()[1]);
    assert!(
        results[0].starts_with("error: refused") && results[0].contains("outside"),
        "{}",
        results[0]
    );
    let limit = switchboard_core::media::size(P::DOCUMENT_LIMIT);
    assert!(
        results[1].starts_with("error: huge.bin was not sent") && results[1].contains(&limit),
        "the platform's limit ({limit}) is named: {}",
        results[1]
    );
    assert!(t.fake.files(&said.chat).is_empty(), "nothing was uploaded");
    let kept = t.dir.path().join("state/media/out");
    let copies = walk(&kept);
    assert!(
        copies.is_empty(),
        "nothing was kept for delivery: {copies:?}"
    );
    t.daemon.shutdown().await;
}

/// The files under `dir`, at any depth.
fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .flat_map(|entry| {
            let path = entry.path();
            if path.is_dir() {
                walk(&path)
            } else {
                vec![path]
            }
        })
        .collect()
}
