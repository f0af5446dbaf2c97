"""The viewer's script, part one: data loading, routing, the matrix and the run page.

The matrix has a filter for the verdicts the last ``replay --reverify`` changed (only when
the run has its ``reverify.json``) and marks those cells; the run page links each setup
warning and each changed verdict to its trials.

Plain ES5-style JavaScript with no library. Every value from the run is set with
``textContent`` or as an attribute built here (never ``innerHTML``); links are
``#/...`` fragments built with ``encodeURIComponent``, so no record can make one.
``trial_js`` (the task page) follows it in the same ``view.js``.
"""

from __future__ import annotations

CORE = r"""
"use strict";
var DV = {index: null, run: null, trials: {}, waiting: {}, shown: 300};
function dvData(kind, key, value) {
  if (kind === "index") { DV.index = value.matrix; DV.run = value.run; dvRoute(); return; }
  if (kind === "trial") {
    DV.trials[key] = value;
    var waiting = DV.waiting[key] || []; delete DV.waiting[key];
    waiting.forEach(function (done) { done(value); });
  }
}
function el(tag, cls, text) {
  var node = document.createElement(tag);
  if (cls) node.className = cls;
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
}
function add(parent) {  // appends each child given; returns the last one
  var last = parent;
  for (var i = 1; i < arguments.length; i++) {
    if (arguments[i]) last = parent.appendChild(arguments[i]);
  }
  return last;
}
function link(text, hash) { var a = el("a", "", text); a.setAttribute("href", hash); return a; }
function dvGood(outcome) { return outcome === "success" || outcome === "abstain_ok"; }
function dvRvText(rv) {
  return "re-verified: recorded " + rv.was + ", now " + rv.now +
    (dvGood(rv.now) ? " (the hidden tests now pass)" : " (the hidden tests now fail)");
}
function dvTrialHash(line) {  // the task page showing this trial on its side
  var m = DV.index, t = m.trials[line];
  var row = m.rows.filter(function (r) { return r.id === t.task; })[0];
  var cell = row && row.cells[t.arm], n = cell ? cell.trials.indexOf(Number(line)) : -1;
  var at = String(Math.max(n, 0)), path = "task/" + encodeURIComponent(t.task);
  return t.arm === m.control ? hashFor(path, {ra: at}) : hashFor(path, {b: t.arm, rb: at});
}
function dvTrialLink(line) {
  var t = DV.index.trials[line];
  if (!t) return el("span", "note", "ledger line " + line);
  return link(t.task + " \u00b7 " + t.arm + (t.rep !== null ? " \u00b7 repeat " + t.rep : "") +
    ": " + t.out, dvTrialHash(line));
}
function hashFor(path, params) {
  var query = new URLSearchParams();
  Object.keys(params || {}).forEach(function (k) { if (params[k]) query.set(k, params[k]); });
  var q = query.toString();
  return "#/" + path + (q ? "?" + q : "");
}
function dvLoadTrial(line, done) {
  if (DV.trials[line]) { done(DV.trials[line]); return; }
  if (DV.waiting[line]) { DV.waiting[line].push(done); return; }
  DV.waiting[line] = [done];
  var script = document.createElement("script");
  script.src = "data/trial/" + Number(line) + ".js";
  script.onerror = function () {
    var waiting = DV.waiting[line] || []; delete DV.waiting[line];
    waiting.forEach(function (cb) { cb(null); });
  };
  document.head.appendChild(script);
}
function dvRoute() {
  if (!DV.index) return;
  var hash = location.hash.replace(/^#\/?/, "");
  var cut = hash.indexOf("?");
  var path = cut < 0 ? hash : hash.slice(0, cut);
  var params = new URLSearchParams(cut < 0 ? "" : hash.slice(cut + 1));
  var main = document.getElementById("main");
  main.textContent = "";
  dvBanner();
  if (path.indexOf("task/") === 0) dvTask(main, decodeURIComponent(path.slice(5)), params);
  else if (path === "run") dvRun(main);
  else dvMatrix(main, params);
  document.body.setAttribute("data-page", path.split("/")[0] || "matrix");
}
window.addEventListener("hashchange", dvRoute);
function dvBanner() {
  var run = DV.run, banner = document.getElementById("banner");
  banner.textContent = "";
  var title = (run.run_id || "") + " \u00b7 control " + DV.index.control;
  document.getElementById("title").textContent = title;
  if (run.in_progress) add(banner, el("p", "progress", "Run in progress: " + run.recorded +
    " of " + run.expected + " trials recorded" + (run.has_report ? "" : ", no report yet") +
    ". Reload to see new trials."));
  if (run.notes) add(banner, el("p", "warn", run.notes +
    " record(s) this deltarun does not fully know: shown with a note"));
}
"""

MATRIX = r"""
function dvOptions(select, label, values, current) {  // a value, or [value, its label]
  add(select, el("option", "", label)).value = "";
  values.forEach(function (v) {
    var value = Array.isArray(v) ? v[0] : v;
    var option = add(select, el("option", "", Array.isArray(v) ? v[1] : v)); option.value = value;
    if (value === current) option.setAttribute("selected", "");
  });
  return select;
}
function dvUnique(rows, pick) {
  var seen = {};
  rows.forEach(function (r) { pick(r).forEach(function (v) { if (v) seen[v] = true; }); });
  return Object.keys(seen).sort();
}
function dvFilters(main, params) {
  var m = DV.index, box = add(main, el("div", "filters"));
  var search = el("input"); search.type = "search"; search.id = "q";
  search.placeholder = "search task ids and prompts"; search.value = params.get("q") || "";
  var outs = dvUnique(Object.keys(m.trials).map(function (k) { return m.trials[k]; }),
    function (t) { return [t.out]; });
  var selects = {
    out: dvOptions(el("select"), "any outcome", outs, params.get("out")),
    arm: dvOptions(el("select"), "every arm", m.arms, params.get("arm")),
    tag: dvOptions(el("select"), "any tag",
      dvUnique(m.rows, function (r) { return r.tags; }), params.get("tag")),
    grading: dvOptions(el("select"), "any grading",
      dvUnique(m.rows, function (r) { return [r.grading]; }), params.get("grading")),
    vs: dvOptions(el("select"), "helped / hurt / same",
      ["helped", "hurt", "same", "inconclusive", "n/a"], params.get("vs"))
  };
  if (m.reverify) {  // only a run that was re-verified (replay --reverify) has this filter
    selects.rv = dvOptions(el("select"), "any verdict", [
      ["changed", "verdict changed by --reverify (" + m.reverify.changed + ")"],
      ["fails", "changed: now fails"], ["passes", "changed: now passes"]], params.get("rv"));
  }
  function apply() {
    var next = {q: search.value};
    Object.keys(selects).forEach(function (k) { next[k] = selects[k].value; });
    location.replace(hashFor("", next));
  }
  add(box, search);
  Object.keys(selects).forEach(function (k) {
    selects[k].id = "f-" + k; selects[k].onchange = apply; add(box, selects[k]);
  });
  search.onchange = apply;
}
function dvKeep(row, params) {
  var q = (params.get("q") || "").toLowerCase(), arm = params.get("arm"), out = params.get("out");
  var text = (row.id + "\n" + (row.prompt || "")).toLowerCase();
  if (q && text.indexOf(q) < 0) return false;
  if (params.get("tag") && row.tags.indexOf(params.get("tag")) < 0) return false;
  if (params.get("grading") && row.grading !== params.get("grading")) return false;
  if (arm && !row.cells[arm]) return false;
  if (out && !Object.keys(row.cells).some(function (a) {
    return (!arm || a === arm) && row.cells[a].counts[out];
  })) return false;
  var vs = params.get("vs");
  if (vs && !Object.keys(row.vs).some(function (a) {
    return (!arm || a === arm) && row.vs[a] === vs;
  })) return false;
  var rv = params.get("rv");
  if (rv && !Object.keys(row.cells).some(function (a) {
    return (!arm || a === arm) && row.cells[a].trials.some(function (line) {
      var t = DV.index.trials[line];
      return t && t.rv && (rv === "changed" || (rv === "passes") === dvGood(t.rv.now));
    });
  })) return false;
  return true;
}
function dvCellText(cell) {
  return Object.keys(cell.counts).sort().map(function (o) {
    return cell.counts[o] > 1 ? o + " \u00d7" + cell.counts[o] : o;
  }).join(", ");
}
function dvMatrix(main, params) {
  var m = DV.index;
  add(main, el("h1", "", "Tasks \u00d7 arms"));
  add(main, el("p", "keys", "keys: j / k move between rows, Enter opens a task"));
  dvFilters(main, params);
  var arms = params.get("arm") ? [params.get("arm")] : m.arms;
  var versus = m.arms.filter(function (a) { return a !== m.control && arms.indexOf(a) >= 0; });
  var rows = m.rows.filter(function (r) { return dvKeep(r, params); });
  add(main, el("p", "note", rows.length + " of " + m.rows.length + " tasks, " +
    Object.keys(m.trials).length + " trials; a cell folds repeats (outcome \u00d7count)" +
    (Object.keys(m.retried || {}).length ? "; " + Object.keys(m.retried).length +
      " error records run again (kept in the ledger, not counted)" : "")));
  var table = add(main, el("table", "matrix")), tr = add(add(table, el("thead")), el("tr"));
  add(tr, el("th", "", "task"), el("th", "", "grading"), el("th", "", "tags"));
  arms.forEach(function (a) { add(tr, el("th", "", a + (a === m.control ? " (control)" : ""))); });
  versus.forEach(function (a) { add(tr, el("th", "", a + " vs control")); });
  var body = add(table, el("tbody"));
  rows.slice(0, DV.shown).forEach(function (r) { dvRow(body, r, arms, versus); });
  if (rows.length > DV.shown) {
    var more = add(main, el("button", "", "show more (" + (rows.length - DV.shown) + " left)"));
    more.onclick = function () { DV.shown += 500; dvRoute(); };
  }
}
function dvRow(body, r, arms, versus) {
  var tr = add(body, el("tr")), m = DV.index;
  tr.setAttribute("data-task", r.id);
  add(add(tr, el("td", "mono")), link(r.id, hashFor("task/" + encodeURIComponent(r.id), {})));
  add(tr, el("td", "", r.grading), el("td", "", r.tags.join(", ")));
  arms.forEach(function (a) {
    var cell = r.cells[a], td = add(tr, el("td", cell ? r.status[a] : "none"));
    if (!cell) { td.textContent = "\u2013"; return; }
    var b = a === m.control ? "" : a;
    add(td, link(dvCellText(cell), hashFor("task/" + encodeURIComponent(r.id), {b: b})));
    if (cell.changed) {
      var changes = cell.trials.map(function (l) { return m.trials[l].rv; }).filter(Boolean);
      var mark = add(td, el("span", "rv", "\u27f2 " + changes.map(function (rv) {
        return rv.was + " \u2192 " + rv.now; }).join(", ")));
      mark.setAttribute("title", "verdict changed by replay --reverify");
      tr.setAttribute("data-rv", "changed");
    }
  });
  versus.forEach(function (a) { add(tr, el("td", "vs " + r.vs[a].replace("/", ""), r.vs[a])); });
}
"""

RUN = r"""
function dvReverified(main, rv) {
  if (!rv) return;
  add(main, el("h2", "", "Re-verification (replay --reverify)"));
  add(main, el("p", "", "ran " + (rv.ran_at || "at an unknown time") + ": " +
    (rv.checked === null ? "?" : rv.checked) + " verdict(s) re-run, " + rv.changed +
    " changed; the ledger and the report keep the recorded verdicts"));
  if (rv.note) add(main, el("p", "warn", rv.note));
  var list = add(main, el("ul", "rv-trials"));
  Object.keys(DV.index.trials).forEach(function (line) {
    var t = DV.index.trials[line];
    if (!t.rv) return;
    var li = add(list, el("li"));
    add(li, dvTrialLink(line), el("span", "note", " \u2014 " + dvRvText(t.rv)));
  });
}
function dvFlat(rows, name, value) {
  if (value && typeof value === "object" && !Array.isArray(value)) {
    Object.keys(value).forEach(function (k) { dvFlat(rows, name + " " + k, value[k]); });
  } else if (value !== null && value !== "" && value !== undefined &&
             !(Array.isArray(value) && !value.length)) {
    rows.push([name, Array.isArray(value) ? value.join(", ") : String(value)]);
  }
}
function dvTable(parent, head, rows) {
  var table = add(parent, el("table")), tr = add(add(table, el("thead")), el("tr"));
  head.forEach(function (h) { add(tr, el("th", "", h)); });
  var body = add(table, el("tbody"));
  rows.forEach(function (row) {
    var r = add(body, el("tr"));
    row.forEach(function (c) {
      var o = c && typeof c === "object";
      add(r, el("td", o ? c.cls : "", o ? c.text : c));
    });
  });
  return table;
}
function dvRun(main) {
  var run = DV.run;
  add(main, el("h1", "", "Run " + (run.run_id || "")));
  add(main, el("p", "note", "protocol " + run.protocol_id + ", channel " + run.channel +
    ", control " + run.control + ", arms " + (run.arms || []).join(", ") +
    ", created " + run.created_at));
  if (run.stamp) add(main, el("p", "progress", run.stamp));
  if (run.verdict) add(main, el("p", "", "Verdict: " + run.verdict));
  add(main, el("h2", "", "Headline"));
  if (!run.headline.length) add(main, el("p", "note", run.has_report ?
    "no headline in report.md" : "no report yet (deltarun report RUN)"));
  var list = add(main, el("ul", "headline"));
  run.headline.forEach(function (line) { add(list, el("li", "", line.replace(/^\s*- /, ""))); });
  add(main, el("h2", "", "Checklist"));
  dvTable(main, ["item", "ok", "detail"], run.checklist.map(function (r) {
    r = r || {};
    var ok = r.ok === true;
    return [r.item, {text: ok ? "yes" : "no", cls: ok ? "ok" : "bad"}, r.detail];
  }));
  add(main, el("h2", "", "Setup warnings"));
  if (!run.setup_warnings.length) add(main, el("p", "note", "none"));
  var warnings = add(main, el("ul", "setup-warnings"));
  run.setup_warnings.forEach(function (w) {
    var li = add(warnings, el("li", "", w.text));
    if (!w.trials.length) return;
    var trials = add(li, el("ul", "trial-links"));
    w.trials.forEach(function (line) { add(add(trials, el("li")), dvTrialLink(line)); });
    if (w.more) add(trials, el("li", "note", "and " + w.more + " more"));
  });
  dvReverified(main, run.reverify);
  add(main, el("h2", "", "Pins"));
  var pins = [];
  Object.keys(run.pins || {}).forEach(function (k) { dvFlat(pins, k, run.pins[k]); });
  dvTable(main, ["pin", "value"], pins);
}
"""

KEYS = r"""
// Keyboard: on the matrix j / k (or the arrows) move between rows and Enter opens one; on
// a task, j / n and k / p go to the next and previous task of the matrix (the two arms
// kept), Escape or u back to the matrix. Keys typed into a field are the field's.
var DVKEY = {row: -1};
function dvGoTask(id, params) {
  var keep = {};
  ["a", "b"].forEach(function (k) { if (params.get(k)) keep[k] = params.get(k); });
  location.hash = hashFor("task/" + encodeURIComponent(id), keep);
}
function dvOnTask() {
  var hash = location.hash.replace(/^#\/?/, ""), cut = hash.indexOf("?");
  var path = cut < 0 ? hash : hash.slice(0, cut);
  if (path.indexOf("task/") !== 0) return null;
  return {id: decodeURIComponent(path.slice(5)),
          params: new URLSearchParams(cut < 0 ? "" : hash.slice(cut + 1))};
}
function dvTaskKey(key, task) {
  var order = DV.index.rows.map(function (r) { return r.id; }), i = order.indexOf(task.id);
  if ((key === "j" || key === "n") && i + 1 < order.length) dvGoTask(order[i + 1], task.params);
  else if ((key === "k" || key === "p") && i > 0) dvGoTask(order[i - 1], task.params);
  else if (key === "Escape" || key === "u") location.hash = "#/";
  else return false;
  return true;
}
function dvMatrixKey(key) {
  var rows = document.querySelectorAll("tr[data-task]");
  if (!rows.length) return false;
  if (key === "j" || key === "ArrowDown") DVKEY.row = Math.min(rows.length - 1, DVKEY.row + 1);
  else if (key === "k" || key === "ArrowUp") DVKEY.row = Math.max(0, DVKEY.row - 1);
  else if (key === "Enter" && DVKEY.row >= 0) {
    dvGoTask(rows[DVKEY.row].getAttribute("data-task"), new URLSearchParams());
    return true;
  } else return false;
  for (var i = 0; i < rows.length; i++) rows[i].classList.toggle("current", i === DVKEY.row);
  rows[DVKEY.row].scrollIntoView({block: "nearest"});
  return true;
}
document.addEventListener("keydown", function (e) {
  if (!DV.index || e.ctrlKey || e.metaKey || e.altKey) return;
  var tag = e.target && e.target.tagName;
  if (tag === "INPUT" || tag === "SELECT" || tag === "TEXTAREA") return;
  var task = dvOnTask(), page = document.body.getAttribute("data-page");
  var used = task ? dvTaskKey(e.key, task) : page === "matrix" && dvMatrixKey(e.key);
  if (used) e.preventDefault();
});
window.addEventListener("hashchange", function () { if (!dvOnTask()) DVKEY.row = -1; });
"""

SCRIPT_HEAD = CORE + MATRIX + RUN + KEYS
