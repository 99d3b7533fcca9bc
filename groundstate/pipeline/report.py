"""`groundstate report`: one self-contained HTML file a person would rather look at than read.

Plots are rendered with matplotlib and embedded as PNG data URIs, so the file opens without network.
In reading order: a one-line summary, the headline metrics, with a baseline the before/after comparison
(lifts, transitions, agreement), the task × attempt success grid with the least-solved tasks first (each
failing attempt links to its verdict), the plots (c/k histogram, pass@k and pass^k against k, per-domain
bars), with a training folder its curve and with a ledger the run's whole cost (`_training`), and the failing attempts:
blame, the diff against the golden state as tables with the differing columns marked, and the conversation turn by turn. Metrics are named as in `metrics` (`metric_label`).
Names from the records (domains, tasks) are plain text everywhere: in plots, mathtext (`$...$`) is off.
"""

from __future__ import annotations

import base64
import html
import io
import json
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from groundstate.records import AttemptRecord, latest_per_key  # noqa: E402
from groundstate.stats.agreement import describe_agreement  # noqa: E402
from groundstate.stats.basis import task_counts  # noqa: E402
from groundstate.stats.compare import compare  # noqa: E402
from groundstate.stats.cost import load_prices  # noqa: E402
from groundstate.stats.estimators import metric_label, pass_at_k, pass_hat_k  # noqa: E402
from groundstate.stats.metrics import compute  # noqa: E402
from groundstate.train.ledger import WASTE_REASONS, Curve, Ledger, read_curve, whole_cost_per_dependable_task  # noqa: E402
from groundstate.types import Blame, ToolCallRecord  # noqa: E402

CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,sans-serif;margin:24px auto;max-width:1200px;color:#1c2330;padding:0 16px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #dde2ea;padding-bottom:4px}
table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #dde2ea;padding:4px 8px;text-align:left}
th{background:#f4f6f9}.muted{color:#6b7585}.grid{display:grid;gap:2px;align-items:center}
.cell{width:14px;height:14px;border-radius:2px;display:block}.pass{background:#2e9d5b}.fail{background:#d64545}
.err{background:#9aa3b2}.unj{background:#e0b400}.tid{font:11px monospace;white-space:nowrap;overflow:hidden;text-overflow:ellipsis;max-width:260px}
.plots img{max-width:48%;margin:4px;border:1px solid #eef0f4}pre{background:#f6f8fa;padding:8px;overflow:auto;max-height:360px;font-size:12px}
details{margin:6px 0;border:1px solid #eef0f4;padding:4px 8px}.summary{font-size:16px;margin:8px 0 0}
table.diff td{font:12px monospace;white-space:pre-wrap;max-width:260px}.chg{background:#ffe1e1;font-weight:bold}
.turn{margin:4px 0;padding:4px 8px;border-left:3px solid #dde2ea;white-space:pre-wrap;font-size:13px}
.turn b{display:block;font-size:11px;color:#6b7585;text-transform:uppercase}.turn.user{border-color:#3a6fd8}
.turn.assistant{border-color:#2e9d5b}.turn.tool{border-color:#e0b400;font:12px monospace}
"""


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def _pct(x: Any) -> str:
    return "—" if x is None or (isinstance(x, float) and x != x) else f"{x:.1%}"


def _anchor(task_id: str, attempt: int) -> str:
    return "a-" + "".join(ch if ch.isalnum() else "-" for ch in task_id) + f"-{attempt}"


def _plots(records: list[AttemptRecord], m: dict[str, Any]) -> list[str]:
    return [_png(fig) for fig in figures(records, m)]


def figures(records: list[AttemptRecord], m: dict[str, Any]) -> list[Figure]:
    """The report's plots, open (`_png` renders and closes each): per-task success rates, pass@k and pass^k against k
    (integer ticks: k is a count), and by domain (its legend beside the axes, where it covers no bar)."""
    covered = {row["task_id"] for row in m["per_task"] if row["covered"]}  # the task set of every figure (`stats.basis`)
    counts = [t for t in task_counts(records).values() if t.task_id in covered]
    k = m["k"]
    out = []
    fig, ax = plt.subplots(figsize=(5, 3.2))
    ax.hist([t.c / t.n for t in counts], bins=[i / k - 0.5 / k for i in range(k + 2)], color="#3a6fd8", edgecolor="white")
    ax.set(xlabel="c / k (share of attempts solved)", ylabel="tasks", title=f"Per-task success rate ({len(counts)} tasks)")
    out.append(fig)
    ks = list(range(1, k + 1))
    full = counts
    fig, ax = plt.subplots(figsize=(5, 3.2))
    if full:
        ax.plot(ks, [sum(pass_at_k(t.n, t.c, j) for t in full) / len(full) for j in ks], "o-", label="pass@k", color="#2e9d5b")
        ax.plot(ks, [sum(pass_hat_k(t.n, t.c, j) for t in full) / len(full) for j in ks], "o-", label="pass^k", color="#d64545")
    ax.set(xlabel="k", ylabel="rate", ylim=(0, 1.02), title="pass@k and pass^k against k")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # k is a count: no tick at 1.5
    if full:
        ax.legend()
    out.append(fig)
    by = m.get("by_domain", {})
    if by:
        fig, ax = plt.subplots(figsize=(5, 3.2))
        names = list(by)
        ax.bar([i - 0.2 for i in range(len(names))], [by[n]["pass_at_1"] for n in names], 0.4, label="pass@1", color="#3a6fd8")
        ax.bar([i + 0.2 for i in range(len(names))], [by[n]["pass_hat_k"] for n in names], 0.4, label=f"pass^{k}", color="#d64545")
        ax.set_xticks(range(len(names)), names, rotation=20)
        ax.set(ylim=(0, 1.02), title="By domain")
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), borderaxespad=0)  # beside the axes: it never covers a bar
        out.append(fig)
    return out


def curve_figures(curve: Curve) -> list[Figure]:
    """The training curve's plots, open: per step the sampled reward, informative and wasted shares; the wasted
    rollouts by reason beside the informative ones; tokens and wall seconds; validation pass@1 with its 95% interval."""
    steps = curve.steps
    x = [s.step for s in steps]
    out = []
    fig, ax = plt.subplots(figsize=(5, 3.2))
    ax.plot(x, [s.sampled_reward for s in steps], "-", color="#2e9d5b", label="sampled reward")
    ax.plot(x, [s.informative_share for s in steps], "-", color="#3a6fd8", label="informative share (first groups)")
    ax.plot(x, [s.wasted_share for s in steps], "-", color="#d64545", label="wasted share (rollouts)")
    ax.set(xlabel="step", ylabel="share", ylim=(0, 1.02), title="Training: reward and signal per step")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), borderaxespad=0, fontsize=8)
    out.append(fig)
    fig, ax = plt.subplots(figsize=(5, 3.2))
    bottom = [s.rollouts - s.wasted for s in steps]
    ax.bar(x, bottom, color="#b9c7e6", label="informative")
    colors = {"all_pass": "#2e9d5b", "all_fail": "#d64545", "unjudged": "#d9a441", "system_error": "#9aa3b2"}
    for reason in WASTE_REASONS:
        vals = [getattr(s, f"wasted_{reason}") for s in steps]
        ax.bar(x, vals, bottom=bottom, color=colors[reason], label=f"wasted: {reason.replace('_', ' ')}")
        bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
    ax.set(xlabel="step", ylabel="rollouts", title="Rollouts per step, wasted by reason")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), borderaxespad=0, fontsize=8)
    out.append(fig)
    fig, ax = plt.subplots(figsize=(5, 3.2))
    ax.plot(x, [s.input_tokens + s.output_tokens for s in steps], "-", color="#3a6fd8", label="tokens (input + output)")
    ax.set(xlabel="step", ylabel="tokens", title="Tokens and seconds per step")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    timed = [s for s in steps if s.seconds is not None]
    if timed:
        ax2 = ax.twinx()
        ax2.plot([s.step for s in timed], [s.seconds for s in timed], "-", color="#e0b400", label="seconds (wall)")
        ax2.set_ylabel("seconds")
        ax2.legend(loc="upper right", fontsize=8)
    ax.legend(loc="upper left", fontsize=8)
    out.append(fig)
    val = [v for v in curve.validation if v.pass_at_1 is not None]
    if val:
        fig, ax = plt.subplots(figsize=(5, 3.2))
        ys = [v.pass_at_1 for v in val]
        lo = [v.pass_at_1 - v.ci_95[0] if v.ci_95 else 0 for v in val]
        hi = [v.ci_95[1] - v.pass_at_1 if v.ci_95 else 0 for v in val]
        ax.errorbar([v.step for v in val], ys, yerr=[lo, hi], fmt="o-", color="#2e9d5b", capsize=4)
        ax.set(
            xlabel="step (0: the base)", ylabel="pass@1", ylim=(0, 1.02), title=f"Validation pass@1, 95% CI ({val[-1].tasks} tasks × k={val[-1].k})"
        )
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        out.append(fig)
    return out


def ledger_figure(ledger: Ledger) -> Figure:
    """The whole cost as one picture: rollouts and tokens by phase, training split into informative and wasted by reason."""
    parts = [("probing", ledger.probing, "#9b6bd6"), ("training: informative", ledger.training.informative, "#3a6fd8")]
    colors = {"all_pass": "#2e9d5b", "all_fail": "#d64545", "unjudged": "#d9a441", "system_error": "#9aa3b2"}
    parts += [(f"training wasted: {r.replace('_', ' ')}", ledger.training.wasted[r], colors[r]) for r in WASTE_REASONS]
    parts.append(("evaluation", ledger.evaluation, "#e0b400"))
    fig, axes = plt.subplots(1, 2, figsize=(10, 2.4))
    for ax, (label, value) in zip(axes, (("rollouts", lambda s: s.rollouts), ("tokens", lambda s: s.input_tokens + s.output_tokens)), strict=True):
        left = 0
        for name, spend, color in parts:
            ax.barh([0], [value(spend)], left=left, color=color, label=name)
            left += value(spend)
        ax.set(yticks=[], xlabel=label, title=f"{label}: {left:,}")
    axes[1].legend(loc="upper left", bbox_to_anchor=(1.01, 1), borderaxespad=0, fontsize=8)
    return fig


def _training(curve: Curve | None, ledger: Ledger | None) -> list[str]:
    """The training section: the curve's pictures and the ledger's, with the sentence saying what they count."""
    if curve is None and ledger is None:
        return []
    parts = ["<h2 id='training'>Training and the whole cost</h2>"]
    if curve is not None and curve.steps:
        first, last = curve.steps[0], curve.steps[-1]
        wasted = sum(s.wasted for s in curve.steps)
        rollouts = sum(s.rollouts for s in curve.steps)
        parts.append(
            f"<p class='muted'>{len(curve.steps)} steps; informative share of the first groups {first.informative_share:.0%} at step "
            f"{first.step}, {last.informative_share:.0%} at step {last.step}; {wasted} of {rollouts} rollouts wasted "
            f"({wasted / rollouts if rollouts else 0:.1%}).</p>"
        )
        parts.append(
            "<div class='plots' id='curve'>" + "".join(f"<img alt='training curve' src='{_png(f)}'>" for f in curve_figures(curve)) + "</div>"
        )
    failed = [v for v in (curve.validation if curve is not None else []) if v.error]
    if failed:  # a gap in the validation curve is said, never left to be noticed
        parts.append(
            "<p class='muted' id='validation-failed'>validation failed at "
            + "; ".join(f"step {v.step} ({html.escape(v.error or '')})" for v in failed)
            + ": not drawn, training went on</p>"
        )
    if ledger is not None:
        t = ledger.total()
        parts.append(
            f"<p class='muted' id='ledger'>the whole run: {t.rollouts:,} rollouts, {t.input_tokens + t.output_tokens:,} tokens "
            f"(probing {ledger.probing.rollouts:,}, training {ledger.training.rollouts:,} of which {ledger.wasted().rollouts:,} wasted, "
            f"evaluation {ledger.evaluation.rollouts:,} rollouts)</p><div class='plots'><img alt='ledger' style='max-width:96%' src='{_png(ledger_figure(ledger))}'></div>"
        )
    return parts


def _transition_plot(c: dict[str, Any]) -> str:
    cats = ["never", "sometimes", "always"]
    fig, ax = plt.subplots(figsize=(5, 3.2))
    bottom = [0] * 3
    colors = {"never": "#d64545", "sometimes": "#e0b400", "always": "#2e9d5b"}
    for to in cats:
        vals = [c["transitions"][fr][to] for fr in cats]
        ax.bar(cats, vals, bottom=bottom, label=f"→ {to}", color=colors[to])
        bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
    ax.set(xlabel="baseline category", ylabel="tasks", title="Before → after transitions")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), borderaxespad=0)
    return _png(fig)


def render(
    records: list[AttemptRecord],
    title: str,
    baseline: list[AttemptRecord] | None = None,
    allow_incomplete: bool = True,
    prices: dict[str, dict[str, float]] | None = None,
    training: Path | None = None,
    ledger: Ledger | None = None,
) -> str:
    """The report's HTML, costed with `prices` (default: the bundled table, `stats.cost.load_prices`). With `training`
    (a TRL training folder) its curve is drawn; with `ledger` the whole cost is drawn and the cost per dependable task is
    also given including what training and probing spent. A label such as `$\\frac{a}$` is a name, not a formula: plots
    render it as it is."""
    with matplotlib.rc_context({"text.parse_math": False, "text.usetex": False}):
        curve = read_curve(training) if training is not None else None
        return _render(records, title, baseline, allow_incomplete, prices, curve, ledger)


def _render(
    records: list[AttemptRecord],
    title: str,
    baseline: list[AttemptRecord] | None,
    allow_incomplete: bool,
    prices: dict[str, dict[str, float]] | None,
    curve: Curve | None = None,
    ledger: Ledger | None = None,
) -> str:
    m = compute(records, prices=prices, allow_incomplete=allow_incomplete, bootstrap_reps=1000)
    k = m["k"]
    c = compare(baseline, records, prices=prices, allow_incomplete=True, reps=1000) if baseline is not None else None
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title><style>{CSS}</style></head><body>"]
    parts.append(f"<h1>{html.escape(title)}</h1>{_summary(m, c)}")
    if not m["complete"]:  # allowed, and said: never a silent figure from an incomplete run
        parts.append(f"<p class='incomplete'>incomplete run, reported anyway: {html.escape('; '.join(m['coverage_problems']))}</p>")
    parts.append(
        f"<div class='muted' id='basis'>figures over {html.escape(m['basis'])} × n = {m['n']} · {m['attempts']} attempts · "
        f"{m['system_errors']} system errors · {m['unjudged']} unjudged · finish reasons: "
        + html.escape(", ".join(f"{name} {n}" for name, n in m["finish_reasons"].items()))
        + "</div>"
    )
    if m["set_apart"]:  # never a silent drop: each task the figures leave out, with its reason
        parts.append(
            f"<details id='set-apart'><summary>{len(m['set_apart'])} tasks set apart from the figures</summary><ul>"
            + "".join(f"<li>{html.escape(r['task_id'])}: {html.escape(r['reason'])}</li>" for r in m["set_apart"])
            + "</ul></details>"
        )
    iv = m.get("intervals", {})

    def ci(n):
        return f"[{_pct(iv[n][0])}, {_pct(iv[n][1])}]" if n in iv else ""

    rows = [
        (metric_label("pass_at_1", k), _pct(m["pass_at_1"]), ci("pass_at_1")),
        (metric_label("pass_at_k", k), _pct(m["pass_at_k"]), ci("pass_at_k")),
        (f"{metric_label('pass_hat_k', k)} (unbiased)", _pct(m["pass_hat_k"]), ci("pass_hat_k")),
        (f"{metric_label('pass_hat_k', k)} (plug-in)", _pct(m["pass_hat_k_plugin"]), ""),
        (metric_label("observed_k_of_k_rate", k, m["n"]), f"{m['observed_k_of_k']} ({_pct(m['observed_k_of_k_rate'])})", ci("observed_k_of_k_rate")),
        ("solved at least once", str(m["solved_at_least_once"]), ""),
        ("cost (USD)", "—" if m["cost_usd"] is None else f"{m['cost_usd']:.4f}", html.escape(m["cost_note"] or "")),
        (
            "cost per dependable task" + (" (inference alone)" if ledger is not None else ""),
            "—" if m["cost_per_dependable_task"] is None else f"{m['cost_per_dependable_task']:.4f}",
            html.escape(m["cost_per_dependable_task_note"] or "this run's attempts of the covered tasks / tasks solved n/n"),
        ),
    ]
    if ledger is not None:
        whole, note = whole_cost_per_dependable_task(records, m, ledger, prices if prices is not None else load_prices())
        rows.append(("cost per dependable task (with training and probing)", "—" if whole is None else f"{whole:.4f}", html.escape(note)))
    parts.append(
        "<h2>Metrics</h2><table id='metrics'><tr><th>metric</th><th>value</th><th>95% CI / note</th></tr>"
        + "".join(f"<tr><td>{a}</td><td>{b}</td><td class='muted'>{c}</td></tr>" for a, b, c in rows)
        + "</table>"
    )
    if c is not None:
        parts += _comparison(c)
    # the success grid: the least-solved tasks first (what a reader came to fix), one cell per attempt
    by_task: dict[str, dict[int, AttemptRecord]] = {}
    for r in latest_per_key(records).values():
        by_task.setdefault(r.task_id, {})[r.attempt] = r
    rate = {t.task_id: (t.c / t.n if t.n else -1) for t in task_counts(records).values()}
    order = sorted(by_task, key=lambda t: (rate[t] if rate[t] >= 0 else 2, t))  # tasks with no clean attempt after the judged ones
    parts.append(
        f"<h2>Success grid</h2><div class='muted'>green pass · red fail (links to the verdict) · grey system error · "
        f"yellow unjudged; the least-solved tasks first, then those without a clean attempt</div><div class='grid' id='success-grid' "
        f"style='grid-template-columns:260px 48px repeat({k},16px)'>"
    )
    for tid in order:
        cnt = task_counts(by_task[tid].values())[tid]
        parts.append(f"<div class='tid' title='{html.escape(tid)}'>{html.escape(tid)}</div><div class='muted'>{cnt.c}/{cnt.n}</div>")
        for a in range(k):
            r = by_task[tid].get(a)
            if r is None:
                parts.append("<span></span>")
                continue
            cls = {"system_error": "err", "unjudged": "unj"}.get(r.outcome, r.outcome)
            if cls == "pass":
                parts.append(f"<span class='cell pass' title='{html.escape(tid)} #{a}: pass'></span>")
            else:
                parts.append(f"<a class='cell {cls}' href='#{_anchor(tid, a)}' title='{html.escape(tid)} #{a}: {cls}'></a>")
    parts.append("</div>")
    parts.append("<h2>Plots</h2><div class='plots'>" + "".join(f"<img alt='plot' src='{p}'>" for p in _plots(records, m)) + "</div>")
    parts += _training(curve, ledger)
    parts.append("<h2>Failing attempts</h2>")
    for tid in order:
        for a, r in sorted(by_task[tid].items()):
            if r.outcome == "pass":
                continue
            v = r.verdict
            reason = r.system_error or ("; ".join(v.reasons[:2]) if v is not None else "")
            traj = r.trajectory
            parts.append(
                f"<details id='{_anchor(tid, a)}'><summary><b>{html.escape(tid)}</b> attempt {a} — {html.escape(str(reason)[:200])}</summary>"
                f"{_blame_html(v.blame if v is not None else None, traj.tool_calls if traj is not None else [])}"
                f"<div>against the golden state</div>{_diff_html(v.diff if v is not None else [])}"
                f"<div>conversation</div>{_conversation_html(traj.messages if traj is not None else [])}</details>"
            )
    parts.append(
        "<script>document.querySelectorAll('a.cell').forEach(a=>a.addEventListener('click',()=>{const d=document.getElementById(a.getAttribute('href').slice(1));if(d)d.open=true;}));</script>"
    )
    parts.append("</body></html>")
    return "".join(parts)


def _summary(m: dict[str, Any], c: dict[str, Any] | None) -> str:
    """The line a reader came for: the run's pass@1 and Observed k/k and, with a baseline, the pass@1 lift."""
    k = m["k"]
    text = (
        f"{metric_label('pass_at_1', k)} {_pct(m['pass_at_1'])} · {metric_label('observed_k_of_k_rate', k, m['n'])}: "
        f"{m['observed_k_of_k']} of {m['tasks_covered']} tasks" + (f" (over {m['basis']})" if m["set_apart"] else "")
    )
    if c is not None:
        p1 = c["metrics"]["pass_at_1"]
        kk = c["observed_k_of_k"]
        text += (
            f" · against the baseline, on the {c['shared_tasks']} shared tasks × n={c['n']}: pass@1 {_pct(p1['base'])} → {_pct(p1['candidate'])} "
            f"({p1['lift']:+.1%}, 95% CI [{p1['ci_95'][0]:+.1%}, {p1['ci_95'][1]:+.1%}]), Observed {kk['k']}/{kk['k']} {kk['base']} → {kk['candidate']}"
        )
    return f"<p class='summary' id='summary'>{html.escape(text)}</p>"


def _comparison(c: dict[str, Any]) -> list[str]:
    parts = [
        f"<h2>Against the baseline ({html.escape(c['basis'])})</h2><table id='comparison'><tr><th>metric</th><th>baseline</th>"
        "<th>this run</th><th>lift</th><th>95% CI</th><th>P(lift &gt; 0)</th></tr>"
        + "".join(
            f"<tr><td>{html.escape(metric_label(n, c['k'], c['n']))}</td><td>{_pct(v['base'])}</td><td>{_pct(v['candidate'])}</td><td>{v['lift']:+.1%}</td>"
            f"<td>[{v['ci_95'][0]:+.1%}, {v['ci_95'][1]:+.1%}]</td><td>{v['p_lift_positive']:.3f}</td></tr>"
            for n, v in c["metrics"].items()
        )
        + "</table>"
    ]
    kk = c["observed_k_of_k"]
    parts.append(f"<p>Observed {kk['k']}/{kk['k']}: {kk['base']} → {kk['candidate']} (moved in {kk['moved_in']}, fell out {kk['fell_out']}).</p>")
    parts += [f"<p class='incomplete'>{html.escape(why)}</p>" for why in c["truncated"].values()]
    parts.append(f"<p id='agreement'>Run-to-run agreement: {html.escape(describe_agreement(c['agreement']))}</p>")
    names = {"base": "the baseline", "candidate": "this run"}
    parts += [
        f"<p class='incomplete'>{names[n]} is incomplete, compared anyway: {html.escape('; '.join(problems))}</p>"
        for n, problems in c["incomplete"].items()
    ]
    if c["left_out"]:
        parts.append(
            f"<details{' open' if len(c['left_out']) <= 5 else ''}><summary>{len(c['left_out'])} tasks left out of the comparison</summary><ul id='left-out'>"
            + "".join(f"<li>{html.escape(r['task_id'])}: {html.escape(r['reason'])}</li>" for r in c["left_out"])
            + "</ul></details>"
        )
    parts.append(f"<div class='plots'><img alt='transitions' src='{_transition_plot(c)}'></div>")
    return parts


def _cell(value: Any) -> str:
    return html.escape(value if isinstance(value, str) else json.dumps(value, default=str))


def _diff_html(diff: Any) -> str:
    """The verdict's diff as one small table per row: golden and actual values, the columns that differ marked (`chg`).
    An item without a `table` (a ThinkingBox server's) is a table of its fields; a diff that is not a list, JSON."""
    if not diff:
        return "<p class='muted'>no difference in the database (the verdict's reasons say what failed)</p>"
    if not isinstance(diff, list) or not all(isinstance(e, dict) for e in diff):
        return f"<pre>{html.escape(json.dumps(diff, indent=1, default=str))}</pre>"
    out = []
    for e in diff[:50]:
        if "table" not in e:  # another grader's item (a ThinkingBox server's diff): its fields as they are
            rows = "".join(f"<tr><th>{html.escape(str(k))}</th><td>{_cell(v)}</td></tr>" for k, v in e.items())
            out.append(f"<table class='diff'>{rows}</table>")
            continue
        expected, actual = e.get("expected"), e.get("actual")
        expected = expected if isinstance(expected, dict) else None
        actual = actual if isinstance(actual, dict) else None
        changed = set(e.get("columns") or {}) if isinstance(e.get("columns"), dict) else set()
        cols = list(dict.fromkeys([*(expected or {}), *(actual or {})]))
        if expected is not None and actual is not None and not changed:
            changed = {col for col in cols if expected.get(col) != actual.get(col)}
        head = f"{e.get('table', '?')} {json.dumps(e.get('key'), default=str)}: {e.get('problem', '')}"
        rows = [(name, row) for name, row in (("golden", expected), ("actual", actual)) if row is not None]
        # a changed row shows its first column (the key, as a rule) and the columns that differ; every column one click away
        shown = [col for i, col in enumerate(cols) if i == 0 or col in changed] if changed else cols
        out.append(f"<div><b>{html.escape(head)}</b></div>{_row_table(rows, shown, changed)}")
        if shown != cols:
            out.append(f"<details><summary class='muted'>all {len(cols)} columns</summary>{_row_table(rows, cols, changed)}</details>")
    if len(diff) > 50:
        out.append(f"<p class='muted'>... and {len(diff) - 50} more rows</p>")
    return "".join(out)


def _row_table(rows: list[tuple[str, dict]], cols: list[Any], changed: set) -> str:
    mark = lambda col: " class='chg'" if col in changed else ""  # noqa: E731
    header = "<tr><th></th>" + "".join(f"<th{mark(col)}>{html.escape(str(col))}</th>" for col in cols) + "</tr>"
    body = "".join(f"<tr><th>{name}</th>" + "".join(f"<td{mark(col)}>{_cell(row.get(col))}</td>" for col in cols) + "</tr>" for name, row in rows)
    return f"<div style='overflow-x:auto'><table class='diff'>{header}{body}</table></div>"


def _conversation_html(messages: list[dict[str, Any]]) -> str:
    """The conversation turn by turn: who spoke, what they said, each tool call as name(arguments) and its result;
    the system prompt folded away."""
    out = []
    for msg in messages[:200]:
        role = str(msg.get("role", "?"))
        content = msg.get("content")
        text = content if isinstance(content, str) else json.dumps(content, default=str) if content is not None else ""
        if role == "system":
            out.append(
                f"<details><summary class='muted'>system prompt ({len(text):,} characters)</summary><pre>{html.escape(text[:20000])}</pre></details>"
            )
            continue
        calls = msg.get("tool_calls") or []
        shown = [text[:4000]] if text else []
        for call in calls if isinstance(calls, list) else []:
            fn = call.get("function", call) if isinstance(call, dict) else {}
            fn = fn if isinstance(fn, dict) else {}
            shown.append(
                f"→ {fn.get('name', '?')}({fn.get('arguments', '') if isinstance(fn.get('arguments'), str) else json.dumps(fn.get('arguments'), default=str)})"
            )
        cls = role if role in ("user", "assistant", "tool") else ""
        out.append(f"<div class='turn {cls}'><b>{html.escape(role)}</b>{html.escape(chr(10).join(shown))}</div>")
    if len(messages) > 200:
        out.append(f"<p class='muted'>... and {len(messages) - 200} more messages</p>")
    return "".join(out)


def _blame_html(blame: Blame | None, calls: list[ToolCallRecord]) -> str:
    """Where the failed attempt went wrong, next to it: the blamed call with its arguments, or that it stopped early."""
    if blame is None:
        return ""
    kind, i = blame.kind, blame.call
    call = calls[i] if i is not None and 0 <= i < len(calls) else None
    what = {
        "diverged": "went wrong at",
        "stopped_early": "stopped early; its first failed write was",
        "never_acted": "never acted; its first failed write was",
    }
    text = f"blame: {kind.replace('_', ' ')}"
    if call is not None:
        text = f"blame: {what.get(kind, kind)} call {i}, {call.name}({json.dumps(call.arguments, default=str)})"
    rows = [  # as the diff's tables: golden and got, changes marked
        {"table": r.get("table"), "key": r.get("key"), "problem": r.get("problem", ""), "expected": r.get("golden"), "actual": r.get("got")}
        for r in blame.rows
    ]
    detail = _diff_html(rows) if rows else ""
    return f"<div class='blame'><b>{html.escape(text)}</b></div>{detail}"


def write_report(
    records: list[AttemptRecord],
    out: Path,
    title: str,
    baseline: list[AttemptRecord] | None = None,
    prices: dict[str, dict[str, float]] | None = None,
    allow_incomplete: bool = True,
    training: Path | None = None,
    ledger: Ledger | None = None,
) -> Path:
    """Write `render`'s page to `out`; `allow_incomplete=False` refuses an incomplete run (`stats.basis.IncompleteRun`)."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render(records, title, baseline, allow_incomplete, prices, training, ledger), encoding="utf-8")
    return out
