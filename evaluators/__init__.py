"""Measuring a running OpenAI-compatible server, the data sets it is measured on, and
the statistics every figure is judged by.

Three things live here: the measurements (HTTP only, below), the data sets
they read (load, check, split, build), and the statistics home: the
intervals of a TPS figure, the spreads and the prior they lean on, Student's
t, the screen floor (``intervals``) and the uncertainty of a PPL on records
not seen (``ppl_uncertainty``). Each measurement takes a ``base_url``, the
served model name, its data and a frozen settings dataclass, and returns a
frozen result with ``to_dict()``. Progress goes to an optional
``progress(phase, done, total)`` callback. Nothing here knows about Optuna,
manifests or how the server was started.

Data (load, check, split, build)::

    load_prompts(source) -> PromptSet              ShareGPT / {prompt} records
    load_ppl_records(source) -> PplRecordSet       the challenge's two PPL shapes
    check_prompt_lengths(...), check_ppl_records(...)   DataError before server time
    PromptSet.split(...), PplRecordSet.split(...)  seeded tuning / held-out split
    build_ppl_reference(base_url, model, prompts)  a PPL set from a reference server

Measurements::

    run_warmup(base_url, model, WarmupSettings())        -> WarmupResult
    measure_ppl(base_url, model, records, PplSettings()) -> PplResult
    measure_tps(base_url, model, prompts, TpsSettings()) -> TpsResult
    measure_fidelity(base_url, model, reference)         -> FidelityResult
    RunningPpl: the running PPL estimate with a standard error (early stopping)
    PplEstimate, pass_probability(ppl, stderr_log_ppl, records, cap, new_records):
        PPL on records not seen, the chance a re-run on new records passes
    served_models(base_url) -> {name: max_model_len}

Statistics (no HTTP)::

    Interval, tps_interval, request_interval, repeat_interval   one configuration's TPS
    speedup_interval, paired_speedup_interval, ratio_interval,
        paired_ratio_interval                     one configuration against another
    Spread, pooled_spread, blocked_spread, nested_spread, NestedSpread
                                                  the spread of repeats, within and between
    PRIOR_SPREAD, prior_fit -> PriorCheck (PriorFit)   the prior spread, checked
    screen_floor, t_quantile, t_cdf, DEFAULT_CONFIDENCE
    PairedPpl, paired_log_ppl, record_stderr, predictive_sd,
        bootstrap_pass_probability                PPL's uncertainty from its records
"""

from __future__ import annotations

from evaluators._common import ProgressCallback, served_models
from evaluators.fidelity import (
    Divergence,
    FidelityReference,
    FidelityResult,
    ReferenceEntry,
    first_divergence,
    generate_reference,
    measure_fidelity,
)
from evaluators.intervals import (
    DEFAULT_CONFIDENCE,
    PRIOR_SPREAD,
    Interval,
    NestedSpread,
    PriorCheck,
    PriorFit,
    Spread,
    blocked_spread,
    nested_spread,
    paired_ratio_interval,
    paired_speedup_interval,
    pooled_spread,
    prior_fit,
    ratio_interval,
    repeat_interval,
    request_interval,
    screen_floor,
    speedup_interval,
    t_cdf,
    t_quantile,
    tps_interval,
)
from evaluators.ppl import (
    EarlyStopRule,
    PplResult,
    PplSettings,
    RecordScore,
    RunningPpl,
    measure_ppl,
    ppl_from_nll,
    ppl_gate,
    score_record,
)
from evaluators.ppl_records import PplRecord, PplRecordSet, check_ppl_records, load_ppl_records
from evaluators.ppl_reference import build_ppl_reference
from evaluators.ppl_uncertainty import (
    PairedPpl,
    PplEstimate,
    bootstrap_pass_probability,
    paired_log_ppl,
    pass_probability,
    predictive_sd,
    record_stderr,
)
from evaluators.prompts import Prompt, PromptSet, check_prompt_lengths, load_prompts
from evaluators.spec_metrics import (
    SpecDecodeCounters,
    SpecDecodeStats,
    scrape_spec_decode,
    spec_decode_delta,
)
from evaluators.tps import RequestRecord, TpsResult, TpsSettings, measure_tps
from evaluators.warmup import WarmupResult, WarmupSettings, run_warmup, synthetic_prompts

__all__ = [
    "PplEstimate",
    "bootstrap_pass_probability",
    "pass_probability",
    "predictive_sd",
    "record_stderr",
    "PairedPpl",
    "paired_log_ppl",
    "Interval",
    "NestedSpread",
    "PriorCheck",
    "PriorFit",
    "prior_fit",
    "nested_spread",
    "Spread",
    "pooled_spread",
    "speedup_interval",
    "tps_interval",
    "blocked_spread",
    "paired_speedup_interval",
    "paired_ratio_interval",
    "ratio_interval",
    "screen_floor",
    "t_quantile",
    "t_cdf",
    "DEFAULT_CONFIDENCE",
    "PRIOR_SPREAD",
    "repeat_interval",
    "request_interval",
    "EarlyStopRule",
    "Divergence",
    "FidelityReference",
    "FidelityResult",
    "PplRecord",
    "PplRecordSet",
    "PplResult",
    "PplSettings",
    "ProgressCallback",
    "Prompt",
    "PromptSet",
    "RecordScore",
    "ReferenceEntry",
    "RequestRecord",
    "RunningPpl",
    "SpecDecodeCounters",
    "SpecDecodeStats",
    "TpsResult",
    "TpsSettings",
    "WarmupResult",
    "WarmupSettings",
    "build_ppl_reference",
    "check_ppl_records",
    "check_prompt_lengths",
    "first_divergence",
    "generate_reference",
    "load_ppl_records",
    "load_prompts",
    "measure_fidelity",
    "measure_ppl",
    "measure_tps",
    "ppl_from_nll",
    "ppl_gate",
    "run_warmup",
    "score_record",
    "scrape_spec_decode",
    "served_models",
    "spec_decode_delta",
    "synthetic_prompts",
]
