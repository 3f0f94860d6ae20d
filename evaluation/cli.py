"""`overspill eval`: how much of a long conversation survives compaction, on your own model.

Generates conversations from seeds (no internet), plays them under each condition (overspill's
compaction, the whole history, the usual baselines) at a chosen window, asks the probes, and
writes one JSON line per probe and condition, then prints recall per probe kind and condition
with the held-out seeds apart. In process by default (the system is built from `--config`, on a
temporary store, or on the folder `--store` names, kept for the next run); `--url` evaluates a
running overspill instead (its own config decides the window its layers plan for, so give the
same `--window` for the baselines).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Any, TypeVar

from evaluation import locomo
from evaluation.compare import compare, render
from evaluation.conditions import CONDITIONS, ConditionName
from evaluation.conversations import DEFAULT_FILLERS, HELD_OUT_FROM, Conversation, generate
from evaluation.phrasings import ALL, TEMPLATE_SETS, TemplateSet, template_sets
from evaluation.probes import PROBE_KINDS, Asked, ProbeKind
from evaluation.report import CEILING, CHART_HINT, chart, read_jsonl, table, write_jsonl
from evaluation.resume import Resumed, Unit, resume
from evaluation.runner import (
    ANSWER_TOKENS,
    SUMMARY_TOKENS,
    ProbeKey,
    Row,
    Setup,
    Target,
    each_row,
)
from kernel.config import ModelEntry, Settings
from kernel.config_loading import ConfigError, load_config
from kernel.records import StoreError
from kernel.store import DiskHistoryStore
from kernel.tokens import count_messages
from middleware.condensing.budget import budget_for
from proxy.arguments import not_negative, positive

_Name = TypeVar("_Name", bound=str)
LOCOMO_CONDITIONS: tuple[ConditionName, ...] = tuple(
    c for c in CONDITIONS if c not in ("short", "overspill-turns")
)
"""What a LoCoMo dialogue is played under: `short` needs a generated conversation, and
replaying 300 turns one request at a time is left out by default (name it to run it)."""
QUESTION_ROOM = 64
"""Tokens a baseline leaves for the probe's question beside the answer's reserve."""
EXIT_USAGE = 2
EXIT_NOTHING_ASKED = 1
"""Every probe failed (an upstream not running, a key refused): the table has no figure."""


def add_parser(commands: Any) -> None:
    """Register the `eval` subcommand."""
    parser = commands.add_parser(
        "eval", help="measure what survives compaction (recall per probe kind and condition)"
    )
    parser.add_argument("--config", default=os.environ.get("OVERSPILL_CONFIG", "config.yaml"))
    parser.add_argument("--model", help="a configured model name (default: the first)")
    parser.add_argument(
        "--window", type=positive, help="plan for this window (default: the model's)"
    )
    chosen = parser.add_mutually_exclusive_group()
    chosen.add_argument("--seeds", help="e.g. 1-4,1000-1001 (from 1000 on: held-out seeds)")
    chosen.add_argument(
        "--conversations",
        type=positive,
        default=2,
        help="half tune seeds, half held-out (default 2)",
    )
    parser.add_argument(
        "--fillers", type=not_negative, default=DEFAULT_FILLERS,
        help=f"filler episodes per conversation: its length (default {DEFAULT_FILLERS})",
    )  # fmt: skip
    add_templates_argument(parser)
    parser.add_argument(
        "--answer-tokens", type=positive, default=ANSWER_TOKENS,
        help=f"max_tokens of each probe and replayed turn (default {ANSWER_TOKENS})",
    )  # fmt: skip
    locomo.add_arguments(parser)
    parser.add_argument("--conditions", help="comma-separated (default: all)")
    parser.add_argument("--kinds", help="probe kinds to ask (default: all)")
    parser.add_argument("--out", default="eval-results.jsonl", help="JSON lines, one per probe")
    parser.add_argument(
        "--resume", action="store_true",
        help="go on with the run --out holds: keep its answered rows and ask only the probes "
        "they lack (a conversation whose probes share a step made again, a summary, replayed "
        "turns, or an extraction not kept in --store, is played again under that condition; "
        "evaluation/resume.py)",
    )  # fmt: skip
    parser.add_argument(
        "--keep-shown", action="store_true",
        help="each row also holds what the model was shown (to read why an answer missed)",
    )  # fmt: skip
    parser.add_argument("--chart", help="also draw recall to this PNG (needs overspill[eval])")
    parser.add_argument(
        "--store", metavar="DIR",
        help="keep compaction's store in DIR (made if missing) instead of a temporary one: a "
        "later run of the same conversations reuses the extractions this one made, so two "
        "versions of what is shown beside them are compared on one extraction (a model's "
        "extractions differ from run to run). Not with --url",
    )  # fmt: skip
    parser.add_argument("--url", help="evaluate a running overspill, e.g. http://127.0.0.1:4000")
    parser.add_argument("--key", default=os.environ.get("OVERSPILL_MASTER_KEY"))
    parser.add_argument(
        "--report", nargs="+", metavar="ROWS",
        help="run nothing: read saved --out files (a split run's parts), print the table "
        "and draw --chart from all their rows",
    )  # fmt: skip
    parser.add_argument(
        "--against", nargs="+", metavar="ROWS",
        help="with --report: an earlier run's files; also print, per condition both ran, "
        "the probes both answered: answer in view and right before and after, each probe "
        "won and lost, and a sign test of the two",
    )  # fmt: skip


def add_templates_argument(parser: argparse.ArgumentParser) -> None:
    """`--templates`: which phrasings the generated conversations are said in."""
    parser.add_argument(
        "--templates", default="tune", choices=[*TEMPLATE_SETS, ALL],
        help="the phrasings of the planted episodes: tune (those the ledger was written "
        "against, the default), held-out (never tuned on), blind (written without reading "
        "the ledger's rules), or all (each seed in each set)",
    )  # fmt: skip


def parse_seeds(text: str) -> list[int]:
    """`1-3,1000` → [1, 2, 3, 1000]; raises ValueError saying what is wrong."""
    seeds: list[int] = []
    for part in text.split(","):
        low, _, high = part.strip().partition("-")
        if not low.isdigit() or (high and not high.isdigit()):
            raise ValueError(f"--seeds: {part.strip()!r} is not a seed or a range like 1-4")
        seeds += range(int(low), int(high or low) + 1)
    return list(dict.fromkeys(seeds))


def default_seeds(conversations: int) -> list[int]:
    """Half (rounded up) tune seeds from 1, the rest held-out seeds from HELD_OUT_FROM."""
    tune = (conversations + 1) // 2
    return [*range(1, tune + 1), *range(HELD_OUT_FROM, HELD_OUT_FROM + conversations - tune)]


def _chosen(text: str, known: Sequence[_Name], flag: str) -> list[_Name]:
    """The names in `text` (comma-separated), in `known`'s order; ValueError for an unknown."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in known]
    if unknown or not names:
        raise ValueError(
            f"{flag}: unknown {', '.join(unknown) or '(none given)'} (known: {', '.join(known)})"
        )
    return [name for name in known if name in names]


def parse_conditions(text: str) -> list[ConditionName]:
    """The named conditions, in the report's order; raises ValueError for an unknown one."""
    return _chosen(text, CONDITIONS, "--conditions")


def parse_kinds(text: str) -> list[ProbeKind]:
    """The named probe kinds, in the report's order; raises ValueError for an unknown one."""
    return _chosen(text, PROBE_KINDS, "--kinds")


@dataclass(frozen=True, slots=True)
class Plan:
    """Which conversations, conditions and probe kinds a run covers."""

    seeds: Sequence[int]
    conditions: Sequence[ConditionName]
    kinds: Sequence[str]
    locomo: Path | None = None
    """Play these LoCoMo dialogues instead of the seeds' generated conversations."""
    dialogues: Sequence[str] = ()
    templates: Sequence[TemplateSet] = ("tune",)
    """The template sets each seed is played in, in turn."""


def run(args: argparse.Namespace) -> int:
    """Carry the evaluation out (or, with --report, report saved rows); the exit status."""
    if args.chart:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            print(f"eval: --chart: {CHART_HINT}", file=sys.stderr)
            return EXIT_USAGE
    if args.report:
        return _report(args)
    if args.against:
        print("eval: --against compares saved runs: give it with --report", file=sys.stderr)
        return EXIT_USAGE
    try:
        seeds = parse_seeds(args.seeds) if args.seeds else default_seeds(args.conversations)
        conditions: list[ConditionName]
        if args.locomo:
            playable = tuple(c for c in CONDITIONS if c != "short")
            default = ",".join(LOCOMO_CONDITIONS)
            conditions = _chosen(args.conditions or default, playable, "--conditions")
            kinds: Sequence[str] = _chosen(
                args.kinds or ",".join(locomo.DEFAULT_KINDS), locomo.LOCOMO_KINDS, "--kinds"
            )
        else:
            conditions = parse_conditions(args.conditions or ",".join(CONDITIONS))
            kinds = parse_kinds(args.kinds or ",".join(PROBE_KINDS))
        _check_store(args.store, args.url)
    except ValueError as exc:
        print(f"eval: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        plan = Plan(seeds, conditions, kinds, args.locomo and Path(args.locomo),
                    [d.strip() for d in args.dialogues.split(",") if d.strip()],
                    template_sets(args.templates))  # fmt: skip
        playing = conversations(plan, args.fillers)
        units: Iterable[Unit] = ((c, condition) for c in playing for condition in conditions)
        kept = None
        if args.resume:
            resumed = _resumed(args, plan, playing)
            units, kept = resumed.to_play, resumed.kept
        rows = asyncio.run(_evaluate(args, units, kept))
    except ConfigError as exc:
        for problem in exc.problems:
            print(f"{exc.path}: {problem}", file=sys.stderr)
        return EXIT_USAGE
    except (LookupError, ValueError) as exc:
        print(f"eval: {exc}", file=sys.stderr)
        return EXIT_USAGE
    return _show(rows, conditions, f"written to {args.out}", args.chart)


def _resumed(
    args: argparse.Namespace, plan: Plan, playing: Iterable[Conversation[Asked]]
) -> Resumed:
    """What --resume keeps of --out and still asks (a missing --out: everything to ask).
    ValueError naming --out when it holds something that is not a row, or one probe twice
    (as --report reads a results file: `read_rows`)."""
    out = Path(args.out)
    try:
        earlier = read_rows([out]) if out.exists() else []
    except (OSError, ValueError) as exc:
        raise ValueError(f"--resume: {exc}") from exc
    kept_store = bool(args.store) and not args.url
    return resume(earlier, list(playing), plan.conditions, extraction_kept=kept_store)


@contextlib.contextmanager
def _written(out: str, kept: Sequence[Row] | None = None) -> Iterator[IO[bytes]]:
    """--out, opened (and emptied) only once the run is about to make its first call: a
    config, model, store or dataset found wrong before then leaves an earlier run's rows in
    it. A resumed run's `kept` rows replace the file's (written apart, then moved over it,
    so no moment leaves it without them) and the new rows follow. ValueError naming --out
    when it cannot be written, the file as it was and no partial copy beside it."""
    part = Path(f"{out}.resuming")
    try:
        if kept is not None:
            with part.open("wb") as rewritten:
                write_jsonl(kept, rewritten)
            os.replace(part, out)
        sink = open(out, "ab" if kept is not None else "wb")  # noqa: SIM115 - closed below
    except OSError as exc:
        part.unlink(missing_ok=True)  # a disk that filled mid-write leaves no half copy
        raise ValueError(f"--out: {exc}") from exc
    with sink:
        yield sink


def _check_store(store: str | None, url: str | None) -> None:
    """ValueError when --store cannot be used: with --url (the server keeps its own store),
    or naming something that is not a folder."""
    if store is None:
        return
    if url:
        raise ValueError("--store: a running server keeps its own store; drop --store or --url")
    if Path(store).exists() and not Path(store).is_dir():
        raise ValueError(f"--store: {store} is not a folder")


def _report(args: argparse.Namespace) -> int:
    """The table (and --chart) of the rows in the --report files, as if one run wrote them;
    --conditions and --kinds select among them (by default every kind the rows hold, the
    generator's or an outside dataset's). Status 2 for a file that cannot be read, a line that
    is no row, or a probe two files both answer (it would count twice) under any condition but
    the whole history's, which may be read more than once. With --against, the comparison
    with the earlier run's rows follows the table (`evaluation.compare`)."""
    known = (*PROBE_KINDS, *locomo.LOCOMO_KINDS)
    try:
        named = parse_conditions(args.conditions) if args.conditions else None
        asked = _chosen(args.kinds, known, "--kinds") if args.kinds else None
    except ValueError as exc:
        print(f"eval: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        rows = read_rows([Path(name) for name in args.report])
    except (OSError, ValueError) as exc:
        print(f"eval: --report: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        earlier = read_rows([Path(name) for name in args.against or ()])
    except (OSError, ValueError) as exc:
        print(f"eval: --against: {exc}", file=sys.stderr)
        return EXIT_USAGE
    present = {row.condition for row in rows}
    kinds = asked or {row.kind for row in rows}
    conditions = named or [c for c in CONDITIONS if c in present]
    rows = [row for row in rows if row.condition in conditions and row.kind in kinds]
    if not rows:
        print("eval: --report: no rows of the chosen conditions and kinds", file=sys.stderr)
        return EXIT_USAGE
    status = _show(rows, conditions, f"from {len(args.report)} file(s)", args.chart)
    if args.against:
        print("\n" + render(compare(earlier, rows)))
    return status


def _show(rows: list[Row], conditions: Sequence[str], source: str, chart_path: str | None) -> int:
    """Print the table and where the rows are; draw the chart when asked. Status 0, or
    `EXIT_NOTHING_ASKED` when no probe was answered and one failed (the first failure's detail
    said): a table of dashes and status 0 read as a run that measured something. Rows that
    only overflowed are a measurement (no condition made the history fit), status 0."""
    print(table(rows, conditions))
    print(f"\n{len(rows)} rows {source}")
    if chart_path:
        chart(rows, conditions, Path(chart_path))
        print(f"chart drawn to {chart_path}")
    if not any(row.status == "ok" for row in rows) and any(row.status == "error" for row in rows):
        first = next(row for row in rows if row.status == "error")
        print(f"eval: no probe was answered; the first failure: {first.detail}", file=sys.stderr)
        return EXIT_NOTHING_ASKED
    return 0


def read_rows(paths: Sequence[Path]) -> list[Row]:
    """The rows of every file, in order; ValueError when two lines answer the same probe
    (the same seed, condition and question), naming where both are, except the whole
    history's (`CEILING`) in two files: a second reading of it, which the report pairs the
    others with as right only where every reading is."""
    rows: list[Row] = []
    seen: dict[ProbeKey, str] = {}
    for path in paths:
        with path.open("rb") as source:
            found = read_jsonl(source, str(path))
        for number, row in enumerate(found, 1):
            key = row.probe
            if key in seen and (row.condition != CEILING or seen[key] == str(path)):
                raise ValueError(
                    f"{path} (row {number}): seed {row.seed} ({row.templates} templates) "
                    f"{row.condition} {row.kind} is also in {seen[key]}: give each part of a "
                    "run once"
                )
            seen[key] = str(path)
        rows += found
    return rows


async def _evaluate(
    args: argparse.Namespace, units: Iterable[Unit], kept: Sequence[Row] | None
) -> list[Row]:
    """The rows of the run (`kept`, an earlier run's, first): in process, or with --url
    from a running overspill."""
    if args.url:
        return await _remote(args, units, kept)
    loaded = load_config(args.config)
    settings = loaded.settings
    model = args.model or (settings.model_list[0].model_name if settings.model_list else None)
    if model is None or model not in settings.model_names():
        raise LookupError(f"--model: {model!r} is not a model of {args.config}")
    if args.window:
        settings = with_window(settings, model, args.window)
    from evaluation.targets import InProcess
    from proxy.system import build_system

    with tempfile.TemporaryDirectory(prefix="overspill-eval-") as scratch:
        folder = Path(args.store) if args.store else Path(scratch) / "store"
        try:
            store = DiskHistoryStore(folder)
        except StoreError as exc:
            raise ValueError(f"--store: {exc}") from exc
        system = build_system(settings, store=store)
        try:
            target = InProcess(system, model)
            found = await system.windows.of(target.entry)
            if found is None:
                raise LookupError(f"--window: the window of {model!r} is unknown; give it")
            setup = _setup(
                target.entry, found.tokens, run="eval",
                answer_tokens=args.answer_tokens, keep_shown=args.keep_shown,
            )  # fmt: skip
            with _written(args.out, kept) as sink:
                return [*(kept or ()), *await _play(target, units, setup, sink)]
        finally:
            await system.aclose()


async def _remote(
    args: argparse.Namespace, units: Iterable[Unit], kept: Sequence[Row] | None
) -> list[Row]:
    import httpx

    from evaluation.targets import Remote

    if not args.window or not args.model:
        raise LookupError("--url needs --model and --window (the window the server plans for)")
    entry = ModelEntry.model_validate(
        {"model_name": args.model, "litellm_params": {"model": f"openai/{args.model}"}}
    )
    run = f"eval-{uuid.uuid4().hex[:8]}"
    setup = _setup(
        entry, args.window, run=run, answer_tokens=args.answer_tokens, keep_shown=args.keep_shown
    )
    async with httpx.AsyncClient(base_url=args.url.rstrip("/"), timeout=600) as client:
        target = Remote(client, args.model, args.key)
        with _written(args.out, kept) as sink:
            return [*(kept or ()), *await _play(target, units, setup, sink)]


def with_window(settings: Settings, model: str, window: int) -> Settings:
    """The settings with `model`'s deployments planned for `window` tokens."""
    entries = tuple(
        entry.model_copy(update={"context": entry.context.model_copy(update={"window": window})})
        if entry.model_name == model
        else entry
        for entry in settings.model_list
    )
    return settings.model_copy(update={"model_list": entries})


def _setup(
    entry: ModelEntry,
    window: int,
    *,
    run: str,
    answer_tokens: int = ANSWER_TOKENS,
    keep_shown: bool = False,
) -> Setup:
    """The budgets the baselines keep to, from the model's window."""
    probe = budget_for(entry, window, {"max_tokens": answer_tokens}).prompt_limit - QUESTION_ROOM
    summary_tokens = min(SUMMARY_TOKENS, window // 4)
    summary = budget_for(entry, window, {"max_tokens": summary_tokens}).prompt_limit
    return Setup(
        probe, summary, count_messages, run, answer_tokens, summary_tokens, keep_shown
    )  # fmt: skip


async def _play(target: Target, units: Iterable[Unit], setup: Setup, sink: IO[bytes]) -> list[Row]:
    """Each conversation under each condition in turn, each row written to `sink` as soon as
    its probe is answered (a run stopped part-way keeps every answer it had)."""
    rows: list[Row] = []
    for conversation, condition in units:
        started = time.monotonic()
        done = []
        async for row in each_row(target, conversation, [condition], setup):
            write_jsonl([row], sink)
            sink.flush()
            done.append(row)
        rows += done
        right = sum(bool(row.correct) for row in done)
        asked_n = sum(row.status == "ok" for row in done)
        failed = sum(row.status == "error" for row in done)
        print(
            f"seed {conversation.seed} ({conversation.seed_set}, {conversation.templates} "
            f"templates, {len(conversation.messages)} messages) "
            f"{condition}: {right}/{asked_n} right"
            f"{f', {failed} failed' if failed else ''}, {time.monotonic() - started:.0f} s",
            file=sys.stderr,
            flush=True,
        )
    return rows


def conversations(plan: Plan, fillers: int) -> Iterator[Conversation[Asked]]:
    """The run's conversations with the probes of its kinds: LoCoMo's dialogues (loaded
    now, so a bad file stops the run before --out is opened or any call made), else the
    seeds' generated ones (each made when it is reached)."""
    if plan.locomo is not None:
        dialogues = locomo.chosen(locomo.load(plan.locomo), plan.dialogues)
        return (
            Conversation(d.number, d.messages, locomo.asked(d, plan.kinds), locomo.SOURCE)
            for d in dialogues
        )

    def generated() -> Iterator[Conversation[Asked]]:
        for seed in plan.seeds:
            for templates in plan.templates:
                conversation = generate(seed, fillers=fillers, templates=templates)
                kept = tuple(probe for probe in conversation.probes if probe.kind in plan.kinds)
                yield replace(conversation, probes=kept)

    return generated()
