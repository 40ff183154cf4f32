"""The HTML leaderboard pages (``fusebench leaderboard --format html``, :mod:`fusebench.leaderboard.html`).

Parser-level (html.parser): no ``src`` / ``href`` to another host, the Content-Security-Policy's hashes are
those of the inline blocks (hashed here with hashlib), every number of the markdown board's table is in the
page, hostile record text stays text, the inline data is the board's JSON, regeneration is byte-identical and
leaves files untouched, a 20-row 10-seed page stays under 300 KB, the committed pages regenerate. Browser
(headless Chromium, skipped with the reason when absent): the script runs under the CSP, sorting and filtering
from the URL fragment, no console error, no network request, a screenshot."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shutil
import subprocess
import urllib.parse
from html import unescape
from html.parser import HTMLParser
from pathlib import Path

import pytest

from fusebench.leaderboard import main, write_leaderboards

ROOT = Path(__file__).resolve().parents[1]
HOSTILE = "</script><script>alert(1)</script><img src=http://evil.example/x.png>"


def _record(obj: str, seed: int, acc: float, bench: str = "toy", extra_metrics: int = 0) -> dict:
    metrics = {"acc": acc, "mae": 1.0 - acc + 0.01 * seed}
    directions = {"acc": "higher", "mae": "lower"}
    for k in range(extra_metrics):
        metrics[f"gap_M{k + 2}"] = 0.1 * seed + acc * (k + 1)
        directions[f"gap_M{k + 2}"] = "lower"
    return {
        "schema_version": 1, "suite_version": "0.1.0", "benchmark": bench, "objective": obj, "seed": seed,
        "metrics": metrics, "metric_directions": directions,
        "config": {"metrics": list(metrics), "selection_metric": "acc", "description": f"{bench} board {HOSTILE}",
                   "seeds": [0, 1, 2], "options": {"board": "study"}, "dataset": {"id": bench}},
        "dataset": {"id": bench, "synthetic": True, "manifest_hash": "synthetic"},
        "selection": {"rule": f"best validation acc {HOSTILE}"},
        "protocol": {"note": HOSTILE},
        "pretrain_time_s": 5.0 + seed, "peak_memory_mb": 50.0, "device": "cpu",
        "git": {"sha": "0123456789abcdef0123456789abcdef01234567", "dirty": False},
        "curves": {"pretrain_loss": [2.0 - 0.1 * i - 0.01 * seed for i in range(40)],
                   "val_acc": [0.3 + 0.01 * i + 0.02 * seed for i in range(40)]},
    }


def _write(runs: Path, rec: dict) -> None:
    d = runs / rec["benchmark"] / rec["objective"] / f"seed{rec['seed']}"
    d.mkdir(parents=True, exist_ok=True)
    (d / "run.json").write_text(json.dumps(rec, indent=2))


#: acc per objective and seed (seeds 0, 1, 2); the means by hand: alpha 0.70, beta 0.62, gamma 0.43
ACCS = {"alpha": [0.61, 0.7, 0.79], "beta": [0.5, 0.66, 0.7], "gamma": [0.4, 0.42, 0.47]}


def _write_accs(runs: Path) -> Path:
    """The records of :data:`ACCS` under ``runs``."""
    for obj, accs in ACCS.items():
        for seed, acc in enumerate(accs):
            _write(runs, _record(obj, seed, acc))
    return runs


@pytest.fixture
def board(tmp_path: Path) -> Path:
    runs = _write_accs(tmp_path / "runs")
    out = tmp_path / "boards"
    assert main(["--runs", str(runs), "--out", str(out), "--format", "md", "json", "html", "--no-plots"]) == 0
    return out


class Page(HTMLParser):
    """Every start tag with its attributes, the text of each ``<script>`` / ``<style>``, the visible text."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.blocks: list[tuple[str, dict[str, str | None], str]] = []
        self.text: list[str] = []
        self._open: tuple[str, dict[str, str | None]] | None = None
        self.feed(text)
        self.close()

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag in ("script", "style"):
            self._open = (tag, dict(attrs))
            self._buf: list[str] = []

    def handle_endtag(self, tag):
        if self._open and tag == self._open[0]:
            self.blocks.append((*self._open, "".join(self._buf)))
            self._open = None

    def handle_data(self, data):
        if self._open:
            self._buf.append(data)
        else:
            self.text.append(data)


def _csp_hash(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def test_no_external_reference_and_csp_hashes_match(board: Path) -> None:
    for path in [board / "toy.html", board / "index.html"]:
        page = Page(path.read_text())
        for tag, attrs in page.tags:
            for name in ("src", "href", "action", "srcset", "xlink:href", "poster", "data"):
                value = attrs.get(name)
                if value is not None:
                    assert "//" not in value and not re.match(r"[A-Za-z][A-Za-z0-9+.-]*:", value), (path, tag, value)
        csp = [a["content"] for t, a in page.tags if t == "meta" and a.get("http-equiv") == "Content-Security-Policy"]
        assert len(csp) == 1
        policy = dict(p.strip().split(" ", 1) for p in csp[0].split(";"))
        assert policy["default-src"] == "'none'" and policy["img-src"] == "data:"
        styles = [body for t, _, body in page.blocks if t == "style"]
        scripts = [body for t, a, body in page.blocks if t == "script" and a.get("type") != "application/json"]
        assert len(styles) == 1 and len(scripts) == 1
        assert policy["style-src"] == _csp_hash(styles[0])
        assert policy["script-src"] == _csp_hash(scripts[0])
        assert not any("style" in a for _, a in page.tags), "style attributes are refused by the CSP"
        assert not any(k.startswith("on") for _, a in page.tags for k in a), "inline handlers are refused by the CSP"


def test_every_number_of_the_markdown_table_is_in_the_page(board: Path) -> None:
    md = (board / "toy.md").read_text().splitlines()
    start = next(i for i, line in enumerate(md) if line.startswith("| objective |"))
    table = [line for line in md[start:] if line.startswith("|")]
    numbers = {n for line in table[2:] for n in re.findall(r"[-+]?\d[\d,]*(?:\.\d+)?", line.replace("\\", ""))}
    text = unescape("".join(Page((board / "toy.html").read_text()).text))
    assert len(numbers) > 20
    assert not [n for n in numbers if n not in text]
    # the acc means, by hand (x100, 2 decimals): alpha 70.00, beta 62.00, gamma 43.00
    for mean in ("70.00", "62.00", "43.00"):
        assert mean in text


def test_hostile_record_text_stays_text(board: Path) -> None:
    source = (board / "toy.html").read_text()
    page = Page(source)
    assert "<script>alert" not in source and "<img" not in source
    assert [t for t, _ in page.tags].count("script") == 2  # the data and the page's own script
    assert [t for t, _ in page.tags].count("img") == 0
    assert HOSTILE in unescape("".join(page.text))  # shown, as text
    data = next(body for t, a, body in page.blocks if t == "script" and a.get("type") == "application/json")
    assert "</" not in data and "<" not in data
    assert json.loads(data) == json.loads((board / "toy.json").read_text())  # the board's JSON, inline


def test_rows_details_and_anchors(board: Path) -> None:
    page = Page((board / "toy.html").read_text())
    rows = [a for t, a in page.tags if t == "tr" and a.get("id", "").startswith("g1-")]
    assert sorted(a["id"] for a in rows) == ["g1-alpha", "g1-beta", "g1-gamma"]
    details = {a["id"] for t, a in page.tags if t == "details"}
    assert details == {"runs-g1-alpha", "runs-g1-beta", "runs-g1-gamma"}
    links = sorted(a["href"] for t, a in page.tags if t == "a" and a.get("href", "").endswith("run.json"))
    assert links == sorted(f"../runs/toy/{o}/seed{s}/run.json" for o in ACCS for s in range(3))
    for link in links:
        assert (board / link).is_file()
    sortable = {a["data-key"]: a.get("data-better") for t, a in page.tags if t == "th" and "data-key" in a}
    assert sortable["acc"] == "higher" and sortable["mae"] == "lower"


def test_tie_mark_and_rank_interval(board: Path) -> None:
    """Paired t-tests against the best row (alpha) on acc, by hand (scipy's ttest_rel of the seeds above): beta
    p = 0.0615, gamma p = 0.0139; Holm over 2 rows: gamma 2 x 0.0139 = 0.028 (separable), beta max(0.028, 0.0615)
    = 0.0615 > 0.05 (tied). Only beta's row has the tie mark; every row has its rank-interval bar."""
    source = (board / "toy.html").read_text()
    rows = dict(re.findall(r'<tr id="(g1-[a-z]+)"(.*?)</tr>', source, flags=re.S))
    assert ["tied with best" in rows[r] for r in ("g1-alpha", "g1-beta", "g1-gamma")] == [False, True, False]
    assert all(rows[r].count('class="rk"') == 1 for r in rows)
    strips = [rows[r].count('class="strip"') for r in ("g1-alpha", "g1-beta", "g1-gamma")]
    assert strips == [3, 3, 3]  # acc, mae and the rank bar
    # a strip has one dot per seed
    assert all(d.count("h0") == 3 for d in re.findall(r'class="dots" d="([^"]*)"', source))


def test_regeneration_is_byte_identical_and_untouched(board: Path) -> None:
    runs = board.parent / "runs"
    before = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in board.glob("*.html")}
    assert set(before) == {"toy.html", "index.html"}
    write_leaderboards(runs, board, plots=False, formats=("md", "json", "html"))
    after = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in board.glob("*.html")}
    assert after == before


def test_twenty_rows_ten_seeds_page_is_small(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    for k in range(20):
        for seed in range(10):
            _write(runs, _record(f"obj{k:02d}", seed, 0.3 + 0.02 * k + 0.003 * seed, bench="big", extra_metrics=5))
    out = tmp_path / "out"
    write_leaderboards(runs, out, plots=True, formats=("html",))
    page = (out / "big.html").read_bytes()
    assert len(page) < 300_000, len(page)
    assert page.count(b"<details") == 20 and page.count(b"<polyline") == 40  # 20 loss and 20 validation curves


def test_committed_pages_regenerate_byte_identically(committed_regeneration) -> None:
    """Each committed board's page and the index page are what the committed runs give (the committed boards'
    formats, ``committed_regeneration``: each page's footer shows the command that made it), byte for byte."""
    root = ROOT / "leaderboards"
    if not list(root.glob("*.html")):
        pytest.skip(f"no HTML page in {root} yet: fusebench leaderboard --runs leaderboards/runs --out leaderboards "
                    f"--format md csv json html")
    regen = committed_regeneration
    boards = [p.stem for p in root.glob("*.md") if p.name != "README.md" and (root / f"{p.stem}.json").exists()]
    missing = [f"{b}.html" for b in boards if not (root / f"{b}.html").exists()]
    assert not missing, f"committed boards without their page: {missing}"
    written = {p.name for p in regen.written}
    for name in [f"{b}.html" for b in boards] + ["index.html"]:
        assert name in written, f"{name}: not written by the regeneration"
        got = regen.first[name][0]
        assert regen.second[name] == regen.first[name], f"{name}: the second regeneration rewrote it"
        assert got == (root / name).read_bytes(), f"{name} differs from what the runs give"


# -- in a real browser ---------------------------------------------------------------------------------

CHROMIUM = next((shutil.which(b) for b in ("chromium-headless-shell", "chromium", "chromium-browser")
                 if shutil.which(b)), None)
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="no headless Chromium (Debian: apt-get install "
                                    "chromium-headless-shell; scripts/setup.sh installs it)")


def _chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    base = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--disable-dev-shm-usage", f"--user-data-dir={tmp_path / 'profile'}",
            "--host-resolver-rules=MAP * ~NOTFOUND", "--enable-logging=stderr", "--v=0"]
    return subprocess.run(base + list(args), capture_output=True, text=True, timeout=120,
                          env={**os.environ, "HOME": str(tmp_path)})


def _url(path: Path, fragment: str = "") -> str:
    return path.resolve().as_uri() + (f"#{fragment}" if fragment else "")


def _row_ids(dom: str) -> list[str]:
    return re.findall(r'<tr id="(g1-[^"]+)"', dom)


def _console_errors(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines()
            if "Uncaught" in line or "Content Security Policy" in line or "Refused to" in line]


@needs_chromium
def test_browser_runs_script_sorts_and_filters(board: Path, tmp_path: Path) -> None:
    page = board / "toy.html"
    plain = _chromium(tmp_path, "--dump-dom", _url(page))
    assert 'data-ready="1"' in plain.stdout, "the page's script did not run (CSP hash?)" + plain.stderr[-2000:]
    assert _console_errors(plain.stderr) == []
    assert _row_ids(plain.stdout) == ["g1-alpha", "g1-beta", "g1-gamma"]  # as the markdown: by id
    # means of mae by hand: alpha 1 - 0.70 + 0.01 = 0.31, beta 0.39, gamma 0.58; acc ascending: gamma, beta, alpha
    asc = _chromium(tmp_path, "--dump-dom", _url(page, "sort=acc:asc")).stdout
    assert _row_ids(asc) == ["g1-gamma", "g1-beta", "g1-alpha"]
    desc = _chromium(tmp_path, "--dump-dom", _url(page, "sort=mae:desc")).stdout
    assert _row_ids(desc) == ["g1-gamma", "g1-beta", "g1-alpha"]
    fam = _chromium(tmp_path, "--dump-dom", _url(page, "family=beta")).stdout
    hidden = re.findall(r'<tr id="(g1-[^"]+)"[^>]*\bhidden\b', fam)
    assert sorted(hidden) == ["g1-alpha", "g1-gamma"]


@needs_chromium
def test_browser_makes_no_request_and_takes_a_screenshot(board: Path, tmp_path: Path) -> None:
    netlog = tmp_path / "net.json"
    shot = tmp_path / "shot.png"
    res = _chromium(tmp_path, f"--log-net-log={netlog}", f"--screenshot={shot}", "--window-size=1280,900",
                    _url(board / "toy.html"))
    assert _console_errors(res.stderr) == []
    urls = set(re.findall(r'"url":"([^"]+)"', netlog.read_text())) if netlog.exists() else set()
    external = [u for u in urls if urllib.parse.urlparse(u).scheme not in ("file", "data", "about", "chrome", "")]
    assert external == [], external
    png = shot.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")
    assert (width, height) == (1280, 900) and len(png) > 20_000


# -- review (html): footer command, run links, sort keys, control characters, huge values, the fragment ----------


def test_footer_command_has_reported_and_quoted_runs_and_links_survive_a_space(tmp_path: Path) -> None:
    runs = tmp_path / "my runs"
    _write_accs(runs)
    reported = tmp_path / "rep.yaml"
    reported.write_text('- {benchmark: toy, label: "Paper X", metric: acc, value: 0.9, source: "p.pdf, Table 1"}\n')
    out = tmp_path / "out"
    assert main(["--runs", str(runs), "--out", str(out), "--format", "md", "html", "--no-plots",
                 "--reported", str(reported)]) == 0
    page = (out / "toy.html").read_text()
    assert "Paper X" in page
    footer = unescape(re.search(r"<footer>Generated by <code>(.*?)</code>", page).group(1))
    assert footer == "fusebench leaderboard --runs '../my runs' --out . --no-plots --reported ../rep.yaml --format md html"
    links = [unescape(h) for h in re.findall(r'href="([^"]*run\.json)"', page)]
    assert len(links) == 9  # every record keeps its link, percent-encoded
    assert all((out / urllib.parse.unquote(h)).is_file() for h in links)


def test_a_metric_named_like_a_fixed_column_keeps_its_own_sort_key(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    for obj, accs in ACCS.items():
        for seed, acc in enumerate(accs):
            rec = _record(obj, seed, acc)
            rec["metrics"]["time"] = 1.0 - acc
            rec["metric_directions"]["time"] = "lower"
            rec["config"]["metrics"].append("time")
            _write(runs, rec)
    out = tmp_path / "out"
    write_leaderboards(runs, out, plots=False, formats=("html",))
    keys = [a["data-key"] for t, a in Page((out / "toy.html").read_text()).tags if t == "th" and "data-key" in a]
    assert len(keys) == len(set(keys)), keys
    assert "time" in keys and "_time" in keys  # the metric; the pretrain time column


def test_control_characters_in_record_text_are_shown_not_used(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    for obj, accs in ACCS.items():
        for seed, acc in enumerate(accs):
            rec = _record(obj, seed, acc)
            rec["config"]["description"] = "\x00table 0"  # the page's hook key of the first table
            _write(runs, rec)
    out = tmp_path / "out"
    write_leaderboards(runs, out, plots=False, formats=("md", "html"))
    page = (out / "toy.html").read_text()
    assert page.count('<table class="board">') == 1 and page.count('id="g1-alpha"') == 1
    assert "\x00" not in page and "\x00" not in (out / "toy.md").read_text()


def test_reported_metric_must_be_a_metric_name(tmp_path: Path) -> None:
    from fusebench.leaderboard.reported import load_reported

    path = tmp_path / "rep.yaml"
    path.write_text('- {benchmark: toy, label: L, metric: "m<script>x</script>|y", value: 0.5, source: S}\n')
    with pytest.raises(ValueError, match="entry 0: metric must be a metric id"):
        load_reported(path)


def test_chart_of_values_spanning_the_float_range_has_coordinates() -> None:
    from fusebench.leaderboard.html_svg import line_chart, mean_curve

    svg = line_chart("loss", [("a", mean_curve([[1e308, -1e308, 0.0], [1e308, -1e308, 0.0]]))])
    points = re.search(r'points="([^"]*)"', svg).group(1)
    # by hand: y = 22 + 210 * (hi - v) / (hi - lo) with hi = 1e308, lo = -1e308: 22, 232, 127
    assert points == "56,22 293,232 530,127"


@needs_chromium
def test_browser_malformed_or_unknown_fragment_is_ignored(board: Path, tmp_path: Path) -> None:
    res = _chromium(tmp_path, "--dump-dom", _url(board / "toy.html", "family=%25zz%&sort=acc:asc"))
    assert _console_errors(res.stderr) == [] and 'data-ready="1"' in res.stdout
    res = _chromium(tmp_path, "--dump-dom", _url(board / "toy.html", "family=nosuchfamily"))
    assert re.findall(r'<tr id="(g1-[^"]+)"[^>]*\bhidden\b', res.stdout) == []  # no row hidden by a stale link
