"""How often a whole study claims a speedup that is not there, and how often it finds one that is.

Each simulated study is what ``sweeper run`` does, without a server: the
base manifest's configuration first (trial 0, role baseline), then a budget
of trials over a grid of eight configurations of one knob (``c`` 0-7, the
base at 0), through ``run_study`` with the default (guided) sampler, PPL
reused where only speed knobs changed, the relative PPL cap, and the
confirmation races as ``sweeper run`` sets them (``RunPlan.confirm_settings``
of the code under test, so each code version runs with its own defaults).
The study's claim is then read with ``standing(records, settings)``:
faster | indistinct | base | slower | none, and the claimed configuration.

Two settings: ``demo``, the demo's budget (8 trials: every configuration
once) and its confirmation rounds; ``run``, a budget of 20 and the rounds
of a run on one's own manifest.

One server's TPS figure is ``truth(c) * exp(noise + drift)``:

* ``noise``: heavy-tailed between-server noise, a Student-t with 3 degrees
  of freedom scaled to an SD of 5, 10 or 15 % in log TPS;
* ``drift``: a slow multiplicative random walk over the study's servers
  (a step of 1.5 % in log TPS per server, so about 5-10 % over a study),
  shared by neighbouring servers.

PPL is the same for every configuration, under the cap: this is about TPS
claims only. Landscapes: ``null`` (every configuration as fast as the base:
any "faster" claim is wrong) and ``alt`` (one configuration 1.25x the base,
one 1.10x, the rest as fast as the base; which ones is drawn per study).
Studies are seeded (the same seeds for every code version).

    python -m benchmarks.claim_error                       # the working tree's code
    python -m benchmarks.claim_error --versions 38818e6,.  # a commit beside the working tree
    python -m benchmarks.claim_error --quick               # a few studies per cell

A version other than ``.`` (the working tree) is a commit, checked out in a
temporary git worktree outside the repository for the run and removed
after. ``--records FILE`` keeps one JSON line per study; ``--from-records``
prints the table from such files without running anything.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib.machinery
import importlib.util
import json
import math
import multiprocessing
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

# the summary's own t quantile; each studied version imports its code in its workers
from evaluators import t_quantile

REPOSITORY = Path(__file__).resolve().parents[1]
CONFIGURATIONS = 8  # c = 0 (the base) to 7
BASE_TPS = 100.0
PPL = 2.0  # every configuration's, so always under the relative cap
FAST, FASTER = 1.10, 1.25  # the alternative landscape's two faster configurations
DRIFT_STEP = 0.015  # SD of the drift's step in log TPS, per server
TAIL_DF = 3
NOISES = (0.05, 0.10, 0.15)
LANDSCAPES = ("null", "alt")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Setting:
    name: str
    budget: int
    demo: bool  # the demo's confirmation settings (else a run on one's own manifest)


SETTINGS = {
    "demo": Setting(name="demo", budget=8, demo=True),
    "run": Setting(name="run", budget=20, demo=False),
}


@dataclasses.dataclass(frozen=True, kw_only=True)
class StudySpec:
    setting: Setting
    landscape: str
    noise: float
    index: int
    sampler: str | None  # None: the default (guided)

    def __post_init__(self) -> None:
        if not 0 <= self.index < 1_000 or not 0.0 < self.noise < 0.5:
            raise ValueError(f"a study needs an index in 0-999 and a noise in (0, 0.5), not {self}")

    @property
    def seed(self) -> int:
        setting = list(SETTINGS).index(self.setting.name)
        return (
            1_000_000 * setting
            + 100_000 * LANDSCAPES.index(self.landscape)
            + 1_000 * round(self.noise * 100)
            + self.index
        )


def truth(landscape: str, seed: int) -> dict[int, float]:
    """Each configuration's true TPS; on ``alt``, the 1.25x and 1.10x ones are drawn per study."""
    tps = {c: BASE_TPS for c in range(CONFIGURATIONS)}
    if landscape == "alt":
        faster, fast = np.random.default_rng([seed, 1]).choice(np.arange(1, CONFIGURATIONS), 2, replace=False)
        tps[int(faster)] = FASTER * BASE_TPS
        tps[int(fast)] = FAST * BASE_TPS
    return tps


class NoisyServers:
    """The study's evaluator: every call is a fresh server with its own noise, on a drifting machine."""

    def __init__(self, tps: Mapping[int, float], noise: float, seed: int) -> None:
        self.tps = dict(tps)
        self.noise = noise
        self.rng = np.random.default_rng([seed, 2])
        self.drift = 0.0
        self.servers = 0

    def __call__(self, params: Mapping[str, Any], context: Any = None) -> Any:
        from sweeper.study import Measurement

        self.servers += 1
        self.drift += DRIFT_STEP * float(self.rng.standard_normal())
        noise = self.noise * float(self.rng.standard_t(TAIL_DF)) / math.sqrt(TAIL_DF / (TAIL_DF - 2))
        known = getattr(context, "known_ppl", None)
        return Measurement(
            tps=self.tps[int(params["c"])] * math.exp(noise + self.drift),
            ppl=None if known is not None else PPL,
        )


def confirm_settings(setting: Setting) -> Any:
    """The races as ``sweeper run`` sets them in the code under test (the demo's, or a run's)."""
    from sweeper.sweep import RunPlan

    plan = RunPlan() if setting.demo else RunPlan(manifest="base-manifest.yaml")
    return plan.confirm_settings()


def run_one(spec: StudySpec, folder: Path) -> dict[str, Any]:
    """One whole study; its claim as a record."""
    import sweeper
    import sweeper.study
    from search_spaces import space_from_dict
    from sweeper.study import standing

    space = space_from_dict(
        {
            "name": "claims",
            "parameters": [
                {
                    "name": "c",
                    "type": "int",
                    "low": 0,
                    "high": CONFIGURATIONS - 1,
                    "affects": "speed",
                    "default": 0,
                    "env": "C",
                }
            ],
        },
        source="claims",
    ).bind({})
    tps = truth(spec.landscape, spec.seed)
    servers = NoisyServers(tps, spec.noise, spec.seed)
    confirm = confirm_settings(spec.setting)
    name = f"{spec.setting.name}-{spec.landscape}-{spec.noise:g}-{spec.index}"
    database = folder / f"{name}.db"
    started = time.monotonic()
    try:
        settings: dict[str, Any] = dict(
            study_name=name,
            storage=str(database),
            n_trials=spec.setting.budget,
            sampler=spec.sampler,
            seed=spec.seed,
            reuse_quality=True,
            confirm=confirm,
            enqueue_base=True,
            handle_signals=False,
        )
        if hasattr(sweeper.study, "StudyOptions"):
            options = sweeper.study.StudyOptions(**settings, gate=sweeper.study.PplGate(cap_rel=1.05))
            result = sweeper.run_study(space, servers, options=options)
        else:  # a version older than StudyOptions (4d4ed61): its run_study took the settings as keywords
            result = sweeper.run_study(space, servers, **settings, ppl_cap_rel=1.05)
        trials = result.status.trials
        now = standing(trials, confirm)
    finally:
        database.unlink(missing_ok=True)
    claimed = None if now.incumbent is None else int(now.incumbent.params["c"])
    speedup = now.speedup
    return {
        "setting": spec.setting.name,
        "budget": spec.setting.budget,
        "landscape": spec.landscape,
        "noise": spec.noise,
        "index": spec.index,
        "seed": spec.seed,
        "sampler": spec.sampler or "default",
        "confirm": confirm.to_settings(),
        "claim": now.claim,
        "claimed": claimed,
        "claimed_ratio": None if claimed is None else round(tps[claimed] / BASE_TPS, 6),
        # the stated speedup (after selection) and its interval: set against claimed_ratio, the truth
        "estimate": None if speedup is None else round(speedup.value, 6),
        "estimate_low": None if speedup is None else round(speedup.low, 6),
        "estimate_high": None if speedup is None else round(speedup.high, 6),
        "faster": next((c for c, v in tps.items() if v == FASTER * BASE_TPS), None),
        "fast": next((c for c, v in tps.items() if v == FAST * BASE_TPS), None),
        "servers": len(trials),
        "seconds": round(time.monotonic() - started, 3),
    }


# -- workers: each imports the code under test from its own root -------------------------------

_FOLDER: Path | None = None


def _load_packages_from(code_root: str) -> None:
    """Import the four packages from ``code_root``, in place of any copy imported before.

    The lower packages first: ``sweeper`` imports them by name, and must find these.
    """
    for name in ("search_spaces", "evaluators", "storage", "sweeper"):
        for loaded in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
            del sys.modules[loaded]
        spec = importlib.machinery.PathFinder.find_spec(name, [code_root])
        if spec is None or spec.loader is None:
            raise RuntimeError(f"no package {name} under {code_root}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)


def _start_worker(code_root: str, folder: str) -> None:
    global _FOLDER
    _load_packages_from(code_root)
    import logging

    import optuna

    logging.basicConfig(level=logging.ERROR)
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    _FOLDER = Path(folder)


def _task(spec: StudySpec) -> dict[str, Any]:
    assert _FOLDER is not None
    return run_one(spec, _FOLDER)


def _where_sweeper_is(code_root: str) -> str:
    import sweeper

    return str(Path(sweeper.__file__).resolve().parents[1])


def run_version(
    code_root: Path, label: str, specs: Sequence[StudySpec], jobs: int, sink: Any = None
) -> list[dict[str, Any]]:
    """Every study on the code at ``code_root``, in ``jobs`` processes; progress on stderr.

    ``sink``: a text file that gets each record as one JSON line as soon as its study ends.
    """
    shm = Path("/dev/shm")
    records: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="sweeper-claims-", dir=shm if shm.is_dir() else None) as folder:
        context = multiprocessing.get_context("spawn")
        with context.Pool(
            jobs, initializer=_start_worker, initargs=(str(code_root), folder), maxtasksperchild=50
        ) as pool:
            found = pool.apply(_where_sweeper_is, (str(code_root),))
            if Path(found) != code_root.resolve():
                raise RuntimeError(f"version {label}: sweeper was imported from {found}, not {code_root}")
            started = time.monotonic()
            for done, record in enumerate(pool.imap(_task, specs, chunksize=2), start=1):
                record = {"version": label, **record}
                records.append(record)
                if sink is not None:
                    sink.write(json.dumps(record, sort_keys=True) + "\n")
                    sink.flush()
                if done % 25 == 0 or done == len(specs):
                    elapsed = time.monotonic() - started
                    print(f"[{label}] {done}/{len(specs)} studies, {elapsed:.0f} s", file=sys.stderr, flush=True)
    return records


# -- the versions: the working tree, or a commit in a temporary worktree ------------------------


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(REPOSITORY), *args], check=True, capture_output=True, text=True
    ).stdout.strip()


def version_label(version: str) -> str:
    if version == ".":
        head = _git("rev-parse", "--short", "HEAD")
        dirty = _git("status", "--porcelain", "--", "sweeper", "evaluators", "storage", "search_spaces")
        return f"working tree ({head}{' + uncommitted changes' if dirty else ''})"
    return _git("rev-parse", "--short", version)


def run_versions(
    versions: Sequence[str],
    specs: Sequence[StudySpec],
    jobs: int,
    sink: Any = None,
    done: Sequence[Mapping[str, Any]] = (),
) -> list[dict[str, Any]]:
    """Each version's studies, less those in ``done`` (records of an earlier run of the same version)."""
    records: list[dict[str, Any]] = []
    for version in versions:
        label = version_label(version)
        finished = {_key(r) for r in done if r["version"] == label}
        todo = [s for s in specs if (s.setting.name, s.landscape, s.noise, s.index) not in finished]
        if finished:
            print(f"[{label}] {len(specs) - len(todo)} studies done before, {len(todo)} to run", file=sys.stderr)
        if version == ".":
            records += run_version(REPOSITORY, label, todo, jobs, sink)
            continue
        tree = Path(tempfile.mkdtemp(prefix="sweeper-version-")) / "tree"
        _git("worktree", "add", "--detach", str(tree), version)
        try:
            records += run_version(tree, label, todo, jobs, sink)
        finally:
            _git("worktree", "remove", "--force", str(tree))
            tree.parent.rmdir()
    return records


# -- the table ----------------------------------------------------------------------------------


def binomial_interval(hits: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Clopper-Pearson (exact) interval of a share."""
    from scipy.stats import beta

    alpha = 1.0 - confidence
    low = 0.0 if hits == 0 else float(beta.ppf(alpha / 2, hits, n - hits + 1))
    high = 1.0 if hits == n else float(beta.ppf(1 - alpha / 2, hits + 1, n - hits))
    return low, high


@dataclasses.dataclass(frozen=True, kw_only=True)
class Cell:
    """One (version, setting, landscape, noise): how the studies' claims came out."""

    version: str
    setting: str
    landscape: str
    noise: float | None  # None: every noise level pooled
    studies: int
    faster: int  # claimed "faster"
    right: int  # claimed "faster" with the 1.25x configuration
    fast: int  # claimed "faster" with the 1.10x configuration
    wrong: int  # claimed "faster" with a configuration no faster than the base
    median_servers: float
    seconds: float  # the studies' time, summed

    @property
    def faster_interval(self) -> tuple[float, float]:
        return binomial_interval(self.faster, self.studies)


def outcome(record: Mapping[str, Any]) -> str:
    """right (the 1.25x), fast (the 1.10x), wrong (faster claimed, no faster truly) or no-claim."""
    if record["claim"] != "faster":
        return "no-claim"
    if record["claimed"] is not None and record["claimed"] == record["faster"]:
        return "right"
    if record["claimed"] is not None and record["claimed"] == record["fast"]:
        return "fast"
    return "wrong"


def summarize(records: Iterable[Mapping[str, Any]], *, pool_noise: bool = False) -> list[Cell]:
    groups: dict[tuple, list[Mapping[str, Any]]] = {}
    for record in records:
        key = (record["version"], record["setting"], record["landscape"], None if pool_noise else record["noise"])
        groups.setdefault(key, []).append(record)
    cells = []
    for (version, setting, landscape, noise), group in groups.items():
        outcomes = [outcome(r) for r in group]
        cells.append(
            Cell(
                version=version,
                setting=setting,
                landscape=landscape,
                noise=noise,
                studies=len(group),
                faster=sum(r["claim"] == "faster" for r in group),
                right=outcomes.count("right"),
                fast=outcomes.count("fast"),
                wrong=outcomes.count("wrong"),
                median_servers=statistics.median(r["servers"] for r in group),
                seconds=sum(r["seconds"] for r in group),
            )
        )
    return cells


def _share(hits: int, n: int) -> str:
    return f"{hits / n:.1%}" if n else "-"


def _faster_text(cell: Cell) -> str:
    low, high = cell.faster_interval
    return f"{_share(cell.faster, cell.studies)} ({low:.1%}-{high:.1%})"


def table(records: Sequence[Mapping[str, Any]]) -> str:
    """Markdown: a row per setting, landscape, noise and code version (the null studies also pooled)."""
    versions = list(dict.fromkeys(r["version"] for r in records))
    cells = {(c.version, c.setting, c.landscape, c.noise): c for c in summarize(records)}
    cells.update({(c.version, c.setting, c.landscape, None): c for c in summarize(records, pool_noise=True)})
    rows = sorted(
        {(s, landscape, n) for _, s, landscape, n in cells if n is not None or landscape == "null"},
        key=lambda k: (list(SETTINGS).index(k[0]), LANDSCAPES.index(k[1]), k[2] is None, k[2] or 0),
    )
    head = (
        "setting",
        "landscape",
        "server noise (SD)",
        "code",
        "studies",
        "claims faster (95 % interval)",
        "claims the 1.25x",
        "claims the 1.10x",
        "claims a wrong one",
        "median servers",
    )
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for setting, landscape, noise in rows:
        for version in versions:
            cell = cells.get((version, setting, landscape, noise))
            if cell is None:
                continue
            alt = landscape == "alt"
            row = (
                f"{setting} ({SETTINGS[setting].budget} trials)",
                landscape,
                "pooled" if noise is None else f"{noise:.0%}",
                version,
                str(cell.studies),
                _faster_text(cell),
                _share(cell.right, cell.studies) if alt else "-",
                _share(cell.fast, cell.studies) if alt else "-",
                _share(cell.wrong, cell.studies),
                f"{cell.median_servers:g}",
            )
            lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def footnotes(records: Sequence[Mapping[str, Any]]) -> str:
    lines = []
    for version in dict.fromkeys(r["version"] for r in records):
        mine = [r for r in records if r["version"] == version]
        confirm: dict[str, Mapping[str, Any]] = {}
        for r in mine:
            confirm.setdefault(r["setting"], r["confirm"])
        races = "; ".join(
            f"{s}: {c.get('confirm_rounds')} round(s), noise {c.get('noise', c.get('noise_prior'))}"
            for s, c in confirm.items()
        )
        samplers = ", ".join(sorted({r["sampler"] for r in mine}))
        lines.append(
            f"{version}: {len(mine)} studies, sampler {samplers}, {sum(r['seconds'] for r in mine) / 60:.1f} "
            f"study-minutes; races as `sweeper run` sets them ({races})"
        )
        bias = estimate_bias(mine)
        if bias is not None:
            lines.append(
                f'{version}: the stated speedup over the true one, in {bias["claims"]} "faster" claims: '
                f"{bias['ratio']:.3f} (95 % {bias['low']:.3f}-{bias['high']:.3f}); the interval held the truth "
                f"in {bias['covered']}/{bias['claims']}"
            )
    return "\n".join(lines)


def estimate_bias(records: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """How the stated speedup of "faster" claims sits against the truth: the geometric mean of
    stated / true with a t interval, and how many intervals held the truth (None: no such claim)."""
    claims = [r for r in records if r["claim"] == "faster" and r.get("estimate") and r.get("claimed_ratio")]
    if not claims:
        return None
    logs = [math.log(r["estimate"] / r["claimed_ratio"]) for r in claims]
    mean = statistics.fmean(logs)
    half = 0.0
    if len(logs) > 1:
        half = t_quantile(0.975, len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs))
    covered = sum(r["estimate_low"] <= r["claimed_ratio"] <= r["estimate_high"] for r in claims)
    return {
        "claims": len(claims),
        "ratio": math.exp(mean),
        "low": math.exp(mean - half),
        "high": math.exp(mean + half),
        "covered": covered,
    }


def specs_for(
    settings: Sequence[str], null: int, alt: int, sampler: str | None, noises: Sequence[float] = NOISES
) -> list[StudySpec]:
    """The studies, interleaved (index by index over the cells): a run stopped early stays balanced."""
    return [
        StudySpec(setting=SETTINGS[s], landscape=landscape, noise=noise, index=i, sampler=sampler)
        for s in settings
        for i in range(max(null, alt))
        for landscape, count in (("null", null), ("alt", alt))
        if i < count
        for noise in noises
    ]


def read_records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _key(record: Mapping[str, Any]) -> tuple:
    return (record["setting"], record["landscape"], record["noise"], record["index"])


def _stop(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--versions", default=".", help="comma-separated: '.' (the working tree) or commits")
    parser.add_argument("--settings", default="demo,run", help="comma-separated: demo (8 trials), run (20)")
    parser.add_argument("--null", type=int, default=170, help="null studies per setting and noise (default 170)")
    parser.add_argument("--alt", type=int, default=80, help="alt studies per setting and noise (default 80)")
    parser.add_argument("--run-null", type=int, help="null studies per noise for the run setting (default --null)")
    parser.add_argument("--run-alt", type=int, help="alt studies per noise for the run setting (default --alt)")
    parser.add_argument(
        "--noises",
        default=",".join(f"{n:g}" for n in NOISES),
        help="comma-separated between-server SDs (default 0.05,0.1,0.15)",
    )
    parser.add_argument("--sampler", default=None, help="default: the code's default (guided)")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes (default 1)")
    parser.add_argument("--quick", action="store_true", help="4 null and 4 alt studies per cell")
    parser.add_argument("--records", help="write one JSON line per study to this file")
    parser.add_argument(
        "--resume", action="store_true", help="keep the studies already in --records and run only the others"
    )
    parser.add_argument("--from-records", nargs="+", help="print the table from record files; run nothing")
    args = parser.parse_args(argv)
    if args.from_records:
        records = [record for name in args.from_records for record in read_records(Path(name))]
    else:
        settings = [s for s in args.settings.split(",") if s]
        unknown = [s for s in settings if s not in SETTINGS]
        if unknown:
            parser.error(f"--settings: unknown {unknown}; choose from {list(SETTINGS)}")
        noises = [float(n) for n in args.noises.split(",") if n]
        null, alt = (4, 4) if args.quick else (args.null, args.alt)
        specs = specs_for([s for s in settings if s != "run"], null, alt, args.sampler, noises)
        if "run" in settings:
            specs += specs_for(
                ["run"],
                null if args.quick or args.run_null is None else args.run_null,
                alt if args.quick or args.run_alt is None else args.run_alt,
                args.sampler,
                noises,
            )
        started = time.monotonic()
        versions = [v for v in args.versions.split(",") if v]
        done = []
        if args.resume and args.records and Path(args.records).is_file():
            done = read_records(Path(args.records))
        records = list(done)
        previous = signal.signal(signal.SIGTERM, _stop)  # as Ctrl-C: the worktree removed, the table printed
        try:
            with contextlib.ExitStack() as stack:
                sink = None
                if args.records:
                    sink = stack.enter_context(open(args.records, "a" if done else "w", encoding="utf-8"))
                records += run_versions(versions, specs, max(1, args.jobs), sink, done)
        except KeyboardInterrupt:
            print("stopped: the table of the studies finished so far (all in --records)", file=sys.stderr)
            if args.records:
                records = read_records(Path(args.records))
        finally:
            signal.signal(signal.SIGTERM, previous)
        print(f"{time.monotonic() - started:.0f} s in all ({max(1, args.jobs)} worker processes)", file=sys.stderr)
    print(table(records))
    print()
    print(footnotes(records))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    raise SystemExit(main())
