"""The viewer's script, part two: one task, two arms side by side.

The task's prompt, then for each side an arm and a repeat to pick (the control and the
first candidate by default, ``?a=`` and ``?b=`` in the fragment), and that trial loaded
on demand: outcome, tokens and cost, timings, stop reason, tool violations, the patch
as a rendered diff, the paths the grading policy dropped and why, the verify log with
its failing tests picked out (the harness's canaries said apart), the agent's
steps with each model reply's tokens, session files and log, the answer; and, when the last
``replay --reverify`` changed the trial's verdict, what it changed.
"""

from __future__ import annotations

TASK = r"""
function dvTask(main, id, params) {
  var m = DV.index, row = m.rows.filter(function (r) { return r.id === id; })[0];
  add(main, el("h1", "mono", "Task " + id));
  add(main, el("p", "keys", "keys: j / k next and previous task, Esc back to the matrix"));
  if (!row) { add(main, el("p", "warn", "no such task in this run")); return; }
  var about = [row.kind, row.grading, row.tags.join(", ")].filter(Boolean);
  add(main, el("p", "note", about.join(" \u00b7 ")));
  add(main, el("h2", "", "Prompt"));
  add(main, el("pre", "prompt", row.prompt !== null ? row.prompt :
    "(no prompt: the run directory keeps none, and its suite is not where it was)"));
  var others = m.arms.filter(function (a) { return a !== m.control; });
  var sides = {a: params.get("a") || m.control, b: params.get("b") || others[0] || m.control};
  var grid = add(main, el("div", "side"));
  ["a", "b"].forEach(function (side) {
    var box = add(grid, el("div", "trial-side"));
    box.id = "side-" + side;
    dvSide(box, row, side, sides, params);
  });
}
function dvSide(box, row, side, sides, params) {
  var m = DV.index, arm = sides[side], cell = row.cells[arm];
  var pick = add(box, el("div", "filters")), select = el("select");
  select.id = "arm-" + side;
  m.arms.forEach(function (a) {
    var o = add(select, el("option", "", a + (a === m.control ? " (control)" : ""))); o.value = a;
    if (a === arm) o.setAttribute("selected", "");
  });
  function go(extra) {
    var next = {a: sides.a, b: sides.b, ra: params.get("ra"), rb: params.get("rb")};
    Object.keys(extra).forEach(function (k) { next[k] = extra[k]; });
    location.replace(hashFor("task/" + encodeURIComponent(row.id), next));
  }
  select.onchange = function () { var e = {}; e[side] = select.value; e["r" + side] = ""; go(e); };
  add(pick, el("label", "", side === "a" ? "left" : "right"), select);
  if (!cell) { add(box, el("p", "note", "no trial of " + arm + " on this task")); return; }
  var lines = cell.trials, wanted = Number(params.get("r" + side) || 0);
  var line = lines[Math.min(Math.max(wanted, 0), lines.length - 1)];
  if (lines.length > 1) {
    var reps = el("select"); reps.id = "rep-" + side;
    lines.forEach(function (l, n) {
      var t = m.trials[l], o = add(reps, el("option", "", "repeat " + t.rep + ": " + t.out +
        (t.rv ? " (re-verified: now " + t.rv.now + ")" : "")));
      o.value = n;
      if (l === line) o.setAttribute("selected", "");
    });
    reps.onchange = function () { var e = {}; e["r" + side] = reps.value; go(e); };
    add(pick, reps);
  }
  add(box, el("p", "note", "repeats: " + dvCellText(cell) + "; majority " + row.status[arm] +
    (row.vs[arm] ? "; vs control: " + row.vs[arm] : "")));
  if (m.trials[line].rv) add(box, el("p", "rv-note", dvRvText(m.trials[line].rv) +
    "; the ledger and the report keep the recorded verdict"));
  var holder = add(box, el("div", "trial", "loading trial\u2026"));
  dvLoadTrial(line, function (t) {
    holder.textContent = "";
    if (t) dvTrial(holder, t); else add(holder, el("p", "warn", "could not load this trial"));
  });
}
"""

TRIAL = r"""
function dvSection(parent, title) { add(parent, el("h3", "", title)); return parent; }
function dvPre(parent, shown, cls) {
  var pre = add(parent, el("pre", cls || "", shown && shown.text ? shown.text : "(empty)"));
  if (shown && shown.cut) add(parent, el("p", "note", "cut for display"));
  return pre;
}
function dvTrial(box, t) {
  box.setAttribute("data-line", t.i);
  add(box, el("p", t.passed ? "ok" : "bad", t.out + (t.passed ? " (passed)" : "") +
    (t.tv ? " \u00b7 tool violation" : "") + (t.stop ? " \u00b7 stop: " + t.stop : "")));
  if (t.note) add(box, el("p", "warn record-note", "note: " + t.note));
  if (t.raw) { dvPre(dvSection(box, "The record as written"), t.raw); return; }
  var facts = {};
  (t.facts || []).forEach(function (f) { facts[f[0]] = f[1]; });
  var shown = ["prompt_tokens", "completion_tokens", "cache_read_tokens", "cost_usd", "tool_calls",
    "wall_s", "started_at", "finished_at", "stop_reason", "tool_violation", "error", "grading",
    "agent_exit_code", "verify_exit_code", "retries_used", "oom_killed", "metrics"];
  dvSection(box, "Facts");
  shown = shown.filter(function (k) { return k in facts; });
  dvTable(box, ["field", "value"], shown.map(function (k) { return [k, facts[k]]; }));
  if (!("cost_usd" in facts)) add(box, el("p", "note", "cost: not priced"));
  dvPatch(box, t.patch);
  if (t.reason.text) dvPre(dvSection(box, "Reason"), t.reason, "reason");
  if (t.dropped.length) {
    dvSection(box, "Dropped by the grading policy");
    dvTable(box, ["path", "rule", "why"], t.dropped.map(function (d) {
      return [d.path, d.rule, d.why];
    })).className = "dropped";
  }
  dvVerify(box, t);
  dvSteps(box, t);
  if (t.answer) dvPre(dvSection(box, "Answer"), t.answer, "answer");
  var details = add(box, el("details")); add(details, el("summary", "", "every field"));
  dvTable(details, ["field", "value"], t.facts);
}
function dvPatch(box, patch) {
  dvSection(box, "Patch");
  patch.notes.forEach(function (n) { add(box, el("p", "note patch-note", n)); });
  if (patch.kind !== "text") {
    if (!patch.notes.length) add(box, el("p", "note", "no patch"));
    return;
  }
  var pre = add(box, el("pre", "diff"));
  patch.text.split("\n").forEach(function (line) {
    var cls = /^(diff |--- |\+\+\+ |index |Binary )/.test(line) ? "file" :
      /^@@/.test(line) ? "hunk" : line[0] === "+" ? "add" : line[0] === "-" ? "del" : "ctx";
    add(pre, el("span", cls, line || " "));
  });
}
function dvVerify(box, t) {
  dvSection(box, "Verify log");
  if (t.verify.failing.length) {
    add(box, el("p", "", "Failing tests:"));
    var ul = add(box, el("ul", "failing-tests"));
    t.verify.failing.forEach(function (name) { add(ul, el("li", "failing", name)); });
  }
  if ((t.verify.canaries || []).length) add(box, el("p", "note canaries",
    "Expected to fail (must-fail canaries the harness planted, not the agent's doing): " +
    t.verify.canaries.join(", ")));
  if (t.verify.canary_note) add(box, el("p", "note canaries",
    "The canaries the harness planted (its own tests, not the agent's doing): " +
    t.verify.canary_note));
  if (t.verify_cut) add(box, el("p", "note", "the log was cut when recorded"));
  var marks = {};
  t.verify.marks.forEach(function (n) { marks[n] = true; });
  var pre = add(box, el("pre", "log verify"));
  if (!t.verify.text) { pre.textContent = "(empty)"; return; }
  t.verify.text.split("\n").forEach(function (line, n) {
    add(pre, el("span", marks[n] ? "mark" : "line", line || " "));
  });
}
function dvSteps(box, t) {
  dvSection(box, "Agent steps");
  if (!t.steps.length && !t.session && !t.agent_log.text) {
    add(box, el("p", "note", "no transcript, session or agent log recorded"));
  }
  if (t.steps_cut) add(box, el("p", "note", "the transcript was cut when recorded"));
  var sum = [0, 0], metered = t.steps.filter(function (s) { return s.tokens; });
  metered.forEach(function (s) { sum[0] += s.tokens[0]; sum[1] += s.tokens[1]; });
  if (metered.length) add(box, el("p", "note step-total", t.steps.length + " steps, " +
    metered.length + " with tokens: " + sum[0] + " in, " + sum[1] + " out in all"));
  t.steps.forEach(function (s, n) {
    var d = add(box, el("details", "step"));
    var head = add(d, el("summary", "", (n + 1) + ". " + s.title));
    if (s.tokens) {
      add(head, el("span", "tokens", s.tokens[0] + " in \u00b7 " + s.tokens[1] + " out"));
    }
    add(d, el("pre", "", s.body));
  });
  (t.session || []).forEach(function (f) {
    var d = add(box, el("details", "session-file"));
    add(d, el("summary", "mono", "session: " + f.name));
    dvPre(d, f);
  });
  if (t.agent_log.text) {
    add(box, el("p", "note", "agent log" + (t.agent_log_cut ? " (cut when recorded)" : "")));
    dvPre(box, t.agent_log, "agent-log");
  }
}
"""

SCRIPT_TAIL = TASK + TRIAL
