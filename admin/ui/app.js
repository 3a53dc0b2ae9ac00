// Ballast status page: polls /api/pools every second, keeps a minute of req/s (connections/s
// in tcp and udp pools) per backend, shows the listeners' counters, and sends runtime changes
// with the page nonce (and the admin token when one is required).
"use strict";
(function () {
  const nonce = document.querySelector('meta[name="ballast-nonce"]').content;
  const tokenRequired = document.querySelector('meta[name="ballast-token-required"]').content === "true";
  const readsNeedToken = document.querySelector('meta[name="ballast-reads-need-token"]').content === "true";
  const poolsEl = document.getElementById("pools");
  const listenersEl = document.getElementById("listeners");
  const msgEl = document.getElementById("message");
  const updatedEl = document.getElementById("updated");
  const tokenEl = document.getElementById("token");
  const HISTORY = 60;
  const COLORS = ["#2f6fde", "#d9480f", "#2b8a3e", "#ae3ec9", "#e67700", "#0c8599", "#c2255c", "#5c940d", "#495057", "#1864ab"];
  const pools = new Map(); // name -> {section, tbody, canvas, rows: Map(id -> row), hist: Map(id -> [])}
  let last = null; // previous response, for rates

  if (tokenRequired || readsNeedToken) {
    document.getElementById("tokenbox").hidden = false;
    tokenEl.value = sessionStorage.getItem("ballast-token") || "";
    tokenEl.addEventListener("change", () => {
      sessionStorage.setItem("ballast-token", tokenEl.value);
      poll();
    });
  }

  // authHeaders carries the token the operator typed, for reads (admin.reads: token) and changes.
  function authHeaders(h) {
    if ((tokenRequired || readsNeedToken) && tokenEl.value) h["Authorization"] = "Bearer " + tokenEl.value;
    return h;
  }
  window.ballastAuthHeaders = authHeaders; // the advice panel's reads (advise.js) carry it too

  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function bytes(n) {
    const units = ["B", "kB", "MB", "GB", "TB"];
    let i = 0;
    while (n >= 1000 && i < units.length - 1) { n /= 1000; i++; }
    return (i ? n.toFixed(1) : String(n)) + " " + units[i];
  }

  function fmt(n, digits) {
    if (n === null || n === undefined) return "–";
    return Number(n).toFixed(digits);
  }

  function say(text, bad) {
    msgEl.textContent = text;
    msgEl.className = bad ? "bad" : "good";
  }

  async function send(pool, id, action, body) {
    const headers = authHeaders({ "Content-Type": "application/json", "X-Ballast-Nonce": nonce });
    const url = "/api/pools/" + encodeURIComponent(pool) + "/backends/" + encodeURIComponent(id) + "/" + action;
    try {
      const r = await fetch(url, { method: "POST", headers, body: JSON.stringify(body || {}), credentials: "same-origin" });
      const j = await r.json();
      if (!r.ok) throw new Error(j.error || r.statusText);
      say("done: " + j.change, false);
      poll();
    } catch (e) {
      say("refused: " + e.message, true);
    }
  }

  // confirmBar asks in the page (no window.confirm) before a change is sent.
  function confirmBar(row, text, go) {
    const bar = row.confirm;
    bar.replaceChildren();
    bar.append(el("span", "", text + "? "));
    const yes = el("button", "confirm", "Confirm");
    const no = el("button", "cancel", "Cancel");
    yes.dataset.action = "confirm";
    yes.onclick = () => { bar.hidden = true; go(); };
    no.onclick = () => { bar.hidden = true; };
    bar.append(yes, no);
    bar.hidden = false;
  }

  function makeRow(pool, b, color) {
    const tr = el("tr");
    tr.dataset.backend = b.id;
    const row = { tr, cells: {} };
    const name = el("td", "name");
    const sw = el("span", "swatch");
    sw.style.background = color;
    name.append(sw, el("span", "", b.id), el("div", "muted addr", b.address));
    tr.append(name);
    for (const k of ["state", "weight", "busy", "requests", "errors", "bytes", "rate", "ewma", "p99", "lbstatus", "health"]) {
      const td = el("td", k);
      td.dataset.label = k;
      row.cells[k] = td;
      tr.append(td);
    }
    const ctl = el("td", "controls");
    for (const act of ["drain", "disable", "enable"]) {
      const btn = el("button", act, act);
      btn.dataset.action = act;
      btn.onclick = () => confirmBar(row, act + " " + b.id + " in " + pool, () => send(pool, b.id, act));
      ctl.append(btn);
    }
    const w = el("input", "weight-input");
    w.type = "number"; w.min = "0"; w.max = "10000"; w.placeholder = "weight"; w.setAttribute("aria-label", "new weight for " + b.id);
    const set = el("button", "setweight", "set weight");
    set.dataset.action = "weight";
    set.onclick = () => {
      const n = parseInt(w.value, 10);
      if (isNaN(n) || n < 0) { say("weight must be a number ≥ 0", true); return; }
      confirmBar(row, "set weight of " + b.id + " to " + n, () => send(pool, b.id, "weight", { weight: n }));
    };
    ctl.append(w, set);
    row.confirm = el("div", "confirmbar");
    row.confirm.hidden = true;
    ctl.append(row.confirm);
    tr.append(ctl);
    return row;
  }

  function poolSection(p) {
    let s = pools.get(p.name);
    if (s) return s;
    const section = el("section", "pool");
    section.dataset.pool = p.name;
    const l4 = p.protocol === "l4";
    const h = el("h2", "", (l4 ? "tcp/udp pool " : "pool ") + p.name);
    const meta = el("div", "meta muted");
    const canvas = el("canvas", "chart");
    canvas.width = 600; canvas.height = 120;
    canvas.setAttribute("aria-label", (l4 ? "connections" : "requests") + " per second per backend, last minute");
    const table = el("table");
    const head = el("tr");
    const cols = l4
      ? ["backend", "state", "weight (eff.)", "open", "connections", "failures (connect)", "bytes in / out", "conn/s", "connect ewma ms", "connect p99 ms", "lbstatus", "last check", "controls"]
      : ["backend", "state", "weight (eff.)", "busy", "requests", "errors", "bytes", "req/s", "peak-ewma ms", "p99 ms", "lbstatus", "last check", "controls"];
    for (const t of cols) head.append(el("th", "", t));
    const thead = el("thead"); thead.append(head);
    const tbody = el("tbody");
    table.append(thead, tbody);
    const wrap = el("div", "tablewrap"); wrap.append(table);
    section.append(h, meta, canvas, wrap);
    poolsEl.append(section);
    s = { section, meta, canvas, tbody, l4, rows: new Map(), hist: new Map(), colors: new Map() };
    pools.set(p.name, s);
    return s;
  }

  function draw(s) {
    const c = s.canvas, g = c.getContext("2d");
    const w = c.width, h = c.height;
    g.clearRect(0, 0, w, h);
    let max = 1;
    for (const arr of s.hist.values()) for (const v of arr) max = Math.max(max, v);
    g.strokeStyle = "#ddd"; g.lineWidth = 1;
    g.beginPath(); g.moveTo(0, h - 0.5); g.lineTo(w, h - 0.5); g.stroke();
    g.fillStyle = "#888"; g.font = "11px sans-serif";
    g.fillText(max.toFixed(0) + (s.l4 ? " conn/s" : " req/s"), 4, 12);
    for (const [id, arr] of s.hist) {
      g.strokeStyle = s.colors.get(id) || "#000"; g.lineWidth = 2;
      g.beginPath();
      arr.forEach((v, i) => {
        const x = (w * (HISTORY - arr.length + i)) / (HISTORY - 1);
        const y = h - 2 - (h - 16) * (v / max);
        if (i === 0) g.moveTo(x, y); else g.lineTo(x, y);
      });
      g.stroke();
    }
  }

  function render(data) {
    const prev = new Map();
    if (last) for (const p of last.pools) for (const b of p.backends) prev.set(p.name + "\u0000" + b.id, b.requests);
    const dt = last ? (new Date(data.time) - new Date(last.time)) / 1000 : 0;
    const seen = new Set();
    for (const p of data.pools) {
      seen.add(p.name);
      const s = poolSection(p);
      const ov = p.overrides || {};
      const parts = [p.balancer, "queue " + p.queue + "/" + p.max_queue, "queued " + p.queue_stats.queued, "timed out " + p.queue_stats.timed_out, "rejected " + p.queue_stats.rejected];
      const n = (ov.backends || []).length + (ov.added || []).length + (ov.removed || []).length;
      if (n) parts.push(n + " runtime override" + (n > 1 ? "s" : ""));
      if (p.panic) parts.push("PANIC: too few backends fit, balancing over all");
      s.meta.textContent = parts.join(" · ");
      const ids = new Set();
      p.backends.forEach((b, i) => {
        ids.add(b.id);
        if (!s.colors.has(b.id)) s.colors.set(b.id, COLORS[s.colors.size % COLORS.length]);
        let row = s.rows.get(b.id);
        if (!row) { row = makeRow(p.name, b, s.colors.get(b.id)); s.rows.set(b.id, row); }
        if (s.tbody.children[i] !== row.tr) s.tbody.insertBefore(row.tr, s.tbody.children[i] || null);
        const before = prev.get(p.name + "\u0000" + b.id);
        const rate = before !== undefined && dt > 0 ? Math.max(0, (b.requests - before) / dt) : 0;
        const arr = s.hist.get(b.id) || [];
        arr.push(rate); if (arr.length > HISTORY) arr.shift();
        s.hist.set(b.id, arr);
        const c = row.cells;
        c.state.textContent = b.state;
        row.tr.className = "st-" + b.state;
        c.weight.textContent = b.weight + (b.weight_overridden ? "*" : "") + " (" + fmt(b.effective_weight, 1) + ")";
        c.weight.title = b.weight_overridden ? "runtime override; configured " + b.config_weight : "configured";
        c.busy.textContent = b.in_flight + (b.max_conns ? "/" + b.max_conns : "");
        c.requests.textContent = b.requests;
        c.errors.textContent = b.failures + (b.conns ? " (" + b.conns.connect_failures + ")" : "");
        c.bytes.textContent = b.conns ? bytes(b.conns.bytes_in) + " / " + bytes(b.conns.bytes_out) : "–";
        c.rate.textContent = fmt(rate, 1);
        c.ewma.textContent = fmt(b.latency_ewma_ms, 1);
        c.p99.textContent = fmt(b.latency_p99_ms, 1);
        c.lbstatus.textContent = b.lbstatus === undefined ? "–" : b.lbstatus;
        if (b.health) {
          c.health.textContent = (b.health.ok ? "ok" : "fail: " + b.health.detail) + " (" + fmt(b.health.took_ms, 1) + " ms)";
          c.health.className = "health " + (b.health.ok ? "good" : "bad");
        } else {
          c.health.textContent = "–";
        }
        if (b.ejections) c.health.textContent += " · ejected ×" + b.ejections;
      });
      for (const [id, row] of s.rows) if (!ids.has(id)) { row.tr.remove(); s.rows.delete(id); s.hist.delete(id); }
      draw(s);
    }
    for (const [name, s] of pools) if (!seen.has(name)) { s.section.remove(); pools.delete(name); }
    renderHA(data.ha);
    renderBGP(data.bgp);
    renderDirectors(data.directors || []);
    renderDiscovery(data.discovery || [], data.fleet);
    renderListeners(data.listeners || []);
    last = data;
    updatedEl.textContent = "updated " + new Date(data.time).toLocaleTimeString();
    document.body.dataset.loaded = "true";
  }

  // Discovery sources and the fleet (admin/discovery.go, admin/fleet.go): a stale set or a node
  // cut off from etcd is said in words, with since when.
  const discoveryEl = document.getElementById("discovery");
  function renderDiscovery(ds, fleet) {
    discoveryEl.hidden = ds.length === 0 && !fleet;
    discoveryEl.replaceChildren();
    if (discoveryEl.hidden) return;
    discoveryEl.append(el("h2", null, "discovery"));
    for (const d of ds) {
      const p = el("p", d.stale ? "bad" : "good");
      p.dataset.pool = d.pool;
      p.textContent = "pool " + d.pool + " · " + d.source + " · " + d.backends + " backends (" + d.draining + " draining) · " +
        (d.stale ? "STALE since " + new Date(d.stale_since).toLocaleTimeString() + ": " + d.last_error + " (keeping the last good set)"
          : "current" + (d.updated ? ", updated " + new Date(d.updated).toLocaleTimeString() : "")) +
        " · changes " + d.changes + " · added " + d.added + " · drained " + d.drained + " · removed " + d.removed;
      discoveryEl.append(p);
    }
    if (fleet) {
      const p = el("p", fleet.connected ? "good" : "bad");
      p.id = "fleet";
      p.textContent = "fleet " + fleet.prefix + " on etcd " + (fleet.endpoints || []).join(", ") + " · " +
        (fleet.connected ? "connected since " + new Date(fleet.since).toLocaleTimeString()
          : "DISCONNECTED since " + new Date(fleet.since).toLocaleTimeString() + ", serving its last view: " + (fleet.last_error || "")) +
        " · revision " + fleet.revision + " · " + fleet.keys + " keys · " + fleet.applied + " changes applied";
      discoveryEl.append(p);
    }
  }

  // The HA virtual router (admin/ha.go): state, priority, master, adverts, flow sync.
  const haEl = document.getElementById("ha");
  function renderHA(h) {
    haEl.hidden = !h;
    if (!h) return;
    const st = document.getElementById("ha-state");
    st.textContent = h.state + (h.fault ? " (" + h.fault + ")" : "");
    st.className = "hastate ha-" + h.state;
    haEl.dataset.state = h.state;
    const errs = Object.entries(h.advert_errors || {}).filter(([, n]) => n > 0).map(([k, n]) => k + " " + n).join(", ") || "none";
    const rows = [
      ["priority", h.priority + " (configured " + h.configured_priority + ")"],
      ["master", (h.master || "none heard") + " (priority " + h.master_priority + ", interval " + h.master_advert_interval + ")"],
      ["router", "VRID " + h.virtual_router_id + " on " + h.interface + " from " + h.address + ", interval " + h.advert_interval + (h.preempt ? ", preempt" : "")],
      ["addresses", (h.addresses || []).join(", ")],
      ["adverts", h.adverts_sent + " sent, " + h.adverts_received + " received"],
      ["transitions", h.transitions + " (master " + h.became_master + " times), since " + new Date(h.since).toLocaleTimeString()],
      ["advert errors", errs],
      ["ARP answered", String(h.arp_answered)],
    ];
    if (h.flow_sync) {
      const f = h.flow_sync;
      rows.push(["flow sync", (f.sending ? "sending" : "receiving") + ": " + f.flows_sent + " sent, " + f.flows_dropped + " dropped, " +
        f.flows_received + " received, " + f.flows_installed + " installed" + (f.error ? " · error: " + f.error : "")]);
    }
    const tbody = haEl.querySelector("tbody");
    tbody.replaceChildren();
    for (const [k, v] of rows) {
      const tr = el("tr");
      tr.dataset.key = k;
      tr.append(el("th", null, k), el("td", null, v));
      tbody.append(tr);
    }
  }

  // The BGP speaker (admin/bgp.go): sessions with the routers, what is announced and why.
  const bgpEl = document.getElementById("bgp");
  function renderBGP(b) {
    bgpEl.hidden = !b;
    if (!b) return;
    const st = document.getElementById("bgp-state");
    st.textContent = b.draining ? "draining" : b.announced + " announced";
    st.className = "hastate " + (b.draining ? "ha-fault" : b.announced > 0 ? "ha-master" : "ha-backup");
    bgpEl.dataset.state = b.draining ? "draining" : "announcing";
    const sessions = bgpEl.querySelector("table.bgp-sessions tbody");
    sessions.replaceChildren();
    for (const s of b.sessions || []) {
      const tr = el("tr");
      tr.dataset.peer = s.peer;
      tr.dataset.state = s.state;
      tr.append(el("td", null, s.peer), el("td", null, String(s.asn)), el("td", null, s.state), el("td", null, s.uptime || "-"),
        el("td", null, String(s.prefixes_sent)), el("td", null, s.bfd ? s.bfd + " (" + (s.bfd_failures || 0) + " failures)" : "off"));
      sessions.append(tr);
    }
    const routes = bgpEl.querySelector("table.bgp-routes tbody");
    routes.replaceChildren();
    for (const r of b.routes || []) {
      const tr = el("tr");
      tr.dataset.prefix = r.prefix;
      tr.dataset.announced = String(r.announced);
      tr.append(el("td", null, r.prefix), el("td", null, r.announced ? "yes" : "no"), el("td", null, r.reason));
      routes.append(tr);
    }
    let sum = "AS " + b.asn + " · router ID " + b.router_id + " · BFD " + b.bfd_timers + " · cluster seed " + b.cluster_seed +
      " · " + b.announcements + " announcements, " + b.withdrawals + " withdrawals";
    if (b.flow_sync) {
      const f = b.flow_sync;
      sum += " · flow sync: " + f.flows_sent + " sent, " + f.flows_dropped + " dropped, " + f.flows_received + " received, " + f.flows_installed + " installed";
    }
    if (b.error) sum += " · error: " + b.error;
    document.getElementById("bgp-summary").textContent = sum;
  }

  // The XDP directors (admin/director.go): one table per VIP, one row per real server.
  const directorsEl = document.getElementById("directors");
  function renderDirectors(ds) {
    directorsEl.hidden = ds.length === 0;
    directorsEl.replaceChildren();
    for (const d of ds) {
      directorsEl.append(el("h2", null, "XDP director on " + d.interface + " (" + d.mode + ")" + (d.error ? " · error: " + d.error : "")));
      for (const v of d.vips || []) {
        directorsEl.append(el("p", "muted", "VIP " + v.vip + " · listener " + v.listener + " · pool " + v.pool + " (" + v.scheduler +
          ") · packets " + v.packets + " · bytes " + v.bytes + " · new flows " + v.new_flows + " · active " + v.active_flows + " · drops " + v.drops));
        const table = el("table", "directors");
        table.dataset.vip = v.vip;
        const head = el("tr");
        for (const h of ["real server", "state", "weight", "slots", "packets", "bytes", "new flows", "active flows"]) head.append(el("th", null, h));
        table.append(head);
        for (const r of v.reals || []) {
          const tr = el("tr", "st-" + r.state);
          tr.dataset.real = r.backend;
          for (const x of [r.backend, r.state, r.weight, r.slots, r.packets, r.bytes, r.new_flows, r.active_flows]) tr.append(el("td", null, String(x)));
          table.append(tr);
        }
        directorsEl.append(table);
      }
    }
  }

  // renderListeners shows the counters planes keep per listener (tcp, udp, and http listeners
  // with accept_proxy).
  function renderListeners(ls) {
    listenersEl.hidden = ls.length === 0;
    const tbody = listenersEl.querySelector("tbody");
    tbody.replaceChildren();
    for (const l of ls) {
      const tr = el("tr");
      tr.dataset.listener = l.listener;
      const udp = l.protocol === "udp";
      const cells = {
        name: l.listener, protocol: l.protocol,
        accepted: udp ? l.flows + " flows" : l.accepted,
        active: l.active,
        proxy_refused: l.proxy_refused,
        no_backend: udp ? l.dropped_no_backend + " dropped" : l.no_backend,
        other: udp ? "dropped at max_flows " + l.dropped_max_flows + " · expired " + l.flows_expired + " · " + bytes(l.bytes_in) + " / " + bytes(l.bytes_out)
          : "no route " + l.no_route + " · idle closed " + l.idle_closed + " · retries " + l.retries,
      };
      for (const [k, v] of Object.entries(cells)) {
        const td = el("td", k, String(v));
        td.dataset.label = k;
        tr.append(td);
      }
      tbody.append(tr);
    }
  }

  let busy = false;
  async function poll() {
    if (busy) return;
    busy = true;
    try {
      const r = await fetch("/api/pools", { cache: "no-store", headers: authHeaders({}) });
      if (r.status === 401) {
        updatedEl.textContent = tokenEl.value ? "token refused: enter the admin token" : "enter the admin token to see the pools";
        updatedEl.className = "bad";
        tokenEl.focus();
        return;
      }
      updatedEl.className = "muted";
      render(await r.json());
    } catch (e) {
      updatedEl.textContent = "connection lost: " + e.message;
    } finally {
      busy = false;
    }
  }
  poll();
  setInterval(poll, 1000);
})();
