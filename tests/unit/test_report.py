"""The HTML report is self-contained and renders in headless Chromium without console errors."""

import re
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from groundstate.pipeline.report import render, write_report
from groundstate.pipeline.runner import RunConfig, run
from groundstate.records import read_records
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
    alone = write_report(cand, tmp_path / "alone.html", "report")  # without a baseline the grid follows the metrics at once
    subprocess.run([CHROMIUM, *flags, f"--screenshot={shot}", "--window-size=1200,900", alone.as_uri()], capture_output=True, timeout=120, check=True)
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


def test_the_report_leads_with_the_summary_and_the_comparison_then_failures_first(runs):
    base, cand, _ = runs
    page = render(cand, "t", baseline=base)
    at = {
        name: page.index(marker)
        for name, marker in [
            ("summary", "id='summary'"),
            ("metrics", "id='metrics'"),
            ("comparison", "id='comparison'"),
            ("grid", "id='success-grid'"),
            ("failing", "<h2>Failing attempts"),
        ]
    }
    assert list(at) == sorted(at, key=at.get)  # in reading order
    summary = page[at["summary"] : page.index("</p>", at["summary"])]
    assert "pass@1" in summary and "against the baseline" in summary and "Observed 8/8 0 → 2" in summary
    # one naming: the comparison says pass@1, pass@8, pass^8, Observed 8/8 as the metrics table does, never pass_at_1
    comparison = page[at["comparison"] : page.index("</table>", at["comparison"])]
    assert all(f"<td>{label}</td>" in comparison for label in ("pass@1", "pass@8", "pass^8", "Observed 8/8"))
    assert "pass_at_1" not in page and "observed_k_of_k" not in page
    # the grid lists the least-solved tasks first
    grid = page[at["grid"] : page.index("<h2>", at["grid"])]
    shown = re.findall(r"<div class='muted'>(\d+)/(\d+)</div>", grid)
    rates = [int(c) / int(n) for c, n in shown]
    assert rates == sorted(rates) and rates[0] < rates[-1]


def test_failing_attempts_show_the_diff_as_a_table_with_the_differing_columns_marked(runs):
    _, cand, _ = runs
    failing = next(r for r in cand if r.reward == 0 and any(e.get("columns") for e in r.verdict.diff))
    page = render([r for r in cand if r.task_id == failing.task_id], "t")
    entry = next(e for e in failing.verdict.diff if e.get("columns"))
    for col in entry["columns"]:
        assert f"<th class='chg'>{col}</th>" in page
    assert "<table class='diff'>" in page and "all " in page and " columns</summary>" in page
    # the conversation turn by turn: each executed call as name(arguments), no raw message JSON
    for call in failing.trajectory.tool_calls:
        assert f"→ {call.name}(" in page
    assert '"role": "assistant"' not in page


def test_hostile_strings_in_records_are_text(runs):
    _, cand, _ = runs
    r = next(r for r in cand if r.reward == 0).model_copy(deep=True)
    evil = "<script>alert(1)</script>"
    r.trajectory.messages.append({"role": "assistant", "content": evil, "tool_calls": [{"function": {"name": evil, "arguments": evil}}]})
    r.verdict.diff = [{"table": evil, "key": [evil], "problem": evil, "expected": {evil: evil}, "actual": {evil: 1}, "columns": {evil: {}}}]
    page = render([r], "t")
    assert evil not in page and "&lt;script&gt;" in page
    with pytest.raises(ValueError, match="diff"):  # a diff of another shape is refused where it is made (or read), not drawn
        r.verdict.diff = {"not": "a list"}


@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (.ci/run installs it)")
def test_in_the_browser_the_summary_and_comparison_are_above_the_fold(runs, tmp_path):
    base, cand, _ = runs
    out = write_report(cand, tmp_path / "report.html", "report", baseline=base)
    probe = "<script>const at=id=>Math.round(document.getElementById(id).getBoundingClientRect().top);document.body.setAttribute('data-top',JSON.stringify({summary:at('summary'),comparison:at('comparison'),grid:at('success-grid')}))</script>"
    page = tmp_path / "probe.html"
    page.write_text(out.read_text().replace("</body>", probe + "</body>"))
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", f"--user-data-dir={tmp_path / 'p'}", "--window-size=1200,900"]
    dom = subprocess.run([CHROMIUM, *flags, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120).stdout
    import html as html_lib
    import json

    top = json.loads(html_lib.unescape(re.search(r'data-top="([^"]+)"', dom).group(1)))
    assert top["summary"] < 120 and top["summary"] < top["comparison"] < 900 and top["comparison"] < top["grid"], top


def test_plots_tick_k_in_whole_numbers_and_keep_the_legend_off_the_bars(tmp_path):
    import matplotlib.pyplot as plt

    from groundstate.pipeline.report import figures
    from groundstate.stats.metrics import compute
    from groundstate.worlds.domain import load_domain

    pairs = [(t, d) for d in (load_domain("hr"), load_domain("banking")) for t in d.tasks[:6]]
    run(pairs, RunConfig(agent="scripted:noisy:0.3", k=4), SqliteBackend(), tmp_path / "r.jsonl")
    records = read_records(tmp_path / "r.jsonl")
    _, pass_k, by_domain = figures(records, compute(records, bootstrap_reps=10))
    pass_k.canvas.draw()
    ticks = [t for t in pass_k.axes[0].get_xticks() if 1 <= t <= 4]
    assert len(ticks) >= 2 and all(float(t).is_integer() for t in ticks), ticks  # never 1.5, 2.5
    by_domain.canvas.draw()
    ax = by_domain.axes[0]
    assert {t.get_text() for t in ax.get_xticklabels()} == {"hr", "banking"}
    assert not ax.get_legend().get_window_extent().overlaps(ax.get_window_extent())  # beside the axes, over no bar
    plt.close("all")


def test_blame_rows_are_tables_of_golden_and_got_with_the_changed_columns_marked(runs):
    import html
    import json

    _, cand, _ = runs
    blamed = next(
        r for r in cand if r.reward == 0 and any(row.get("golden") and row.get("got") for row in (r.verdict.blame.rows if r.verdict.blame else []))
    )
    page = render([blamed], "t")
    assert html.escape('"golden":') not in page and html.escape('"got":') not in page  # no raw JSON of the rows
    blame = page[page.index("<div class='blame'>") :]
    blame = blame[: blame.index("</div>", blame.index("<table class='diff'>"))]  # the blame and its first table
    row = next(row for row in blamed.verdict.blame.rows if row.get("golden") and row.get("got"))
    assert html.escape(f"{row['table']} {json.dumps(row['key'])}: {row['problem']}") in page
    changed = [c for c in row["golden"] if row["golden"].get(c) != row["got"].get(c)]
    assert changed and all(f"<th class='chg'>{c}</th>" in page for c in changed)
    assert "<th>golden</th>" in blame and "<th>actual</th>" in blame
