//! Headless Chromium driven over the DevTools protocol (`chromiumoxide`), for the web chat
//! page and the control panel: a page is opened, typed into and clicked as a person would,
//! and read back by evaluating JavaScript in it. Waits poll a condition in the page until it
//! holds or a deadline passes (the page's own events are what it waits on).
//!
//! Tests that need a browser call [`Browser::launch`], which returns `None` (and the test
//! prints why it skipped) where no Chromium is installed; `.ci/run` installs Debian's.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use chromiumoxide::cdp::browser_protocol::dom::SetFileInputFilesParams;
use chromiumoxide::cdp::browser_protocol::emulation::{
    MediaFeature, SetDeviceMetricsOverrideParams,
};
use chromiumoxide::handler::viewport::Viewport;
use chromiumoxide::page::ScreenshotParams;
use futures::StreamExt;
use serde::de::DeserializeOwned;
use switchboard::app;
use switchboard_testkit::ScriptedLlm;

use crate::util::{self, Extra};

/// How long a page may take to reach a state, on a loaded machine.
pub const PATIENCE: Duration = Duration::from_secs(30);

/// The Chromium binary, if there is one.
pub fn chromium() -> Option<PathBuf> {
    [
        "chromium",
        "chromium-browser",
        "google-chrome",
        "google-chrome-stable",
    ]
    .iter()
    .filter_map(|name| {
        std::env::var_os("PATH").and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|dir| dir.join(name))
                .find(|path| path.is_file())
        })
    })
    .next()
}

/// A headless Chromium with a profile of its own (no stored token, no history).
pub struct Browser {
    browser: chromiumoxide::Browser,
    handler: tokio::task::JoinHandle<()>,
    _profile: tempfile::TempDir,
}

impl Browser {
    /// Starts Chromium, or says why the test is skipped and returns `None`.
    pub async fn launch(test: &str) -> Option<Self> {
        Self::launch_with(test, &[]).await
    }

    /// Starts Chromium with `extra` flags (a fake microphone), or says why the test is
    /// skipped.
    pub async fn launch_with(test: &str, extra: &[String]) -> Option<Self> {
        let Some(chromium) = chromium() else {
            eprintln!("SKIPPED {test}: no Chromium on PATH (install the `chromium` package)");
            return None;
        };
        let profile = tempfile::tempdir().expect("profile");
        let config = chromiumoxide::BrowserConfig::builder()
            .chrome_executable(chromium)
            .new_headless_mode()
            .no_sandbox()
            .user_data_dir(profile.path())
            .viewport(Viewport {
                width: 1280,
                height: 860,
                ..Viewport::default()
            })
            .window_size(1280, 860)
            // chromiumoxide writes `--` before each flag itself: passed with theirs, the flags
            // would reach Chromium as `----flag`, which it ignores.
            .args(
                [
                    "--disable-gpu",
                    "--disable-quic",
                    "--disable-component-update",
                    "--disable-extensions",
                    "--disable-background-networking",
                ]
                .map(str::to_owned)
                .iter()
                .chain(extra)
                .map(|flag| flag.trim_start_matches('-').to_owned()),
            )
            .launch_timeout(PATIENCE * 2)
            .request_timeout(PATIENCE * 2)
            .build()
            .expect("browser config");
        let (browser, mut events) = chromiumoxide::Browser::launch(config)
            .await
            .expect("Chromium starts");
        let handler = tokio::spawn(async move { while events.next().await.is_some() {} });
        Some(Self {
            browser,
            handler,
            _profile: profile,
        })
    }

    /// Opens `url` in a new tab and waits for its scripts to have run.
    pub async fn open(&self, url: &str) -> Page {
        let page = self.browser.new_page(url).await.expect("page opens");
        let page = Page(page);
        page.wait_until("document.readyState === 'complete'", "the page loaded")
            .await;
        page
    }

    /// Closes the browser and waits for it.
    pub async fn close(mut self) {
        let _ = self.browser.close().await;
        let _ = tokio::time::timeout(Duration::from_secs(10), self.browser.wait()).await;
        self.handler.abort();
    }
}

/// A tab.
pub struct Page(pub chromiumoxide::Page);

impl Page {
    /// The value of a JavaScript expression.
    pub async fn eval<T: DeserializeOwned>(&self, expression: &str) -> T {
        let result = self
            .0
            .evaluate(expression)
            .await
            .unwrap_or_else(|err| panic!("evaluating `{expression}`: {err}"));
        result
            .into_value()
            .unwrap_or_else(|err| panic!("the value of `{expression}`: {err}"))
    }

    /// Waits until `condition` (a JavaScript expression) is true; fails the test naming
    /// `what` (and the page's log) after [`PATIENCE`].
    pub async fn wait_until(&self, condition: &str, what: &str) {
        let deadline = Instant::now() + PATIENCE;
        let check = format!(
            "(() => {{ try {{ return !!({condition}); }} catch (_) {{ return false; }} }})()"
        );
        loop {
            if let Ok(result) = self.0.evaluate(check.as_str()).await
                && result.into_value::<bool>().unwrap_or(false)
            {
                return;
            }
            if Instant::now() > deadline {
                let log: String = self
                    .0
                    .evaluate("document.body ? document.body.innerText : ''")
                    .await
                    .ok()
                    .and_then(|r| r.into_value().ok())
                    .unwrap_or_default();
                panic!("waited {PATIENCE:?} for {what} (`{condition}`); the page shows:\n{log}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until the chat page says it is connected.
    pub async fn wait_connected(&self) {
        self.wait_until(
            "document.getElementById('conn').dataset.state === 'connected'",
            "the page to connect",
        )
        .await;
    }

    /// Clicks the element `selector` names.
    pub async fn click(&self, selector: &str) {
        self.0
            .find_element(selector)
            .await
            .unwrap_or_else(|err| panic!("no `{selector}`: {err}"))
            .click()
            .await
            .unwrap_or_else(|err| panic!("clicking `{selector}`: {err}"));
    }

    /// Types `text` into the message box and presses Enter, as a person sends a message.
    pub async fn say(&self, text: &str) {
        let input = self
            .0
            .find_element("#input")
            .await
            .expect("the message box");
        input.click().await.expect("focus the message box");
        input.type_str(text).await.expect("type");
        input.press_key("Enter").await.expect("Enter");
    }

    /// Replaces the text of the field `selector` with `text` and presses Enter, as a person
    /// fills in a one-line form.
    pub async fn submit(&self, selector: &str, text: &str) {
        let _: bool = self
            .eval(&format!(
                "(document.querySelector('{selector}').value = '', true)"
            ))
            .await;
        let field = self.0.find_element(selector).await.expect("the field");
        field.click().await.expect("focus");
        field.type_str(text).await.expect("type");
        field.press_key("Enter").await.expect("Enter");
    }

    /// Presses a key in the focused element (e.g. `Escape`).
    pub async fn press(&self, selector: &str, key: &str) {
        self.0
            .find_element(selector)
            .await
            .expect("element")
            .press_key(key)
            .await
            .expect("key");
    }

    /// Picks `file` in the file input `selector`, as the file chooser would.
    pub async fn pick_file(&self, selector: &str, file: &Path) {
        let input = self.0.find_element(selector).await.expect("file input");
        let pick = SetFileInputFilesParams::builder()
            .file(file.display().to_string())
            .backend_node_id(input.backend_node_id)
            .build()
            .expect("params");
        self.0.execute(pick).await.expect("files set");
    }

    /// Emulates a phone's screen (`width`×`height` CSS pixels, touch, scale 3).
    pub async fn phone(&self, width: i64, height: i64) {
        let metrics = SetDeviceMetricsOverrideParams::builder()
            .width(width)
            .height(height)
            .device_scale_factor(3.0)
            .mobile(true)
            .build()
            .expect("metrics");
        self.0.execute(metrics).await.expect("phone metrics");
    }

    /// Emulates a system set to dark mode.
    pub async fn dark(&self) {
        let dark = MediaFeature::new("prefers-color-scheme", "dark");
        self.0
            .emulate_media_features(vec![dark])
            .await
            .expect("dark mode");
    }

    /// Reloads the page and waits for its scripts to have run.
    pub async fn reload(&self) {
        self.0.reload().await.expect("reload");
        self.wait_until("document.readyState === 'complete'", "the page reloaded")
            .await;
    }

    /// Saves a screenshot of the page to `$SWITCHBOARD_SCREENSHOTS/<name>.png` when that
    /// variable names a folder (how docs/screenshots/ is made); otherwise does nothing.
    pub async fn screenshot(&self, name: &str) {
        let Some(dir) = std::env::var_os("SWITCHBOARD_SCREENSHOTS") else {
            return;
        };
        let png = self
            .0
            .screenshot(ScreenshotParams::builder().build())
            .await
            .expect("screenshot");
        std::fs::write(Path::new(&dir).join(format!("{name}.png")), png).expect("saved");
    }
}

/// The chat page's text in its log, for messages.
pub const LOG_TEXT: &str = "document.getElementById('log').innerText";

pub async fn daemon(dir: &std::path::Path, llm: &ScriptedLlm, tables: &str) -> app::Running {
    util::start_configured(
        llm,
        dir,
        Extra {
            tables,
            ..Extra::default()
        },
        Vec::new(),
    )
    .await
}

/// A daemon against a scripted model, and a browser tab on its chat page, connected.
pub struct Chat {
    pub browser: Browser,
    pub page: Page,
    pub daemon: app::Running,
    pub llm: ScriptedLlm,
    pub dir: tempfile::TempDir,
}

impl Chat {
    /// Starts both (`tables`: extra config); `None` (the test skips) without Chromium.
    pub async fn start(test: &str, tables: &str) -> Option<Self> {
        Self::start_with(test, tables, &[]).await
    }

    /// As [`Chat::start`], Chromium with `flags`.
    pub async fn start_with(test: &str, tables: &str, flags: &[String]) -> Option<Self> {
        let browser = Browser::launch_with(test, flags).await?;
        let dir = tempfile::tempdir().expect("tempdir");
        let llm = ScriptedLlm::start().await.expect("llm");
        let daemon = daemon(dir.path(), &llm, tables).await;
        let page = browser.open(&format!("http://{}/", daemon.addr())).await;
        page.wait_connected().await;
        Some(Self {
            browser,
            page,
            daemon,
            llm,
            dir,
        })
    }

    pub async fn end(self) {
        self.browser.close().await;
        self.daemon.shutdown().await;
    }
}
