// switchboard's control panel: reads and acts through /admin/api/ with the panel's token
// (kept in this browser's local storage, sent as a bearer header). Everything from the
// daemon is shown as text: nothing it returns is parsed as HTML.
"use strict";

const $ = (id) => document.getElementById(id);
let token = localStorage.getItem("switchboard.admin_token");
let current = "overview";

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
}

function button(label, onClick, className) {
  const node = el("button", className, label);
  node.type = "button";
  node.addEventListener("click", onClick);
  return node;
}

function table(headers, rows) {
  if (!rows.length) return el("p", "empty", "Nothing here.");
  const box = el("div", "table");
  const t = el("table");
  const head = el("tr");
  for (const h of headers) head.append(el("th", "", h));
  t.append(head);
  for (const row of rows) {
    const tr = el("tr");
    for (const cell of row) {
      const td = el("td");
      if (cell instanceof Node) td.append(cell);
      else {
        td.textContent = cell === null || cell === undefined ? "—" : String(cell);
        if (typeof cell === "number") td.className = "num";
      }
      tr.append(td);
    }
    t.append(tr);
  }
  box.append(t);
  return box;
}

function actions(...buttons) {
  const box = el("div", "actions");
  box.append(...buttons);
  return box;
}

function ago(ms) {
  const minutes = Math.round((Date.now() - ms) / 60000);
  if (minutes < 1) return "just now";
  if (minutes < 60) return minutes + " min ago";
  if (minutes < 48 * 60) return Math.round(minutes / 60) + " h ago";
  return Math.round(minutes / 1440) + " days ago";
}

async function api(path, method) {
  const response = await fetch("admin/api/" + path, {
    method: method || "GET",
    headers: { Authorization: "Bearer " + (token || "") },
  });
  if (response.status === 401) {
    askForToken(token ? "The token was refused; enter the control panel's token:" : null);
    throw new Error("not signed in");
  }
  const text = await response.text();
  let body;
  try {
    body = JSON.parse(text);
  } catch (_) {
    body = { error: text };
  }
  if (!response.ok) throw new Error(body.error || response.statusText);
  return body;
}

function askForToken(why) {
  $("auth").hidden = false;
  if (why) $("auth-label").textContent = why;
  $("state").textContent = "not signed in";
  $("token").focus();
}

function note(section, text, ok) {
  const box = el("div", "note " + (ok ? "ok" : "bad"), text);
  $(section).prepend(box);
  setTimeout(() => box.remove(), 8000);
}

/** Runs an action, then shows its section again with what came of it. */
async function act(section, path, done) {
  try {
    const body = await api(path, "POST");
    await show(section);
    note(section, done(body), true);
  } catch (err) {
    note(section, String(err.message || err), false);
  }
}

// ---- Sections --------------------------------------------------------------------------

const sections = {
  async overview(box) {
    const body = await api("overview");
    const health = body.health;
    box.append(el("h2", "", "Daemon"));
    box.append(
      table(
        ["status", "version", "up", "active sessions", "connections"],
        [[health.status, health.version, Math.round(health.uptime_secs / 60) + " min", health.active_sessions, health.http_connections]],
      ),
    );
    box.append(el("h2", "", "Channels"));
    const cards = el("div", "cards");
    for (const [name, state] of Object.entries(health.channels || {})) {
      const card = el("div", "card");
      const ok = state.state === "running";
      card.append(el("div", "name", name), el("span", "badge " + (ok ? "ok" : "bad"), state.state));
      const detail = Object.entries(state).filter(([k]) => k !== "state");
      for (const [k, v] of detail) card.append(el("div", "muted", `${k}: ${typeof v === "object" ? JSON.stringify(v) : v}`));
      cards.append(card);
    }
    box.append(cards);
    box.append(el("h2", "", "Checks"));
    box.append(
      table(
        ["check", "state", "detail"],
        Object.entries(health.checks || {}).map(([name, check]) => [name, check.state, check.error || ""]),
      ),
    );
    box.append(el("h2", "", "Agents"));
    box.append(table(["agent", "model", "/model choices"], body.agents.map((a) => [a.name, a.model, a.choices.join(", ")])));
    box.append(el("h2", "", "Tools"));
    box.append(el("p", "", body.tools.join(", ") || "none"));
    box.append(el("h2", "", "MCP servers"));
    // Up: the tools each offers; down: why (from /healthz's mcp check).
    const down = (health.checks && health.checks.mcp && health.checks.mcp.servers_down) || {};
    const servers = Object.entries(body.mcp || {}).map(([name, tools]) => [name, "up", tools.join(", ")]);
    for (const [name, why] of Object.entries(down)) servers.push([name, "down", why]);
    box.append(table(["server", "state", "tools, or why it is down"], servers));
  },

  async sessions(box) {
    const body = await api("sessions");
    box.append(searchForm());
    box.append(el("h2", "", `Sessions (${body.sessions.length}, most recent first)`));
    box.append(
      table(
        ["agent", "chat", "last written", "messages", "size", ""],
        body.sessions.map((s) => [
          s.agent,
          chatCell(s),
          ago(s.modified_ms),
          s.messages,
          Math.round(s.bytes / 1024) + " KB",
          s.key
            ? actions(
                button("Open", () => openTranscript(s)),
                button("Reset", (event) => reset(event.target, s), "danger"),
              )
            : "",
        ]),
      ),
    );
  },

  async pairing(box) {
    const body = await api("pairing");
    box.append(el("h2", "", "Waiting for approval"));
    box.append(
      table(
        ["code", "channel", "sender", "name", "asked", ""],
        body.pending.map((p) => [
          p.code,
          p.channel,
          p.sender,
          p.name,
          ago(p.created_at * 1000),
          actions(
            button("Approve", () => act("pairing", `pairing/${encodeURIComponent(p.code)}/approve`, (b) => "Approved " + b.approved), "primary"),
            button("Deny", () => act("pairing", `pairing/${encodeURIComponent(p.code)}/deny`, (b) => "Denied " + b.denied), "danger"),
          ),
        ]),
      ),
    );
    box.append(el("h2", "", "Approved"));
    box.append(
      table(
        ["channel", "sender", "name", ""],
        body.approved.map((a) => [
          a.channel,
          a.sender,
          a.name,
          actions(
            button("Revoke", (event) => {
              const target = event.target;
              if (target.dataset.confirm !== "yes") {
                target.dataset.confirm = "yes";
                target.textContent = "Revoke? They must pair again.";
                return;
              }
              act("pairing", `approved/${encodeURIComponent(a.channel + ":" + a.sender)}/revoke`, (b) => "Revoked " + b.revoked.join(", "));
            }, "danger"),
          ),
        ]),
      ),
    );
  },

  async usage(box) {
    const body = await api("usage?days=14");
    const report = body.report;
    box.append(el("h2", "", `Cost per day, ${report.from} to ${report.to}`));
    box.append(
      table(
        ["day", "tokens in", "cached", "out", "USD"],
        body.days.map((d) => [d.day, d.spent.input, d.spent.cached, d.spent.output, d.spent.usd.toFixed(4)]),
      ),
    );
    box.append(el("h2", "", "Per agent and chat"));
    box.append(
      table(
        ["day", "agent", "chat", "tokens in", "out", "USD", "of it, sub-agents and runs"],
        report.lines.map((l) => [
          l.day,
          l.agent,
          l.session,
          l.spent.input,
          l.spent.output,
          l.spent.usd.toFixed(4),
          l.delegated.usd.toFixed(4),
        ]),
      ),
    );
  },

  async jobs(box) {
    const body = await api("jobs");
    if (!body.enabled) {
      box.append(el("p", "empty", "The scheduler is off ([scheduler] enabled = false)."));
      return;
    }
    box.append(el("h2", "", "Scheduled jobs"));
    box.append(
      table(
        ["job", "schedule", "next", "last run", "chat", ""],
        body.jobs.map(({ job, reading }) => [
          jobCell(job),
          reading.schedule,
          reading.next,
          reading.last || "not yet",
          `${job.channel}:${job.chat_id}`,
          actions(
            job.enabled
              ? button("Pause", () => act("jobs", `jobs/${job.id}/pause`, () => `Paused ${job.id}`))
              : button("Resume", () => act("jobs", `jobs/${job.id}/resume`, () => `Resumed ${job.id}`)),
            button("Run now", () => act("jobs", `jobs/${job.id}/run`, () => `${job.id} runs now`), "primary"),
            button("Runs", () => showRuns(job)),
          ),
        ]),
      ),
    );
  },

  async config(box) {
    const body = await api("config");
    const head = el("div", "actions");
    head.append(
      button("Reload config", async () => {
        try {
          const result = await api("reload", "POST");
          if (result.applied) {
            const later = result.need_restart.length ? ` These need a restart: ${result.need_restart.join(", ")}.` : "";
            note("config", "Reloaded." + later, true);
          } else note("config", "Not reloaded: " + result.error, false);
        } catch (err) {
          note("config", String(err.message || err), false);
        }
      }, "primary"),
    );
    box.append(el("h2", "", body.path), head);
    box.append(el("p", "muted", "Secrets written in the file are masked; ${…} references only name where a secret is."));
    box.append(el("pre", "config", body.text));
  },
};

/** What a reply's HTML may keep: as on the chat page, no forms, frames, styles or ids. */
const SANITISE = {
  RETURN_DOM_FRAGMENT: true,
  FORBID_TAGS: ["style", "form", "input", "button", "textarea", "select", "iframe", "object", "embed", "svg", "math"],
  FORBID_ATTR: ["style", "class", "id"],
};

/** The Sessions tab's search over what was said (every agent's memory, `[memory]`). */
function searchForm() {
  const form = el("form", "search");
  form.setAttribute("role", "search");
  const field = el("input");
  field.type = "search";
  field.id = "memory-query";
  field.placeholder = "Search what was said";
  field.setAttribute("aria-label", "Search what was said");
  field.maxLength = 500;
  const go = el("button", "", "Search");
  go.type = "submit";
  const found = el("div", "found");
  found.id = "memory-found";
  form.append(field, go);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const q = field.value.trim();
    found.replaceChildren();
    if (!q) return;
    try {
      const body = await api("search?q=" + encodeURIComponent(q));
      if (!body.hits.length) return found.append(el("p", "empty", "Nothing found."));
      found.append(
        table(
          ["agent", "where", "when", "who", "what was said", ""],
          body.hits.map((h) => [
            h.agent,
            h.place + (h.archived ? " (archived)" : ""),
            h.at_ms ? new Date(h.at_ms).toLocaleString() : "",
            h.file ? "file" : h.who,
            snippet(h.snippet),
            h.file ? "" : actions(button("Open", () => openTranscript({ agent: h.agent, key: h.place }))),
          ]),
        ),
      );
    } catch (err) {
      found.append(el("div", "note bad", String(err.message || err)));
    }
  });
  const wrap = el("div");
  wrap.append(form, found);
  return wrap;
}

/** A hit's snippet, its matching words (`**so**`) marked, of text nodes only. */
function snippet(text) {
  const span = el("span", "snippet");
  text.split("**").forEach((part, i) => {
    if (part) span.append(i % 2 ? el("mark", "", part) : document.createTextNode(part));
  });
  return span;
}

/** A session's chat: the web page's title for it when it has one, its key under it. */
function chatCell(session) {
  const key = session.key || session.name;
  if (!session.title) return key;
  const cell = el("span", "", session.title);
  cell.append(el("small", "muted key", key));
  return cell;
}

/** A job's name, its id under it. */
function jobCell(job) {
  const cell = el("span", "", job.name || job.id);
  cell.append(el("small", "muted key", job.id));
  return cell;
}

async function reset(target, session) {
  if (target.dataset.confirm !== "yes") {
    target.dataset.confirm = "yes";
    target.textContent = "Reset? The chat is told.";
    return;
  }
  try {
    const body = await postReset(session);
    await show("sessions");
    note("sessions", `Started ${body.reset} anew.`, true);
  } catch (err) {
    note("sessions", String(err.message || err), false);
  }
}

async function openTranscript(session) {
  const body = await api(`transcript?agent=${encodeURIComponent(session.agent)}&key=${encodeURIComponent(session.key)}`);
  $("viewer-title").textContent = `${session.key} (${session.agent})`;
  const list = $("viewer-body");
  list.replaceChildren();
  for (const said of body.messages) {
    if (said.role === "tool" && said.tool) {
      const t = said.tool;
      list.append(el("div", "said tool", `${t.name} ${t.arguments} → ${t.result === null ? "(no result)" : t.result}`));
    } else if (said.role === "assistant" && window.marked && window.DOMPurify) {
      // Rendered as the chat shows it (sanitised: a reply's HTML never runs).
      const bubble = el("div", "said assistant markdown");
      const html = marked.parse(said.content, { gfm: true, breaks: true, async: false });
      bubble.append(DOMPurify.sanitize(html, SANITISE));
      list.append(bubble);
    } else list.append(el("div", "said " + said.role, said.content));
  }
  if (!body.messages.length) list.append(el("p", "empty", "No messages."));
  $("viewer").showModal();
}

async function showRuns(job) {
  const body = await api(`jobs/${job.id}/runs`);
  $("viewer-title").textContent = `Runs of ${job.name || job.id}`;
  const list = $("viewer-body");
  list.replaceChildren(
    table(
      ["due", "started", "took", "outcome"],
      body.runs.map((r) => [r.due, r.started, r.took || "", r.outcome + (r.attempt > 1 ? ` (try ${r.attempt})` : "")]),
    ),
  );
  $("viewer").showModal();
}

/** How many times each section was asked to show: a reading that comes back after a later
 * one was asked for is stale (an action's own reading, after the tab's), and not drawn. */
const asked = {};

async function show(name) {
  current = name;
  for (const tab of document.querySelectorAll("#tabs button")) tab.setAttribute("aria-selected", String(tab.dataset.tab === name));
  for (const section of document.querySelectorAll("main section")) section.hidden = section.id !== name;
  const box = $(name);
  const fresh = el("div");
  const mine = (asked[name] = (asked[name] || 0) + 1);
  try {
    await sections[name](fresh);
    $("auth").hidden = true;
    $("state").textContent = "updated " + new Date().toLocaleTimeString();
  } catch (err) {
    if (String(err.message) !== "not signed in") fresh.append(el("div", "note bad", String(err.message || err)));
  }
  if (mine !== asked[name]) return false;
  box.replaceChildren(...fresh.childNodes);
  return true;
}

// Reset posts JSON (agent and key), unlike the other actions.
async function postReset(session) {
  const response = await fetch("admin/api/reset", {
    method: "POST",
    headers: { Authorization: "Bearer " + (token || ""), "Content-Type": "application/json" },
    body: JSON.stringify({ agent: session.agent, key: session.key }),
  });
  const body = await response.json().catch(() => ({}));
  if (!response.ok) throw new Error(body.error || response.statusText);
  return body;
}

// ---- Controls --------------------------------------------------------------------------

for (const tab of document.querySelectorAll("#tabs button")) tab.addEventListener("click", () => show(tab.dataset.tab));
$("refresh").addEventListener("click", () => show(current));
$("viewer-close").addEventListener("click", () => $("viewer").close());
$("auth").addEventListener("submit", (event) => {
  event.preventDefault();
  token = $("token").value.trim();
  localStorage.setItem("switchboard.admin_token", token);
  show(current);
});
if (token) show(current);
else askForToken(null);
// The overview follows the daemon by itself (the other tabs change only when asked: a
// refresh must not undo a half-done action, such as a reset waiting for its confirmation).
setInterval(() => {
  if (current === "overview" && token && document.visibilityState === "visible" && $("auth").hidden) show("overview");
}, 10000);
