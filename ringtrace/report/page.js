// The page: verdicts first (one source: its verdict line; several: the overview), the sizing picture of each
// program, one legend, then a section per source.  Concatenated last (see _page.py).
function programFor(f) {
  const key = f.path || (f.host_log || {}).path;
  const j = doc.programs.findIndex(p => p.sources.includes(key));
  return j < 0 ? null : [doc.programs[j], j];
}

function glyph(kind) {
  const s = svg("svg", {width: 22, height: 12, "class": "glyph"});
  const shapes = {
    band: [svg("rect", {x: 1, y: 3, width: 20, height: 7, "class": "occupancy"}), svg("line", {x1: 1, x2: 21, y1: 3, y2: 3, "class": "occupancy-top"})],
    hw: [svg("circle", {cx: 11, cy: 6, r: 2.5, "class": "hw"})],
    need: [svg("line", {x1: 1, x2: 21, y1: 6, y2: 6, "class": "need"})],
    capacity: [svg("line", {x1: 1, x2: 21, y1: 6, y2: 6, "class": "capacity"})],
    wedge: [svg("line", {x1: 11, x2: 11, y1: 0, y2: 12, "class": "wedge"})],
    peak: [svg("path", {d: "M6,2h10l-5,7z", "class": "peak"})],
    bracket: [svg("rect", {x: 1, y: 2, width: 20, height: 8, "class": "bracket"})],
    estimate: [svg("path", {d: "M11,0l5,6l-5,6l-5,-6z", "class": "estimate"})],
    rec: [svg("path", {d: "M11,0V12", "class": "rec"})],
    next: [svg("path", {d: "M11,0V12", "class": "next"})],
    completed: [svg("circle", {cx: 11, cy: 6, r: 4, "class": "pt completed"})],
    failed: [svg("path", {d: "M7,2l8,8m0,-8l-8,8", "class": "pt failed"})],
    other: [svg("circle", {cx: 11, cy: 6, r: 4, "class": "pt other"})],
  };
  return add(s, ...shapes[kind]);
}
function legend() {
  const box = el("div", {"class": "legend", id: "legend"});
  const row = (head, items) => { const r = add(el("div"), el("b", {}, head));
    items.forEach(([k, t]) => r.appendChild(add(el("span", {"class": "key"}), glyph(k), t))); box.appendChild(r); };
  row("charts", [["band", "in use (head − tail), least–most per column"], ["hw", "a scope's high water"], ["need", "proven need"],
    ["capacity", "capacity"], ["peak", "scope that set the high water"], ["wedge", "wedged: innermost open scope"]]);
  row("sizing", [["bracket", "proven bracket (needs ≥ … completed at)"], ["estimate", "estimate"], ["rec", "set (final)"],
    ["next", "measure next"], ["completed", "run completed"], ["failed", "run failed here"], ["other", "run proves nothing here"]]);
  box.appendChild(el("div", {"class": "muted"}, "Drag across a chart to zoom (every chart of the run follows), double-click to reset; hover for values; click a row or a sentence to open it."));
  return box;
}

function verdictLine(f) {
  const v = f.verdict, d = el("div", {"class": "verdict", title: v.text});
  d.appendChild(chip(v));
  verdictWords(f).slice(1).forEach(w => d.appendChild(el("span", {"class": "word"}, w)));
  const more = add(el("details", {"class": "full"}), el("summary", {}, "in full"), el("span", {}, v.text));
  d.appendChild(more);
  return d;
}

function ringTable(f) {
  return table(["ring", "resource", "capacity", "proven need", "use", "high water", "live at exit", "alloc", "peak site"],
    f.rings.filter(moved).map(r => [r.ring, WORDS[r.resource], amount(r.resource, r.capacity), amount(r.resource, r.proven_need), pct(r.need_ratio),
      amount(r.resource, r.high_water), amount(r.resource, r.live_at_exit), amount(r.resource, r.alloc), r.high_water_site]), "rings");
}

function unusedLine(src) {
  const by = new Map();
  src.unused.forEach(([g, r]) => { if (!by.has(g)) by.set(g, []); by.get(g).push(WORDS[r]); });
  const parts = [...by].map(([g, rs]) => "ring " + g + ": " + (rs.length === 3 ? "all" : rs.join(", ")));
  return el("div", {"class": "unused"}, "unused (never moved, no chart): " + parts.join(" · "));
}

function section(src, i, common, single, anchor) {
  const f = src.file, v = f.verdict;
  const box = el("section", {"class": "source", id: "s" + i, "data-verdict": v.kind, "data-severity": v.severity});
  box.appendChild(el("h2", {}, src.name));
  box.appendChild(verdictLine(f));
  box.appendChild(el("div", {"class": "muted"}, f.path ? f.path + " · version " + f.version + " · records " + f.records +
    (f.total !== null ? "/" + f.total : "") + " · dropped " + f.dropped + " · fatal " + f.fatal :
    "no scope_stats file (the runtime writes none for a failed run): host log " + (f.host_log || {}).path));
  if (anchor) box.appendChild(anchor);
  const prog = programFor(f);
  if (prog && single) box.appendChild(programBlock(prog[0], prog[1]));
  else if (prog) box.appendChild(add(el("div", {"class": "to-program"}), "sizing: ", el("a", {href: "#p" + prog[1]}, prog[0].program),
    " — " + (prog[0].blocked.length ? "sizing cannot fix this" : prog[0].final ? "final sizes" : "next measurement run")));
  if (src.failure) box.appendChild(failureBar(src.failure));
  if (f.rings.length) box.appendChild(ringTable(f));
  let said = 0;
  (f.findings || []).forEach(x => { if (common.has(x.message)) { said++; return; }
    box.appendChild(line(x.severity, x.severity + " " + x.rule + ":", x.message)); });
  if (said) box.appendChild(el("div", {"class": "muted"}, said + " finding(s) said once in the overview"));
  if (src.unused.length) box.appendChild(unusedLine(src));
  const state = {full: [src.x[0] - 0.5, src.x[1] + 0.5], dom: null, draws: []};  // a record is one unit wide
  state.dom = state.full.slice();
  const charts = el("div", {"class": "charts"});
  src.charts.forEach(c => charts.appendChild(timeChart(src, c, state)));
  if (src.tensormap) charts.appendChild(timeChart(src, src.tensormap, state));
  box.appendChild(charts);
  if (src.left_out) box.appendChild(el("div", {"class": "line warning"}, (src.left_out === "charts" ? "charts" : "charts and details") +
    " left out to keep this page under 2 MB: run `ringtrace report` on this source alone"));
  return [box, state];
}

(function main() {
  const common = commonFindings(), single = doc.sources.length === 1;
  if (!single) {
    const ov = el("div", {"class": "overview-box"});
    overview(ov, common);
    root.appendChild(ov);
    root.appendChild(legend());
    doc.programs.forEach((p, j) => root.appendChild(programBlock(p, j)));
  }
  const states = [];
  doc.sources.forEach((s, i) => {
    const [box, state] = section(s, i, common, single, single ? legend() : null);
    root.appendChild(box);
    state.draws.forEach(f => f());
    states.push(state);
  });
  let pending = false;  // a resized window redraws the charts at their new width, once per frame
  window.addEventListener("resize", () => { if (pending) return; pending = true;
    requestAnimationFrame(() => { pending = false; states.forEach(st => st.draws.forEach(f => f())); }); });
  document.body.setAttribute("data-ready", "1");
})();
