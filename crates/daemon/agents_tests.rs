//! The agents' sections as the config reads them.

use std::path::Path;

use crate::config::parse_minimal_for_test as parse;
use switchboard_agent::section::bindings;

#[test]
fn an_agent_takes_what_it_does_not_set_from_agent_but_not_its_workspace() {
    let config = parse(
        "[agent]\nworkspace = \"/srv/main\"\nmax_iterations = 7\nsystem_prompt = \"hi\"\n\
         [agent.approvals]\ntools = [\"exec\"]\n\
         [agents.home]\nmax_iterations = 3\n\
         [agents.work]\nworkspace = \"/srv/work\"\n[agents.work.approvals]\ntools = []\n",
    )
    .expect("parses");
    let home = config.agents["home"].get_ref();
    assert_eq!(*home.max_iterations.get_ref(), 3);
    assert_eq!(home.system_prompt.as_deref(), Some("hi"));
    assert_eq!(home.approvals.tools, ["exec"]);
    let work = config.agents["work"].get_ref();
    assert_eq!(*work.max_iterations.get_ref(), 7);
    assert!(
        work.approvals.tools.is_empty(),
        "a sub-table is taken whole"
    );
    let specs = config.agent_specs();
    let names: Vec<_> = specs.iter().map(|s| s.name.to_string()).collect();
    assert_eq!(names, ["default", "home", "work"]);
    assert!(specs[1].workspace.ends_with(".switchboard/agents/home"));
    assert_eq!(specs[2].workspace, Path::new("/srv/work"));
    assert!(specs[2].state_dir.ends_with("agents/work"));
}

#[test]
fn a_binding_to_an_unknown_agent_is_refused_at_its_line_naming_the_agents() {
    let err = parse(
        "[agents.home]\nworkspace = \"/srv/home\"\n\n[[bindings]]\nagent = \"hoem\"\n\
         channel = \"telegram\"\nchat = 123\n",
    )
    .expect_err("unknown agent");
    assert_eq!(err.key, "bindings[0].agent");
    assert_eq!(err.line, Some(7), "{err}");
    assert!(err.message.contains("default, home"), "{err}");
}

#[test]
fn two_agents_sharing_a_workspace_or_one_inside_another_are_refused() {
    let err = parse(
        "[agent]\nworkspace = \"/srv/agent\"\n[agents.home]\nworkspace = \"/srv/agent/../agent\"\n",
    )
    .expect_err("shared");
    assert_eq!(err.key, "agents.home.workspace");
    assert_eq!(err.line, Some(5), "{err}");
    assert!(
        err.message
            .contains("is the workspace of the agent `default`"),
        "{err}"
    );
    let err = parse("[agents.a]\nworkspace = \"/srv/a\"\n[agents.b]\nworkspace = \"/srv/a/b\"\n")
        .expect_err("nested");
    assert_eq!(err.key, "agents.b.workspace");
    assert!(err.message.contains("overlaps"), "{err}");
}

#[test]
fn the_daemons_keys_bad_names_and_empty_bindings_are_refused() {
    let err = parse("[agents.home]\nstate_dir = \"/x\"\n").expect_err("daemon key");
    assert_eq!(
        (err.key.as_str(), err.line),
        ("agents.home.state_dir", Some(4))
    );
    let err = parse("[agents.Home]\n").expect_err("name");
    assert_eq!(err.key, "agents.Home");
    let err = parse("[agents.default]\n").expect_err("reserved");
    assert!(err.message.contains("[agent]"), "{err}");
    let err = parse("[[bindings]]\nagent = \"default\"\n").expect_err("no condition");
    assert_eq!(err.key, "bindings[0]");
    let err = parse("[[bindings]]\nagent = \"default\"\nchat = \"1\"\n").expect_err("no channel");
    assert!(err.message.contains("channel"), "{err}");
    let err = parse("[agents.home]\nhistory_limt = 5\n").expect_err("typo");
    assert_eq!(err.key, "agents.home.history_limt");
}

#[test]
fn bindings_read_ids_written_as_numbers_or_strings() {
    let config = parse(
        "[agents.home]\n[[bindings]]\nagent = \"home\"\nchannel = \"telegram\"\nchat = -100123\n\
         sender = \"42\"\n",
    )
    .expect("parses");
    let bindings = bindings(&config.bindings);
    assert_eq!(
        bindings[0].chat.as_ref().map(|c| c.as_str()),
        Some("-100123")
    );
    assert_eq!(bindings[0].sender.as_ref().map(|s| s.as_str()), Some("42"));
}
