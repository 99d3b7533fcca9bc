"""The HTML report is self-contained and renders in headless Chromium without console errors."""

import re
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from groundstate.report import render, write_report
from groundstate.results import read_records
from groundstate.runner import RunConfig, run
from groundstate.state.sqlite import SqliteBackend

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def runs(tmp_path_factory, shop):
    d = tmp_path_factory.mktemp("runs")
    pairs = [(t, shop) for t in shop.tasks]
    run(pairs, RunConfig(agent="scripted:noisy:0.3", k=8), SqliteBackend(), d / "base.jsonl")
    run(pairs, RunConfig(agent="scripted:noisy:0.1", k=8), SqliteBackend(), d / "cand.jsonl")
    return read_records(d / "base.jsonl"), read_records(d / "cand.jsonl"), d


def test_report_is_self_contained_and_links_failures(runs):
    base, cand, _ = runs
    page = render(cand, "t", baseline=base)
    assert not re.search(r"(src|href)=['\"]https?://", page)  # nothing fetched from the network
    assert page.count("<img") >= 4  # histogram, pass@k/pass^k, domains, transitions
    failing = [r for r in cand if r.reward != 1]
    for r in failing:
        anchor = "a-" + "".join(ch if ch.isalnum() else "-" for ch in r.task_id) + f"-{r.attempt}"
        assert f"href='#{anchor}'" in page and f"id='{anchor}'" in page
    assert page.count("class='cell pass'") == sum(r.reward == 1 for r in cand)


@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (.ci/run installs it)")
def test_report_opens_in_headless_chromium_without_console_errors(runs, tmp_path):
    base, cand, _ = runs
    out = write_report(cand, tmp_path / "report.html", "report", baseline=base)
    flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        f"--user-data-dir={tmp_path / 'profile'}",
        "--enable-logging=stderr",
        "--v=0",
    ]
    dom = subprocess.run([CHROMIUM, *flags, "--dump-dom", out.as_uri()], capture_output=True, text=True, timeout=120)
    assert 'id="success-grid"' in dom.stdout
    console_errors = [line for line in dom.stderr.splitlines() if "CONSOLE" in line and ("Uncaught" in line or "Error" in line)]
    assert console_errors == []
    shot = tmp_path / "grid.png"
    subprocess.run([CHROMIUM, *flags, f"--screenshot={shot}", "--window-size=1200,900", out.as_uri()], capture_output=True, timeout=120, check=True)
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    assert (width, height) == (1200, 900)
    import matplotlib.image

    pixels = matplotlib.image.imread(str(shot))[:, :, :3]
    green = ((pixels[:, :, 1] > 0.5) & (pixels[:, :, 0] < 0.3) & (pixels[:, :, 2] < 0.45)).sum()
    red = ((pixels[:, :, 0] > 0.7) & (pixels[:, :, 1] < 0.35) & (pixels[:, :, 2] < 0.35)).sum()
    assert green > 100 and red > 50, "the success grid's pass and fail cells are visible above the fold"
    Path("/tmp/groundstate-report-grid.png").write_bytes(data)  # kept for a person to look at
