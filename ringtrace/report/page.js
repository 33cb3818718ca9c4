(function () {
"use strict";
const doc = JSON.parse(document.getElementById("data").textContent);
const root = document.getElementById("report"), tip = document.getElementById("tip");
const NS = "http://www.w3.org/2000/svg", W = 1200, H = 150, PAD = 4;
function el(tag, attrs, text) { const e = document.createElement(tag);
  for (const k in attrs || {}) e.setAttribute(k, attrs[k]); if (text !== undefined) e.textContent = text; return e; }
function svg(tag, attrs) { const e = document.createElementNS(NS, tag); for (const k in attrs) e.setAttribute(k, attrs[k]); return e; }
function amount(res, n) { if (n === null || n === undefined) return "-";
  if (res !== "heap") return String(n);
  for (const [u, s] of [["GiB", 1 << 30], ["MiB", 1 << 20], ["KiB", 1 << 10]]) if (Math.abs(n) >= s) return (n / s).toFixed(1) + " " + u;
  return n + " B"; }
function pct(x) { return x === null || x === undefined ? "-" : (100 * x).toFixed(1) + "%"; }
function table(head, rows, cls) { const t = el("table", cls ? {"class": cls} : {}); const tr = el("tr");
  head.forEach(h => tr.appendChild(el("th", {}, h))); t.appendChild(tr);
  rows.forEach(r => { const row = el("tr"); r.forEach((c, i) => row.appendChild(el("td", typeof c === "number" || (i > 1 && /^-?[\d.]+( [KMG]iB| B|%)?$/.test(String(c))) ? {"class": "n"} : {}, String(c)))); t.appendChild(row); });
  return t; }
function chip(kind) { return el("span", {"class": "chip " + kind}, kind === "near" ? "near capacity" : kind); }

function programFor(src) { return doc.programs.find(p => p.sources.includes(src.file.path || (src.file.host_log || {}).path)); }
function advice(box, p) {
  if (!p) return;
  box.appendChild(el("h3", {}, "Advice for " + p.program + ": " + (p.final ? "final sizes" : p.blocked.length ? "sizing cannot fix this" : "next measurement run") + " (" + p.runs + " run(s))"));
  p.blocked.forEach(b => box.appendChild(el("div", {"class": "finding error"}, b)));
  p.notes.forEach(b => box.appendChild(el("div", {"class": "finding warning"}, b)));
  if (p.snippets.length) box.appendChild(el("pre", {"class": "runconfig"}, p.snippets.join("\n")));
  box.appendChild(table(["ring", "resource", "lower", "upper", "advice", "why"], p.advice.map(a => [a.ring, a.resource,
    amount(a.resource, a.lower_bound), amount(a.resource, a.upper_bound),
    a.recommended !== null ? "set " + amount(a.resource, a.recommended) : a.measure_next !== null ? "measure at " + amount(a.resource, a.measure_next) : "-",
    a.reason]), "advice"));
}

function chart(box, src, c, figs) {
  const wrap = el("div", {"class": "chart", "data-ring": c.ring, "data-resource": c.resource});
  wrap.appendChild(el("h3", {}, (c.resource === "tensormap" ? "tensormap (one global table)" : "ring " + c.ring + " " + c.resource) + (c.capacity ? " (capacity " + amount(c.resource, c.capacity) + ")" : " (capacity unknown)")));
  const s = svg("svg", {viewBox: "0 0 " + W + " " + H, preserveAspectRatio: "none", role: "img"});
  let top = c.capacity || 1;
  c.occ.forEach(o => { top = Math.max(top, o[2]); });
  for (const f of figs) (c[f] || []).forEach(p => { top = Math.max(top, p[1]); });
  const X = x => PAD + (W - 2 * PAD) * x / Math.max(src.x_max, 1), Y = v => H - PAD - (H - 2 * PAD) * v / top;
  if (c.occ.length) {
    const up = c.occ.map(o => X(o[0]).toFixed(1) + "," + Y(o[2]).toFixed(1));
    const down = c.occ.slice().reverse().map(o => X(o[0]).toFixed(1) + "," + Y(o[1]).toFixed(1));
    s.appendChild(svg("polygon", {points: up.concat(down).join(" "), fill: "#90caf9", stroke: "#1e88e5", "stroke-width": 1, "class": "occupancy"}));
  }
  const colors = {high_water: "#8e24aa", live_at_exit: "#43a047", alloc: "#fb8c00"};
  for (const f of figs) { const pts = (c[f] || []).map(p => X(p[0]).toFixed(1) + "," + Y(p[1]).toFixed(1));
    if (pts.length) s.appendChild(svg("polyline", {points: pts.join(" "), fill: "none", stroke: colors[f], "stroke-width": 1.2, "class": "scope-" + f})); }
  if (c.capacity) s.appendChild(svg("line", {x1: 0, x2: W, y1: Y(c.capacity), y2: Y(c.capacity), stroke: "#c62828", "stroke-dasharray": "6 4", "class": "capacity"}));
  const ring = src.file.rings.find(r => r.ring === c.ring && r.resource === c.resource);
  if (ring && ring.high_water_site) { const hw = (c.high_water || []).reduce((a, p) => p[1] > (a ? a[1] : -1) ? p : a, null);
    if (hw) { s.appendChild(svg("circle", {cx: X(hw[0]), cy: Y(hw[1]), r: 4, fill: "#8e24aa", "class": "peak"}));
      const t = svg("text", {x: Math.min(X(hw[0]) + 6, W - 260), y: Math.max(Y(hw[1]) + 4, 14), "font-size": 12, fill: "#4a148c", "class": "peak-label"}); t.textContent = "peak " + ring.high_water_site; s.appendChild(t); } }
  src.file.wedged.filter(w => w.ring === c.ring).slice(-1).forEach(w => {
    s.appendChild(svg("line", {x1: X(w.line), x2: X(w.line), y1: 0, y2: H, stroke: "#c62828", "stroke-width": 2, "class": "wedge"}));
    const t = svg("text", {x: Math.max(X(w.line) - 250, 4), y: 14, "font-size": 12, fill: "#c62828", "class": "wedge-label"}); t.textContent = "WEDGED " + w.site; s.appendChild(t); });
  s.addEventListener("mousemove", ev => { const r = s.getBoundingClientRect(); const x = (ev.clientX - r.left) / r.width * W;
    let best = null, dist = 1e9; for (const o of c.occ) { const d = Math.abs(X(o[0]) - x); if (d < dist) { dist = d; best = o; } }
    if (!best) return; const cap = c.capacity ? " / " + amount(c.resource, c.capacity) + " (" + pct(best[2] / c.capacity) + ")" : "";
    tip.textContent = "line " + best[3] + "  " + src.strings[best[4]] + "  depth " + best[5] + "\nlive " + amount(c.resource, best[2]) + cap + "  (min in column " + amount(c.resource, best[1]) + ")";
    tip.style.display = "block"; tip.style.left = (ev.clientX + 12) + "px"; tip.style.top = (ev.clientY + 12) + "px"; });
  s.addEventListener("mouseleave", () => { tip.style.display = "none"; });
  wrap.appendChild(s);
  const lg = el("div", {"class": "legend"});
  [["#1e88e5", "occupancy (head - tail) per record: min..max per column"], ["#8e24aa", "high water per scope (end.head - begin.tail)"], ["#fb8c00", "alloc per scope (end.head - begin.head); live at exit is the band at a scope's end"], ["#c62828", "capacity"]]
    .forEach(([col, txt]) => { const sp = el("span"); sp.appendChild(el("span", {"class": "sw", style: "background:" + col})); sp.appendChild(document.createTextNode(txt)); lg.appendChild(sp); });
  wrap.appendChild(lg);
  box.appendChild(wrap);
}

function section(src, i) {
  const f = src.file, box = el("section", {"class": "source", id: "s" + i, "data-verdict": src.verdict.kind});
  box.appendChild(el("h2", {}, src.name));
  const v = el("div", {"class": "verdict"}); v.appendChild(chip(src.verdict.kind)); v.appendChild(document.createTextNode(src.verdict.text)); box.appendChild(v);
  box.appendChild(el("div", {"class": "muted"}, (f.path || "(no scope_stats file; host log " + (f.host_log || {}).path + ")") +
    " - version " + f.version + ", records " + f.records + (f.total !== null ? "/" + f.total : "") + ", dropped " + f.dropped + ", fatal " + f.fatal));
  advice(box, programFor(src));
  if (f.rings.length) box.appendChild(table(["ring", "resource", "capacity", "high water", "use", "live at exit", "alloc", "peak site"],
    f.rings.map(r => [r.ring, r.resource, amount(r.resource, r.capacity), amount(r.resource, r.high_water), pct(r.high_water_ratio),
      amount(r.resource, r.live_at_exit), amount(r.resource, r.alloc), r.high_water_site]), "rings"));
  f.findings.forEach(x => box.appendChild(el("div", {"class": "finding " + x.severity}, x.severity + " " + x.rule + ": " + x.message)));
  src.charts.forEach(c => chart(box, src, c, ["high_water", "alloc"]));
  if (f.tensormap.capacity && src.tensormap.length) chart(box, src, {ring: "-", resource: "tensormap", capacity: f.tensormap.capacity, occ: src.tensormap}, []);
  return box;
}

if (doc.sources.length > 1) {
  root.appendChild(el("h2", {}, "Overview: " + doc.sources.length + " sources, problems first"));
  root.appendChild(table(["source", "verdict", "worst", "use", "detail"], doc.sources.map(s => {
    const worst = s.file.rings.reduce((a, r) => (r.high_water_ratio || 0) > ((a && a.high_water_ratio) || -1) ? r : a, null);
    return [s.name, s.verdict.kind, worst ? "ring " + worst.ring + " " + worst.resource : "-", worst ? pct(worst.high_water_ratio) : "-", s.verdict.text]; }), "overview"));
}
doc.sources.forEach((s, i) => root.appendChild(section(s, i)));
document.body.setAttribute("data-ready", "1");
})();
