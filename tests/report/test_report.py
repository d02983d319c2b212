"""The static report: self-contained, escaped, with every section."""

import json
import re

from hindsight.cli.main import main
from hindsight.report.html import _CATEGORY_NAMES, script_json
from hindsight.report.svg import min_max_normalise, nice_ticks

from .helpers import HOSTILE, hostile_run, sweep_runs


def build(tmp_path, *paths, extra=()):
    out = tmp_path / "out"
    assert main(["report", *map(str, paths), "-o", str(out), *extra]) == 0
    return (out / "index.html").read_text(encoding="utf-8")


def viewer_payload(html):
    found = re.search(r'<script type="application/json" id="viewer-data">(.*?)</script>', html, re.DOTALL)
    return json.loads(found.group(1))


def test_hostile_text_never_reaches_the_page_as_markup(tmp_path):
    html = build(tmp_path, hostile_run(tmp_path / "run"))
    assert HOSTILE not in html
    assert "<img src=x" not in html
    # The only script elements are the report's own three.
    assert len(re.findall(r"<script\b", html)) == 3
    # In static HTML (the summary table) the model name shows as text.
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    # The viewer's data round-trips to the exact original text.
    payload = viewer_payload(html)
    (run,) = payload["runs"]
    steps = run["trajectories"][0]["steps"]
    assert steps[0]["o"] == f"obs {HOSTILE} A" and steps[0]["a"] == f"right {HOSTILE}"
    assert steps[0]["r"] == f"raw {HOSTILE}" and steps[0]["n"] == f"why {HOSTILE}"
    assert steps[1]["o"] == "B & </script><img src=x onerror=alert(2)>"
    assert [s["l"] for s in steps] == [False, False, True, True]
    assert [s["v"] for s in steps] == [True, False, True, True]


def test_script_json_cannot_close_its_element():
    text = script_json({"x": "</script><!-- & \u2028"})
    assert "<" not in text and ">" not in text and "&" not in text and "\u2028" not in text
    assert json.loads(text) == {"x": "</script><!-- & \u2028"}


def test_report_is_self_contained(tmp_path):
    html = build(tmp_path, sweep_runs(tmp_path / "sweep"))
    without_svg_namespace = html.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert "http://" not in without_svg_namespace and "https://" not in without_svg_namespace
    assert not re.search(r"<(link|img|iframe)\b", html)
    assert not re.search(r'\ssrc="', html)
    assert "default-src 'none'" in html


def test_report_has_every_section_and_the_memory_curve(tmp_path):
    html = build(tmp_path, sweep_runs(tmp_path / "sweep"))
    for marker in ('id="summary"', 'id="pt-frozenlake"', 'id="radar-frozenlake"', 'id="scatter-frozenlake"',
                   'id="memory"', 'id="viewer"'):
        assert marker in html
    assert html.count("<svg") == 5  # P_t, radar, scatter, error taxonomy, memory window
    assert "Memory Index (AUV full − AUV none)" in html
    summary = re.search(r'<table class="summary".*?</table>', html, re.DOTALL).group(0)
    assert summary.count("<tr>") == 4  # header + three runs
    payload = viewer_payload(html)
    assert [r["label"] for r in payload["runs"]] == ["memory-2", "memory-full", "memory-none"]
    assert all(r["trajectories"] for r in payload["runs"])


def test_keep_limits_the_viewer(tmp_path):
    html = build(tmp_path, sweep_runs(tmp_path / "sweep"), extra=["--keep", "2"])
    assert all(len(r["trajectories"]) == 2 for r in viewer_payload(html)["runs"])
    html = build(tmp_path, sweep_runs(tmp_path / "sweep"), extra=["--keep", "0"])
    assert all(r["trajectories"] == [] for r in viewer_payload(html)["runs"])


def test_report_exit_codes(tmp_path, capsys):
    assert main(["report", str(tmp_path / "missing"), "-o", str(tmp_path / "o")]) == 2
    (tmp_path / "empty").mkdir()
    assert main(["report", str(tmp_path / "empty"), "-o", str(tmp_path / "o")]) == 1
    assert "no report written" in capsys.readouterr().err
    assert not (tmp_path / "o" / "index.html").exists()


def test_chart_helpers():
    assert min_max_normalise([2.0, 4.0, 3.0]) == [0.0, 1.0, 0.5]
    assert min_max_normalise([0.3, 0.3]) == [1.0, 1.0]
    assert nice_ticks(0.0, 1.0, 5) == [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]
    assert nice_ticks(0, 30, 6) == [0, 5, 10, 15, 20, 25, 30]


def test_the_taxonomy_chart_shows_each_runs_share_of_failures(tmp_path, capsys):
    sweep = sweep_runs(tmp_path / "sweep")
    assert main(["diagnose", str(sweep), "--json"]) == 0
    printed = capsys.readouterr().out
    diagnosed = [json.loads(line) for line in printed.splitlines() if line.strip()]
    html = build(tmp_path, sweep)
    chart = re.search(r'<figure id="taxonomy-frozenlake">(.*?)</figure>', html, re.DOTALL).group(1)
    bars = dict(re.findall(r"<title>([^<]*?): ([0-9.]+)</title></rect>", chart))
    checked = 0
    for run in diagnosed:
        for category, share in run["taxonomy"].items():
            if share is not None:
                key = f"{run['label']} · {_CATEGORY_NAMES[category]}"
                assert abs(float(bars[key]) - share) < 1e-3  # the title rounds to 3 decimals
                checked += 1
    assert checked >= 3 and "n/a" in chart  # FrozenLake cannot judge wrong-object focus
    # What ended the failures, from the same diagnosis: each run's "ended" bars add up to 1.
    for run in diagnosed:
        known = sum(run["failure_endings"].values())
        if not known:
            continue
        shares = [float(bars[f"{run['label']} · ended: {e}"]) for e in ("env", "budget", "other")
                  if f"{run['label']} · ended: {e}" in bars]
        assert shares and abs(sum(shares) - 1) < 3e-3
        for ending, count in run["failure_endings"].items():
            assert abs(float(bars[f"{run['label']} · ended: {ending}"]) - count / known) < 1e-3
        checked += 1
    assert checked > 3  # at least one run's endings were checked
