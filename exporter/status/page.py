"""The status page on ``/``: plain HTML and inline SVG, no script and no external asset.

Renders the data of ``bottleneck_exporter.status.model`` for the person on the node: the verdicts first, then each
training job and rank with a bar of its step phases, then the collectors, the GPUs and the push receiver.
"""

from __future__ import annotations

import html
from collections.abc import Mapping
from typing import Any

from bottleneck_exporter.status.model import PHASES
from bottleneck_exporter.verdicts.peers import PEER_NAMES, URL_FLAGS

PHASE_COLOURS = {"data_wait": "#e4572e", "forward": "#2e86de", "backward": "#8e44ad", "optimizer": "#27ae60",
                 "other": "#a4acb4"}
PHASE_NAMES = {"data_wait": "data wait", "forward": "forward", "backward": "backward", "optimizer": "optimizer",
               "other": "other"}
SEVERITY_COLOURS = {"critical": "#c0392b", "warning": "#d68910", "info": "#2874a6"}
NONE = "\u2013"  # an en dash where there is no value
# The page reloads itself (an HTML meta refresh, no script); each reload shows a collection at most
# renders.FRESH_SECONDS old, and however many tabs reload, they share one collection and one render.
REFRESH_SECONDS = 5

_STYLE = """
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;color:#1f2933;
background:#f3f5f7}
header{background:#1f2933;color:#fff;padding:14px 28px;display:flex;align-items:baseline;gap:18px;flex-wrap:wrap}
header h1{font-size:18px;margin:0;font-weight:600}
header .meta{color:#c3ccd5;font-size:13px}
header nav{margin-left:auto;font-size:13px}
header nav a{color:#9fd3ff;margin-left:14px;text-decoration:none}
main{max-width:1180px;margin:0 auto;padding:18px 28px 40px}
section{background:#fff;border:1px solid #dde3e9;border-radius:8px;padding:16px 20px;margin-bottom:16px}
h2{font-size:15px;margin:0 0 10px;text-transform:uppercase;letter-spacing:.04em;color:#52606d}
table{border-collapse:collapse;width:100%}
th,td{text-align:left;padding:6px 10px 6px 0;border-bottom:1px solid #eef1f4;vertical-align:middle}
th{font-size:12px;color:#7b8794;font-weight:600;text-transform:uppercase;letter-spacing:.03em}
td.num{font-variant-numeric:tabular-nums;white-space:nowrap}
.badge{display:inline-block;padding:1px 8px;border-radius:10px;font-size:12px;font-weight:600;color:#fff}
.ok{background:#27ae60}.fail{background:#c0392b}.off{background:#9aa5b1}.warn{background:#d68910}
.verdict{border-left:4px solid;padding:8px 14px;margin:10px 0;background:#fbfcfd}
.verdict .title{font-weight:600;font-size:15px}
.verdict .subject{color:#52606d;margin-left:6px}
.verdict dl{margin:6px 0 0;display:grid;grid-template-columns:80px 1fr;gap:2px 10px}
.verdict dt{color:#7b8794}.verdict dd{margin:0}
.muted{color:#7b8794}
.legend span{display:inline-block;margin-right:14px;font-size:12px;color:#52606d}
.legend i{display:inline-block;width:10px;height:10px;border-radius:2px;margin-right:5px;vertical-align:-1px}
.split{font-size:12px;color:#52606d;margin-top:2px}
.phasebar{display:block;width:100%;max-width:420px;height:18px}
code{background:#eef1f4;padding:1px 5px;border-radius:4px;font-size:13px}
.grid{display:grid;grid-template-columns:1fr 1fr;gap:0 16px}
.peer-down{border-left:4px solid #d68910;padding-left:8px}
.verdict .alert{font-size:12px;color:#52606d;margin-left:8px}
"""


def render(status: Mapping[str, Any]) -> bytes:
    exporter = status["exporter"]
    title = f"bottleneck-exporter on {exporter.get('instance', '')}"
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="refresh" content="{REFRESH_SECONDS}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_e(title)}</title><style>{_STYLE}</style></head><body>",
        _header(status),
        "<main>",
        _jobs(status["jobs"]),
        _verdicts(status),
        '<div class="grid">',
        _collectors(status["collectors"]),
        "<div>", _gpus(status["gpu"]), _push(status["push"]), "</div>",
        "</div></main></body></html>",
    ]
    return "\n".join(parts).encode()


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _header(status: Mapping[str, Any]) -> str:
    exporter, collection = status["exporter"], status["collection"]
    ready = '<span class="badge ok">ready</span>' if exporter.get("ready") else \
        '<span class="badge warn">starting</span>'
    last = f"last collection {_age(collection['age_seconds'])}" if collection["at"] is not None else \
        "no collection yet"
    telemetry = _e(exporter.get("telemetry_path", "/metrics"))
    return (f"<header><h1>bottleneck-exporter {_e(exporter.get('version', ''))}</h1>"
            f'<span class="meta">{_e(exporter.get("instance", ""))} · up {_duration(exporter["uptime_seconds"])}'
            f" · {last}</span> {ready}"
            f'<nav><a href="{telemetry}">metrics</a><a href="/status.json">status.json</a>'
            '<a href="/-/healthy">healthy</a><a href="/-/ready">ready</a></nav></header>')


def _verdicts(status: Mapping[str, Any]) -> str:
    verdicts = status["verdicts"]
    out = ["<section><h2>Verdicts</h2>"]
    if verdicts["snapshots"] < 2:
        out.append(f'<p class="muted">Collecting samples ({verdicts["snapshots"]} so far): verdicts need two '
                   "collections; this page reloads itself.</p>")
    elif not verdicts["findings"]:
        out.append(f"<p>No bottleneck found: no rule of the catalogue holds over the last "
                   f"{_duration(verdicts['window_seconds'])} ({verdicts['snapshots']} samples).</p>")
    else:
        out.append(f'<p class="muted">From this exporter\'s own samples over the last '
                   f"{_duration(verdicts['window_seconds'])} ({verdicts['snapshots']} samples), with the rules "
                   "of <code>bottleneck-exporter diagnose</code>.</p>")
    for finding in verdicts["findings"]:
        colour = SEVERITY_COLOURS.get(finding["severity"], "#52606d")
        out.append(
            f'<div class="verdict" style="border-color:{colour}">'
            f'<span class="badge" style="background:{colour}">{_e(finding["severity"])}</span> '
            f'<span class="title">{_e(finding["verdict"])}</span>'
            f'<span class="subject">{_e(finding["subject"])}</span>'
            f'<a class="alert" href="{_e(finding["runbook_url"])}">{_e(finding["alert"])} runbook</a>'
            f'<dl><dt>evidence</dt><dd>{_e(finding["evidence"])}</dd>'
            f'<dt>advice</dt><dd>{_e(finding["advice"])}</dd></dl></div>')
    if verdicts["missing"]:
        out.append('<p class="muted">No data for: ' + "; ".join(_e(m) for m in verdicts["missing"]) + ".</p>")
    for peer in verdicts["peers"]:
        if peer["error"]:  # said plainly: the verdicts that read its series are judged without them
            flag = next(URL_FLAGS[s] for s, name in PEER_NAMES.items() if name == peer["name"])
            out.append(f'<p class="peer-down">{_e(peer["name"])} did not answer ({_e(peer["error"])}), so these '
                       f'verdicts lack its series: {_e(", ".join(peer["unjudged"]) or "none")}. Start it, or '
                       f"point {_e(flag)} at it.</p>")
    if verdicts["bundle"] != "bottleneck" or verdicts["peers"]:
        read = ", ".join(f'{p["name"]} at {p["url"]}' for p in verdicts["peers"]) or "no other exporter"
        out.append(f'<p class="muted">Rule bundle {_e(verdicts["bundle"])}; besides this exporter, read: '
                   f"{_e(read)}.</p>")
    out.append("</section>")
    return "".join(out)


def _jobs(jobs: list[Mapping[str, Any]]) -> str:
    out = ["<section><h2>Training jobs</h2>"]
    if not jobs:
        out.append('<p class="muted">No training process has pushed its step timings. Instrument the loop with '
                   "<code>loader = bottleneck_exporter.hook.instrument(loader, model=model, optimizer=optimizer)"
                   "</code> "
                   "(docs/hook.md).</p></section>")
        return "".join(out)
    out.append('<p class="legend">' + "".join(
        f'<span><i style="background:{PHASE_COLOURS[p]}"></i>{PHASE_NAMES[p]}</span>' for p in PHASES) + "</p>")
    out.append("<table><tr><th>job</th><th>rank</th><th>steps</th><th>step time</th><th>last step</th>"
               "<th>workers</th><th>where each step goes</th></tr>")
    for job in jobs:
        for rank in job["ranks"]:
            step = rank.get("step_seconds")
            age = rank.get("last_step_age_seconds")
            workers = rank.get("num_workers")
            out.append(
                f"<tr><td>{_e(job['job'])}</td><td class=num>{_e(rank['rank'])}</td>"
                f"<td class=num>{rank['steps']:.0f}</td>"
                f"<td class=num>{_seconds(step) if step is not None else NONE}</td>"
                f"<td class=num>{_age(age) if age is not None else NONE}</td>"
                f"<td class=num>{workers if workers is not None else NONE}</td>"
                f"<td>{_phase_bar(rank)}</td></tr>")
    out.append("</table></section>")
    return "".join(out)


def _phase_bar(rank: Mapping[str, Any]) -> str:
    ratios, seconds = rank.get("phase_ratios") or {}, rank.get("phase_seconds") or {}
    if not ratios:
        return '<span class="muted">no step yet</span>'
    width, x, rects, words = 400.0, 0.0, [], []
    for phase in PHASES:
        share = ratios.get(phase, 0.0)
        if share <= 0:
            continue
        w = share * width
        label = f"{PHASE_NAMES[phase]} {share:.0%}"
        rects.append(f'<rect x="{x:.1f}" y="0" width="{w:.1f}" height="18" fill="{PHASE_COLOURS[phase]}">'
                     f"<title>{_e(label)} ({_seconds(seconds.get(phase, 0.0))} in the window)</title></rect>")
        if share >= 0.01:
            words.append(label)
        x += w
    over = "since the job started" if rank.get("phases_over") == "start" else "recent steps"
    return (f'<svg class="phasebar" viewBox="0 0 {width:.0f} 18" preserveAspectRatio="none" role="img" '
            f'aria-label="{_e(", ".join(words))}">{"".join(rects)}</svg>'
            f'<div class="split">{_e(" · ".join(words))} <span class="muted">({over})</span></div>')


def _collectors(collectors: list[Mapping[str, Any]]) -> str:
    out = ["<section><h2>Collectors</h2><table><tr><th>collector</th><th>last collection</th><th>took</th></tr>"]
    for c in collectors:
        badge = '<span class="badge ok">ok</span>' if c["success"] else '<span class="badge fail">failed</span>'
        took = _seconds(c["duration_seconds"]) if c["duration_seconds"] is not None else NONE
        out.append(f"<tr><td>{_e(c['name'])}</td><td>{badge}</td><td class=num>{took}</td></tr>")
    if not collectors:
        out.append('<tr><td colspan=3 class="muted">no collection yet</td></tr>')
    out.append("</table></section>")
    return "".join(out)


def _gpus(gpu: Mapping[str, Any]) -> str:
    state = {"ok": "ok", "degraded": "warn", "off": "off"}.get(gpu["state"], "fail")
    out = [f'<section><h2>GPUs</h2><p><span class="badge {state}">{_e(gpu["state"])}</span> {_e(gpu["detail"])}'
           "</p>"]
    if gpu["gpus"]:
        out.append("<table><tr><th>gpu</th><th>model</th><th>state</th><th>utilization</th><th>memory</th></tr>")
        for g in gpu["gpus"]:
            util = f"{g['utilization_ratio']:.0%}" if g["utilization_ratio"] is not None else NONE
            memory = NONE
            if g["memory_used_bytes"] is not None and g["memory_total_bytes"]:
                memory = f"{g['memory_used_bytes'] / 2**30:.1f} / {g['memory_total_bytes'] / 2**30:.0f} GiB"
            up = '<span class="badge ok">up</span>' if g["up"] else '<span class="badge fail">lost</span>'
            out.append(f"<tr><td class=num>{_e(g['gpu'])}</td><td>{_e(g['name'])}</td><td>{up}</td>"
                       f"<td class=num>{util}</td><td class=num>{memory}</td></tr>")
        out.append("</table>")
    out.append("</section>")
    return "".join(out)


def _push(push: Mapping[str, Any]) -> str:
    if push["state"] != "listening":
        return (f'<section><h2>Push receiver</h2><p><span class="badge off">off</span> {_e(push["detail"])}</p>'
                "</section>")
    where = [f"<code>{_e(push['unix_socket'])}</code>"] if push.get("unix_socket") else []
    if push.get("udp"):
        where.append(f"<code>udp://{_e(push['udp'])}</code>")
    return (f'<section><h2>Push receiver</h2><p><span class="badge ok">listening</span> on {", ".join(where)}: '
            f"{push['datagrams']:.0f} datagrams, {push['rejected']:.0f} rejected, {push['jobs']:.0f} job(s).</p>"
            "</section>")


def _seconds(value: float) -> str:
    if value < 1e-3:
        return f"{value * 1e6:.0f} µs"
    if value < 1:
        return f"{value * 1e3:.1f} ms" if value < 0.1 else f"{value * 1e3:.0f} ms"
    return f"{value:.2f} s"


def _duration(seconds: float) -> str:
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m {seconds % 60:02d}s"
    return f"{seconds // 3600}h {seconds % 3600 // 60:02d}m"


def _age(seconds: float | None) -> str:
    return NONE if seconds is None else f"{_duration(seconds)} ago"
