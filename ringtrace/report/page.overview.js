// Several sources at a glance: per multi-rank run a rank x dispatch x ring heatmap of the proven need's share
// of capacity (the figure the verdict rests on), problems outlined; a table of verdicts in a few words, sources
// with the same words said once; findings that several sources share, said once.
const KIND = {failed: "failed", wedged: "wedged", cut_short: "cut short", test_failed: "test failed",
  no_headroom: "no headroom", near_capacity: "near capacity", healthy: "healthy", unknown: "unknown"};

function chip(v) { return el("span", {"class": "chip " + v.severity, "data-kind": v.kind}, KIND[v.kind] || v.kind); }
// The verdict in a few words: kind, site, ring and resource (with the proven use where it is the point), code.
function verdictWords(f) {
  const v = f.verdict, out = [KIND[v.kind] || v.kind];
  if (v.site) out.push(v.site);
  if (v.severity !== "ok" && (v.ring !== null || v.resource)) {
    const r = f.rings.find(x => x.ring === v.ring && x.resource === v.resource);
    out.push((v.ring !== null ? "ring " + v.ring + " " : "") + (WORDS[v.resource] || "") +
      (r && r.need_ratio !== null && !v.code ? " " + pct(r.need_ratio) : ""));
  }
  if (v.code !== null) out.push((v.code_name || "code") + " (" + v.code + ")");
  return out.map(w => w.trim()).filter(w => w);
}
function moved(r) { return !!(r.high_water || r.live_at_exit || r.alloc || r.proven_need); }
// Per ring 0-3: the largest proven need's share of capacity over its resources ({use, r}), or null (unused).
function ringUse(f) {
  return [0, 1, 2, 3].map(g => f.rings.filter(r => r.ring === g && moved(r)).reduce((best, r) => {
    const u = r.need_ratio || 0;
    return best === null || u > best.use ? {use: u, r: r} : best; }, null));
}
function heatColor(u) {
  if (u === null) return null;
  const t = Math.min(1, Math.max(0, u));
  return "hsl(" + (50 - 50 * t).toFixed(0) + ",90%," + (94 - 46 * t).toFixed(0) + "%)";
}
function mostUsed(f) {
  const best = ringUse(f).filter(x => x).reduce((a, x) => !a || x.use > a.use ? x : a, null);
  return best && best.use ? "ring " + best.r.ring + " " + WORDS[best.r.resource] + " " + pct(best.use) : "-";
}
const num = s => s === "" ? -1 : Number(s);

function heatmap(run, members) {
  const ranks = [...new Set(members.map(([s]) => s.file.labels.rank))].sort((a, b) => num(a) - num(b));
  const ds = [...new Set(members.map(([s]) => s.file.labels.dispatch))].sort((a, b) => num(a) - num(b));
  const t = el("table", {"class": "heat", "data-run": run}), head = el("tr");
  head.appendChild(el("th", {}, run));
  ds.forEach(d => head.appendChild(el("th", {}, d === "" ? "-" : "d" + d)));
  t.appendChild(head);
  ranks.forEach(rank => {
    const tr = el("tr"); tr.appendChild(el("th", {}, "rank " + rank));
    ds.forEach(d => {
      const hit = members.find(([s]) => s.file.labels.rank === rank && s.file.labels.dispatch === d);
      if (!hit) { tr.appendChild(el("td", {"class": "none"}, "")); return; }
      const [s, i] = hit, f = s.file, v = f.verdict, use = ringUse(f);
      const td = el("td", {"class": "sev-" + v.severity, "data-source": i}), cells = el("div", {"class": "cells"});
      td.appendChild(cells);
      use.forEach((u, g) => {
        const a = el("a", {"class": "cell" + (v.severity !== "ok" && v.ring === g ? " culprit" : "") + (u === null ? " idle" : ""),
          href: "#s" + i, "data-ring": g, "data-use": u === null ? "" : u.use});
        if (u !== null) a.style.background = heatColor(u.use);
        const what = u === null ? (f.path ? "unused" : "no records") : u.use ? "proven need " + withUnit(u.r.resource, u.r.proven_need) +
          " of " + withUnit(u.r.resource, u.r.capacity) + " (" + pct(u.use) + "), " + WORDS[u.r.resource] : "in use, no need proven";
        const text = s.name + " ring " + g + ": " + what + "\n" + verdictWords(f).join(" · ");
        a.addEventListener("mousemove", ev => showTip(ev, text)); a.addEventListener("mouseleave", hideTip);
        cells.appendChild(a);
      });
      tr.appendChild(td);
    });
    t.appendChild(tr);
  });
  return t;
}

function heatKey() {
  const k = el("div", {"class": "heat-key"});
  add(k, "each cell: rings 0-3, coloured by the proven need's share of capacity ");
  [0, 0.5, 0.8, 1].forEach(u => { const sw = el("span", {"class": "cell"}); sw.style.background = heatColor(u); add(k, sw, pct(u) + (u === 1 ? "+ " : " ")); });
  add(k, add(el("span", {"class": "cell idle"})), "unused · outline: the run's problem (red: error, orange: warning), thick: the ring it names");
  return k;
}

function overview(box, common) {
  box.appendChild(el("h2", {}, "Overview: " + doc.sources.length + " sources, problems first"));
  const runs = new Map();
  doc.sources.forEach((s, i) => { const lab = s.file.labels;
    if (lab.rank !== "") { if (!runs.has(lab.run)) runs.set(lab.run, []); runs.get(lab.run).push([s, i]); } });
  if (runs.size) { runs.forEach((m, run) => box.appendChild(heatmap(run, m))); box.appendChild(heatKey()); }
  const groups = new Map();
  doc.sources.forEach((s, i) => {
    const f = s.file, words = verdictWords(f).join(" · ");
    const key = f.labels.rank !== "" ? f.labels.run + "|" + words : "#" + i;
    if (!groups.has(key)) groups.set(key, []);
    groups.get(key).push([s, i]);
  });
  const rows = [...groups.values()].map(g => {
    const names = el("span"), run = g.length > 1 ? g[0][0].file.labels.run : "";
    if (run) names.appendChild(el("span", {"class": "run"}, run + ": "));
    g.forEach(([s, i], n) => { if (n) names.appendChild(document.createTextNode(", "));
      names.appendChild(el("a", {href: "#s" + i, "class": "src", "data-name": s.name}, run ? s.name.slice(run.length + 1) : s.name)); });
    const v = add(el("span", {"class": "vwords"}), chip(g[0][0].file.verdict), verdictWords(g[0][0].file).slice(1).join(" · "));
    const worst = g.map(([s]) => s.file).reduce((a, f) => mostUsed(f) !== "-" && (!a || (ringUse(f).reduce((m, x) => Math.max(m, x ? x.use : 0), 0) >
      ringUse(a).reduce((m, x) => Math.max(m, x ? x.use : 0), 0))) ? f : a, null);
    return [names, v, worst ? (g.length > 1 ? "up to " : "") + mostUsed(worst) : "-"];
  });
  box.appendChild(table(["sources", "verdict", "most used (proven need)"], rows, "overview"));
  if (common.size) {
    const c = el("div", {"class": "common"});
    c.appendChild(el("h3", {}, "Said once for several sources"));
    common.forEach((who, msg) => c.appendChild(line(who.severity, who.rule + " (" + who.names.length + " sources: " +
      (who.names.length > 4 ? who.names.slice(0, 3).join(", ") + ", …" : who.names.join(", ")) + ")", msg)));
    box.appendChild(c);
  }
}

// Findings whose message several sources share: message -> {rule, severity, names}.
function commonFindings() {
  const seen = new Map();
  doc.sources.forEach(s => (s.file.findings || []).forEach(x => {
    const e = seen.get(x.message) || {rule: x.rule, severity: x.severity, names: []};
    if (!e.names.includes(s.name)) e.names.push(s.name);
    seen.set(x.message, e); }));
  return new Map([...seen].filter(([, e]) => e.names.length > 1));
}
