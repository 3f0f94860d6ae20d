"""The results: JSON lines, the printed table (tune and held-out seeds apart, and within
each, the template sets apart), the chart.

Recall in a cell is the share of right answers among the probes of that kind the condition
could ask; probes it could not ask (it overflowed the window, or the model failed) are counted
on their own line, never as right or wrong.
"""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import IO, Any

import orjson

from evaluation.phrasings import TEMPLATE_SETS
from evaluation.places import PLACES
from evaluation.probes import PROBE_KINDS
from evaluation.runner import Row

CHART_HINT = "the chart needs matplotlib: pip install 'overspill[eval]'"


def write_jsonl(rows: Iterable[Row], sink: IO[bytes]) -> None:
    """One JSON object per row."""
    for row in rows:
        sink.write(orjson.dumps(row.as_dict()) + b"\n")


_FIELDS = {field.name: field for field in dataclasses.fields(Row)}
_REQUIRED = [name for name, field in _FIELDS.items() if field.default is dataclasses.MISSING]
_TYPES: dict[str, tuple[type, ...]] = {
    "seed": (int,), "seed_set": (str,), "condition": (str,), "kind": (str,), "question": (str,),
    "status": (str,), "answer": (str, type(None)), "correct": (bool, type(None)),
    "present": (bool, type(None)), "growths": (int, type(None)),
    "condensed": (int, type(None)), "detail": (str,), "shown": (str, type(None)),
    "templates": (str,), "stood": (str,), "evidence": (bool, type(None)),
    "stand_in": (str,),
}  # fmt: skip


def read_jsonl(lines: Iterable[bytes], source: str) -> list[Row]:
    """The rows of a results file (what `write_jsonl` wrote); blank lines are skipped.
    Raises ValueError naming `source` and the line for anything that is not a row."""
    rows = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{source}:{number}"
        try:
            data = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise ValueError(f"{where}: not JSON ({exc})") from exc
        rows.append(_row_of(data, where))
    return rows


def _row_of(data: Any, where: str) -> Row:
    if not isinstance(data, dict):
        raise ValueError(f"{where}: a row is a JSON object, not {type(data).__name__}")
    missing = [name for name in _REQUIRED if name not in data]
    unknown = sorted(set(data) - set(_FIELDS))
    if missing or unknown:
        said = [f"missing {', '.join(missing)}"] if missing else []
        said += [f"unknown {', '.join(unknown)}"] if unknown else []
        raise ValueError(f"{where}: not an eval row ({'; '.join(said)})")
    for name, value in data.items():
        allowed = _TYPES[name]
        if not isinstance(value, allowed) or (isinstance(value, bool) and bool not in allowed):
            raise ValueError(f"{where}: {name} is {value!r}, not a {allowed[0].__name__}")
    if data.get("stood", "") not in ("", *PLACES):
        raise ValueError(f"{where}: stood is {data['stood']!r}, not one of {', '.join(PLACES)}")
    return Row(**data)


def recall(rows: Sequence[Row]) -> float | None:
    """The share of answered rows that are right (None when none was answered)."""
    answered = [row for row in rows if row.status == "ok"]
    if not answered:
        return None
    return sum(bool(row.correct) for row in answered) / len(answered)


def _cell(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.0f}%"


def table(rows: Sequence[Row], conditions: Sequence[str]) -> str:
    """Recall per probe kind (lines) and condition (columns), one block per seed set and,
    for generated conversations, per template set, then the points each other template set
    is from tune templates when both were played."""
    blocks = []
    sets = sorted({row.seed_set for row in rows}, key=_set_order)
    for seed_set in sets:
        chosen = [row for row in rows if row.seed_set == seed_set]
        if seed_set not in SEED_SETS:  # an outside dataset: is the answer still there at all
            blocks.append(_block(seed_set, chosen, conditions))
            blocks.append(_presence(seed_set, chosen, conditions))
            if any(row.evidence is not None for row in chosen):
                blocks.append(_with_evidence(seed_set, chosen, conditions))
            if any(row.stood for row in chosen):
                blocks.append(_places(seed_set, chosen, conditions))
            continue
        said = sorted({row.templates for row in chosen}, key=_set_order)
        for templates in said:
            of = [row for row in chosen if row.templates == templates]
            blocks.append(_block(seed_set, of, conditions, templates))
        if "tune" in said:
            for other in said[1:]:
                blocks.append(_template_gap(seed_set, chosen, conditions, other))
    fell_back = fallbacks(rows)
    if fell_back:
        blocks.append(fell_back)
    return "\n\n".join(blocks)


def fallbacks(rows: Sequence[Row]) -> str:
    """A warning naming the conversations whose overspill rows were answered beside a
    fallback (the extraction failed and a middle cut or masking stood in): those rows
    measure the fallback, not compaction. Empty when there are none."""
    found: dict[tuple[str, str, int, str], int] = {}
    for row in rows:
        if row.stand_in not in ("", "extract"):
            key = (row.condition, row.seed_set, row.seed, row.stand_in)
            found[key] = found.get(key, 0) + 1
    if not found:
        return ""
    lines = [
        f"  {condition}, {seed_set} seed {seed}: {count} row(s) beside a {stand_in}"
        for (condition, seed_set, seed, stand_in), count in sorted(found.items())
    ]
    return "\n".join(
        [
            "warning: the extraction failed for these conversations and a fallback stood in "
            "(the run's log says why); their rows measure the fallback, not compaction:",
            *lines,
        ]
    )


SEED_SETS = ("tune", "held-out")
"""The generated conversations' sets, listed first; an outside source's after them."""


def _set_order(name: str) -> tuple[int, str]:
    return (SEED_SETS.index(name) if name in SEED_SETS else len(SEED_SETS), name)


def kinds_of(rows: Sequence[Row]) -> list[str]:
    """The kinds to list: every generated kind (a kind not asked shows "-") when the rows
    are the generator's, then any other kind the rows hold (an outside dataset's)."""
    found = {row.kind for row in rows}
    generated = list(PROBE_KINDS) if found & set(PROBE_KINDS) else []
    return generated + sorted(found - set(PROBE_KINDS))


def presence(rows: Sequence[Row]) -> float | None:
    """The share of rows whose shown context held the right answer (None: none known)."""
    known = [row.present for row in rows if row.present is not None]
    return sum(known) / len(known) if known else None


def _presence(seed_set: str, rows: Sequence[Row], conditions: Sequence[str]) -> str:
    """Per kind and condition: how often the right answer was in what the model was shown."""

    def cell(of: Sequence[Row]) -> str:
        value = presence(of)
        known = sum(r.present is not None for r in of)
        return "-" if value is None else f"{100 * value:.0f}% of {known}"

    title = f"{seed_set}: the right answer in what the model was shown"
    return _by_kind(title, rows, conditions, cell)


def _with_evidence(seed_set: str, rows: Sequence[Row], conditions: Sequence[str]) -> str:
    """Per kind and condition: how often the right answer was in what the model was shown
    together with every turn marked as answering it (`Row.evidence`), and how many of those
    were answered right; rows that do not say (no turn marked) are left out."""

    def cell(of: Sequence[Row]) -> str:
        said = [r for r in of if r.evidence is not None]
        held = [r for r in said if r.present and r.evidence]
        right = sum(bool(r.correct) for r in held)
        return f"{len(held)} of {len(said)} ({right})" if said else "-"

    title = f"{seed_set}: the right answer with the turns that say it (answered right)"
    return _by_kind(title, rows, conditions, cell)


def _by_kind(
    title: str, rows: Sequence[Row], conditions: Sequence[str], cell: Callable[[Sequence[Row]], str]
) -> str:
    """A table of `cell` over the rows of each kind (and all) and condition."""
    width = max(len(name) for name in conditions) + 2
    lines = [title, f"{'':<16}" + "".join(f"{name:>{width}}" for name in conditions)]
    for kind in [*kinds_of(rows), "all"]:
        cells = [
            cell([r for r in rows if r.condition == condition and kind in ("all", r.kind)])
            for condition in conditions
        ]
        lines.append(f"{kind:<16}" + "".join(f"{c:>{width}}" for c in cells))
    return "\n".join(lines)


def _places(seed_set: str, rows: Sequence[Row], conditions: Sequence[str]) -> str:
    """Per condition and place the right answer stood (`places.PLACES`): how many of the
    answers were right; then, beside the ceiling, how many of those it answered right were
    kept. The rows that do not say where (written before rows said it) are left out."""
    width = max(len(name) for name in conditions) + 2
    label = max(len(place) for place in PLACES) + 4
    head = f"{'':<{label}}" + "".join(f"{name:>{width}}" for name in conditions)
    lines = [f"{seed_set}: right answers by where the right answer stood", head]
    said = {
        c: [r for r in rows if r.condition == c and r.status == "ok" and r.stood]
        for c in conditions
    }

    def counted(rows: Sequence[Row], place: str) -> str:
        at = [r for r in rows if r.stood == place]
        return f"{sum(bool(r.correct) for r in at)} of {len(at)}" if at else "-"

    for place in PLACES:
        cells = (counted(said[c], place) for c in conditions)
        lines.append(f"{place:<{label}}" + "".join(f"{cell:>{width}}" for cell in cells))
    if CEILING in conditions:
        verdicts = _ceiling_verdicts([r for r in rows if r.condition == CEILING])
        right = {probe for probe, ok in verdicts.items() if ok}
        lines.append(f"of those right on {CEILING}, kept:")
        for place in PLACES:
            cells = (
                "-"
                if c in UNPAIRED
                else counted([r for r in said[c] if (r.seed, r.kind, r.question) in right], place)
                for c in conditions
            )
            lines.append(f"{'  ' + place:<{label}}" + "".join(f"{cell:>{width}}" for cell in cells))
    return "\n".join(lines)


def _template_gap(seed_set: str, rows: Sequence[Row], conditions: Sequence[str], other: str) -> str:
    """Per kind and condition, `other` templates' recall minus tune templates', in points,
    over the probes (a seed's kind) answered in both: the same values said otherwise."""
    width = max(len(name) for name in conditions) + 2
    lines = [
        f"{seed_set} seeds: points of {other} templates against tune templates, "
        "on the probes both asked",
        f"{'':<16}" + "".join(f"{name:>{width}}" for name in conditions),
    ]
    right: dict[tuple[str, str, int, str], bool] = {
        (row.templates, row.condition, row.seed, row.kind): bool(row.correct)
        for row in rows
        if row.status == "ok"
    }
    for kind in [*kinds_of(rows), "all"]:
        cells = []
        for condition in conditions:
            pairs = [
                (mine, right[("tune", condition, seed, asked)])
                for (templates, of, seed, asked), mine in right.items()
                if templates == other and of == condition and kind in ("all", asked)
                and ("tune", condition, seed, asked) in right
            ]  # fmt: skip
            gap = 100 * sum(int(a) - int(b) for a, b in pairs) / len(pairs) if pairs else None
            cells.append(_points(gap))
        lines.append(f"{'  ' + kind:<16}" + "".join(f"{cell:>{width}}" for cell in cells))
    return "\n".join(lines)


def _block(
    seed_set: str, rows: Sequence[Row], conditions: Sequence[str], templates: str = ""
) -> str:
    seeds = sorted({row.seed for row in rows})
    width = max(len(name) for name in conditions) + 2
    head = f"{'':<16}" + "".join(f"{name:>{width}}" for name in conditions)
    said = f", {templates} templates" if templates else ""
    lines = [f"{seed_set} seeds {seed_ranges(seeds)}{said}: recall by probe kind", head]

    def line(label: str, values: Iterable[str]) -> str:
        return f"{label:<16}" + "".join(f"{value:>{width}}" for value in values)

    by: dict[tuple[str, str], list[Row]] = defaultdict(list)
    for row in rows:
        by[(row.condition, row.kind)].append(row)
    for kind in kinds_of(rows):
        lines.append(line(kind, (_cell(recall(by.get((c, kind), []))) for c in conditions)))
    per = {c: [row for row in rows if row.condition == c] for c in conditions}
    lines.append(line("all", (_cell(recall(per[c])) for c in conditions)))
    lines.append(line("conversations", (str(len({r.seed for r in per[c]})) for c in conditions)))
    lines.append(
        line("not asked", (str(sum(r.status != "ok" for r in per[c])) for c in conditions))
    )
    lines.append(line("growths (mean)", (_growths(per[c]) for c in conditions)))
    if CEILING in conditions:
        paired = {c: against_ceiling(c, per[c], per[CEILING]) for c in conditions}
        for label, side in ((f"lost vs {CEILING}", 0), (f"won vs {CEILING}", 1)):
            lines.append(line(label, ("-" if p is None else str(p[side]) for p in paired.values())))
        kept = ("-" if p is None else f"{p[2] - p[0]} of {p[2]}" for p in paired.values())
        lines.append(line(f"kept of {CEILING}", kept))
        again = [said for said in _readings(per[CEILING]).values() if len(said) > 1]
        if again:
            split = sum(len(set(said)) > 1 for said in again)
            lines.append(
                f"{CEILING} read more than once: {len(again)} probes, right in some readings "
                f"and wrong in others {split}; paired as right only when right in every one"
            )
    if CEILING in conditions and set(conditions) - UNPAIRED:
        lines.append(f"points against {CEILING} on the probes both asked:")
        for name in [*kinds_of(rows), "all"]:
            of = {c: [r for r in per[c] if name in ("all", r.kind)] for c in conditions}
            gaps = (_points(points_against(c, of[c], of[CEILING])) for c in conditions)
            lines.append(line(f"  {name}", gaps))
    kinds = answerable(rows)
    binned = {c: by_condensed(per[c], kinds) for c in conditions}
    if any(bin_rows for c in conditions for _, bin_rows in binned[c]):
        lines.append("recall by how often the value was condensed (kinds answered somewhere):")
        for index, (label, _, _) in enumerate(CONDENSED_BINS):
            cells = (_counted(binned[c][index][1]) for c in conditions)
            lines.append(line(f"condensed {label}", cells))
    return "\n".join(lines)


CEILING = "full"
"""The condition the others are paired with, probe by probe."""
UNPAIRED = frozenset({CEILING, "short"})
"""Conditions not paired with the ceiling: itself, and `short` (another conversation)."""


def against_ceiling(
    condition: str, rows: Sequence[Row], ceiling: Sequence[Row]
) -> tuple[int, int, int] | None:
    """Probes (a seed's kind) both asked: how many the ceiling answers right and `rows`
    wrong (lost), the other way round (won), and how many the ceiling answers right (so
    right minus lost are kept: a target such as "80% of the answers right on the whole
    dialogue still right"). Paired, this is what one condition loses against the other on
    the same conversations, apart from what both miss. None: not paired (`UNPAIRED`, or no
    probe both asked)."""
    pairs = _paired(condition, rows, ceiling)
    if not pairs:
        return None
    lost = sum(theirs and not mine for mine, theirs in pairs)
    won = sum(mine and not theirs for mine, theirs in pairs)
    return lost, won, sum(theirs for _, theirs in pairs)


def points_against(condition: str, rows: Sequence[Row], ceiling: Sequence[Row]) -> float | None:
    """Recall of `rows` minus the ceiling's, in points, over the probes (a seed's kind) both
    asked: what a target such as "within 10 points of the whole history" is measured on,
    whatever other conversations either condition ran. None: not paired (as in
    `against_ceiling`)."""
    pairs = _paired(condition, rows, ceiling)
    if not pairs:
        return None
    return 100 * sum(int(mine) - int(theirs) for mine, theirs in pairs) / len(pairs)


def _paired(condition: str, rows: Sequence[Row], ceiling: Sequence[Row]) -> list[tuple[bool, bool]]:
    """(right here, right under the ceiling) for each probe both asked; none if unpaired.
    A probe the ceiling answered more than once (the whole history read again, as
    ``--report`` takes it from several files) is right under it only when every reading
    answered it right: a small reader's answer can turn on a word changed anywhere in a long
    prompt, and an answer it gives on one reading only is no ceiling to be paired with."""
    if condition in UNPAIRED:
        return []
    right = _ceiling_verdicts(ceiling)
    return [
        (bool(row.correct), right[(row.seed, row.kind, row.question)])
        for row in rows
        if row.status == "ok" and (row.seed, row.kind, row.question) in right
    ]


def _ceiling_verdicts(ceiling: Sequence[Row]) -> dict[tuple[int, str, str], bool]:
    """Whether the ceiling answered each probe (seed, kind, question) right: only when every
    reading of it did (`_paired`)."""
    return {probe: all(said) for probe, said in _readings(ceiling).items()}


def _readings(rows: Sequence[Row]) -> dict[tuple[int, str, str], list[bool]]:
    """Whether each answered probe (seed, kind, question) was right, per reading of it."""
    said: dict[tuple[int, str, str], list[bool]] = defaultdict(list)
    for row in rows:
        if row.status == "ok":
            said[(row.seed, row.kind, row.question)].append(bool(row.correct))
    return dict(said)


def _points(value: float | None) -> str:
    return "-" if value is None else f"{value:+.0f}"


CONDENSED_BINS: tuple[tuple[str, int, int], ...] = (
    ("0", 0, 0), ("1-3", 1, 3), ("4-6", 4, 6), ("7-9", 7, 9), ("10+", 10, 1 << 30),
)  # fmt: skip
"""How `Row.condensed` is grouped: the growths that condensed a probe's value."""


def answerable(rows: Sequence[Row]) -> set[str]:
    """The probe kinds some row answers right: a kind no condition gets right says nothing
    about what compaction lost, and would only weigh on the most condensed values (an
    instruction from the first turn is condensed by every growth)."""
    return {row.kind for row in rows if row.correct}


def by_condensed(rows: Sequence[Row], kinds: set[str]) -> list[tuple[str, list[Row]]]:
    """The rows of `kinds` whose condensed count is known, in `CONDENSED_BINS`."""
    known = [(row, row.condensed) for row in rows if row.kind in kinds]
    return [
        (label, [row for row, n in known if n is not None and low <= n <= high])
        for label, low, high in CONDENSED_BINS
    ]


def _counted(rows: Sequence[Row]) -> str:
    """Recall and how many answers it is of ('-' when none)."""
    answered = sum(row.status == "ok" for row in rows)
    return "-" if not answered else f"{_cell(recall(rows))} of {answered}"


def _growths(rows: Sequence[Row]) -> str:
    """The mean growths per conversation ('-' for conditions without growths)."""
    seen = {row.seed: row.growths for row in rows if row.growths is not None}
    if not seen:
        return "-"
    return f"{sum(seen.values()) / len(seen):.1f}"


def seed_ranges(seeds: Sequence[int]) -> str:
    """Sorted seeds as ranges: [1, 2, 3, 1000] → ``1-3, 1000``."""
    parts: list[str] = []
    start = previous = seeds[0] if seeds else 0
    for seed in [*seeds[1:], None]:
        if seed is not None and seed == previous + 1:
            previous = seed
            continue
        parts.append(f"{start}-{previous}" if previous > start else str(start))
        if seed is not None:
            start = previous = seed
    return ", ".join(parts) if seeds else "none"


def _percent(value: float | None) -> float:
    """A recall in percent; NaN (nothing drawn) when nothing was asked."""
    return math.nan if value is None else 100 * value


def chart(rows: Sequence[Row], conditions: Sequence[str], path: Path) -> None:
    """A PNG: recall by probe kind and condition, and the overspill conditions' recall
    against how many growths condensed the value asked about, beside the whole history's.
    Raises ImportError (with `CHART_HINT`) without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise ImportError(CHART_HINT) from exc
    figure, (bars, trend) = plt.subplots(1, 2, figsize=(14, 5), width_ratios=(3, 1))
    kinds = [*PROBE_KINDS, "all"]
    step = 0.8 / max(1, len(conditions))
    for index, condition in enumerate(conditions):
        mine = [row for row in rows if row.condition == condition]
        values = [
            _percent(recall([r for r in mine if kind == "all" or r.kind == kind])) for kind in kinds
        ]  # a kind not asked is a gap, not a zero
        positions = [k + index * step for k in range(len(kinds))]
        asked = any(row.status == "ok" for row in mine)
        label = condition if asked else f"{condition} (nothing asked)"
        drawn = bars.bar(positions, values, width=step, label=label)
        zeros = [p for p, value in zip(positions, values, strict=True) if value == 0]
        if zeros:  # a 0% bar has no height: a tick tells it from a kind not asked
            colour = drawn.patches[0].get_facecolor()
            bars.scatter(zeros, [0.8] * len(zeros), marker="_", color=colour, s=30)
    bars.set_xticks([k + 0.4 - step / 2 for k in range(len(kinds))], kinds, rotation=30)
    bars.set_ylabel("recall (%)")
    bars.set_ylim(0, 128)  # room above 100% for the legend
    bars.set_yticks(range(0, 101, 20))
    bars.legend(fontsize="small", ncols=2)
    bars.set_title("recall by probe kind")
    _trend(trend, rows, conditions)
    seeds = sorted({row.seed for row in rows})
    sets = " and ".join(s for s in ("tune", "held-out") if any(r.seed_set == s for r in rows))
    said = [t for t in TEMPLATE_SETS if any(r.templates == t for r in rows)]
    templates = f", {' and '.join(said)} templates" if said != ["tune"] and said else ""
    figure.suptitle(f"{len(seeds)} conversations, {sets} seeds {seed_ranges(seeds)}{templates}")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def _trend(axes: Any, rows: Sequence[Row], conditions: Sequence[str]) -> None:
    """Recall by `CONDENSED_BINS` for each overspill condition (each point says how many
    answers it is of), and the whole history's recall over the same kinds as a line."""
    kinds = answerable(rows)
    labels = [label for label, _, _ in CONDENSED_BINS]
    for condition, marker, above in (("overspill-turns", "o", 6), ("overspill-once", "s", -12)):
        if condition not in conditions:
            continue
        mine = [row for row in rows if row.condition == condition]
        points = [
            (index, recall(bin_rows), sum(r.status == "ok" for r in bin_rows))
            for index, (_, bin_rows) in enumerate(by_condensed(mine, kinds))
        ]
        drawn = [(i, 100 * value, n) for i, value, n in points if value is not None]
        if not drawn:
            continue
        axes.plot([i for i, _, _ in drawn], [v for _, v, _ in drawn], marker=marker,
                  label=condition)  # fmt: skip
        for index, value, count in drawn:
            axes.annotate(f"{count}", (index, value), textcoords="offset points",
                          xytext=(0, above), ha="center", fontsize="x-small")  # fmt: skip
    level = recall([r for r in rows if r.condition == CEILING and r.kind in kinds])
    if level is not None and CEILING in conditions:
        axes.axhline(100 * level, linestyle="--", color="grey", label=f"{CEILING} (same kinds)")
    if axes.get_legend_handles_labels()[0]:
        axes.legend(fontsize="small")
    axes.set_xticks(range(len(labels)), labels)
    axes.set_xlabel("growths that condensed the value\n(the number over a point: answers in it)")
    axes.set_ylabel("recall (%)")
    axes.set_ylim(0, 110)
    axes.set_title("recall against nested growths")
