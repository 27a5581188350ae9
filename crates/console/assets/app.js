// The sandboxd web console: a small single-page app over /console/api (session cookie,
// CSRF token on every change). Pages are chosen by the URL's fragment. No framework,
// no build step; text from the server is only ever set as text, never as HTML.
"use strict";

const state = { csrf: null, workspace: null, timer: null, stops: [] };

// --- helpers -----------------------------------------------------------------------

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else if (k === "text") node.textContent = v;
    else node.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

class ApiError extends Error {
  constructor(status, code, message) {
    super(message || code);
    this.status = status;
    this.code = code;
  }
}

// Tries of a request whose connection fails before any answer (a connection closed under
// it; the server keeps idle ones longer than browsers do, so that is rare): GETs, and the
// changes whose repeat changes nothing more (pause and resume answer a sandbox already in
// the state asked for as they would have). Pages that load once, and a Pause clicked
// once, would otherwise show "Failed to fetch" for good. A repeat may follow a first
// send the server did act on: within its 0.2-0.6 s it could undo a resume another client
// made meanwhile, and one whose first send ended the sandbox FAILED shows the repeat's
// answer. Other changes are never sent twice.
const TRIES = 4;

async function send(method, url, init, idempotent) {
  const retriable = method === "GET" || idempotent === true;
  for (let tried = 1; ; tried++) {
    try {
      return await fetch(url, init);
    } catch (e) {
      if (!retriable || tried >= TRIES) throw e;
      await new Promise((done) => setTimeout(done, 200 * tried));
    }
  }
}

// One call of the console's API. `idempotent`: a change that may be sent again when its
// connection fails before any answer (see `send`).
async function api(method, path, body, raw, idempotent) {
  const headers = {};
  if (method !== "GET") headers["X-CSRF-Token"] = state.csrf;
  let payload;
  if (raw !== undefined) payload = raw;
  else if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    payload = JSON.stringify(body);
  }
  const res = await send(method, "/console/api" + path, { method, headers, body: payload, credentials: "same-origin" }, idempotent);
  if (res.status === 401) {
    signedOut();
    throw new ApiError(401, "unauthorized", "signed out");
  }
  const text = await res.text();
  const json = text ? JSON.parse(text) : null;
  if (!res.ok) {
    const e = (json && json.error) || {};
    throw new ApiError(res.status, e.code || "error", e.message || res.statusText);
  }
  return json;
}

function signedOut() {
  stopPage();
  document.getElementById("workspace").textContent = "";
  show(el("section", {},
    el("h1", { text: "Signed out" }),
    el("p", {}, "Run ", el("code", { text: "sandboxd console link" }),
      " on the server and open the link it prints.")));
}

function show(...nodes) {
  const view = document.getElementById("view");
  view.replaceChildren(...nodes);
}

function errorBox() {
  return el("p", { class: "error", role: "alert" });
}

function report(box, e) {
  box.textContent = e instanceof ApiError ? `${e.code}: ${e.message}` : String(e);
}

function age(iso) {
  const s = Math.max(0, (Date.now() - Date.parse(iso)) / 1000);
  if (s < 60) return `${Math.floor(s)}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m`;
  if (s < 86400) return `${Math.floor(s / 3600)}h`;
  return `${Math.floor(s / 86400)}d`;
}

function stateBadge(s) {
  return el("span", { class: `state ${s}`, text: s });
}

function stopPage() {
  if (state.timer) clearInterval(state.timer);
  state.timer = null;
  for (const stop of state.stops.splice(0)) {
    try { stop(); } catch (_) { /* already closed */ }
  }
}

function every(ms, fn) {
  fn();
  state.timer = setInterval(fn, ms);
}

// --- sparklines -----------------------------------------------------------------------

const SPARK_POINTS = 30;
// Per sandbox id: the last readings' CPU (percent of its vCPUs) and memory (percent of
// its limit), oldest first.
const usageHistory = new Map();

function recordUsage(readings) {
  const live = new Set();
  for (const u of readings) {
    live.add(u.id);
    const h = usageHistory.get(u.id) || { cpu: [], mem: [] };
    h.cpu.push(Math.min(100, u.cpu_percent / Math.max(1, u.vcpu)));
    h.mem.push(u.memory_limit_bytes ? Math.min(100, (100 * u.memory_bytes) / u.memory_limit_bytes) : 0);
    for (const k of ["cpu", "mem"]) if (h[k].length > SPARK_POINTS) h[k].splice(0, h[k].length - SPARK_POINTS);
    h.last = u;
    usageHistory.set(u.id, h);
  }
  for (const id of [...usageHistory.keys()]) if (!live.has(id)) usageHistory.delete(id);
}

function svg(tag, attrs) {
  const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  return node;
}

// A small line of `values` (0–100), newest at the right.
function sparkline(kind, values, label) {
  const w = 80, h = 20;
  const step = w / (SPARK_POINTS - 1);
  const x0 = w - step * (values.length - 1);
  const points = values.map((v, i) => `${(x0 + i * step).toFixed(1)},${(h - 1 - (v / 100) * (h - 2)).toFixed(1)}`).join(" ");
  const s = svg("svg", { class: `spark ${kind}`, width: w, height: h, viewBox: `0 0 ${w} ${h}`, role: "img", "aria-label": label });
  s.append(svg("polyline", { points, fill: "none" }));
  return s;
}

function usageCell(id, kind) {
  const h = usageHistory.get(id);
  if (!h) return el("td", { class: "muted", text: "–" });
  const u = h.last;
  const text = kind === "cpu"
    ? `${u.cpu_percent.toFixed(0)}%`
    : bytes(u.memory_bytes);
  return el("td", { class: "usage" }, sparkline(kind, h[kind], text), " ", el("span", { class: "muted", text }));
}

// --- sandboxes list ------------------------------------------------------------------

const listView = { sort: "created_at", desc: true, filter: "", status: "" };

function sandboxesPage() {
  const box = errorBox();
  const body = el("tbody", { id: "sandbox-rows" });
  const filter = el("input", {
    id: "filter", type: "search", placeholder: "Filter by id, name, image, template", value: listView.filter,
    oninput: (e) => { listView.filter = e.target.value; render(); },
  });
  const status = el("select", { id: "status-filter", onchange: (e) => { listView.status = e.target.value; render(); } },
    ["", "RUNNING", "PAUSED", "TERMINATED", "FAILED"].map((s) =>
      el("option", { value: s, selected: s === listView.status, text: s || "any state" })));
  const cols = [["name", "Sandbox"], ["status", "State"], ["tier", "Tier"], ["source", "Template / image"],
    ["resources", "Resources"], ["cpu", "CPU"], ["mem", "Memory"], ["created_at", "Age"]];
  const head = el("tr", {}, cols.map(([key, label]) => el("th", {
    "data-sort": key,
    onclick: () => { listView.desc = listView.sort === key ? !listView.desc : false; listView.sort = key; render(); },
  }, label)));
  let rows = [];
  const sortKey = (sb, key) => {
    if (key === "name") return sb.name || sb.id;
    if (key === "source") return sb.template || sb.image;
    if (key === "resources") return sb.vcpu * 1e6 + sb.memory_mb;
    if (key === "cpu" || key === "mem") {
      const h = usageHistory.get(sb.id);
      return h ? h[key][h[key].length - 1] : -1;
    }
    return sb[key] || "";
  };
  function render() {
    const q = listView.filter.toLowerCase();
    const shown = rows.filter((sb) =>
      (!listView.status || sb.status === listView.status) &&
      (!q || [sb.id, sb.name, sb.image, sb.template, sb.status].some((v) => v && v.toLowerCase().includes(q))));
    shown.sort((a, b) => {
      const x = sortKey(a, listView.sort), y = sortKey(b, listView.sort);
      const c = x < y ? -1 : x > y ? 1 : 0;
      return listView.desc ? -c : c;
    });
    for (const th of head.children) {
      const key = th.getAttribute("data-sort");
      th.setAttribute("aria-sort", key === listView.sort ? (listView.desc ? "descending" : "ascending") : "none");
    }
    body.replaceChildren(...shown.map((sb) => el("tr", { "data-id": sb.id },
      el("td", {}, el("a", { href: `#/sandbox/${sb.id}`, text: sb.name || sb.id.slice(0, 8) }),
        sb.name ? null : el("span", { class: "muted", text: "…" })),
      el("td", {}, stateBadge(sb.status)),
      el("td", { text: sb.tier }),
      el("td", { text: sb.template ? `${sb.template} (${sb.image})` : sb.image }),
      el("td", { text: `${sb.vcpu} vCPU, ${sb.memory_mb} MiB` }),
      usageCell(sb.id, "cpu"),
      usageCell(sb.id, "mem"),
      el("td", { title: sb.created_at, text: age(sb.created_at) }))));
    if (!shown.length) body.append(el("tr", {}, el("td", { colspan: cols.length, class: "muted", text: "No sandboxes." })));
  }
  show(el("section", {},
    el("h1", { text: "Sandboxes" }),
    el("div", { class: "toolbar" }, filter, status, el("a", { href: "#/create" }, el("button", { class: "primary", type: "button", text: "Create sandbox" }))),
    box,
    el("div", { class: "scroll" }, el("table", { id: "sandboxes" }, el("thead", {}, head), body))));
  every(3000, async () => {
    try {
      rows = await api("GET", "/sandboxes");
      box.textContent = "";
      render();
      recordUsage(await api("GET", "/usage"));
      render();
    } catch (e) { report(box, e); }
  });
}

// --- create --------------------------------------------------------------------------

async function createPage() {
  const box = errorBox();
  const template = el("select", { id: "create-template", name: "template" }, el("option", { value: "", text: "(none: use the image below)" }));
  const image = el("select", { id: "create-image", name: "image" }, el("option", { value: "", text: "default" }));
  const num = (id, value) => el("input", { id, type: "number", min: "1", value });
  const vcpu = num("create-vcpu", "1"), memory = num("create-memory", "512"), disk = num("create-disk", "");
  const name = el("input", { id: "create-name", placeholder: "optional" });
  const timeout = num("create-timeout", "");
  const submit = el("button", { id: "create-submit", class: "primary", type: "submit", text: "Create" });
  const form = el("form", { id: "create-form", class: "grid" },
    el("label", { for: "create-template", text: "Template" }), template,
    el("label", { for: "create-image", text: "Image" }), image,
    el("label", { for: "create-name", text: "Name" }), name,
    el("label", { for: "create-vcpu", text: "vCPUs" }), vcpu,
    el("label", { for: "create-memory", text: "Memory (MiB)" }), memory,
    el("label", { for: "create-disk", text: "Disk (MiB)" }), disk,
    el("label", { for: "create-timeout", text: "Lifetime (s)" }), timeout,
    el("div", { class: "full" }, submit), el("div", { class: "full" }, box));
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const n = (input) => (input.value ? Number(input.value) : undefined);
    const body = {
      template: template.value || undefined, image: image.value || undefined, name: name.value || undefined,
      vcpu: n(vcpu), memory_mb: n(memory), disk_mb: n(disk), timeout_seconds: n(timeout),
    };
    submit.disabled = true;
    submit.textContent = "Creating…";
    try {
      const sb = await api("POST", "/sandboxes", body);
      location.hash = `#/sandbox/${sb.id}`;
    } catch (e) {
      report(box, e);
    } finally {
      submit.disabled = false;
      submit.textContent = "Create";
    }
  });
  show(el("section", {}, el("h1", { text: "Create a sandbox" }), form));
  try {
    for (const t of await api("GET", "/templates")) {
      template.append(el("option", { value: t.name, text: `${t.name} (≤ ${t.vcpu} vCPU, ${t.memory_mb} MiB)` }));
    }
    for (const i of await api("GET", "/images")) {
      if (i.name !== "default") image.append(el("option", { value: i.name, text: i.name }));
    }
  } catch (e) { report(box, e); }
}

function bytes(n) {
  if (n >= 1073741824) return `${(n / 1073741824).toFixed(1)} GiB`;
  if (n >= 1048576) return `${(n / 1048576).toFixed(1)} MiB`;
  return `${Math.ceil(n / 1024)} KiB`;
}

// --- one sandbox ---------------------------------------------------------------------

function sandboxPage(id) {
  const box = errorBox();
  const title = el("h1", { text: id });
  const facts = el("p", { id: "sandbox-facts", class: "muted" });
  // `again`: the action may be sent twice (see `send`).
  const act = (label, path, method, question, cls, again) => el("button", {
    type: "button", id: `action-${label.toLowerCase()}`, class: cls,
    onclick: async () => {
      if (!window.confirm(question)) return;
      try {
        if (label === "Snapshot") {
          const snap = await api("POST", `/sandboxes/${id}/snapshot`, {});
          box.textContent = `Snapshot ${snap.id} saved.`;
        } else {
          await api(method, `/sandboxes/${id}${path}`, undefined, undefined, again);
        }
        if (label === "Delete") location.hash = "#/sandboxes";
        else refresh();
      } catch (e) { report(box, e); }
    },
  }, label);
  const actions = el("div", { class: "toolbar" },
    act("Pause", "/pause", "POST", "Pause this sandbox?", null, true),
    act("Resume", "/resume", "POST", "Resume this sandbox?", null, true),
    act("Snapshot", "", "POST", "Snapshot this sandbox's filesystem?"),
    act("Delete", "", "DELETE", "Delete this sandbox? Its processes and files are lost.", "danger"));
  async function refresh() {
    try {
      const sb = await api("GET", `/sandboxes/${id}`);
      title.textContent = sb.name || sb.id;
      facts.replaceChildren(stateBadge(sb.status),
        ` ${sb.tier} · ${sb.template ? `template ${sb.template} · ` : ""}image ${sb.image} · ${sb.vcpu} vCPU · ${sb.memory_mb} MiB · ${sb.disk_mb ?? "?"} MiB disk · age ${age(sb.created_at)}`);
      facts.setAttribute("data-status", sb.status);
    } catch (e) { report(box, e); }
  }
  show(el("section", {}, title, facts, actions, box,
    terminalPanel(id),
    el("div", { class: "cols" }, filesPanel(id), processesPanel(id))));
  every(5000, refresh);
}

function terminalPanel(id) {
  const box = errorBox();
  const holder = el("div", { id: "terminal" });
  const open = el("button", { id: "terminal-open", type: "button", text: "Open terminal" });
  open.addEventListener("click", async () => {
    open.disabled = true;
    try {
      const { ticket } = await api("POST", `/sandboxes/${id}/terminal/tickets`);
      const term = new window.Terminal({ cols: 100, rows: 24, convertEol: false, fontSize: 13 });
      holder.replaceChildren();
      term.open(holder);
      const proto = location.protocol === "https:" ? "wss:" : "ws:";
      const q = new URLSearchParams({ ticket, cols: String(term.cols), rows: String(term.rows) });
      const ws = new WebSocket(`${proto}//${location.host}/console/api/sandboxes/${id}/terminal?${q}`);
      ws.binaryType = "arraybuffer";
      const enc = new TextEncoder();
      ws.onmessage = (m) => {
        if (typeof m.data === "string") {
          const msg = JSON.parse(m.data);
          if (msg.type === "exit") term.write(`\r\n[shell exited ${msg.exit_code}]\r\n`);
        } else {
          term.write(new Uint8Array(m.data));
        }
      };
      ws.onclose = () => { holder.setAttribute("data-closed", "true"); open.disabled = false; };
      ws.onopen = () => { holder.setAttribute("data-open", "true"); term.focus(); };
      term.onData((d) => { if (ws.readyState === WebSocket.OPEN) ws.send(enc.encode(d)); });
      state.stops.push(() => { ws.close(); term.dispose(); });
    } catch (e) {
      report(box, e);
      open.disabled = false;
    }
  });
  return el("div", {}, el("h2", { text: "Terminal" }), el("div", { class: "toolbar" }, open), box, holder);
}

function filesPanel(id) {
  const box = errorBox();
  const path = el("input", { id: "files-path", value: "/tmp" });
  const list = el("ul", { id: "files-list" });
  const upload = el("input", { id: "upload-input", type: "file" });
  const send = el("button", { id: "upload-button", type: "button", text: "Upload here" });
  const done = el("p", { class: "muted" });
  const join = (dir, name) => (dir.endsWith("/") ? dir : dir + "/") + name;
  async function load() {
    box.textContent = "";
    done.textContent = "";
    try {
      const got = await api("GET", `/sandboxes/${id}/files/list?` + new URLSearchParams({ path: path.value }));
      const up = path.value.replace(/\/[^/]*\/?$/, "") || "/";
      list.replaceChildren(
        path.value !== "/" ? el("li", {}, el("a", { href: "#", onclick: (e) => { e.preventDefault(); path.value = up; load(); }, text: "../" })) : null,
        ...got.entries.map((f) => el("li", { "data-name": f.name }, f.dir
          ? el("a", { href: "#", onclick: (e) => { e.preventDefault(); path.value = join(path.value, f.name); load(); }, text: f.name + "/" })
          : el("a", {
            href: `/console/api/sandboxes/${id}/files/content?` + new URLSearchParams({ path: join(path.value, f.name) }),
            download: f.name, text: f.name,
          }))));
    } catch (e) { report(box, e); }
  }
  send.addEventListener("click", async () => {
    const file = upload.files[0];
    if (!file) { box.textContent = "Choose a file first."; return; }
    try {
      const target = join(path.value, file.name);
      await api("PUT", `/sandboxes/${id}/files/content?` + new URLSearchParams({ path: target }), undefined, file);
      upload.value = "";
      await load();
      done.replaceChildren(el("span", { id: "upload-done", text: `Uploaded ${target}` }));
    } catch (e) { report(box, e); }
  });
  path.addEventListener("keydown", (e) => { if (e.key === "Enter") load(); });
  load();
  return el("div", {}, el("h2", { text: "Files" }), el("div", { class: "panel files" },
    el("div", { class: "toolbar" }, path, el("button", { type: "button", onclick: load, text: "Open" })),
    el("div", { class: "toolbar" }, upload, send), box, done, list));
}

function processesPanel(id) {
  const box = errorBox();
  const body = el("tbody", { id: "process-rows" });
  const command = el("input", { id: "process-command", placeholder: "command, run with sh -c" });
  const output = el("pre", { id: "process-output", class: "output", text: "Choose a process to follow its output." });
  let reader = null;
  async function follow(pid) {
    if (reader) reader.cancel();
    output.textContent = "";
    try {
      const res = await send("GET", `/console/api/sandboxes/${id}/processes/${pid}/output`, { credentials: "same-origin" });
      if (!res.ok) throw new ApiError(res.status, "error", await res.text());
      reader = res.body.getReader();
      const dec = new TextDecoder();
      state.stops.push(() => reader && reader.cancel());
      for (;;) {
        const { value, done } = await reader.read();
        // At the end: a character the output stopped part-way through becomes U+FFFD.
        if (done) { output.textContent += dec.decode(); break; }
        output.textContent += dec.decode(value, { stream: true });
        output.scrollTop = output.scrollHeight;
      }
      load(); // it ended: show its exit in the table
    } catch (e) { if (e.name !== "AbortError") report(box, e); }
  }
  async function load() {
    try {
      const procs = await api("GET", `/sandboxes/${id}/processes`);
      body.replaceChildren(...procs.map((p) => el("tr", { "data-id": p.id },
        el("td", {}, el("a", { href: "#", onclick: (e) => { e.preventDefault(); follow(p.id); }, text: p.argv.join(" ") + (p.argv_truncated ? " …" : ""),
          title: p.argv_truncated ? "Command line shortened: the server keeps its first 1 KiB and 64 arguments" : null })),
        el("td", { text: p.state }), el("td", { text: p.exit || "" }))));
      if (!procs.length) body.append(el("tr", {}, el("td", { colspan: 3, class: "muted", text: "No managed processes." })));
    } catch (e) { report(box, e); }
  }
  const start = el("button", {
    type: "button", id: "process-start", text: "Start",
    onclick: async () => {
      try {
        const p = await api("POST", `/sandboxes/${id}/processes`, { command: command.value });
        command.value = "";
        await load();
        follow(p.id);
      } catch (e) { report(box, e); }
    },
  });
  load();
  return el("div", {}, el("h2", { text: "Processes" }), el("div", { class: "panel" },
    el("div", { class: "toolbar" }, command, start), box,
    el("div", { class: "scroll" }, el("table", {}, el("thead", {}, el("tr", {}, el("th", { text: "Command" }), el("th", { text: "State" }), el("th", { text: "Exit" }))), body)),
    output));
}

// --- templates and snapshots ---------------------------------------------------------

async function templatesPage() {
  const box = errorBox();
  const body = el("tbody", {});
  const images = el("tbody", {});
  show(el("section", {}, el("h1", { text: "Templates" }), box,
    el("div", { class: "scroll" }, el("table", { id: "templates" },
      el("thead", {}, el("tr", {}, ["Name", "Kind", "Description", "Image", "Resources (max)", "Disk"].map((h) => el("th", { text: h })))), body)),
    el("h2", { text: "Images" }),
    el("div", { class: "scroll" }, el("table", { id: "images" },
      el("thead", {}, el("tr", {}, ["Name", "Digest", "Layers", "Size"].map((h) => el("th", { text: h })))), images))));
  try {
    for (const t of await api("GET", "/templates")) {
      body.append(el("tr", {}, el("td", { text: t.name }), el("td", { text: t.builtin ? "built-in" : "workspace" }),
        el("td", { text: t.description }), el("td", { text: t.image || "default" }),
        el("td", { text: `${t.vcpu} vCPU, ${t.memory_mb} MiB` }), el("td", { text: t.disk_mb ? `${t.disk_mb} MiB` : "no limit" })));
    }
    for (const i of await api("GET", "/images")) {
      images.append(el("tr", { "data-name": i.name }, el("td", { text: i.name }),
        el("td", { class: "id", title: i.digest || "", text: i.digest ? i.digest.slice(0, 19) : "built-in" }),
        el("td", { text: String(i.layers) }), el("td", { text: bytes(i.size_bytes) })));
    }
  } catch (e) { report(box, e); }
}

async function snapshotsPage() {
  const box = errorBox();
  const body = el("tbody", {});
  show(el("section", {}, el("h1", { text: "Snapshots" }), box,
    el("div", { class: "scroll" }, el("table", { id: "snapshots" },
      el("thead", {}, el("tr", {}, ["Snapshot", "From sandbox", "Image", "Size", "Age", ""].map((h) => el("th", { text: h })))), body))));
  async function load() {
    try {
      const snaps = await api("GET", "/snapshots");
      body.replaceChildren(...snaps.map((s) => el("tr", { "data-id": s.id },
        el("td", { class: "id", text: s.name || s.id }), el("td", { class: "id", text: s.source_sandbox_id }),
        el("td", { text: s.image }), el("td", { text: `${(s.size_bytes / 1048576).toFixed(1)} MiB` }),
        el("td", { text: age(s.created_at) }),
        el("td", {}, el("button", {
          type: "button", class: "danger", text: "Delete",
          onclick: async () => {
            if (!window.confirm("Delete this snapshot?")) return;
            try { await api("DELETE", `/snapshots/${s.id}`); load(); } catch (e) { report(box, e); }
          },
        })))));
      if (!snaps.length) body.append(el("tr", {}, el("td", { colspan: 6, class: "muted", text: "No snapshots." })));
    } catch (e) { report(box, e); }
  }
  load();
}

// --- the master workspace's keys and quota ---------------------------------------------

async function accountPage() {
  const box = errorBox();
  const keys = el("tbody", {});
  const quota = el("dl", { id: "quota", class: "panel" });
  show(el("section", {}, el("h1", { text: "Keys and quota" }), box,
    el("p", { class: "muted" }, "Read-only: change them with ", el("code", { text: "sandboxd keys" }),
      " and ", el("code", { text: "sandboxd quota" }), " on the server."),
    el("h2", { text: "API keys" }),
    el("div", { class: "scroll" }, el("table", { id: "keys" },
      el("thead", {}, el("tr", {}, ["Prefix", "Kind", "Permissions", "Created", "Revoked"].map((h) => el("th", { text: h })))), keys)),
    el("h2", { text: "Quota" }), quota));
  try {
    const a = await api("GET", "/account");
    keys.replaceChildren(...a.keys.map((k) => el("tr", { "data-id": k.id },
      el("td", { class: "id", text: `${k.prefix}…` }),
      el("td", { text: k.master ? "master" : k.alias_of ? "alias" : "key" }),
      el("td", { text: k.permissions.join(", ") }),
      el("td", { text: k.created_at }), el("td", { text: k.revoked_at || "" }))));
    const q = a.quota;
    quota.replaceChildren(
      el("dt", { text: "Active sandboxes" }), el("dd", { text: q.max_sandboxes }),
      el("dt", { text: "vCPUs of active sandboxes" }), el("dd", { text: q.max_vcpu }),
      el("dt", { text: "Memory of active sandboxes" }), el("dd", { text: `${q.max_memory_mb} MiB` }));
  } catch (e) { report(box, e); }
}

// --- routing -------------------------------------------------------------------------

function route() {
  stopPage();
  const parts = (location.hash || "#/sandboxes").slice(2).split("/");
  const page = parts[0] || "sandboxes";
  for (const a of document.querySelectorAll("header nav a")) {
    a.classList.toggle("active", a.getAttribute("data-page") === page);
  }
  if (page === "sandbox" && parts[1]) sandboxPage(parts[1]);
  else if (page === "create") createPage();
  else if (page === "templates") templatesPage();
  else if (page === "snapshots") snapshotsPage();
  else if (page === "account") accountPage();
  else sandboxesPage();
}

async function start() {
  document.getElementById("logout").addEventListener("click", async () => {
    await fetch("/console/logout", { method: "POST", credentials: "same-origin" });
    signedOut();
  });
  try {
    const s = await api("GET", "/session");
    state.csrf = s.csrf_token;
    state.workspace = s.workspace;
    document.getElementById("workspace").textContent = `workspace ${s.workspace}`;
    document.getElementById("nav-account").hidden = s.workspace !== "default";
  } catch (e) {
    return;
  }
  window.addEventListener("hashchange", route);
  route();
}

document.addEventListener("DOMContentLoaded", start);
