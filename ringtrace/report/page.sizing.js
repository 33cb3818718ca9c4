// The sizing picture: per program, per ring and resource of advise's answer, every run on a size axis
// (completed, failed with its code), the proven bracket, the estimate and the size to set or to measure next.
// Its numbers are advise's (p.advice is `advise --format json`'s), drawn, never recomputed.
function adviceText(a) {
  return a.action;  // advise's own words (ringtrace.analysis.advise.action): one verb on every surface
}
function shortReason(a) {
  const r = a.resource, parts = [];
  if (a.recommended === null && a.measure_next === null) return a.reason.split(/[;:]/)[0];
  parts.push(a.upper_bound !== null ? "completed at " + amount(r, a.upper_bound) : "nothing completed yet");
  if (a.lower_bound !== null) parts.push("needs ≥ " + amount(r, a.lower_bound));
  if (a.recommended !== null) { if (a.upper_bound !== null && a.recommended > a.upper_bound) parts.push("+ headroom"); }
  else parts.push("a run at " + amount(r, a.measure_next) + " tells");
  return parts.join("; ");
}

function sizeTicks(res, lo, hi) {
  const pow = [];
  for (let k = Math.ceil(Math.log2(lo)); Math.pow(2, k) <= hi; k++) pow.push(Math.pow(2, k));
  if (pow.length >= 3) { const step = Math.ceil(pow.length / 6); return pow.filter((_, i) => i % step === 0); }
  return unitTicks(res, lo, hi, 4).map(([v]) => v).filter(v => v > 0 && v >= lo && v <= hi);
}

function sizingPicture(a, row) {
  const res = a.resource, W = 470, H = 62, L = 22, R = 22, pw = W - L - R, AX = 40;
  const focus = [a.lower_bound, a.upper_bound, a.estimate, a.recommended, a.measure_next].filter(v => v);
  const caps = row.points.map(p => p.capacity);
  let lo = Math.min(...(focus.length ? focus : caps)), hi = Math.max(...(focus.length ? focus : caps));
  caps.forEach(v => { if (v >= lo / 8 && v <= hi * 8) { lo = Math.min(lo, v); hi = Math.max(hi, v); } });
  lo /= 1.25; hi *= 1.25;
  if (hi / lo < 1.6) { const mid = Math.sqrt(lo * hi); lo = mid / 1.3; hi = mid * 1.3; }
  const X = v => v < lo ? L - 12 : v > hi ? W - R + 12 : L + pw * Math.log(v / lo) / Math.log(hi / lo);
  const num = v => v === null ? "" : String(v);
  const s = svg("svg", {width: W, height: H, "class": "sizing", "data-ring": a.ring, "data-resource": res,
    "data-lower": num(a.lower_bound), "data-upper": num(a.upper_bound), "data-estimate": num(a.estimate),
    "data-recommended": num(a.recommended), "data-measure-next": num(a.measure_next)});
  const gx = svg("g", {"class": "x-axis"});
  add(gx, svg("line", {x1: L, x2: L + pw, y1: AX, y2: AX, "class": "frame"}));
  sizeTicks(res, lo, hi).forEach(v => add(gx, svg("line", {x1: X(v), x2: X(v), y1: AX, y2: AX + 4, "class": "tickmark"}),
    svg("text", {x: X(v), y: AX + 16, "text-anchor": "middle", "class": "tick"}, sizeLabel(res, v))));
  s.appendChild(gx);
  const b0 = a.lower_bound !== null ? X(a.lower_bound) : L, b1 = a.upper_bound !== null ? X(a.upper_bound) : L + pw;
  const bw = Math.max(2, Math.abs(b1 - b0));  // a closed bracket is a 2-pixel bar centred on its size
  add(s, add(svg("rect", {x: (b0 + b1) / 2 - bw / 2, y: 12, width: bw, height: AX - 14,
    "class": "bracket" + (a.upper_bound === null || a.lower_bound === null ? " open" : "")}),
    svg("title", {}, "proven bracket: needs ≥ " + amount(res, a.lower_bound) + ", completed at " + amount(res, a.upper_bound))));
  if (a.estimate) add(s, add(svg("path", {d: `M${X(a.estimate)},${AX - 20}l5,6l-5,6l-5,-6z`, "class": "estimate"}),
    svg("title", {}, "estimate " + amount(res, a.estimate))));
  const target = a.recommended !== null ? a.recommended : a.measure_next;
  if (target !== null) add(s, add(svg("path", {d: `M${X(target)},4V${AX}`, "class": a.recommended !== null ? "rec" : "next"}),
    svg("title", {}, adviceText(a))));
  const stack = {};
  row.points.slice().sort((p, q) => (p.outcome === "completed") - (q.outcome === "completed")).forEach(p => {
    const px = Math.round(X(p.capacity)), k = stack[px] = (stack[px] || 0) + 1, y = AX - 6 - 8 * (k - 1);
    const how = p.outcome === "completed" ? "completed" : p.outcome === "failed" ?
      "failed: " + (p.code_name || "code " + p.code) + (p.ring_named ? "" : " (the report names no ring)") : p.kind.replace("_", " ") + " (proves nothing here)";
    const text = p.run + ": " + how + " at " + withUnit(res, p.capacity);
    const mark = p.outcome === "failed" ? svg("path", {d: `M${px - 4},${y - 4}l8,8m0,-8l-8,8`, "class": "pt failed"}) :
      svg("circle", {cx: px, cy: y, r: 4, "class": "pt " + p.outcome});
    const link = add(svg("a", {href: "#s" + p.section, "data-capacity": p.capacity, "data-outcome": p.outcome}), mark);
    link.addEventListener("mousemove", ev => showTip(ev, text)); link.addEventListener("mouseleave", hideTip);
    s.appendChild(link);
  });
  if (caps.some(v => v < lo)) add(s, svg("text", {x: L - 12, y: AX + 16, "text-anchor": "middle", "class": "gutter"}, "≪"));
  if (caps.some(v => v > hi)) add(s, svg("text", {x: W - R + 12, y: AX + 16, "text-anchor": "middle", "class": "gutter"}, "≫"));
  return s;
}

function programBlock(p, j) {
  const box = el("section", {"class": "program", id: "p" + j, "data-program": p.program});
  const state = p.blocked.length ? "sizing cannot fix this" : p.final ? "final sizes" : "next measurement run";
  box.appendChild(el("h2", {}, "Sizing " + p.program + ": " + state + " (" + p.runs + " run" + (p.runs === 1 ? "" : "s") + ")"));
  p.blocked.forEach(b => box.appendChild(line("error", "blocked", b)));
  p.notes.forEach(b => box.appendChild(line("warning", "note", b)));
  if (p.snippets.length) box.appendChild(el("pre", {"class": "runconfig"}, p.snippets.join("\n")));
  if (!p.advice.length) return box;
  const t = el("table", {"class": "advice pic"}), head = el("tr");
  ["ring", "resource", "runs by size", "needs ≥", "completed at", "estimate", "advice", "why"].forEach(h => head.appendChild(el("th", {}, h)));
  t.appendChild(head);
  p.advice.forEach((a, i) => {
    const row = p.rows[i], r = a.resource, tr = el("tr", {"class": "adv", "data-ring": a.ring, "data-resource": r});
    const why = el("tr", {"class": "why", hidden: ""});
    add(tr, el("td", {"class": "n"}, a.ring), el("td", {}, WORDS[r]), add(el("td", {"class": "picture"}, null), sizingPicture(a, row)),
      el("td", {"class": "n"}, amount(r, a.lower_bound)), el("td", {"class": "n"}, amount(r, a.upper_bound)),
      el("td", {"class": "n"}, amount(r, a.estimate)), el("td", {"class": "act"}, adviceText(a)),
      el("td", {"class": "reason", title: a.reason}, shortReason(a)));
    add(why, add(el("td", {colspan: 8}), el("span", {}, a.reason + (a.driven_by ? " (driven by " + a.driven_by + ")" : "") +
      (row.unknown ? "; not drawn: " + row.unknown + " run(s) whose files do not state this size" : ""))));
    tr.addEventListener("click", ev => { if (!ev.target.closest("a")) why.hidden = !why.hidden; });
    add(t, tr, why);
  });
  box.appendChild(t);
  return box;
}
