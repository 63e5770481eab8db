//! The bus authenticated and encrypted: the example `nats-server.conf` that
//! docs/deployment.md ships, run as it is (its listener, storage and certificate paths
//! replaced), with TLS and client certificates made by `openssl`, each member logging in as
//! its role. A chat is answered; a client without a user gets nothing; each role is refused
//! what it must not do (forge a person's message, an answer, a session; read a transcript
//! it has no need of; delete a stream).

use std::path::{Path, PathBuf};
use std::time::Duration;

use async_nats::jetstream;
use switchboard_testkit::{NatsServer, Reply, ScriptedLlm};

use crate::cluster::{CLUSTER_PATIENCE, echoing};
use crate::util::{self, Extra, WsClient};

/// The example server config, as shipped.
const EXAMPLE: &str = include_str!("../examples/nats-server.conf");

const PASSWORDS: [(&str, &str, &str); 3] = [
    ("gateway", "SWITCHBOARD_GATEWAY_PASSWORD", "gw-secret-1"),
    ("worker", "SWITCHBOARD_WORKER_PASSWORD", "wk-secret-2"),
    ("operator", "SWITCHBOARD_OPERATOR_PASSWORD", "op-secret-3"),
];

/// A CA, the server's certificate (for 127.0.0.1) and a member's, made with `openssl`.
struct Certificates {
    ca: PathBuf,
    server: (PathBuf, PathBuf),
    member: (PathBuf, PathBuf),
}

fn openssl(dir: &Path, args: &[&str]) {
    let status = std::process::Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .expect("openssl runs (.ci/run installs it)");
    assert!(status.success(), "openssl {args:?}");
}

fn certificates(dir: &Path) -> Certificates {
    let key = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    let mut ca = vec![
        "req",
        "-x509",
        "-days",
        "2",
        "-subj",
        "/CN=switchboard test CA",
    ];
    ca.extend(key);
    ca.extend(["-keyout", "ca-key.pem", "-out", "ca.pem"]);
    openssl(dir, &ca);
    std::fs::write(dir.join("san.ext"), "subjectAltName=IP:127.0.0.1\n").expect("ext");
    for name in ["server", "member"] {
        let subject = format!("/CN={name}");
        let (key_file, csr) = (format!("{name}-key.pem"), format!("{name}.csr"));
        let mut request = vec!["req", "-subj", subject.as_str()];
        request.extend(key);
        request.extend(["-keyout", key_file.as_str(), "-out", csr.as_str()]);
        openssl(dir, &request);
        let cert = format!("{name}.pem");
        openssl(
            dir,
            &[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca-key.pem",
                "-CAcreateserial",
                "-days",
                "2",
                "-extfile",
                "san.ext",
                "-out",
                &cert,
            ],
        );
    }
    let pair = |name: &str| {
        (
            dir.join(format!("{name}.pem")),
            dir.join(format!("{name}-key.pem")),
        )
    };
    Certificates {
        ca: dir.join("ca.pem"),
        server: pair("server"),
        member: pair("member"),
    }
}

/// The example config on 127.0.0.1:`port`, keeping its streams under `dir`.
fn server_config(port: u16, dir: &Path, certs: &Certificates) -> String {
    EXAMPLE
        .replace("0.0.0.0:4222", &format!("127.0.0.1:{port}"))
        .replace(
            "/var/lib/nats",
            &dir.join("jetstream").display().to_string(),
        )
        .replace(
            "/etc/nats/server.pem",
            &certs.server.0.display().to_string(),
        )
        .replace(
            "/etc/nats/server-key.pem",
            &certs.server.1.display().to_string(),
        )
        .replace("/etc/nats/ca.pem", &certs.ca.display().to_string())
}

fn secure_nats(certs: &Certificates) -> NatsServer {
    let env: Vec<(&str, &str)> = PASSWORDS.iter().map(|(_, var, pw)| (*var, *pw)).collect();
    NatsServer::start_configured(|port, dir| server_config(port, dir, certs), &env, true)
}

/// The config of a member of role `role` logging in as `user`, in its own directory.
fn member(
    root: &Path,
    llm: &ScriptedLlm,
    nats: &NatsServer,
    certs: &Certificates,
    role: &str,
    user: &str,
) -> PathBuf {
    let dir = root.join(user);
    std::fs::create_dir_all(dir.join("workspace")).expect("workspace");
    let password = PASSWORDS
        .iter()
        .find(|(name, ..)| *name == user)
        .expect("a user")
        .2;
    let tables = format!(
        "[cluster]\nnats_url = \"{url}\"\nrole = \"{role}\"\nmember = \"{user}\"\npartitions = 8\nlease_secs = 2.0\nuser = \"{user}\"\npassword = \"{password}\"\n\n[cluster.tls]\nca_file = \"{ca}\"\ncert_file = \"{cert}\"\nkey_file = \"{key}\"\n",
        url = nats.url(),
        ca = certs.ca.display(),
        cert = certs.member.0.display(),
        key = certs.member.1.display(),
    );
    let text = util::config_text_with(
        &llm.base_url(),
        &dir,
        Extra {
            tables: &tables,
            ..Extra::default()
        },
    );
    let config = dir.join("config.toml");
    std::fs::write(&config, text).expect("config");
    config
}

/// A bare client of the bus as `user` (`None`: no user at all), over TLS.
async fn client(
    nats: &NatsServer,
    certs: &Certificates,
    user: Option<&str>,
) -> Result<async_nats::Client, async_nats::ConnectError> {
    let mut options = async_nats::ConnectOptions::new()
        .require_tls(true)
        .add_root_certificates(certs.ca.clone())
        .add_client_certificate(certs.member.0.clone(), certs.member.1.clone())
        .connection_timeout(Duration::from_secs(5));
    if let Some(user) = user {
        let password = PASSWORDS
            .iter()
            .find(|(name, ..)| *name == user)
            .expect("a user")
            .2;
        options = options.user_and_password(user.into(), password.into());
    }
    options.connect(nats.url()).await
}

/// Whether publishing `subject` to JetStream as this client is stored.
async fn stored(client: &async_nats::Client, subject: &str) -> bool {
    let mut js = jetstream::new(client.clone());
    js.set_timeout(Duration::from_secs(2));
    match js.publish(subject.to_owned(), "forged".into()).await {
        Ok(ack) => ack.await.is_ok(),
        Err(_) => false,
    }
}

/// Whether `client` may read the last message on `subject` of `stream`.
async fn reads(client: &async_nats::Client, stream: &str, subject: &str) -> bool {
    match jetstream::new(client.clone()).get_stream(stream).await {
        Ok(stream) => stream
            .get_last_raw_message_by_subject(subject)
            .await
            .is_ok(),
        Err(_) => false,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_example_server_config_runs_a_cluster_and_refuses_what_each_role_must_not_do() {
    let root = tempfile::tempdir().expect("tempdir");
    let certs = certificates(root.path());
    let nats = secure_nats(&certs);
    let llm = ScriptedLlm::start().await.expect("llm");
    echoing(&llm);
    let (_gateway, addr) = util::spawn_daemon(&member(
        root.path(),
        &llm,
        &nats,
        &certs,
        "gateway",
        "gateway",
    ))
    .await;
    let (_worker, _) = util::spawn_daemon(&member(
        root.path(),
        &llm,
        &nats,
        &certs,
        "worker",
        "worker",
    ))
    .await;

    // A chat is answered through the bus, each member logged in as its role, over TLS.
    let mut page = WsClient::connect(addr).await;
    page.send("c", "hello").await;
    let answer = page.turn("c").await;
    assert!(
        answer
            .frames
            .iter()
            .any(|frame| frame["type"] == "message" && frame["content"] == "re: hello"),
        "{:?}",
        answer.frames
    );
    // The gateway reads the conversation back for a page shown again.
    page.send_json(serde_json::json!({"type": "history", "chat_id": "c"}))
        .await;
    let history = loop {
        let frame = page.next_frame().await;
        if frame["type"] == "history" {
            break frame;
        }
    };
    assert_eq!(history["messages"][0]["content"], "hello", "{history}");
    // A file the worker sends reaches the page on the gateway (another host: another state
    // directory) through the cluster's object store.
    let chart = b"\x89PNG\r\n\x1a\n the worker's chart".to_vec();
    std::fs::write(root.path().join("worker/workspace/chart.png"), &chart).expect("chart");
    llm.push(Reply::tool(
        "send_file",
        serde_json::json!({"path": "chart.png"}),
    ));
    page.send("c", "send me the chart").await;
    let sent = page.turn("c").await;
    let file = sent.of_type("file");
    assert_eq!(file.len(), 1, "{:?}", sent.frames);
    let served = crate::media::fetch(addr, file[0]["url"].as_str().expect("a link")).await;
    assert_eq!(served.status, 200);
    assert_eq!(served.body, chart, "the same bytes, across hosts");
    // The operator's commands work from another host's config, as the operator.
    let operator = member(root.path(), &llm, &nats, &certs, "gateway", "operator");
    let jobs = util::cli(&["cron", "list"], &operator).await;
    assert!(jobs.contains("no scheduled jobs"), "{jobs}");

    // A client without a user gets nothing.
    let stranger = client(&nats, &certs, None).await;
    assert!(stranger.is_err(), "a client with no user is refused");

    // Each role is refused what it must not do.
    let gateway = client(&nats, &certs, Some("gateway"))
        .await
        .expect("gateway");
    let worker = client(&nats, &certs, Some("worker")).await.expect("worker");
    let operator = client(&nats, &certs, Some("operator"))
        .await
        .expect("operator");
    assert!(
        stored(&gateway, "switchboard.in.0").await,
        "a gateway puts what people wrote"
    );
    assert!(
        !stored(&gateway, "switchboard.out.websocket").await,
        "a gateway forges no answer"
    );
    assert!(
        !stored(&gateway, "switchboard.sessions.default.websocket_c").await,
        "nor a session"
    );
    assert!(
        !stored(&worker, "switchboard.in.0").await,
        "a worker forges no person's message"
    );
    assert!(!stored(&operator, "switchboard.in.0").await);
    assert!(
        !stored(&gateway, "$O.switchboard_media.C.forged").await,
        "a gateway puts no file for a chat"
    );
    // What compaction keeps (with `[memory]` on) is a worker's to write, and nobody's but
    // the members' to read.
    let history = "switchboard.history.default.websocket_c.1";
    assert!(
        !stored(&gateway, history).await,
        "a gateway writes no history"
    );
    assert!(stored(&worker, history).await, "a worker keeps history");
    for (stream, subject) in [
        (
            "switchboard_sessions",
            "switchboard.sessions.default.websocket_c",
        ),
        ("switchboard_history", history),
    ] {
        assert!(
            !reads(&operator, stream, subject).await,
            "the operator reads no transcript ({stream})"
        );
        assert!(
            reads(&worker, stream, subject).await,
            "a worker reads {stream}"
        );
    }
    let deleted = jetstream::new(gateway.clone())
        .delete_stream("switchboard_sessions")
        .await;
    assert!(deleted.is_err(), "nobody deletes a stream");
    // The chat still works after all that.
    page.send("c", "still there?").await;
    let again = page.turn("c").await;
    assert!(
        again
            .frames
            .iter()
            .any(|frame| frame["content"] == "re: still there?"),
        "{:?}",
        again.frames
    );
}

#[test]
fn a_member_without_credentials_for_a_server_on_another_host_is_refused_at_start() {
    let dir = tempfile::tempdir().expect("tempdir");
    let text = util::config_text_with(
        "http://127.0.0.1:9/v1",
        dir.path(),
        Extra {
            tables: "[cluster]\nnats_url = \"nats://10.0.0.5:4222\"\n",
            ..Extra::default()
        },
    );
    let err = switchboard::config::Config::parse(&text, &dir.path().join("config.toml"))
        .expect_err("refused")
        .to_string();
    assert!(err.contains("config.toml:"), "{err}");
    assert!(err.contains("cluster.nats_url"), "{err}");
    assert!(err.contains("could read and forge every chat"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_password_in_the_url_never_shows_in_what_the_daemon_says() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir_all(dir.path().join("workspace")).expect("workspace");
    // Nothing listens there: the daemon says it cannot reach the server, and how it named it.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("port");
    let port = closed.local_addr().expect("addr").port();
    drop(closed);
    let tables = format!(
        "[cluster]\nnats_url = \"nats://worker:hunter2-secret@127.0.0.1:{port}\"\nrole = \"worker\"\n"
    );
    let text = util::config_text_with(
        "http://127.0.0.1:9/v1",
        dir.path(),
        Extra {
            tables: &tables,
            ..Extra::default()
        },
    );
    let config = dir.path().join("config.toml");
    std::fs::write(&config, text).expect("config");
    let output = tokio::time::timeout(
        CLUSTER_PATIENCE,
        tokio::process::Command::new(util::BINARY)
            .args(["run", "--config"])
            .arg(&config)
            .output(),
    )
    .await
    .expect("it gives up")
    .expect("runs");
    assert!(!output.status.success());
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(said.contains(&format!("127.0.0.1:{port}")), "{said}");
    assert!(!said.contains("hunter2"), "{said}");
}

#[test]
fn the_deployment_guide_shows_the_example_server_config_as_it_is() {
    let guide = include_str!("../docs/deployment.md");
    assert!(
        guide.contains(EXAMPLE),
        "docs/deployment.md must include examples/nats-server.conf verbatim"
    );
}
