"""The inline style sheet and script of the HTML leaderboard pages (:mod:`fusebench.leaderboard.html`), as
strings: the page's Content-Security-Policy allows exactly these two blocks by their SHA-256 hash
(:func:`csp`), so a page runs no other script and applies no other style. Colours: the Okabe-Ito palette
(colour-blind safe; Okabe & Ito 2008). The script only sorts and filters rows already in the page (no
network access of any kind); the page reads the same with it off."""

from __future__ import annotations

import base64
import hashlib

#: Okabe-Ito: orange, sky blue, bluish green, yellow, blue, vermillion, reddish purple, black
PALETTE = ("#E69F00", "#56B4E9", "#009E73", "#F0E442", "#0072B2", "#D55E00", "#CC79A7", "#000000")

CSS = """
:root{--fg:#1a1a1a;--bg:#fff;--muted:#555;--line:#ccc;--hl:#0072B2;--tie:#E69F00}
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:var(--fg);background:var(--bg);
margin:0 auto;max-width:1500px;padding:0 1em 2em}
h1{font-size:1.6em}h2{font-size:1.3em;margin-top:1.6em}h3{font-size:1.1em}
code{font:12.5px ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;background:#f3f3f3;padding:0 .2em}
a{color:var(--hl)}
.wrap{overflow-x:auto}
table{border-collapse:collapse;margin:.6em 0}
th,td{border:1px solid var(--line);padding:.25em .45em;vertical-align:top;text-align:left}
thead th{background:#f3f6f9;position:sticky;top:0}
th.sortable{cursor:pointer;user-select:none}
th.sortable:focus{outline:2px solid var(--hl)}
th[aria-sort=ascending]::after{content:" \\25B2"}
th[aria-sort=descending]::after{content:" \\25BC"}
td.num{text-align:right;white-space:nowrap}
td .strip{display:block;margin-left:auto}
tr.ref td:first-child{font-style:italic}
tr:target{background:#fff4d6}
.tie{color:#8a5a00;font-weight:600}
.perm{color:var(--muted);text-decoration:none;margin-left:.3em}
.controls{margin:.8em 0;padding:.5em;border:1px solid var(--line);background:#fafafa}
.controls label{margin-right:1.2em}
details{margin:.3em 0}
details table{font-size:12.5px}
summary{cursor:pointer}
.strip .dots{fill:none;stroke:#0072B2;stroke-width:4.5;stroke-linecap:round;stroke-opacity:.7}
.strip .mean{stroke:#D55E00;stroke-width:2}
.strip .ci{stroke:#1a1a1a;stroke-width:1.5}
.strip .rk{fill:#56B4E9}
.chart text,.cd text{font-size:11px;fill:#1a1a1a}
.chart .axis,.cd .axis{stroke:#555;fill:none}
.chart polyline{fill:none;stroke-width:1.6}
footer{margin-top:2em;color:var(--muted);border-top:1px solid var(--line);padding-top:.5em}
@media print{.controls,.perm{display:none}thead th{position:static}body{max-width:none;font-size:10pt}
a{color:inherit;text-decoration:none}details>*{display:block}tr{break-inside:avoid}.wrap{overflow:visible}}
""".strip()

JS = """
(function () {
  "use strict";
  function all(sel, root) { return Array.prototype.slice.call((root || document).querySelectorAll(sel)); }
  function num(td) {
    var v = td ? td.getAttribute("data-v") : null;
    return v === null || v === "" ? null : v;
  }
  var state = {sort: "", dir: "", family: "", refs: "on", group: ""};
  function readHash() {
    location.hash.replace(/^#/, "").split("&").forEach(function (kv) {
      var i = kv.indexOf("=");
      if (i < 0) { return; }
      var k, v;
      try { k = decodeURIComponent(kv.slice(0, i)); v = decodeURIComponent(kv.slice(i + 1)); } catch (e) { return; }
      if (k === "sort") { var p = v.split(":"); state.sort = p[0]; state.dir = p[1] === "asc" ? "asc" : "desc"; }
      else if (k === "family" || k === "refs" || k === "group") { state[k] = v; }
    });
  }
  function writeHash() {
    var parts = [];
    if (state.sort) { parts.push("sort=" + encodeURIComponent(state.sort) + ":" + state.dir); }
    if (state.family) { parts.push("family=" + encodeURIComponent(state.family)); }
    if (state.refs === "off") { parts.push("refs=off"); }
    if (state.group) { parts.push("group=" + encodeURIComponent(state.group)); }
    try { history.replaceState(null, "", parts.length ? "#" + parts.join("&") : location.pathname); } catch (e) { /* file: */ }
  }
  function sortTable(table) {
    var heads = all("thead th", table), idx = -1;
    heads.forEach(function (th, i) { th.removeAttribute("aria-sort"); if (th.getAttribute("data-key") === state.sort) { idx = i; } });
    if (idx < 0) { return; }
    var text = heads[idx].getAttribute("data-type") === "text", sign = state.dir === "asc" ? 1 : -1;
    var body = table.tBodies[0], rows = all("tr", body);
    rows.sort(function (a, b) {
      var x = num(a.cells[idx]), y = num(b.cells[idx]), c = 0;
      if (x === null || y === null) { c = x === y ? 0 : (x === null ? 1 : -1); }
      else { if (!text) { x = parseFloat(x); y = parseFloat(y); } c = sign * (x < y ? -1 : x > y ? 1 : 0); }
      return c || (parseInt(a.getAttribute("data-i"), 10) - parseInt(b.getAttribute("data-i"), 10));
    });
    rows.forEach(function (r) { body.appendChild(r); });
    heads[idx].setAttribute("aria-sort", state.dir === "asc" ? "ascending" : "descending");
  }
  function apply() {
    all("table.board").forEach(sortTable);
    all("table.board tbody tr").forEach(function (tr) {
      tr.hidden = (state.family !== "" && tr.getAttribute("data-family") !== state.family)
        || (state.refs === "off" && tr.getAttribute("data-ref") === "1");
    });
    all("section.group").forEach(function (s) { s.hidden = state.group !== "" && s.getAttribute("data-group") !== state.group; });
    var f = document.getElementById("f-family"), r = document.getElementById("f-refs"), g = document.getElementById("f-group");
    if (f) { f.value = state.family; }
    if (r) { r.checked = state.refs !== "off"; }
    if (g) { g.value = state.group; }
  }
  all("th.sortable").forEach(function (th) {
    th.tabIndex = 0;
    function go() {
      var key = th.getAttribute("data-key");
      if (state.sort === key) { state.dir = state.dir === "asc" ? "desc" : "asc"; }
      else { state.sort = key; state.dir = th.getAttribute("data-better") === "lower" || th.getAttribute("data-type") === "text" ? "asc" : "desc"; }
      apply(); writeHash();
    }
    th.addEventListener("click", go);
    th.addEventListener("keydown", function (e) { if (e.key === "Enter" || e.key === " ") { e.preventDefault(); go(); } });
  });
  var controls = document.getElementById("controls");
  if (controls) {
    controls.hidden = false;
    controls.addEventListener("change", function () {
      var f = document.getElementById("f-family"), r = document.getElementById("f-refs"), g = document.getElementById("f-group");
      state.family = f ? f.value : ""; state.refs = r && !r.checked ? "off" : "on"; state.group = g ? g.value : "";
      apply(); writeHash();
    });
  }
  function known(id, v) {
    var s = document.getElementById(id);
    return v === "" || (s !== null && all("option", s).some(function (o) { return o.value === v; }));
  }
  readHash();
  if (!known("f-family", state.family)) { state.family = ""; }
  if (!known("f-group", state.group)) { state.group = ""; }
  if (state.sort || state.family || state.refs === "off" || state.group) { apply(); }
  document.documentElement.setAttribute("data-ready", "1");
})();
""".strip()


def sha256_source(text: str) -> str:
    """The CSP source of an inline block: ``'sha256-<base64 of the SHA-256 of its UTF-8 text>'``."""
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii") + "'"


def csp() -> str:
    """The pages' Content-Security-Policy: nothing but the inline style and script above and data: images;
    no connection, frame, font, form target or base URL of any kind."""
    return (f"default-src 'none'; style-src {sha256_source(CSS)}; script-src {sha256_source(JS)}; img-src data:; "
            f"base-uri 'none'; form-action 'none'")
