"""Whole studies at the cap's edge: the point gate against the confidence gate, and the trap.

Every run goes through ``sweeper.run_study`` (guided sampler, a fresh SQLite
study) on the landscapes of ``landscape.py`` with the PPL curve moved so that
one grid window reads just over the cap: its true PPL is ``cap + edge_offset``
(2.421 against 2.42 by default), and every window under it is over the cap,
every one above it under. Even landscapes put that window at 188, the
window of the preset's known configuration (VIDRAFT W188), odd ones at the
grid window nearest the landscape's own boundary (its zone: landscape % 3).

**Record sampling** (``gate`` runs) is simulated from real per-record scores
of the bundled demo model (its 48 PPL records, scored with transformers on
the CPU, as ``tests/conftest.py`` does): each study draws its own tuning
set of ``--records`` records from them (with replacement) and the organizers'
private set of ``--rerun-records`` others. A record's difficulty is shared by
every configuration (its NLL per token is the configuration's log PPL plus
the record's own offset), so the tuning set's luck moves every reading of a
study the same way, as it does on real records. Each reading adds a reading
noise of ``--ppl-noise`` (absolute, PPL units) and a TPS noise. The trial's
``ppl_stderr_records`` is the tuning records' standard error. Seed ``s`` is
landscape ``s`` and its own record draw.

The table: the share of answers whose true PPL is over the cap and the
share that fails the private re-run, each with its 95 % (Wilson) interval,
and the answer's true TPS against the best truly feasible one, for the
point gate and the confidence gates.

**A relative cap** (``gate --relative``): the study gates ``PPL / baseline
PPL`` (``ppl_cap_rel``), the baseline being the landscape's base
configuration (W512), measured first on the same tuning records, and the
organizers' re-run scores both on the same private records. The ratio is
set per landscape to ``PPL_CAP`` over the base's true PPL (1.006-1.052
over seeds 0-199: close to 1 where the edge window is a wide one), so the
cap falls where it does under the absolute cap. What a configuration
does to each record is taken from the demo model itself: its records scored
at the trained window (32) and at 20 (PPL 2.13 and 2.21, the real pair whose
change of log PPL, 0.037, is nearest the landscapes' 0.05 from the base to
the cap). A record's change of log PPL per token at window ``W`` is
``delta(W) * s`` with ``delta(W)`` the log of true PPL(W) over the base's
and ``s`` that record's change at 20 over the mean change (token-weighted
mean 1; standard deviation 0.62 over the 48 records). The tuning set's
luck, shared by every configuration, cancels in the ratio; what is left is
the spread of ``s`` over the records drawn, which the paired standard
error (``sweeper.study._gate.paired_stderr``) measures from the per-record
rows each trial returns.

**The trap** (``trap`` runs, no record sampling, the point gate): on each
of ``--landscapes``, ``--seeds`` runs (their own TPS and PPL noise) with
and without the preset's known configurations enqueued, at each of
``--ppl-noises``: the most trials at the cap-edge window and at any window
truly over the cap, and the trials to a configuration within 1 % of the
best feasible TPS (as ``search_efficiency.py`` counts them).

Each study's result is appended to ``--log`` (JSONL, with the task that
produced it) as soon as it ends; a run given a log that already holds some
of its tasks runs only the others, so a cut run is resumed by running the
same command again, and a finished one prints its table at once.

    python -m benchmarks.ppl_gate gate --seeds 200 --confidences none,0.9 --log gate.jsonl
    python -m benchmarks.ppl_gate gate --relative --seeds 200 --confidences none,0.9 --log rel.jsonl
    python -m benchmarks.ppl_gate trap --landscapes 0-5 --seeds 5 --log trap.jsonl
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import math
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np
import optuna

import sweeper
from benchmarks.landscape import PPL_CAP, REFERENCE_PPL, WINDOWS, Landscape, search_space
from sweeper.study import Measurement, PplGate, StudyOptions, TrialEvent

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "sweeper" / "demo" / "data"
BASE_ENV = {"SPECULATIVE_CONFIG": json.dumps({"method": "mtp", "model": "drafter", "num_speculative_tokens": 4})}
KNOWN_WINDOW = 188
BASE_WINDOW = 512  # the base configuration's window (the space's default)
WILSON_Z = 1.959964  # 95 %


NARROW_WINDOW = 20  # the demo model's window whose records give the per-record change (--relative)


def transformers_nll(model_dir: Path, records: list, sliding_window: int | None = None) -> dict[str, float]:
    """Each PPL record's NLL over its scored span, from the model's logits in transformers (float32,
    on the CPU), with no server in between. ``sliding_window``: overrides the model's own."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(model_dir)
    if sliding_window is not None:
        config.sliding_window = sliding_window
    model = AutoModelForCausalLM.from_pretrained(model_dir, config=config, dtype=torch.float32)
    model.eval()
    result: dict[str, float] = {}
    with torch.no_grad():
        for record in records:
            tokens = record.token_ids
            logprobs = torch.log_softmax(model(torch.tensor([tokens])).logits[0].double(), dim=-1)
            # the token at ``position`` is predicted from the logits one position before it
            result[record.id] = -sum(
                logprobs[position - 1, tokens[position]].item()
                for position in range(record.score_start, record.score_end)
            )
    return result


def demo_record_scores(cache: Path | None = None, sliding_window: int | None = None) -> list[tuple[float, int]]:
    """(NLL, scored tokens) of each demo PPL record, by transformers on the CPU.

    ``sliding_window``: the model's local-attention window (None: its own, 32).
    """
    if cache is not None and sliding_window is not None:
        cache = cache.with_name(f"{cache.stem}-w{sliding_window}{cache.suffix}")
    if cache is not None and cache.exists():
        return [tuple(row) for row in json.loads(cache.read_text())]
    from evaluators import load_ppl_records

    records = [
        *load_ppl_records(str(DEMO / "ppl_tuning.jsonl")),
        *load_ppl_records(str(DEMO / "ppl_heldout.jsonl")),
    ]
    nll = transformers_nll(DEMO / "model", records, sliding_window=sliding_window)
    scores = [(float(nll[r.id]), r.scored_tokens) for r in records]
    if cache is not None:
        cache.write_text(json.dumps(scores))
    return scores


def record_sensitivity(base: list[tuple[float, int]], narrow: list[tuple[float, int]]) -> list[float]:
    """Each record's change of log PPL per token from ``base`` to ``narrow``, over the mean change.

    Token-weighted, the values average 1 (module docstring, "A relative cap").
    """
    tokens = np.array([t for _, t in base], float)
    change = (np.array([n for n, _ in narrow]) - np.array([n for n, _ in base])) / tokens
    mean = float((change * tokens).sum() / tokens.sum())
    return [float(v) for v in change / mean]


class EdgeLandscape(Landscape):
    """A landscape whose PPL reads ``cap + edge_offset`` at one grid window (module docstring).

    ``seed`` picks the landscape; ``run`` (default: the same number) the
    noise of its readings and its record draw, so one landscape can be
    searched by several runs.
    """

    def __init__(
        self,
        seed: int,
        *,
        noise: float,
        ppl_noise: float,
        edge_offset: float = 0.001,
        scores: list[tuple[float, int]] | None = None,
        records: int = 128,
        rerun_records: int = 128,
        run: int | None = None,
        sensitivity: list[float] | None = None,
    ) -> None:
        run = seed if run is None else run
        # seed == run keeps the streams of the one-run-per-landscape version
        stream = [seed] if run == seed else [seed, run]
        rng = np.random.default_rng([*stream, 18])
        self._edge = None
        self.edge_offset = edge_offset
        self.ppl_noise = ppl_noise
        self._probe = Landscape(seed, noise=noise)
        # the edge window: the known configuration's for even landscapes, else the grid
        # window nearest the landscape's own boundary
        if seed % 2 == 0:
            edge = KNOWN_WINDOW
        else:
            edge = int(WINDOWS[np.argmin(np.abs(WINDOWS - self._probe.shape.boundary))])
        self._edge = edge
        super().__init__(seed, noise=noise)
        if run != seed:
            self._rng = np.random.default_rng([*stream, int(round(noise * 1e4)), 7])
        self._ppl_rng = np.random.default_rng([*stream, int(round(ppl_noise * 1e5)), 11])
        self.tuning_shift, self.rerun_shift, self.stderr = 0.0, 0.0, None
        self.records = records
        if scores:
            nll = np.array([n for n, _ in scores])
            tokens = np.array([t for _, t in scores], float)
            base = nll.sum() / tokens.sum()
            tune = rng.integers(0, len(scores), records)
            fresh = rng.integers(0, len(scores), rerun_records)
            self.tuning_shift = float(nll[tune].sum() / tokens[tune].sum() - base)
            self.rerun_shift = float(nll[fresh].sum() / tokens[fresh].sum() - base)
            mean = nll[tune].sum() / tokens[tune].sum()
            residuals = nll[tune] - mean * tokens[tune]
            self.stderr = float(math.sqrt((residuals**2).sum() / (records - 1) / records) / tokens[tune].mean())
            self._offsets = nll[tune] / tokens[tune] - base  # each drawn record's own difficulty
            self._tokens = tokens[tune].astype(int)
        # under a relative cap: each record's share of a configuration's change of log PPL
        self.sensitivity = None
        if sensitivity is not None and scores:
            s = np.array(sensitivity)
            self.sensitivity = s[tune]
            self.tuning_sensitivity = float((s[tune] * tokens[tune]).sum() / tokens[tune].sum())
            self.rerun_sensitivity = float((s[fresh] * tokens[fresh]).sum() / tokens[fresh].sum())

    def ppl(self, window):  # noqa: ANN001 - numpy or a number
        if self._edge is None:
            return super().ppl(window)
        s = self.shape
        x = np.maximum(np.asarray(window, float) - 128, 0.0) / s.decay
        at_edge = math.exp(-(((self._edge - 128) / s.decay) ** s.power))
        amplitude = (PPL_CAP + self.edge_offset - REFERENCE_PPL) / at_edge
        return REFERENCE_PPL + amplitude * np.exp(-(x**s.power))

    @property
    def edge(self) -> int:
        if self._edge is None:
            raise ValueError("this landscape has no edge window")
        return self._edge

    def neighbour_margin(self) -> float:
        """How far under the cap the next window on the safe side is (true PPL)."""
        return PPL_CAP - float(self.ppl(self.edge + 4))

    def rerun_ppl(self, params) -> float:  # noqa: ANN001
        return float(self.ppl(params["sliding_window"])) * math.exp(self.rerun_shift)

    @property
    def base_ppl(self) -> float:
        """The base configuration's true PPL (its window: the space's default, 512)."""
        return float(self.ppl(BASE_WINDOW))

    @property
    def cap_rel(self) -> float:
        """The relative cap that falls where ``PPL_CAP`` does: PPL_CAP over the base's PPL."""
        return PPL_CAP / self.base_ppl

    def _change(self, window: int) -> float:
        """log(true PPL / the base's true PPL)."""
        return math.log(float(self.ppl(window)) / self.base_ppl)

    def rerun_ratio(self, params) -> float:  # noqa: ANN001
        """PPL / baseline PPL on the private records (both re-run on them)."""
        return math.exp(self._change(params["sliding_window"]) * self.rerun_sensitivity)

    def __call__(self, params, context=None) -> Measurement:  # noqa: ANN001
        tps = self.tps_of(params) * (1 + self.noise * float(self._rng.standard_normal()))
        true = float(self.ppl(params["sliding_window"]))
        requests: list[dict] = []
        if self.sensitivity is None:
            tuned = true * math.exp(self.tuning_shift)
        else:  # the records' own changes (module docstring, "A relative cap")
            change = self._change(params["sliding_window"])
            per_token = math.log(self.base_ppl) + self._offsets + change * self.sensitivity
            nll = per_token * self._tokens
            tuned = math.exp(float(nll.sum()) / float(self._tokens.sum()))
            requests = [
                {"kind": "ppl", "id": str(i), "nll": float(n), "tokens": int(t)}
                for i, (n, t) in enumerate(zip(nll, self._tokens))
            ]
        read = tuned + self.ppl_noise * float(self._ppl_rng.standard_normal())
        extras = {}
        if self.stderr is not None:
            extras = {"ppl_stderr_records": self.stderr, "ppl_records": self.records}
        return Measurement(tps=tps, ppl=read, extras=extras, requests=requests)


@dataclasses.dataclass(frozen=True)
class Task:
    kind: str  # gate | trap
    landscape: int
    seed: int
    confidence: float | None
    enqueue: bool
    noise: float
    ppl_noise: float
    trials: int
    records: int
    rerun_records: int
    edge_offset: float
    relative: bool = False  # gate PPL / baseline PPL (module docstring)
    folder: str = dataclasses.field(default="", compare=False)
    scores: tuple = dataclasses.field(default=(), compare=False, repr=False)
    sensitivity: tuple = dataclasses.field(default=(), compare=False, repr=False)

    def key(self) -> str:
        """What the result depends on, as the log stores it (logs of absolute runs
        written before ``relative`` existed keep their keys)."""
        fields = dataclasses.asdict(self)
        fields.pop("folder"), fields.pop("scores"), fields.pop("sensitivity")
        if not fields["relative"]:
            fields.pop("relative")
        return json.dumps(fields, sort_keys=True)


def run_task(task: Task) -> dict:
    logging.basicConfig(level=logging.ERROR)
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    started = time.monotonic()
    land = EdgeLandscape(
        task.landscape,
        noise=task.noise,
        ppl_noise=task.ppl_noise,
        edge_offset=task.edge_offset,
        scores=list(task.scores) or None,
        records=task.records,
        rerun_records=task.rerun_records,
        run=task.seed,
        sensitivity=list(task.sensitivity) if task.relative else None,
    )
    seen: list[dict] = []
    reached: list[int] = []

    def progress(event: TrialEvent) -> None:
        if event.kind != "finished":
            return
        seen.append(dict(event.params))
        if not reached and land.is_near_best(event.params):
            reached.append(len(seen))

    name = (
        f"{task.kind}-{task.landscape}-{task.seed}-{task.confidence}-{task.enqueue}"
        f"-{task.ppl_noise:g}{'-rel' if task.relative else ''}"
    )
    if task.relative:
        gate = PplGate(cap_rel=land.cap_rel, confidence=task.confidence)
    else:
        gate = PplGate(cap=PPL_CAP, confidence=task.confidence)
    result = sweeper.run_study(
        search_space().bind(BASE_ENV),
        land,
        StudyOptions(
            study_name=name,
            storage=str(Path(task.folder) / f"{name}.db"),
            n_trials=task.trials,
            gate=gate,
            sampler="guided",
            seed=task.seed,
            enqueue_space_configs=task.enqueue,
            progress=progress,
            handle_signals=False,
        ),
    )
    Path(task.folder, f"{name}.db").unlink(missing_ok=True)
    windows = Counter(p["sliding_window"] for p in seen)
    over = Counter(p["sliding_window"] for p in seen if not land.is_feasible(p))
    best = result.best
    answer = dict(best.params) if best is not None else None
    return {
        "trials": len(seen),
        "reached": reached[0] if reached else None,
        "edge": land.edge,
        "neighbour_margin": land.neighbour_margin(),
        "max_over": max(over.values()) if over else 0,
        "at_edge": windows[land.edge],
        "max_window": max(windows.values()) if windows else 0,
        "windows": len(windows),
        "answer_over": None if answer is None else not land.is_feasible(answer),
        "rerun_fails": None
        if answer is None
        else (land.rerun_ratio(answer) > land.cap_rel if task.relative else land.rerun_ppl(answer) > PPL_CAP),
        "tps_ratio": None if answer is None else land.tps_of(answer) / land.best_tps,
        "pass_probability": None if best is None else best.extras.get("ppl_pass_probability"),
        "seconds": round(time.monotonic() - started, 2),
    }


def wilson(successes: int, n: int, z: float = WILSON_Z) -> tuple[float, float]:
    """The Wilson score interval of a binomial share (95 % by default)."""
    if n == 0:
        return (math.nan, math.nan)
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


def _share(values: list) -> str:
    known = [bool(v) for v in values if v is not None]
    if not known:
        return "-"
    low, high = wilson(sum(known), len(known))
    return f"{sum(known)}/{len(known)} = {sum(known) / len(known):.1%} ({low:.1%}-{high:.1%})"


def _quantile(values: list[float], q: float) -> float:
    return float(np.quantile(np.array(values, float), q)) if values else math.nan


def _read_log(path: Path | None) -> dict[str, dict]:
    """The results already in the log, by task key (lines of another format are passed over)."""
    done: dict[str, dict] = {}
    if path is None or not path.exists():
        return done
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut off when the run was
        if isinstance(row, dict) and "task" in row and "result" in row:
            done[json.dumps(row["task"], sort_keys=True)] = row["result"]
    return done


def _ranges(text: str) -> list[int]:
    """'0-3,7' -> [0, 1, 2, 3, 7]."""
    values: list[int] = []
    for part in text.split(","):
        low, _, high = part.partition("-")
        values += range(int(low), int(high or low) + 1)
    return values


def gate_table(tasks: list[Task], results: dict[str, dict], levels: list) -> list[str]:
    lines = [
        "| gate | studies | answers truly over the cap (95 % interval) | answers failing the "
        "private re-run (95 % interval) | stated pass probability (median) | TPS cost: 1 - answer "
        "/ best feasible (median, 90th pct) | TPS cost against the point gate's answer, same seed "
        "(median, 90th pct) |",
    ]
    lines.append("|---" * 7 + "|")
    by_level = {
        c: {t.seed: results[t.key()] for t in tasks if t.confidence == c and t.key() in results} for c in levels
    }
    point = by_level.get(None, {})
    for c in levels:
        chunk = list(by_level[c].values())
        if not chunk:
            continue
        costs = [1 - r["tps_ratio"] for r in chunk if r["tps_ratio"] is not None]
        probs = [r["pass_probability"] for r in chunk if r["pass_probability"] is not None]
        paired = [
            1 - r["tps_ratio"] / point[seed]["tps_ratio"]
            for seed, r in by_level[c].items()
            if seed in point and r["tps_ratio"] and point[seed]["tps_ratio"]
        ]
        label = "point estimate" if c is None else f"{c:.0%} confidence"
        paired_text = "-" if c is None or not paired else f"{_quantile(paired, 0.5):.2%}, {_quantile(paired, 0.9):.2%}"
        lines.append(
            f"| {label} | {len(chunk)} | {_share([r['answer_over'] for r in chunk])} | "
            f"{_share([r['rerun_fails'] for r in chunk])} | "
            f"{statistics.median(probs) if probs else math.nan:.3f} | "
            f"{_quantile(costs, 0.5):.2%}, {_quantile(costs, 0.9):.2%} | {paired_text} |"
        )
    return lines


def trap_table(tasks: list[Task], results: dict[str, dict], cap: int) -> list[str]:
    lines = [
        "| landscape (edge window, next window's margin) | PPL noise | known configs first | seeds "
        "| most trials at the edge window | most trials at one window over the cap | median "
        "trials to 1 % of best | reached |",
    ]
    lines.append("|---" * 8 + "|")
    cells: dict[tuple, list[dict]] = {}
    for t in tasks:
        if t.key() in results:
            cells.setdefault((t.ppl_noise, t.enqueue, t.landscape), []).append(results[t.key()])

    def row(label: str, noise: float, enqueue: bool, chunk: list[dict]) -> str:
        reached = [r["reached"] for r in chunk]
        ranked = sorted(v if v is not None else cap + 1 for v in reached)
        middle = statistics.median(ranked)
        return (
            f"| {label} | {noise:g} | {'yes' if enqueue else 'no'} | {len(chunk)} | "
            f"{max(r['at_edge'] for r in chunk)} | {max(r['max_over'] for r in chunk)} | "
            f"{f'{middle:g}' if middle <= cap else f'>{cap}'} | "
            f"{sum(v is not None for v in reached)}/{len(chunk)} |"
        )

    for noise, enqueue in sorted({(k[0], k[1]) for k in cells}):
        pooled = []
        for landscape in sorted(k[2] for k in cells if k[:2] == (noise, enqueue)):
            chunk = cells[(noise, enqueue, landscape)]
            pooled += chunk
            label = f"{landscape} (W{chunk[0]['edge']}, {chunk[0]['neighbour_margin']:.4f})"
            lines.append(row(label, noise, enqueue, chunk))
        lines.append(row("**all**", noise, enqueue, pooled))
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kind", choices=("gate", "trap"))
    parser.add_argument("--seeds", type=int, default=200, help="gate: seeds (landscapes); trap: runs per landscape")
    parser.add_argument("--landscapes", default="0-5", help="trap: landscape numbers, e.g. 0-5")
    parser.add_argument("--trials", type=int, default=40)
    parser.add_argument("--jobs", type=int, default=1, help="studies in parallel (default 1)")
    parser.add_argument(
        "--noise", "--tps-noise", dest="noise", type=float, default=0.01, help="relative TPS noise (default 0.01)"
    )
    parser.add_argument("--ppl-noise", type=float, default=0.002, help="gate: PPL reading noise")
    parser.add_argument("--ppl-noises", default="0.002,0.01", help="trap: PPL reading noises")
    parser.add_argument("--edge-offset", type=float, default=0.001, help="edge window: cap + this")
    parser.add_argument("--records", type=int, default=128, help="tuning records")
    parser.add_argument("--rerun-records", type=int, default=128, help="private records")
    parser.add_argument("--confidences", default="none,0.8,0.9,0.95", help="gate runs: 'none' is the point gate")
    parser.add_argument(
        "--relative",
        action="store_true",
        help="gate: a relative cap (PPL / baseline PPL, the base measured on the same records)",
    )
    parser.add_argument("--scores-cache", type=Path, default=None)
    parser.add_argument("--log", type=Path, default=None, help="append each study's result (JSONL); resume from it")
    args = parser.parse_args(argv)
    started = time.monotonic()
    done = _read_log(args.log)
    with tempfile.TemporaryDirectory(prefix="sweeper-ppl-gate-") as tmp:
        common = dict(
            noise=args.noise,
            trials=args.trials,
            records=args.records,
            rerun_records=args.rerun_records,
            edge_offset=args.edge_offset,
            folder=tmp,
        )
        if args.kind == "gate":
            scores = tuple(demo_record_scores(args.scores_cache))
            nll = sum(n for n, _ in scores)
            tokens = sum(t for _, t in scores)
            sensitivity: tuple = ()
            if args.relative:
                narrow = demo_record_scores(args.scores_cache, sliding_window=NARROW_WINDOW)
                sensitivity = tuple(record_sensitivity(list(scores), narrow))
            print(
                f"{len(scores)} demo records, PPL {math.exp(nll / tokens):.4f}; each study tunes on "
                f"{args.records} of them and is re-run on {args.rerun_records} others; PPL reading "
                f"noise {args.ppl_noise:g}, TPS noise {args.noise:.0%}, {args.trials} trials, "
                f"{args.seeds} seeds"
                + (f"; relative cap, per-record changes sd {np.std(sensitivity):.2f}" if args.relative else "")
                + "\n"
            )
            levels = [None if c == "none" else float(c) for c in args.confidences.split(",")]
            tasks = [
                Task(
                    "gate",
                    seed,
                    seed,
                    c,
                    True,
                    ppl_noise=args.ppl_noise,
                    scores=scores,
                    relative=args.relative,
                    sensitivity=sensitivity,
                    **common,
                )
                for seed in range(args.seeds)
                for c in levels
            ]
        else:
            noises = [float(v) for v in args.ppl_noises.split(",")]
            tasks = [
                Task("trap", landscape, seed, None, enqueue, ppl_noise=noise, **common)
                for noise in noises
                for enqueue in (False, True)
                for landscape in _ranges(args.landscapes)
                for seed in range(args.seeds)
            ]
        todo = [t for t in tasks if t.key() not in done]
        print(
            f"{len(tasks) - len(todo)} of {len(tasks)} studies in the log; running {len(todo)}",
            file=sys.stderr,
            flush=True,
        )
        results = dict(done)

        def record(task: Task, result: dict) -> None:
            results[task.key()] = result
            if args.log is not None:
                with args.log.open("a", encoding="utf-8") as log:
                    line = {"task": json.loads(task.key()), "result": result}
                    log.write(json.dumps(line) + "\n")
            count = len(results) - len(done)
            if count % 10 == 0 or count == len(todo):
                print(f"{count}/{len(todo)} studies, {time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)

        if args.jobs <= 1:
            for task in todo:
                record(task, run_task(task))
        else:
            context = multiprocessing.get_context("spawn")
            with context.Pool(args.jobs, maxtasksperchild=10) as pool:
                for task, result in zip(todo, pool.imap(run_task, todo)):
                    record(task, result)
    if args.kind == "gate":
        lines = gate_table(tasks, results, levels)
    else:
        lines = trap_table(tasks, results, args.trials)
    print("\n".join(lines))
    seconds = [results[t.key()]["seconds"] for t in tasks if t.key() in results]
    print(
        f"\n{time.monotonic() - started:.0f} s; {statistics.median(seconds):.1f} s per study "
        f"(median over {len(seconds)})"
    )
    return 0


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.exit(main())
