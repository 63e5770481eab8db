//! The test MCP server speaks MCP over stdio: it lists its tools (with their read-only hints)
//! and answers a call. (Its being an integration test of this package also makes `cargo
//! test` build the `mcp-test-server` binary the daemon's tests start.)

use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::TokioChildProcess;

#[tokio::test]
async fn the_test_server_lists_its_tools_and_answers_over_stdio() {
    let command = tokio::process::Command::new(env!("CARGO_BIN_EXE_mcp-test-server"));
    let transport = TokioChildProcess::new(command).expect("starts");
    let client = ().serve(transport).await.expect("initializes");
    let tools = client.list_all_tools().await.expect("lists");
    let mut names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "crash", "echo", "env", "flood", "freeze", "gather", "grow", "look", "meet", "picture",
            "slow"
        ]
    );
    let echo = tools.iter().find(|t| t.name == "echo").expect("echo");
    assert_eq!(
        echo.annotations.as_ref().and_then(|a| a.read_only_hint),
        Some(true)
    );
    let mut params = CallToolRequestParams::new("echo");
    params.arguments = serde_json::json!({"text": "hi"}).as_object().cloned();
    let result = client.call_tool(params).await.expect("calls");
    let text = result.content[0].as_text().expect("text").text.clone();
    assert_eq!(text, "mcp echo: hi");
    client.cancel().await.expect("ends");
}
