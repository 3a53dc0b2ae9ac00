// Ballast status page, advice panel: under every HTTP pool, a button that asks
// GET /api/pools/{pool}/advice (the simulator replays what the pool was seen to do for every
// balancer that fits and a small grid of settings) and shows the same table as
// `ballast advise`: the best choice first, the current one marked, each figure as the median
// of the runs [min, max]. The advice runs in the proxy's process, one at a time and cached for
// a few seconds, so it is computed only when asked.
"use strict";
(function () {
  const poolsEl = document.getElementById("pools");

  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function ms(x) {
    if (x >= 1000) return (x / 1000).toFixed(2) + "s";
    if (x >= 10) return x.toFixed(0) + "ms";
    if (x >= 1) return x.toFixed(1) + "ms";
    return x.toFixed(2) + "ms";
  }
  const range = (v, r, f) => f(v) + " [" + f(r[0]) + ", " + f(r[1]) + "]";
  const num = (d) => (x) => Number(x).toFixed(d);

  function render(panel, adv) {
    const out = panel.querySelector(".advice-out");
    out.replaceChildren();
    out.append(el("p", "muted", adv.objective + " · " + adv.runs + " runs per choice · " + adv.requests + " requests each"));
    for (const m of adv.model || []) out.append(el("div", "muted", "model: " + m));
    const ids = Object.keys((adv.choices[0] || {}).predicted.share_pct || {}).sort();
    const table = el("table", "advice");
    const head = el("tr");
    for (const h of ["", "balancer", "max_conns", "max_queue", "hedge", "throughput req/s", "makespan s", "p50", "p99", "queue", "share " + ids.join("/"), "failed"]) head.append(el("th", "", h));
    const thead = el("thead"); thead.append(head);
    const tbody = el("tbody");
    adv.choices.forEach((c, i) => {
      const tr = el("tr");
      tr.dataset.balancer = c.balancer;
      if (i === 0) tr.classList.add("best");
      if (c.current) tr.classList.add("current");
      const mark = [i === 0 ? "best" : "", c.current ? "current" : ""].filter(Boolean).join(", ");
      const s = c.settings, p = c.predicted, r = c.range;
      const cells = [mark, c.balancer, s.max_conns, s.max_conns ? s.max_queue : "-", s.hedge_delay_ms ? ms(s.hedge_delay_ms) : "off",
        range(p.throughput_rps, r.throughput_rps, num(0)), range(p.makespan_s, r.makespan_s, num(3)),
        range(p.p50_ms, r.p50_ms, ms), range(p.p99_ms, r.p99_ms, ms), range(p.queue_ms, r.queue_ms, ms),
        ids.map((id) => Number(p.share_pct[id] || 0).toFixed(0)).join("/"),
        (p.failed_pct + p.errors_pct) ? (p.failed_pct + p.errors_pct).toFixed(1) + "%" : "0"];
      const labels = ["", "balancer", "max_conns", "max_queue", "hedge", "throughput", "makespan", "p50", "p99", "queue", "share", "failed"];
      cells.forEach((v, k) => { const td = el("td", labels[k] || "mark", String(v)); if (labels[k]) td.dataset.label = labels[k]; tr.append(td); });
      tbody.append(tr);
    });
    table.append(thead, tbody);
    const wrap = el("div", "tablewrap"); wrap.append(table);
    out.append(wrap, el("p", "verdict", "verdict: " + adv.verdict));
  }

  async function ask(panel, pool) {
    const btn = panel.querySelector("button.advise");
    const obj = panel.querySelector("select").value;
    const status = panel.querySelector(".advice-status");
    btn.disabled = true;
    status.textContent = "replaying in the simulator…";
    status.className = "advice-status muted";
    try {
      const r = await fetch("/api/pools/" + encodeURIComponent(pool) + "/advice?objective=" + encodeURIComponent(obj), { cache: "no-store", headers: window.ballastAuthHeaders({}) });
      const j = await r.json();
      if (!r.ok) throw new Error(j.error || r.statusText);
      render(panel, j);
      status.textContent = "computed " + new Date().toLocaleTimeString();
      panel.dataset.loaded = "true";
    } catch (e) {
      status.textContent = "no advice: " + e.message;
      status.className = "advice-status bad";
    } finally {
      btn.disabled = false;
    }
  }

  function attach(section) {
    if (section.querySelector(".advice-panel")) return;
    const h = section.querySelector("h2");
    if (!h || !h.textContent.startsWith("pool ")) return; // tcp/udp pools: nothing to replay
    const pool = section.dataset.pool;
    const panel = el("div", "advice-panel");
    const bar = el("div", "advice-bar");
    const sel = el("select");
    sel.setAttribute("aria-label", "objective for " + pool);
    for (const o of ["p99", "throughput", "makespan"]) { const op = el("option", "", o); op.value = o; sel.append(op); }
    const btn = el("button", "advise", "advise");
    btn.onclick = () => ask(panel, pool);
    bar.append(el("strong", "", "advise "), sel, btn, el("span", "advice-status muted", ""));
    panel.append(bar, el("div", "advice-out"));
    section.append(panel);
  }

  new MutationObserver(() => poolsEl.querySelectorAll("section.pool").forEach(attach)).observe(poolsEl, { childList: true });
  poolsEl.querySelectorAll("section.pool").forEach(attach);
})();
