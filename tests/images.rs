//! Images tools return — a picture `read_file` opens, an MCP server's screenshot — reach a
//! model that takes images in its own dialect for the turn that called the tool (Anthropic:
//! inside the `tool_result`; chat completions: a user message after the results), are not
//! sent again in later turns, and are left out for a model whose `[llm] images = false`.

use base64::Engine;
use serde_json::{Value, json};
use switchboard_testkit::Reply;
use switchboard_testkit::mcp::PICTURE;

use crate::util::{self, Extra, Harness};

/// `PICTURE` as a data URL's payload.
fn picture_base64() -> String {
    base64::engine::general_purpose::STANDARD.encode(PICTURE)
}

/// The base64 data of every image `request` shows, in either dialect.
fn images_shown(request: &Value) -> Vec<String> {
    fn walk(value: &Value, out: &mut Vec<String>) {
        match value {
            Value::Object(map) => {
                if let Some(url) = map.get("url").and_then(Value::as_str)
                    && let Some((_, data)) = url.split_once(";base64,")
                {
                    out.push(data.to_owned());
                }
                if map.get("type").and_then(Value::as_str) == Some("base64")
                    && let Some(data) = map.get("data").and_then(Value::as_str)
                {
                    out.push(data.to_owned());
                }
                map.values().for_each(|v| walk(v, out));
            }
            Value::Array(items) => items.iter().for_each(|v| walk(v, out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(&request["messages"], &mut out);
    out
}

/// For each model: the picture `read_file` opens is shown in the request after the call —
/// where its dialect puts it — and in no later request; `images = false` never shows it,
/// and the model still reads that the file is an image.
#[tokio::test]
async fn an_image_read_with_read_file_is_shown_in_the_turn_in_each_dialect() {
    for (provider, images) in [("anthropic", true), ("openai", true), ("openai", false)] {
        let llm = format!("provider = \"{provider}\"\nimages = {images}");
        let mut h = Harness::with_config(Extra {
            llm: &llm,
            ..Extra::default()
        })
        .await;
        h.llm.strict();
        std::fs::write(h.dir.path().join("workspace/shot.png"), PICTURE).expect("picture");
        h.llm
            .push(Reply::tool("read_file", json!({"path": "shot.png"})));
        h.llm.push(Reply::text("A pixel."));
        h.llm.push(Reply::text("Still a pixel."));
        assert_eq!(h.client.say("c", "look").await.reply(), "A pixel.");
        assert_eq!(h.client.say("c", "again?").await.reply(), "Still a pixel.");
        assert!(h.llm.violations().is_empty(), "{:?}", h.llm.violations());

        let requests = h.llm.requests();
        let what = format!("{provider}, images = {images}");
        let expected = if images {
            vec![picture_base64()]
        } else {
            Vec::new()
        };
        assert_eq!(images_shown(&requests[1]), expected, "{what}");
        assert_eq!(
            images_shown(&requests[2]),
            Vec::<String>::new(),
            "{what}: once"
        );
        let text = requests[1]["messages"].to_string();
        assert!(
            text.contains("is an image (image/png, 70 bytes)"),
            "{what}: {text}"
        );
        let conversation = util::conversation(&requests[1]);
        let last = conversation.last().expect("messages");
        match (provider, images) {
            // The result's own block holds it.
            ("anthropic", _) => {
                assert_eq!(last["content"][0]["type"], "tool_result", "{what}: {last}")
            }
            // A tool message takes only text: the picture follows the results.
            ("openai", true) => {
                assert_eq!(last["role"], "user", "{what}: {last}");
                assert_eq!(last["content"][2]["type"], "image_url", "{what}: {last}");
            }
            _ => assert_eq!(last["role"], "tool", "{what}: {last}"),
        }
        h.daemon.shutdown().await;
    }
}

/// A server's image is saved in the workspace, named in the result and shown to the model;
/// one of a type models are not shown, and one whose data is not base64, are named and left
/// out, and the turn goes on.
#[cfg(feature = "mcp")]
#[tokio::test]
async fn an_mcp_servers_image_is_saved_and_shown_and_a_bad_one_named() {
    use crate::mcp::{TOOLS, results, with_server};

    let mut h = with_server("", TOOLS).await;
    h.llm.strict();
    h.llm.push(Reply::tools([
        ("test__picture", json!({})),
        ("test__picture", json!({"kind": "svg"})),
        ("test__picture", json!({"kind": "broken"})),
    ]));
    h.llm.push(Reply::text("One picture came."));
    assert_eq!(
        h.client.say("c", "take pictures").await.reply(),
        "One picture came."
    );
    assert!(h.llm.violations().is_empty(), "{:?}", h.llm.violations());
    let request = &h.llm.requests()[1];
    assert_eq!(images_shown(request), [picture_base64()]);
    let got = results(request);
    let saved = got[0]
        .1
        .split_once("saved in the workspace at ")
        .and_then(|(_, rest)| rest.strip_suffix(']'))
        .unwrap_or_else(|| panic!("the result names the file: {got:?}"));
    assert!(saved.starts_with("media/tools/websocket_c-"), "{saved}");
    let on_disk = std::fs::read(h.dir.path().join("workspace").join(saved)).expect("saved");
    assert_eq!(on_disk, PICTURE);
    assert!(
        got[1].1.contains("image/svg+xml") && got[1].1.contains("was left out"),
        "{got:?}"
    );
    assert!(got[2].1.contains("not base64"), "{got:?}");
    h.daemon.shutdown().await;
}
