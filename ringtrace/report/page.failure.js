// A failed run's ring at the failure, from its host log's deadlock report: what was used, what was free,
// what was asked, against the capacity (the runtime's simulator writes no records for a failed run).
function failureBar(f) {
  const res = f.resource, wrap = el("div", {"class": "failure pic", "data-resource": res, "data-ring": f.ring === null ? "-" : f.ring});
  const where = (f.ring === null ? "ring not named by the report" : "ring " + f.ring) + " " + WORDS[res] + (f.pool === "fanin_spill_pool" ? " (fanin spill pool)" : "");
  wrap.appendChild(el("h3", {}, where + " at the failure — " + (f.code_name || "") + (f.code !== null ? " (code " + f.code + ")" : "")));
  const cap = f.capacity, used = f.used || 0, avail = f.available || 0, asked = f.requested || 0;
  const top = Math.max(cap || 0, used + avail, asked, 1) * 1.08;
  const W = 760, H = 112, L = 92, R = 20, T = 12, pw = W - L - R, row = 26;
  const X = v => L + pw * v / top;
  const s = svg("svg", {width: W, height: H, "class": "fbar"});
  const gx = svg("g", {"class": "x-axis"}), gy = svg("g", {"class": "y-axis"});
  unitTicks(res, 0, top, 5).filter(([v]) => v <= top).forEach(([v, label]) => add(gx,
    svg("line", {x1: X(v), x2: X(v), y1: T, y2: T + 2 * row + 12, "class": "grid"}),
    svg("text", {x: X(v), y: T + 2 * row + 26, "text-anchor": "middle", "class": "tick"}, label)));
  add(gx, svg("text", {x: L + pw, y: H - 2, "text-anchor": "end", "class": "axis-title"}, UNIT[res]));
  [["ring state", T + row / 2], ["request", T + row * 1.5 + 6]].forEach(([t, y]) =>
    add(gy, svg("text", {x: L - 8, y: y + 4, "text-anchor": "end", "class": "tick"}, t)));
  add(s, gx, gy);
  const seg = (x0, x1, y, cls, label) => { if (x1 <= x0) return;
    add(s, add(svg("rect", {x: X(x0), y: y, width: Math.max(1, X(x1) - X(x0)), height: row - 6, "class": cls}), svg("title", {}, label))); };
  const held = cap ? Math.max(0, cap - used - avail) : 0;
  seg(0, used, T, "used", "used " + withUnit(res, used));
  seg(used, used + held, T, "held", "neither used nor available, as the log counts them: " + withUnit(res, held));
  seg(used + held, used + held + avail, T, "avail", "available " + withUnit(res, avail));
  seg(0, asked, T + row + 6, "asked", "requested " + withUnit(res, asked));
  if (cap) add(s, svg("line", {x1: X(cap), x2: X(cap), y1: T - 6, y2: T + 2 * row + 6, "class": "capacity"}),
    svg("text", {x: X(cap) - 4, y: T + 2 * row + 2, "text-anchor": "end", "class": "cap-label"}, "capacity " + withUnit(res, cap)));
  wrap.appendChild(s);
  const key = el("div", {"class": "facts key"});
  [["used", "used"], ["held", "neither used nor available, as the log counts them"], ["avail", "available"], ["asked", "requested"]]
    .forEach(([cls, text]) => add(key, add(svg("svg", {width: 16, height: 10, "class": "glyph"}), svg("rect", {x: 1, y: 1, width: 14, height: 8, "class": cls})), text + "  "));
  wrap.appendChild(key);
  const facts = [["capacity", cap], ["used", f.used], ["available", f.available], ["requested", f.requested]]
    .filter(([, v]) => v !== null && v !== undefined).map(([k, v]) => k + " " + withUnit(res, v));
  wrap.appendChild(el("div", {"class": "facts"}, facts.join(" · ") + " — " + f.title + " (" + f.log + ":" + f.line + ")" +
    (f.provable ? "; provable head-of-line deadlock" : "")));
  return wrap;
}
