"""The report in a real browser: Debian's headless Chromium renders it without script errors."""

import os
import re
import subprocess
from pathlib import Path

import pytest

from hindsight.cli.main import main

from .helpers import HOSTILE, hostile_run, sweep_runs

CHROMIUM = Path("/usr/bin/chromium")

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium (apt-get install chromium)"),
]


def dump_dom(page: Path, profile: Path) -> str:
    """The DOM after load and scripts, as headless Chromium serialises it."""
    command = [
        str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={profile}",
        "--enable-logging=stderr", "--v=0", "--dump-dom", page.resolve().as_uri(),
    ]
    env = {**os.environ, "HOME": str(profile)}
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


def attribute(dom: str, element: str, name: str) -> str | None:
    tag = re.search(rf"<{element}\b[^>]*>", dom)
    assert tag, f"no <{element}> in the rendered DOM"
    found = re.search(rf'\s{name}="([^"]*)"', tag.group(0))
    return found.group(1) if found else None


def viewer_tag(dom: str) -> str:
    return re.search(r'<section id="viewer"[^>]*>', dom).group(0)


def test_report_renders_without_script_errors(tmp_path):
    out = tmp_path / "report"
    assert main(["report", str(hostile_run(tmp_path / "hostile")), str(sweep_runs(tmp_path / "sweep")),
                 "-o", str(out)]) == 0
    dom = dump_dom(out / "index.html", tmp_path / "profile")
    assert attribute(dom, "html", "data-js-errors") is None
    tag = viewer_tag(dom)
    assert 'data-ready="1"' in tag
    steps = int(re.search(r'data-rendered-steps="(\d+)"', tag).group(1))
    assert steps == 4  # the hostile run is first and its looping failure is shown first
    # Loop rows are highlighted, and the hostile text is shown as text, not run as markup.
    assert dom.count('<tr class="loop') == 2
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in dom
    assert HOSTILE not in dom and "<img" not in dom
    options = re.search(r'<select id="viewer-run">(.*?)</select>', dom, re.DOTALL).group(1)
    assert options.count("<option") == 4


def test_a_broken_page_is_caught(tmp_path):
    # The error hook must report failures, or the test above could never fail.
    out = tmp_path / "report"
    assert main(["report", str(sweep_runs(tmp_path / "sweep")), "-o", str(out)]) == 0
    page = out / "index.html"
    html = page.read_text(encoding="utf-8")
    broken = re.sub(r'(<script type="application/json" id="viewer-data">).*?(</script>)', r"\1{not json\2", html,
                    flags=re.DOTALL)
    page.write_text(broken, encoding="utf-8")
    dom = dump_dom(page, tmp_path / "profile")
    assert attribute(dom, "html", "data-js-errors")
    assert 'data-ready="0"' in viewer_tag(dom)


def test_training_section_renders_and_its_boxes_hide_runs(tmp_path):
    from .training_runs import grpo_seeds

    out = tmp_path / "report"
    grpo_seeds(tmp_path / "runs", [(0.2, 0.4, 0.9), (0.6, 0.0, 0.5)], auvs=[(0.1, 0.2, 0.3), (0.3, 0.1, 0.2)])
    assert main(["report", str(tmp_path / "runs"), "-o", str(out)]) == 0
    page = out / "index.html"
    # Untick the first run's box as a user would, after the page's own scripts ran.
    untick = ("<script>var box = document.querySelector('input[data-toggle-run=\"run-0\"]'); box.checked = false;"
              "box.dispatchEvent(new Event('change'));</script></body>")
    page.write_text(page.read_text(encoding="utf-8").replace("</body>", untick), encoding="utf-8")
    dom = dump_dom(page, tmp_path / "profile")
    assert attribute(dom, "html", "data-js-errors") is None
    assert 'data-ready="1"' in re.search(r'<section id="training"[^>]*>', dom).group(0)
    hidden = re.findall(r'<polyline[^>]*class="run-line hidden-run"[^>]*data-run="run-(\d)"', dom)
    shown = re.findall(r'<polyline[^>]*class="run-line"[^>]*data-run="run-(\d)"', dom)
    # Each chart (success, return, loss, KL, clip fraction, TIDE success, AUV) hides run 0 and keeps run 1.
    assert set(hidden) == {"0"} and set(shown) == {"1"} and len(hidden) == len(shown) == 7
