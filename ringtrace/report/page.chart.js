// Time charts: one per ring resource that moved; x = record (its line in the file), y in the resource's unit.
// The charts of one source share their x range: drag on any to zoom them all, double-click to reset.
const M = {l: 78, r: 14, t: 38, b: 40}, CH = 210;
let clipSeq = 0, DRAG = null;

function firstAtLeast(cols, x, k) { let a = 0, b = cols.length;
  while (a < b) { const m = (a + b) >> 1; if (cols[m][k] < x) a = m + 1; else b = m; } return a; }
// The columns in [x0, x1] and one neighbour each side (so a line runs to the edge).
function columnsIn(cols, x0, x1, k) {
  return cols.slice(Math.max(0, firstAtLeast(cols, x0, k) - 1), Math.min(cols.length, firstAtLeast(cols, x1 + 1, k) + 1));
}
function nearestAt(cols, x, k) {
  if (!cols.length) return null;
  const i = Math.min(firstAtLeast(cols, x, k), cols.length - 1);
  return i > 0 && Math.abs(cols[i - 1][k] - x) <= Math.abs(cols[i][k] - x) ? cols[i - 1] : cols[i];
}

window.addEventListener("mouseup", ev => {
  if (!DRAG) return;
  const d = DRAG; DRAG = null; d.sel.setAttribute("visibility", "hidden");
  const px = ev.clientX - d.svg.getBoundingClientRect().left;
  if (Math.abs(px - d.px) < 4) return;
  let a = Math.round(d.inv(Math.min(px, d.px))), b = Math.round(d.inv(Math.max(px, d.px)));
  if (b - a < 4) { const mid = Math.round((a + b) / 2); a = mid - 2; b = mid + 2; }  // at least 5 records
  d.state.dom = [Math.max(a - 0.5, d.state.full[0]), Math.min(b + 0.5, d.state.full[1])];
  d.state.draws.forEach(f => f());
});

function chartTitle(c) {
  const what = c.resource === "tensormap" ? "tensormap (one global table)" : "ring " + c.ring + " " + WORDS[c.resource];
  const cap = c.capacity ? "capacity " + withUnit(c.resource, c.capacity) : "capacity unknown";
  const need = c.need ? " · proven need ≥ " + withUnit(c.resource, c.need) + (c.capacity ? " (" + pct(c.need / c.capacity) + ")" : "") : "";
  return what + " — " + cap + need;
}

// Labels above the plot, in two rows, never over each other: a label that fits no row is left to its marker's hover.
function placeLabels(s, marks, W) {
  const rows = [[], []], ys = [M.t - 24, M.t - 9];
  marks.sort((a, b) => (a.kind === "wedge" ? 0 : 1) - (b.kind === "wedge" ? 0 : 1) || a.px - b.px);
  for (const m of marks) {
    if (!m.text) continue;
    const t = svg("text", {"class": "mark-label " + m.kind + "-label", y: ys[0]}, m.text);
    s.appendChild(t);
    const w = t.getComputedTextLength();
    let left = m.px + 4;
    if (left + w > W - 2) left = m.px - 4 - w;
    left = Math.max(2, left);
    const row = rows.findIndex(r => r.every(([a, b]) => left + w + 8 <= a || left >= b + 8));
    if (row < 0) { t.remove(); continue; }
    rows[row].push([left, left + w]);
    t.setAttribute("x", left); t.setAttribute("y", ys[row]);
  }
}

function timeChart(src, c, state) {
  const wrap = el("div", {"class": "chart pic", "data-ring": c.ring === null ? "-" : c.ring, "data-resource": c.resource});
  wrap.appendChild(el("h3", {}, chartTitle(c)));
  const holder = add(el("div", {"class": "plot"}));
  wrap.appendChild(holder);
  let top = Math.max(1, c.need || 0);
  c.occ.forEach(o => { top = Math.max(top, o[2]); });
  c.high.forEach(h => { top = Math.max(top, h[1]); });
  const capIn = !!c.capacity && c.capacity <= top * 4;  // else the data would fill less than a quarter of the height
  const yMax = capIn ? Math.max(top, c.capacity) * 1.08 : top * 1.12;
  const res = c.resource;

  function draw() {
    const W = Math.max(360, holder.clientWidth || 1000), H = CH, pw = W - M.l - M.r, ph = H - M.t - M.b;
    const [x0, x1] = state.dom, span = Math.max(x1 - x0, 1);
    const X = x => M.l + pw * (x - x0) / span, Y = v => M.t + ph - ph * v / yMax, inv = px => x0 + (px - M.l) / pw * span;
    const s = svg("svg", {width: W, height: H, "class": "tchart", "data-x0": x0, "data-x1": x1});
    const clip = "clip" + (++clipSeq);
    add(s, add(svg("defs"), add(svg("clipPath", {id: clip}), svg("rect", {x: M.l, y: M.t - 1, width: pw, height: ph + 2}))));
    const gy = svg("g", {"class": "y-axis"}), gx = svg("g", {"class": "x-axis"});
    unitTicks(res, 0, yMax, 4).filter(([v]) => v <= yMax).forEach(([v, label]) => {
      add(gy, svg("line", {x1: M.l, x2: M.l + pw, y1: Y(v), y2: Y(v), "class": "grid"}),
          svg("text", {x: M.l - 6, y: Y(v) + 4, "text-anchor": "end", "class": "tick"}, label)); });
    add(gy, svg("text", {"class": "axis-title", "text-anchor": "middle", transform: "translate(13," + (M.t + ph / 2) + ") rotate(-90)"}, UNIT[res]));
    linearTicks(x0, x1, Math.max(2, Math.floor(pw / 120)), true).filter(v => v >= x0 && v <= x1).forEach(v => {
      add(gx, svg("line", {x1: X(v), x2: X(v), y1: M.t + ph, y2: M.t + ph + 4, "class": "tickmark"}),
          svg("text", {x: X(v), y: M.t + ph + 16, "text-anchor": "middle", "class": "tick"}, v.toLocaleString("en-US"))); });
    add(gx, svg("text", {x: M.l + pw, y: H - 4, "text-anchor": "end", "class": "axis-title"}, "record (its line in scope_stats.jsonl)"));
    add(s, gy, gx, svg("path", {d: `M${M.l},${M.t}V${M.t + ph}H${M.l + pw}`, "class": "frame"}));
    const g = svg("g", {"clip-path": "url(#" + clip + ")"});
    const occ = columnsIn(c.occ, x0, x1, 0);
    if (occ.length) {  // steps: a column holds from its first record to the next column's
      const up = [], down = [];
      occ.forEach((o, i) => { const a = X(o[0] - 0.5), b = X((i + 1 < occ.length ? occ[i + 1][0] : Math.max(o[3], o[0]) + 1) - 0.5);
        up.push(a.toFixed(1) + "," + Y(o[2]).toFixed(1), b.toFixed(1) + "," + Y(o[2]).toFixed(1));
        down.push(a.toFixed(1) + "," + Y(o[1]).toFixed(1), b.toFixed(1) + "," + Y(o[1]).toFixed(1)); });
      add(g, svg("polygon", {points: up.concat(down.reverse()).join(" "), "class": "occupancy"}),
          svg("polyline", {points: up.join(" "), "class": "occupancy-top"}));
    }
    columnsIn(c.high, x0, x1, 0).forEach(h => g.appendChild(svg("circle", {cx: X(h[0]).toFixed(1), cy: Y(h[1]).toFixed(1), r: 2.2, "class": "hw"})));
    s.appendChild(g);
    const lines = svg("g", {"class": "levels"});
    if (c.need) add(lines, svg("line", {x1: M.l, x2: M.l + pw, y1: Y(c.need), y2: Y(c.need), "class": "need"}));
    if (capIn) add(lines, svg("line", {x1: M.l, x2: M.l + pw, y1: Y(c.capacity), y2: Y(c.capacity), "class": "capacity"}));
    const capText = !c.capacity ? "capacity unknown (0 in the metadata)" :
      "capacity " + withUnit(res, c.capacity) + (capIn ? "" : " ↑ off scale (the chart's top is " + small(top * 1.12 / c.capacity) + " of it)");
    const capY = capIn ? Y(c.capacity) - 5 : M.t + 13;  // off scale: at the chart's top
    add(lines, svg("text", {x: M.l + 6, y: capY, "class": "cap-label"}, capText));  // left: a wedge is at the right
    if (c.need) {  // above its line, or below it when that is where the capacity's label is (a line of text apart)
      const above = Y(c.need) - 5, needY = Math.abs(above - capY) < 15 ? Math.max(Y(c.need) + 13, capY + 15) : above;
      add(lines, svg("text", {x: M.l + 6, y: needY, "class": "need-label"}, "proven need ≥ " + withUnit(res, c.need)));
    }
    s.appendChild(lines);
    const marks = [];
    c.marks.filter(m => m.x >= x0 && m.x <= x1).forEach(m => {
      const px = X(m.x), mk = svg("g", {"class": "mark " + m.kind});
      if (m.kind === "wedge") add(mk, svg("line", {x1: px, x2: px, y1: M.t - 4, y2: M.t + ph, "class": "wedge"}));
      else add(mk, svg("line", {x1: px, x2: px, y1: M.t, y2: M.t + ph, "class": "peak-line"}),
                   svg("path", {d: `M${px - 5},${M.t - 6}h10l-5,7z`, "class": "peak"}));
      add(mk, svg("title", {}, (m.text || "wedged here") + " (line " + m.x + ")"));
      s.appendChild(mk); marks.push({kind: m.kind, px: px, text: m.text});
    });
    const cross = svg("line", {y1: M.t, y2: M.t + ph, "class": "cross", visibility: "hidden"});
    const sel = svg("rect", {y: M.t, height: ph, "class": "sel", visibility: "hidden"});
    const over = svg("rect", {x: M.l, y: M.t, width: pw, height: ph, "class": "overlay"});
    add(s, cross, sel, over);
    holder.replaceChildren(s);
    placeLabels(s, marks, W);
    const at = ev => ev.clientX - s.getBoundingClientRect().left;
    over.addEventListener("mousedown", ev => { ev.preventDefault(); hideTip();
      DRAG = {svg: s, px: at(ev), inv: inv, sel: sel, state: state}; });
    over.addEventListener("mousemove", ev => {
      const px = at(ev);
      if (DRAG && DRAG.svg === s) {
        sel.setAttribute("x", Math.min(px, DRAG.px)); sel.setAttribute("width", Math.abs(px - DRAG.px));
        sel.setAttribute("visibility", "visible"); return;
      }
      const o = nearestAt(columnsIn(c.occ, x0, x1, 0), inv(px), 0);
      if (!o) return;
      cross.setAttribute("x1", X(o[3])); cross.setAttribute("x2", X(o[3])); cross.setAttribute("visibility", "visible");
      let t = "line " + o[3] + " · " + src.strings[o[4]] + " · depth " + o[5] + "\n" + (WORDS[res]) + " in use " + withUnit(res, o[2]) +
        (c.capacity ? " of " + withUnit(res, c.capacity) + " (" + pct(o[2] / c.capacity) + ")" : "") +
        (o[1] !== o[2] ? "; least in this column " + amount(res, o[1]) : "");
      const h = nearestAt(columnsIn(c.high, x0, x1, 0), inv(px), 0);
      if (h && Math.abs(X(h[0]) - px) <= 6) t += "\nscope " + src.strings[h[2]] + " (lines " + h[4] + "–" + h[0] + "): high water " + withUnit(res, h[1]);
      showTip(ev, t);
    });
    over.addEventListener("mouseleave", () => { cross.setAttribute("visibility", "hidden"); hideTip(); });
    over.addEventListener("dblclick", () => { state.dom = state.full.slice(); state.draws.forEach(f => f()); });
  }
  state.draws.push(draw);
  return wrap;
}
