// switchboard's web chat. One WebSocket speaking docs/protocol.md; the list of conversations
// is the server's (the same on every device with the token); Markdown is rendered by marked
// and sanitised by DOMPurify (both vendored, see assets/vendor/README.md) — no HTML from the
// model or a person ever runs, and the page's CSP allows no inline script besides. What is
// typed is kept in an outbox (local storage) until the server says it was handled, and sent
// again, with the same id, after a reconnect: nothing typed is lost.
"use strict";

const $ = (id) => document.getElementById(id);
const log = $("log"), input = $("input"), conn = $("conn"), hint = $("hint");
const params = new URLSearchParams(location.search);
const store = {
  get: (key) => localStorage.getItem("switchboard." + key),
  set: (key, value) => localStorage.setItem("switchboard." + key, value),
};

function randomId() {
  const bytes = new Uint8Array(12);
  crypto.getRandomValues(bytes);
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

let token = params.get("token") || store.get("token");
if (params.get("token")) {
  // Kept, and taken out of the address bar (and so out of bookmarks and shared links).
  store.set("token", params.get("token"));
  params.delete("token");
  history.replaceState(null, "", location.pathname + (params.size ? "?" + params : ""));
}
let chatId = params.get("chat") || store.get("chat_id") || "web-" + randomId();
store.set("chat_id", chatId);

let socket = null;
let ready = false;
/** Set at `ready`: the outbox is sent when the list of conversations arrives. */
let flushing = false;
let retryMs = 500;
let limits = { max_frame_bytes: 65536, max_attachment_bytes: 0 };
let conversations = [];
/** Frames of the open chat before its history arrives: kept until it does, then the
 * running turn's later ones are drawn (the rest are part of that history). */
let awaitingHistory = true;
let beforeHistory = [];
/** The `seq` the open chat's history covers: a frame up to it is already shown. */
let historySeq = 0;
/** The open chat's turns on screen, by the id of the message they answer ("" for none). */
const turns = new Map();
/** A turn the history said runs, until its first frame names it. */
let placeholder = null;
/** The `seq` of the last frame seen of each chat: named when subscribing again (after a
 * reconnect, to this server or another of a cluster), so nothing comes twice. */
const seen = new Map();
/** Messages typed and not yet handled by the server: {id, chat_id, content, attachments}. */
let outbox = loadOutbox();
/** Files attached to the message being written. */
let attachments = [];
/** The person's message bubbles on screen by their message id, for what is heard of a
 * voice note to go under its own (at most a few hundred are kept). */
const bubbles = new Map();
const MAX_OUTBOX = 50;
const MAX_ATTACHMENTS = 8;

// ---- Markdown, safely -------------------------------------------------------------------

const PURIFY = {
  RETURN_DOM_FRAGMENT: true,
  // No forms or embedded documents; no styles, classes or ids (a reply must not dress
  // itself as one of this page's own controls, e.g. an approval).
  FORBID_TAGS: ["style", "form", "input", "button", "textarea", "select", "iframe", "object", "embed", "svg", "math"],
  FORBID_ATTR: ["style", "class", "id"],
};
if (window.DOMPurify) {
  DOMPurify.addHook("afterSanitizeAttributes", (node) => {
    if (node.tagName === "A") {
      node.setAttribute("target", "_blank");
      node.setAttribute("rel", "noopener noreferrer");
    }
  });
}

/** The reply's Markdown as sanitised DOM (plain text if the renderer did not load). */
function markdown(text) {
  if (!window.marked || !window.DOMPurify) {
    const plain = document.createElement("p");
    plain.textContent = text;
    return plain;
  }
  const html = marked.parse(text, { gfm: true, breaks: true, async: false });
  const fragment = DOMPurify.sanitize(html, PURIFY);
  for (const pre of fragment.querySelectorAll("pre")) {
    const box = element("div", "code");
    pre.replaceWith(box);
    const copy = element("button", "copy", "Copy");
    copy.type = "button";
    copy.setAttribute("aria-label", "Copy the code");
    copy.addEventListener("click", () => copyText(pre.textContent, copy));
    box.append(pre, copy);
  }
  return fragment;
}

async function copyText(text, button) {
  try {
    await navigator.clipboard.writeText(text);
  } catch (_) {
    // No clipboard API outside secure contexts: the old way.
    const area = element("textarea");
    area.value = text;
    document.body.append(area);
    area.select();
    document.execCommand("copy");
    area.remove();
  }
  button.textContent = "Copied";
  setTimeout(() => (button.textContent = "Copy"), 1500);
}

// ---- Small helpers ----------------------------------------------------------------------

function element(tag, className, text) {
  const el = document.createElement(tag);
  if (className) el.className = className;
  if (text !== undefined) el.textContent = text;
  return el;
}

/** Runs `change`, then keeps the log scrolled to the bottom if it was there. */
function stick(change) {
  const atBottom = log.scrollHeight - log.scrollTop - log.clientHeight < 80;
  const result = change();
  if (atBottom) log.scrollTop = log.scrollHeight;
  return result;
}

function add(el) {
  return stick(() => log.appendChild(el));
}

function size(bytes) {
  if (bytes < 1024) return bytes + " bytes";
  if (bytes < 1024 * 1024) return Math.round(bytes / 1024) + " KB";
  return (bytes / 1024 / 1024).toFixed(1) + " MB";
}

/** A line under the composer: a problem (red), or with `info` something to know (muted). */
function showHint(text, info) {
  hint.textContent = text;
  hint.classList.toggle("info", !!info);
}

function setConn(state, text) {
  conn.dataset.state = state;
  conn.textContent = text;
}

function send(frame) {
  if (socket && ready && socket.readyState === WebSocket.OPEN) {
    socket.send(JSON.stringify(frame));
    return true;
  }
  return false;
}

// ---- A turn on screen: its tool calls, its question, its answer --------------------------

class Turn {
  constructor(key, running) {
    this.key = key;
    this.text = "";
    this.running = running;
    this.calls = new Map();
    this.el = element("div", "turn");
    this.tools = element("div", "tools");
    this.answer = element("div", "msg agent");
    this.files = element("div", "files-out");
    this.el.append(this.tools, this.answer, this.files);
    this.status = null;
    this.question = null;
    this.typing = null;
    this.drawing = 0;
    if (running) this.showTyping();
    add(this.el);
  }

  /** A scheduled run's turn: no message of the person's started it, and it says so. */
  markScheduled() {
    if (this.el.querySelector(".origin")) return;
    const tag = element("div", "origin", "Scheduled");
    tag.title = "A scheduled job's run (/jobs lists them)";
    this.el.prepend(tag);
  }

  showTyping() {
    if (!this.typing) {
      this.typing = element("div", "typing", "Working");
      this.typing.setAttribute("aria-label", "The agent is working");
      this.el.append(this.typing);
    }
  }

  hideTyping() {
    if (this.typing) this.typing.remove();
    this.typing = null;
  }

  /** The turn went on: a transient status goes, an open question was answered. */
  moveOn() {
    if (this.status) this.status.remove();
    this.status = null;
    if (this.question) {
      input.placeholder = "Message";
      this.question.classList.add("answered");
      for (const button of this.question.querySelectorAll("button")) button.disabled = true;
      this.question = null;
    }
  }

  /** Draws the answer: at once when final, else at the next frame (many deltas, one draw). */
  draw(final) {
    if (final) {
      cancelAnimationFrame(this.drawing);
      this.drawing = 0;
      stick(() => this.answer.replaceChildren(markdown(this.text)));
      return;
    }
    if (!this.drawing) {
      this.drawing = requestAnimationFrame(() => {
        this.drawing = 0;
        stick(() => this.answer.replaceChildren(markdown(this.text)));
      });
    }
  }

  tool(id, name, state, detail, elapsedMs) {
    let call = this.calls.get(id);
    if (!call) {
      call = toolLine(name);
      this.calls.set(id, call);
      stick(() => this.tools.append(call.el));
    }
    call.el.dataset.state = state;
    call.state.textContent = state;
    if (state === "started") {
      call.args.textContent = detail;
      call.argsFull.textContent = pretty(detail);
      call.time.textContent = "running";
    } else {
      call.result.textContent = detail;
      call.resultBox.hidden = false;
      const took = elapsedMs === undefined ? "" : seconds(elapsedMs);
      call.time.textContent = state === "failed" ? "failed" + (took ? " · " + took : "") : took;
    }
    return call;
  }

  setStatus(text) {
    if (!this.status) {
      this.status = element("div", "status");
      this.el.insertBefore(this.status, this.answer);
    }
    this.status.textContent = text;
  }

  ask(text, kind) {
    this.moveOn();
    const card = element("div", "ask");
    card.setAttribute("role", "group");
    const label = kind === "approval" ? "Approval needed" : "The agent asks";
    card.setAttribute("aria-label", label);
    const question = element("div", "q");
    question.append(markdown(text));
    card.append(element("strong", "kind", label), question);
    const buttons = element("div", "buttons");
    if (kind === "approval") {
      const approve = element("button", "primary", "Approve");
      const deny = element("button", "danger", "Deny");
      approve.type = deny.type = "button";
      approve.addEventListener("click", () => answer("/approve", card));
      deny.addEventListener("click", () => answer("/deny", card));
      buttons.append(approve, deny);
      // What typing does meanwhile, said where one types.
      buttons.append(element("span", "muted", "A message sent now denies this and is answered next."));
      input.placeholder = "A message now denies the request, then is answered";
    } else {
      buttons.append(element("span", "", "Type your answer below."));
      input.focus();
    }
    card.append(buttons);
    this.question = card;
    stick(() => this.el.insertBefore(card, this.answer));
  }

  fail(message) {
    stick(() => this.el.insertBefore(element("div", "error", message), this.answer));
  }

  /** A file of the answer (a picture, a voice message, a document), under its text. */
  file(frame) {
    stick(() => this.files.append(fileCard(frame)));
  }

  end() {
    this.running = false;
    this.hideTyping();
    this.moveOn();
    this.draw(true);
  }
}

function toolLine(name) {
  const el = element("details", "tool");
  const summary = element("summary");
  const dot = element("span", "dot");
  const state = element("span", "sr-only");
  state.hidden = true;
  const args = element("span", "args");
  const time = element("span", "time");
  summary.append(dot, element("span", "name", name), args, time, state);
  const argsFull = element("pre");
  const result = element("pre");
  const resultBox = element("div");
  resultBox.append(element("div", "", "Result"), result);
  resultBox.hidden = true;
  const argsBox = element("div");
  argsBox.append(element("div", "", "Arguments"), argsFull);
  el.append(summary, argsBox, resultBox);
  return { el, args, argsFull, result, resultBox, time, state };
}

function pretty(text) {
  try {
    return JSON.stringify(JSON.parse(text), null, 2);
  } catch (_) {
    return text;
  }
}

function seconds(ms) {
  return ms < 1000 ? ms + " ms" : (ms / 1000).toFixed(1) + " s";
}

/** Approve / Deny: sent at once (never kept for later: it answers this question only). */
function answer(command, card) {
  if (!send({ type: "message", chat_id: chatId, id: "m-" + randomId(), content: command })) {
    showHint("Not connected: the answer was not sent. Try again once connected.");
    return;
  }
  for (const button of card.querySelectorAll("button")) button.disabled = true;
  card.classList.add("answered");
  card.append(element("div", "status", command === "/approve" ? "Approved." : "Denied."));
}

// ---- Frames -----------------------------------------------------------------------------

function onFrame(frame) {
  switch (frame.type) {
    case "ready":
      ready = true;
      limits = frame;
      setConn("connected", "connected");
      // The outbox goes once the list is here (it names new chats, not known ones).
      flushing = true;
      send({ type: "conversations" });
      openChat(chatId, true);
      return;
    case "conversations":
      conversations = frame.conversations;
      renderList();
      if (flushing) {
        flushing = false;
        for (const entry of outbox) deliver(entry);
      }
      return;
    case "handled":
      return settle(frame);
    case "search":
      return showResults(frame);
    case "history":
      if (frame.chat_id === chatId) showHistory(frame);
      return;
    case "pong":
      return;
    case "error":
      if (!frame.chat_id) return showHint(frame.message);
      break;
  }
  if (frame.chat_id && typeof frame.seq === "number" && frame.seq > (seen.get(frame.chat_id) || 0)) {
    seen.set(frame.chat_id, frame.seq);
  }
  if (frame.chat_id !== chatId) return;
  if (awaitingHistory) {
    if (beforeHistory.length < 1000) beforeHistory.push(frame);
    return;
  }
  if (typeof frame.seq === "number" && frame.seq <= historySeq) return;
  const key = frame.reply_to || "";
  if (frame.type === "post") return add(replyBubble(frame.content));
  if (frame.type === "notice") return add(element("div", "notice", frame.text));
  if (frame.type === "transcript") return showHeard(key, frame.text);
  // A file outside any turn (sent from another chat's turn, or scheduled work).
  if (frame.type === "file" && !turns.has(key) && !placeholder) return add(fileCard(frame));
  let turn = turns.get(key);
  if (!turn) {
    turn = placeholder || new Turn(key, frame.type === "started");
    placeholder = null;
    turn.key = key;
    turns.set(key, turn);
  }
  switch (frame.type) {
    case "started":
      turn.running = true;
      turn.showTyping();
      if (frame.scheduled) turn.markScheduled();
      break;
    case "delta":
      turn.moveOn();
      turn.text += frame.text;
      turn.draw(false);
      break;
    case "reset":
      turn.text = "";
      turn.draw(false);
      break;
    case "message":
      turn.moveOn();
      turn.text = frame.content;
      turn.draw(true);
      break;
    case "tool":
      turn.moveOn();
      turn.tool(frame.id, frame.name, frame.status, frame.detail, frame.elapsed_ms);
      break;
    case "status":
      if (frame.waiting_for) turn.ask(frame.text, frame.waiting_for);
      else turn.setStatus(frame.text);
      break;
    case "error":
      turn.moveOn();
      turn.fail(frame.message);
      break;
    case "file":
      turn.moveOn();
      turn.file(frame);
      break;
    case "done":
      turn.end(frame.end);
      turns.delete(key);
      break;
  }
  updateStop();
}

function replyBubble(text) {
  const bubble = element("div", "msg agent");
  bubble.append(markdown(text));
  return bubble;
}

/** A file the agent sent: a picture shown, a voice message played, a document to download. */
function fileCard(frame) {
  // The link is a path on this server: made relative, so a page behind a proxy's prefix
  // fetches it where it is.
  const url = String(frame.url || "").replace(/^\//, "");
  let card;
  if (frame.kind === "image") {
    card = element("figure", "file image");
    const link = element("a");
    link.href = url;
    link.target = "_blank";
    link.rel = "noopener noreferrer";
    const img = element("img");
    img.src = url;
    img.alt = frame.name;
    link.append(img);
    card.append(link);
    if (frame.caption) {
      const caption = element("figcaption");
      caption.append(markdown(frame.caption));
      card.append(caption);
    }
    return card;
  }
  if (frame.kind === "voice") {
    card = element("div", "file voice");
    const audio = element("audio");
    audio.controls = true;
    audio.preload = "metadata";
    audio.src = url;
    audio.setAttribute("aria-label", "The answer, spoken");
    card.append(audio);
  } else {
    card = element("a", "file doc");
    card.href = url;
    card.download = frame.name;
    card.append(element("span", "name", frame.name), element("span", "size", size(frame.bytes || 0)));
  }
  if (frame.caption) {
    const box = element("div", "file-box");
    const caption = element("div", "caption");
    caption.append(markdown(frame.caption));
    box.append(card, caption);
    return box;
  }
  return card;
}

/** What a voice note said, as heard, under the person's message (`key`: its id). */
function showHeard(key, text) {
  const bubble = bubbles.get(key);
  if (bubble) {
    let heard = bubble.querySelector(".heard");
    if (!heard) heard = bubble.appendChild(element("span", "heard"));
    heard.textContent = "“" + text + "”";
    return;
  }
  add(element("div", "heard alone", "🎙️ “" + text + "”"));
}

/** The open chat as the server has it: what was said, tool calls, the running turn. */
function showHistory(frame) {
  awaitingHistory = false;
  turns.clear();
  placeholder = null;
  log.replaceChildren();
  let turn = null;
  for (const said of frame.messages) {
    if (said.role === "user") {
      turn = null;
      log.append(userBubble(said.content.includes("[voice note ") ? heardOf(said.content) : { content: said.content }));
    } else if (said.role === "tool" && said.tool) {
      turn = turn || new Turn(null, false);
      const t = said.tool;
      turn.tool(t.id, t.name, "started", t.arguments);
      if (t.result !== null && t.result !== undefined) turn.tool(t.id, t.name, t.ok ? "finished" : "failed", t.result);
    } else {
      turn = turn || new Turn(null, false);
      turn.text = said.content;
      turn.draw(true);
      turn = null;
    }
  }
  if (frame.running) {
    placeholder = new Turn(null, true);
    // What it has said so far, then the frames after what the history covers: a page
    // reloaded mid-answer shows all of it, not only the tail.
    if (frame.text) {
      placeholder.moveOn();
      placeholder.text = frame.text;
      placeholder.draw(false);
    }
    if (frame.waiting) placeholder.ask(frame.waiting.text, frame.waiting.waiting_for);
  }
  historySeq = frame.running && typeof frame.seq === "number" ? frame.seq : 0;
  const later = frame.running ? beforeHistory : [];
  beforeHistory = [];
  // Typed here and not yet handled: shown as pending, unless the history holds it already.
  const said = new Set(frame.messages.filter((m) => m.role === "user").slice(-20).map((m) => m.content));
  for (const entry of outbox) {
    if (entry.chat_id === chatId && !said.has(entry.content)) entry.el = log.appendChild(userBubble(entry));
  }
  log.scrollTop = log.scrollHeight;
  updateStop();
  for (const next of later) onFrame(next);
}

function updateStop() {
  const running = placeholder !== null || [...turns.values()].some((t) => t.running);
  $("stop").hidden = !running;
}

// ---- Sending: the outbox ----------------------------------------------------------------

function loadOutbox() {
  try {
    const kept = JSON.parse(store.get("outbox") || "[]");
    return Array.isArray(kept) ? kept : [];
  } catch (_) {
    return [];
  }
}

function saveOutbox() {
  store.set("outbox", JSON.stringify(outbox.map(({ el, ...entry }) => entry)));
}

function frameOf(entry) {
  const frame = { type: "message", chat_id: entry.chat_id, id: entry.id, content: entry.content };
  if (entry.attachments && entry.attachments.length) frame.attachments = entry.attachments;
  return frame;
}

function userBubble(entry) {
  const bubble = element("div", "msg user", entry.content);
  const files = (entry.attachments || []).filter((a) => !a.voice);
  if (files.length) {
    bubble.prepend(element("span", "files", "Attached: " + files.map((a) => a.name).join(", ")));
  }
  for (const note of (entry.attachments || []).filter((a) => a.voice)) {
    const length = note.duration_ms ? " · " + clock(note.duration_ms) : "";
    bubble.append(element("span", "voice", "🎙️ Voice note" + length));
    if (note.heard) bubble.append(element("span", "heard", "“" + note.heard + "”"));
  }
  if (entry.id) {
    bubbles.set(entry.id, bubble);
    if (bubbles.size > 500) bubbles.delete(bubbles.keys().next().value);
  }
  return bubble;
}

/** A message of the history with voice notes: its text, and each note with what was heard
 * (the model's line for it: `[voice note NAME (TYPE, 0:04), saved …; transcribed: "…"]`). */
function heardOf(content) {
  const attachments = [];
  const line = /^\[(?:voice note|audio file) (.+?) \(([^)]*)\), saved in the workspace at [^;]*; (transcribed: "([\s\S]*)"|[^\]]*)\]$/;
  const rest = [];
  for (const part of content.split("\n")) {
    const found = part.match(line);
    if (!found) {
      rest.push(part);
      continue;
    }
    const length = (found[2].split(", ")[1] || "").split(":");
    const ms = length.length === 2 ? (Number(length[0]) * 60 + Number(length[1])) * 1000 : 0;
    attachments.push({ name: found[1], voice: true, duration_ms: ms || undefined, heard: found[4] });
  }
  return { content: rest.join("\n"), attachments };
}

/** Milliseconds as a clock reads them: 0:07, 12:30. */
function clock(ms) {
  const total = Math.round(ms / 1000);
  return Math.floor(total / 60) + ":" + String(total % 60).padStart(2, "0");
}

/** Sends an outbox entry if connected (its chat listed first); else it shows as waiting. */
function deliver(entry) {
  if (ready) listConversation(entry.chat_id, entry.content);
  const sent = send(frameOf(entry));
  if (entry.el) {
    entry.el.classList.toggle("pending", !sent);
    let state = entry.el.querySelector(".state");
    if (!sent && !state) {
      state = element("span", "state", "Not sent yet: it goes out when the connection is back.");
      entry.el.append(state);
    }
    if (sent && state) state.remove();
  }
  return sent;
}

function settle(frame) {
  const index = outbox.findIndex((entry) => entry.id === frame.id);
  if (index < 0) return;
  if (frame.fate === "unprocessed") {
    // The daemon is stopping: the message is kept here and sent again after the reconnect.
    setConn("stopping", "server restarting");
    const entry = outbox[index];
    if (entry.el && !entry.el.querySelector(".state")) {
      entry.el.classList.add("pending");
      entry.el.append(element("span", "state", "The server is restarting: this goes out again when it is back."));
    }
    return;
  }
  outbox.splice(index, 1);
  saveOutbox();
}

function submit() {
  const text = input.value;
  const files = attachments.filter((a) => a.state === "ready").map((a) => ({ file: a.file, name: a.name }));
  if (!text.trim() && !files.length) return;
  if (attachments.some((a) => a.state === "uploading")) {
    showHint("Wait until the attachments are uploaded.");
    return;
  }
  const entry = { id: "m-" + randomId(), chat_id: chatId, content: text, attachments: files };
  const bytes = new TextEncoder().encode(JSON.stringify(frameOf(entry))).length;
  if (bytes > limits.max_frame_bytes) {
    showHint(
      `This message is ${size(bytes)}; the server takes at most ${size(limits.max_frame_bytes)} ` +
        "per message (channels.websocket.max_frame_bytes). Shorten it, or attach it as a file.",
    );
    return;
  }
  if (outbox.length >= MAX_OUTBOX) {
    showHint(`${MAX_OUTBOX} messages are waiting to be sent already; wait for the connection.`);
    return;
  }
  showHint("");
  outbox.push(entry);
  saveOutbox();
  entry.el = log.appendChild(userBubble(entry));
  input.value = "";
  autosize();
  // Who sends a message reads on from it: the log follows to its end.
  log.scrollTop = log.scrollHeight;
  attachments = [];
  renderChips();
  deliver(entry);
}

function stopTurn() {
  send({ type: "message", chat_id: chatId, id: "m-" + randomId(), content: "/stop" });
}

// ---- Conversations ----------------------------------------------------------------------

/** Puts `chat` first in the list (named after its first message when new); nothing to do,
 *  and nothing written on the server, when it is first already. */
/** Lists `chat` first; its title is the first line of the first message that is not a
 * command ("/help" names no conversation). */
function listConversation(chat, text) {
  const first = text.trim().split("\n")[0];
  const line = first.startsWith("/") ? "" : first.slice(0, 60);
  const found = conversations.find((c) => c.chat_id === chat);
  const untitled = !found || found.title === "New chat";
  if (found && conversations[0] === found && !(untitled && line)) return;
  send({ type: "conversation", chat_id: chat, title: untitled && line ? line : found ? undefined : "New chat" });
}

/** The day and time a conversation was last written to, to tell like-named ones apart. */
function when(ms) {
  return new Date(ms).toLocaleString(undefined, { month: "short", day: "numeric", hour: "2-digit", minute: "2-digit" });
}

function titleOf(id) {
  const found = conversations.find((c) => c.chat_id === id);
  return found ? found.title : "New chat";
}

function renderList() {
  const list = $("list");
  list.replaceChildren();
  const named = new Map();
  for (const c of conversations) named.set(c.title, (named.get(c.title) || 0) + 1);
  for (const conversation of conversations) {
    const item = element("li");
    item.setAttribute("aria-current", String(conversation.chat_id === chatId));
    const open = element("button", "open", conversation.title);
    if (named.get(conversation.title) > 1 && conversation.updated_ms) {
      open.append(element("small", "when", " · " + when(conversation.updated_ms)));
    }
    open.type = "button";
    open.title = conversation.title;
    open.addEventListener("click", () => openChat(conversation.chat_id, false));
    const rename = iconButton("i-edit", "Rename " + conversation.title, "act");
    rename.addEventListener("click", () => startRename(item, conversation));
    const remove = iconButton("i-trash", "Delete " + conversation.title, "act");
    remove.addEventListener("click", () => {
      if (!remove.classList.contains("confirm")) {
        remove.classList.add("confirm");
        remove.replaceChildren("Delete?");
        return;
      }
      send({ type: "delete_conversation", chat_id: conversation.chat_id });
      if (conversation.chat_id === chatId) newChat();
    });
    item.append(open, rename, remove);
    list.append(item);
  }
  $("title").textContent = titleOf(chatId);
}

function iconButton(icon, label, className) {
  const button = element("button", "icon-button " + (className || ""));
  button.type = "button";
  button.setAttribute("aria-label", label);
  button.title = label;
  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  svg.setAttribute("class", "icon");
  const use = document.createElementNS("http://www.w3.org/2000/svg", "use");
  use.setAttribute("href", "#" + icon);
  svg.append(use);
  button.append(svg);
  return button;
}

function startRename(item, conversation) {
  const field = element("input");
  field.value = conversation.title;
  field.setAttribute("aria-label", "New title");
  field.maxLength = 200;
  item.replaceChildren(field);
  field.focus();
  field.select();
  let done = false;
  const finish = (save) => {
    if (done) return;
    done = true;
    const title = field.value.trim();
    if (save && title && title !== conversation.title) {
      send({ type: "conversation", chat_id: conversation.chat_id, title });
    }
    renderList();
  };
  field.addEventListener("keydown", (event) => {
    if (event.key === "Enter") finish(true);
    if (event.key === "Escape") finish(false);
  });
  field.addEventListener("blur", () => finish(true));
}

function openChat(id, reconnected) {
  if (id !== chatId) {
    send({ type: "unsubscribe", chat_id: chatId });
    if (placeholder || [...turns.values()].some((t) => t.running)) {
      showHint(`The answer in “${titleOf(chatId)}” goes on; it is there when you open it again.`, true);
    }
    attachments = [];
    renderChips();
  }
  chatId = id;
  store.set("chat_id", id);
  turns.clear();
  placeholder = null;
  awaitingHistory = true;
  beforeHistory = [];
  historySeq = 0;
  if (!reconnected) log.replaceChildren();
  renderList();
  closeSidebar();
  updateStop();
  if (send({ type: "subscribe", chat_id: id, after: seen.get(id) })) {
    send({ type: "history", chat_id: id });
  } else {
    for (const entry of outbox) if (entry.chat_id === id) entry.el = add(userBubble(entry));
  }
}

function newChat() {
  openChat("web-" + randomId(), false);
  input.focus();
}

function closeSidebar() {
  $("app").classList.remove("side-open");
  $("backdrop").hidden = true;
  $("menu").setAttribute("aria-expanded", "false");
}

// ---- Search -----------------------------------------------------------------------------

let searchTimer = null;

/** Searches every conversation for what the search box holds (the list again when empty). */
function search() {
  clearTimeout(searchTimer);
  const query = $("search").value.trim();
  if (!query) {
    $("results").hidden = true;
    $("results").replaceChildren();
    $("list").hidden = false;
    return;
  }
  send({ type: "search", query });
}

/** A snippet with its matching words (`**so**`) marked, built of text nodes only. */
function snippetOf(text) {
  const span = element("span", "snippet");
  text.split("**").forEach((part, i) => {
    if (part) span.append(i % 2 ? element("mark", "", part) : document.createTextNode(part));
  });
  return span;
}

function showResults(frame) {
  // An answer to a query the box no longer holds.
  if (frame.query !== $("search").value.trim()) return;
  const results = $("results");
  results.replaceChildren();
  if (!frame.hits.length) results.append(element("li", "none", "Nothing found."));
  for (const hit of frame.hits) {
    const item = element("li");
    const open = element("button", "open");
    open.type = "button";
    const title = titleOf(hit.chat_id) + (hit.archived ? " (earlier)" : "");
    open.append(element("strong", "", title));
    if (hit.at_ms) open.append(element("small", "when", " · " + when(hit.at_ms)));
    open.append(snippetOf(hit.snippet));
    open.addEventListener("click", () => openChat(hit.chat_id, false));
    item.append(open);
    results.append(item);
  }
  results.hidden = false;
  $("list").hidden = true;
}

// ---- Attachments ------------------------------------------------------------------------

async function attach(files) {
  if (!limits.max_attachment_bytes) {
    showHint("This server takes no attachments (channels.websocket.max_attachment_bytes = 0).");
    return;
  }
  for (const file of files) {
    if (attachments.length >= MAX_ATTACHMENTS) {
      showHint(`At most ${MAX_ATTACHMENTS} attachments per message.`);
      break;
    }
    const name = file.name || "pasted." + (file.type.split("/")[1] || "bin");
    if (file.size > limits.max_attachment_bytes) {
      showHint(`${name} is ${size(file.size)}; the limit is ${size(limits.max_attachment_bytes)}.`);
      continue;
    }
    const item = { name, bytes: file.size, state: "uploading" };
    attachments.push(item);
    renderChips();
    try {
      item.file = await upload(file, name);
      item.state = "ready";
    } catch (err) {
      item.state = "failed";
      showHint(`${name} was not attached: ${err.message || err}`);
    }
    renderChips();
  }
}

/** Uploads `blob` as `name` for the open chat (`POST /upload`); the saved file's name. */
async function upload(blob, name) {
  const url = `upload?chat_id=${encodeURIComponent(chatId)}&name=${encodeURIComponent(name)}`;
  const headers = { "Content-Type": blob.type || "application/octet-stream" };
  if (token) headers.Authorization = "Bearer " + token;
  const response = await fetch(url, { method: "POST", body: blob, headers });
  if (!response.ok) throw new Error(await response.text());
  return (await response.json()).file;
}

// ---- Voice notes: recorded here, sent as a message of their own -------------------------

/** The recording under way: its recorder, stream, pieces, start, and whether it is
 * cancelled. */
let recording = null;
/** The last time a touch began a recording (the click a touch ends in is not a toggle). */
let touchedAt = 0;
const recordButton = $("record");
const MIN_RECORDING_MS = 400;

function canRecord() {
  return !!(navigator.mediaDevices && navigator.mediaDevices.getUserMedia && window.MediaRecorder);
}

async function startRecording() {
  if (recording) return;
  if (!canRecord()) {
    showHint("This browser cannot record here (recording needs https, or the page on localhost).");
    return;
  }
  if (!limits.max_attachment_bytes) {
    showHint("This server takes no attachments (channels.websocket.max_attachment_bytes = 0).");
    return;
  }
  const state = { chunks: [], started: 0, cancelled: false, stream: null, recorder: null, timer: 0 };
  recording = state;
  try {
    state.stream = await navigator.mediaDevices.getUserMedia({ audio: true });
  } catch (err) {
    recording = null;
    showHint("The microphone could not be used: " + (err.message || err.name));
    return;
  }
  if (state.cancelled) return stopTracks(state);
  const type = ["audio/ogg;codecs=opus", "audio/webm;codecs=opus", "audio/webm"].find((t) =>
    MediaRecorder.isTypeSupported(t),
  );
  state.recorder = type ? new MediaRecorder(state.stream, { mimeType: type }) : new MediaRecorder(state.stream);
  state.recorder.ondataavailable = (event) => {
    if (event.data && event.data.size) state.chunks.push(event.data);
  };
  state.recorder.onstop = () => finishRecording(state);
  state.recorder.start(250);
  state.started = performance.now();
  recordButton.classList.add("on");
  recordButton.setAttribute("aria-pressed", "true");
  const tick = () =>
    showHint(`Recording ${clock(performance.now() - state.started)} — the microphone again sends it, Esc cancels.`, true);
  tick();
  state.timer = setInterval(tick, 500);
}

/** Ends the recording: sent, or (`cancel`) thrown away. */
function stopRecording(cancel) {
  const state = recording;
  if (!state) return;
  state.cancelled = cancel;
  if (state.recorder && state.recorder.state !== "inactive") state.recorder.stop();
  else if (!state.recorder) recording = null;
}

function stopTracks(state) {
  if (state.stream) for (const track of state.stream.getTracks()) track.stop();
}

async function finishRecording(state) {
  clearInterval(state.timer);
  stopTracks(state);
  recording = null;
  recordButton.classList.remove("on");
  recordButton.setAttribute("aria-pressed", "false");
  if (state.cancelled) return showHint("The recording was thrown away.", true);
  const ms = Math.round(performance.now() - state.started);
  const type = (state.recorder.mimeType || "audio/webm").split(";")[0];
  const blob = new Blob(state.chunks, { type });
  if (ms < MIN_RECORDING_MS || !blob.size) {
    return showHint("Too short to send: speak while it records (on a phone, hold the microphone).", true);
  }
  if (blob.size > limits.max_attachment_bytes) {
    return showHint(`The recording is ${size(blob.size)}; the limit is ${size(limits.max_attachment_bytes)}.`);
  }
  const name = "voice-" + new Date().toISOString().replace(/[:.]/g, "-") + (type.includes("ogg") ? ".ogg" : ".webm");
  showHint("Sending the voice note…", true);
  let file;
  try {
    file = await upload(blob, name);
  } catch (err) {
    return showHint(`The voice note was not sent: ${err.message || err}`);
  }
  showHint("");
  const entry = {
    id: "m-" + randomId(),
    chat_id: chatId,
    content: "",
    attachments: [{ file, name, voice: true, duration_ms: ms }],
  };
  outbox.push(entry);
  saveOutbox();
  entry.el = log.appendChild(userBubble(entry));
  log.scrollTop = log.scrollHeight;
  deliver(entry);
}

recordButton.addEventListener("pointerdown", (event) => {
  if (event.pointerType !== "touch") return;
  // Hold to talk: recording while the finger is down, sent when it lifts.
  event.preventDefault();
  touchedAt = Date.now();
  startRecording();
});
for (const end of ["pointerup", "pointercancel"]) {
  recordButton.addEventListener(end, (event) => {
    if (event.pointerType === "touch" && recording) stopRecording(end === "pointercancel");
  });
}
recordButton.addEventListener("click", () => {
  if (Date.now() - touchedAt < 1500) return;
  if (recording) stopRecording(false);
  else startRecording();
});

function renderChips() {
  const box = $("files");
  box.replaceChildren();
  for (const item of attachments) {
    const chip = element("span", "chip " + item.state);
    const label = item.state === "uploading" ? " (uploading…)" : item.state === "failed" ? " (failed)" : "";
    chip.append(element("span", "", `${item.name} · ${size(item.bytes)}${label}`));
    const remove = iconButton("i-x", "Remove " + item.name);
    remove.addEventListener("click", () => {
      attachments = attachments.filter((a) => a !== item);
      renderChips();
    });
    chip.append(remove);
    box.append(chip);
  }
}

// ---- The connection ---------------------------------------------------------------------

function connect() {
  const url = new URL("ws", location.href);
  url.protocol = location.protocol === "https:" ? "wss:" : "ws:";
  url.search = "";
  ready = false;
  setConn("connecting", "connecting…");
  socket = token ? new WebSocket(url, ["bearer", token]) : new WebSocket(url);
  socket.onopen = () => {
    retryMs = 500;
    $("auth").hidden = true;
  };
  socket.onmessage = (event) => {
    let frame;
    try {
      frame = JSON.parse(event.data);
    } catch (_) {
      return;
    }
    onFrame(frame);
  };
  socket.onclose = async () => {
    ready = false;
    // A socket cannot tell why it was refused; a plain GET of /ws can: 401 means the token
    // is missing or wrong, and retrying will not help.
    try {
      const answer = await fetch("ws", { headers: token ? { Authorization: "Bearer " + token } : {} });
      if (answer.status === 401) {
        askForToken(token ? "The token was refused; enter the right one:" : "This switchboard needs a token:");
        return;
      }
    } catch (_) {
      /* the server is down: retry below */
    }
    setConn("offline", "offline — retrying");
    setTimeout(connect, retryMs);
    retryMs = Math.min(retryMs * 2, 10000);
  };
}

function askForToken(why) {
  setConn("refused", "not connected");
  $("auth-label").textContent = why;
  $("auth").hidden = false;
  $("token").focus();
}

setInterval(() => send({ type: "ping" }), 25000);

// ---- Controls ---------------------------------------------------------------------------

/** Fits the composer to its text; the log, shorter or taller for it, keeps its end in view
 * if it was there (a long paste must not push the conversation's end out of sight). */
function autosize() {
  stick(() => {
    input.style.height = "auto";
    input.style.height = Math.min(input.scrollHeight, 192) + "px";
  });
}

$("auth").addEventListener("submit", (event) => {
  event.preventDefault();
  token = $("token").value.trim();
  store.set("token", token);
  $("auth").hidden = true;
  connect();
});
$("form").addEventListener("submit", (event) => {
  event.preventDefault();
  submit();
});
input.addEventListener("keydown", (event) => {
  if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
    event.preventDefault();
    submit();
  }
});
input.addEventListener("input", autosize);
input.addEventListener("paste", (event) => {
  const files = [...(event.clipboardData ? event.clipboardData.files : [])];
  if (files.length) {
    event.preventDefault();
    attach(files);
  }
});
document.addEventListener("keydown", (event) => {
  if (event.key !== "Escape") return;
  if (recording) return stopRecording(true);
  if ($("app").classList.contains("side-open")) return closeSidebar();
  if (!$("stop").hidden) stopTurn();
});
$("stop").addEventListener("click", stopTurn);
$("new").addEventListener("click", newChat);
$("new-top").addEventListener("click", newChat);
$("attach").addEventListener("click", () => $("file").click());
$("file").addEventListener("change", () => {
  attach([...$("file").files]);
  $("file").value = "";
});
$("menu").addEventListener("click", () => {
  $("app").classList.add("side-open");
  $("backdrop").hidden = false;
  $("menu").setAttribute("aria-expanded", "true");
});
$("backdrop").addEventListener("click", closeSidebar);
$("search-form").addEventListener("submit", (event) => {
  event.preventDefault();
  search();
});
$("search").addEventListener("input", () => {
  clearTimeout(searchTimer);
  searchTimer = setTimeout(search, 250);
});

renderList();
connect();
input.focus();
