"""The viewer's page: one HTML shell, its style sheet and its Content-Security-Policy.

The shell holds no data and no inline script or style: the script (``app_js``) and the
data (``data/index.js``, ``data/trial/<line>.js``, each a call of ``dvData``) load by
``<script src>`` from the page's own origin, so the same files work served and from a
``file://`` folder. The policy forbids inline and remote script, every fetch, frame,
form and plugin; all sandbox text is set with ``textContent`` by the script.
"""

from __future__ import annotations

import json
from typing import Any

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'none'; base-uri 'none'; form-action 'none'"
)
HEADER_CSP = CSP + "; frame-ancestors 'none'"  # a <meta> policy cannot say frame-ancestors

SHELL = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{CSP}">
<meta name="referrer" content="no-referrer">
<title>deltarun view</title>
<link rel="stylesheet" href="view.css">
</head><body>
<nav id="nav"><a href="#/">Matrix</a> <a href="#/run">Run</a> <span id="title"></span></nav>
<div id="banner"></div>
<main id="main"><p class="note">Loading… (this page needs JavaScript)</p></main>
<script src="view.js"></script>
<script src="data/index.js"></script>
</body></html>
"""

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#222;margin:0;
padding:0 18px 40px}
nav{position:sticky;top:0;background:#fff;border-bottom:1px solid #ddd;padding:8px 0;z-index:2}
nav a{margin-right:14px;font-weight:600}nav span{color:#555}
h1{font-size:20px;margin:10px 0}h2{font-size:16px;margin:18px 0 6px;border-bottom:1px solid #ddd}
h3{font-size:14px;margin:12px 0 4px}
table{border-collapse:collapse;margin:6px 0;font-size:13px}
th,td{border:1px solid #ddd;padding:3px 7px;text-align:left;vertical-align:top}
th{background:#f4f4f4;position:sticky;top:37px}
pre,code,.mono{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12px}
pre{white-space:pre-wrap;word-break:break-all;background:#f8f8f8;border:1px solid #e4e4e4;
padding:6px;margin:4px 0;max-height:640px;overflow:auto}
.filters{display:flex;flex-wrap:wrap;gap:8px;align-items:center;margin:8px 0}
.filters input[type=search]{min-width:260px}
.pass{background:#e3f0fa}.fail{background:#fbe5e0}.tie{background:#fff1c2}.none{color:#999}
.helped{background:#c9ecd2;font-weight:600}.hurt{background:#f6c4bd;font-weight:600}
.same{color:#555}.inconclusive{background:#fff1c2}
.warn{background:#fde2e1;border:1px solid #d6604d;padding:6px 10px;margin:6px 0}
.progress{background:#fff3cd;border:1px solid #e0c060;padding:6px 10px;margin:6px 0}
.note{color:#555;font-size:13px}
.side{display:grid;grid-template-columns:1fr 1fr;gap:14px}
.side>div{min-width:0}
.diff .add{background:#e6ffec;display:block}.diff .del{background:#ffebe9;display:block}
.diff .hunk{color:#0550ae;display:block}.diff .file{font-weight:700;display:block}
.diff .ctx{display:block}
.log .mark{background:#ffd8d3;display:block}.log .line{display:block}
li.failing{word-break:break-all;color:#b42318;font-family:ui-monospace,Menlo,Consolas,monospace}
details{margin:3px 0}summary{cursor:pointer}
.ok{color:#1a7f37}.bad{color:#b42318;font-weight:600}
button{margin:8px 0}
tr.current td{outline:2px solid #36c;outline-offset:-2px}
.keys{color:#555;font-size:12px}
.rv{display:block;font-size:12px;color:#7a3e00;font-weight:600}
.rv-note{background:#ffe8cc;border:1px solid #d08a2c;padding:6px 10px;margin:6px 0}
summary .tokens{margin-left:10px;color:#555;font-size:12px;font-family:ui-monospace,Menlo,monospace}
ul.trial-links{margin:2px 0 8px;font-size:13px}
"""


def data_script(kind: str, key: int, value: Any) -> str:
    """A data file: one call of ``dvData`` with the value as JSON. ASCII only, so no text
    from a sandbox can end the script or change its meaning."""
    body = json.dumps(value, ensure_ascii=True, separators=(",", ":"))  # NaN is valid JS
    return f"dvData({json.dumps(kind)},{key},{body});\n"


def static_files() -> dict[str, str]:
    """The page's files by relative path: the shell, its style sheet and its script."""
    from runner.view.app_js import SCRIPT_HEAD
    from runner.view.trial_js import SCRIPT_TAIL

    return {"index.html": SHELL, "view.css": CSS, "view.js": SCRIPT_HEAD + SCRIPT_TAIL}
