// Shared helpers: elements, units, axis ticks, the tooltip.  Concatenated first (see _page.py).
const NS = "http://www.w3.org/2000/svg";
const doc = JSON.parse(document.getElementById("data").textContent);
const root = document.getElementById("report"), tip = document.getElementById("tip");
const BYTES = [["GiB", 1073741824], ["MiB", 1048576], ["KiB", 1024]];
// The resources as the runtime's table names them (model/runtime.TABLE, and the tensormap), from the data:
// {name: {words, unit, bytes}}.
const RESOURCES = doc.resources;
const WORDS = {}, UNIT = {};
for (const name in RESOURCES) { WORDS[name] = RESOURCES[name].words; UNIT[name] = RESOURCES[name].unit; }
function inBytes(res) { return !!(RESOURCES[res] && RESOURCES[res].bytes); }

function el(tag, attrs, text) {
  const e = document.createElement(tag);
  for (const k in attrs || {}) if (attrs[k] !== null && attrs[k] !== undefined) e.setAttribute(k, attrs[k]);
  if (text !== undefined && text !== null) e.textContent = text;
  return e;
}
function svg(tag, attrs, text) {
  const e = document.createElementNS(NS, tag);
  for (const k in attrs || {}) if (attrs[k] !== null && attrs[k] !== undefined) e.setAttribute(k, attrs[k]);
  if (text !== undefined && text !== null) e.textContent = text;
  return e;
}
function add(parent, ...kids) { kids.forEach(k => { if (k) parent.appendChild(typeof k === "string" ? document.createTextNode(k) : k); }); return parent; }

// A figure as the tables show it (the tests read the same format): a resource counted in bytes in B/KiB/MiB/GiB
// with one decimal.
function amount(res, n) {
  if (n === null || n === undefined) return "-";
  if (!inBytes(res)) return String(n);
  for (const [u, s] of BYTES) if (Math.abs(n) >= s) return (n / s).toFixed(1) + " " + u;
  return n + " B";
}
// A figure with its unit, for sentences and labels: "4 tasks", "64.0 KiB", "12 entries".
function withUnit(res, n) {
  return inBytes(res) ? amount(res, n) : amount(res, n) + " " + (n === 1 ? UNIT[res].replace(/s$/, "").replace(/ie$/, "y") : UNIT[res]);
}
function pct(x) { return x === null || x === undefined ? "-" : (100 * x).toFixed(x >= 10 ? 0 : 1) + "%"; }
function small(x) { return x < 0.001 ? "<0.1%" : pct(x); }
function trim(v) { return String(parseFloat(v.toFixed(2))); }

// Round steps (1, 2, 2.5, 5 x 10^k) giving about n intervals over [lo, hi].
function niceStep(span, n, integer) {
  const raw = Math.max(span, 1e-9) / Math.max(n, 1), mag = Math.pow(10, Math.floor(Math.log10(raw)));
  let step = mag * 10;
  for (const m of [1, 2, 2.5, 5, 10]) if (m * mag >= raw) { step = m * mag; break; }
  return integer ? Math.max(1, Math.round(step)) : step;
}
function linearTicks(lo, hi, n, integer) {
  const step = niceStep(hi - lo, n, integer), out = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(integer ? Math.round(v) : v);
  return out;
}
// Ticks over [lo, hi] in a resource's unit: [[value, label], ...] (bytes: one binary unit for the whole axis).
function unitTicks(res, lo, hi, n) {
  if (inBytes(res)) {
    const [u, s] = BYTES.find(([, s]) => hi >= s) || ["B", 1];
    return linearTicks(lo / s, hi / s, n, s === 1).map(v => [v * s, trim(v) + " " + u]);
  }
  return linearTicks(lo, hi, n, true).map(v => [v, v.toLocaleString("en-US")]);
}
// Compact label of one size on a sizing axis: "845 KiB", "8", "1.5 MiB".
function sizeLabel(res, n) {
  if (!inBytes(res)) return n.toLocaleString("en-US");
  const [u, s] = BYTES.find(([, s]) => n >= s) || ["B", 1];
  return trim(n / s) + " " + u;
}

function showTip(ev, text) {
  tip.textContent = text; tip.style.display = "block";
  const x = Math.min(ev.clientX + 14, window.innerWidth - tip.offsetWidth - 8);
  tip.style.left = Math.max(4, x) + "px"; tip.style.top = (ev.clientY + 14) + "px";
}
function hideTip() { tip.style.display = "none"; }

// One line that opens on click (and says it all on hover): findings, reasons, notes.
function line(cls, head, text) {
  const d = el("div", {"class": "line " + cls, title: text});
  if (head) d.appendChild(el("b", {}, head + " "));
  d.appendChild(el("span", {"class": "msg"}, text));
  d.addEventListener("click", () => d.classList.toggle("open"));
  return d;
}
function table(head, rows, cls) {
  const t = el("table", cls ? {"class": cls} : {}), tr = el("tr");
  head.forEach(h => tr.appendChild(el("th", {}, h))); t.appendChild(tr);
  rows.forEach(r => { const row = el("tr");
    r.forEach(c => row.appendChild(c instanceof Node ? add(el("td"), c) :
      el("td", typeof c === "number" || /^-?[\d.,]+( [KMG]?i?B| B|%)?$/.test(String(c)) ? {"class": "n"} : {}, String(c))));
    t.appendChild(row); });
  return t;
}
