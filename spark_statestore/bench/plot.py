"""The ``scale`` suite's curves as one SVG file, written next to the JSON report.

Plain SVG written here (no plotting library is a dependency): four line charts with a
logarithmic x axis, restore rate and peak memory against the changelog's records (one line
per side and partition count), point-read and 100-key range latency against the store's keys.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

from spark_statestore.bench.measure import BenchRun, Measurement

__all__ = ["plot_path", "scale_svg", "write_plots"]

_WIDTH, _HEIGHT = 480, 300
_LEFT, _RIGHT, _TOP, _BOTTOM = 70, 150, 40, 45
_COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b")
Series = Mapping[str, Sequence[tuple[float, float]]]


def plot_path(report: Path) -> Path:
    """Where the curves of the report at ``report`` go: ``<report stem>.scale.svg``."""
    return report.with_name(f"{report.stem}.scale.svg")


def write_plots(run: BenchRun, report: Path) -> Path | None:
    """Write the ``scale`` suite's curves next to ``report``; None when the run has none."""
    svg = scale_svg(run.measurements)
    if svg is None:
        return None
    path = plot_path(report)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(svg)
    tmp.replace(path)
    return path


def scale_svg(measurements: Sequence[Measurement]) -> str | None:
    """The SVG of the ``scale`` measurements among ``measurements``, or None."""
    scale = [m for m in measurements if m.suite == "scale"]
    restores = [m for m in scale if m.name.startswith("restore_")]
    if not restores:
        return None
    rates: dict[str, list[tuple[float, float]]] = {}
    memory: dict[str, list[tuple[float, float]]] = {}
    for m in restores:
        records, partitions = m.parameters["records"], m.parameters["partitions"]
        for side, rate in (("ours", m.candidate_rate), ("bare", m.baseline_rate)):
            label = f"{side}, {partitions} partitions"
            rates.setdefault(label, []).append((records, rate / 1000))
            memory.setdefault(label, []).append(
                (
                    records,
                    m.parameters[f"{'candidate' if side == 'ours' else 'baseline'}_peak_rss_mib"],
                )
            )
    charts = [
        _chart("restore rate", "changelog records", "k records/s", rates),
        _chart("restore peak RSS", "changelog records", "MiB", memory),
    ]
    for kind, title in (("get_", "point read latency"), ("range100_", "100-key range latency")):
        series: dict[str, list[tuple[float, float]]] = {}
        for m in scale:
            if not m.name.startswith(kind):
                continue
            keys = m.parameters["keys"]
            for side in ("candidate", "baseline"):
                for q in ("p50", "p99"):
                    label = f"{'ours' if side == 'candidate' else 'plyvel'} {q}"
                    us = m.parameters[f"{side}_{q}_us"]
                    series.setdefault(label, []).append((keys, us))
        if series:
            charts.append(_chart(title, "keys in the store", "microseconds", series))
    columns = 2
    rows = math.ceil(len(charts) / columns)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_WIDTH * columns}" '
        f'height="{_HEIGHT * rows}" font-family="sans-serif" font-size="11">',
        '<rect width="100%" height="100%" fill="white"/>',
    ]
    for index, chart in enumerate(charts):
        x, y = (index % columns) * _WIDTH, (index // columns) * _HEIGHT
        parts.append(f'<g transform="translate({x},{y})">{chart}</g>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def _chart(title: str, xlabel: str, ylabel: str, series: Series) -> str:
    xs = [x for points in series.values() for x, _ in points]
    ys = [y for points in series.values() for _, y in points]
    lo, hi = math.log10(min(xs)), math.log10(max(xs))
    if hi - lo < 1e-9:
        lo, hi = lo - 0.5, hi + 0.5
    top = max(ys) * 1.1 if max(ys) > 0 else 1.0
    width, height = _WIDTH - _LEFT - _RIGHT, _HEIGHT - _TOP - _BOTTOM

    def px(x: float) -> float:
        return _LEFT + (math.log10(x) - lo) / (hi - lo) * width

    def py(y: float) -> float:
        return _TOP + height - y / top * height

    out = [
        f'<text x="{_LEFT}" y="20" font-size="13" font-weight="bold">{html.escape(title)}</text>',
        f'<line x1="{_LEFT}" y1="{_TOP + height}" x2="{_LEFT + width}" y2="{_TOP + height}" '
        'stroke="black"/>',
        f'<line x1="{_LEFT}" y1="{_TOP}" x2="{_LEFT}" y2="{_TOP + height}" stroke="black"/>',
        f'<text x="{_LEFT + width / 2}" y="{_HEIGHT - 8}" text-anchor="middle">'
        f"{html.escape(xlabel)} (log scale)</text>",
        f'<text x="14" y="{_TOP + height / 2}" text-anchor="middle" '
        f'transform="rotate(-90 14 {_TOP + height / 2})">{html.escape(ylabel)}</text>',
    ]
    for x in sorted(set(xs)):
        out.append(
            f'<text x="{px(x):.1f}" y="{_TOP + height + 15}" text-anchor="middle">'
            f"{_short(x)}</text>"
        )
    for step in range(5):
        value = top * step / 4
        out.append(
            f'<text x="{_LEFT - 6}" y="{py(value) + 4:.1f}" text-anchor="end">{value:.0f}</text>'
            f'<line x1="{_LEFT}" y1="{py(value):.1f}" x2="{_LEFT + width}" y2="{py(value):.1f}" '
            'stroke="#ddd"/>'
        )
    for index, (label, points) in enumerate(sorted(series.items())):
        colour = _COLOURS[index % len(_COLOURS)]
        dash = ' stroke-dasharray="5,3"' if "bare" in label or "plyvel" in label else ""
        path = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in sorted(points))
        out.append(
            f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"{dash}/>'
        )
        for x, y in points:
            out.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3" fill="{colour}"/>')
        legend_y = _TOP + 14 * index
        out.append(
            f'<line x1="{_LEFT + width + 10}" y1="{legend_y}" x2="{_LEFT + width + 30}" '
            f'y2="{legend_y}" stroke="{colour}" stroke-width="2"{dash}/>'
            f'<text x="{_LEFT + width + 34}" y="{legend_y + 4}">{html.escape(label)}</text>'
        )
    return "\n".join(out)


def _short(value: float) -> str:
    for unit, word in ((1_000_000, "M"), (1_000, "k")):
        if value >= unit:
            return f"{value / unit:g}{word}"
    return f"{value:g}"
