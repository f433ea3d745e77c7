"""Policy tuning with Optuna: search a space of scenario keys, then confirm on fresh seeds.

**Space.**  A ``[tune]`` table (in the scenario file, or its own file given with
``--space``) maps a scenario key to a range::

    [tune]
    "live.timeouts.turn_response_s" = { low = 0.5, high = 5.0 }          # float
    "live.backoff.base_s" = { low = 0.01, high = 1.0, log = true }      # log scale
    "live.retry.max_attempts" = { low = 1, high = 6 }                   # integers
    "live.backoff.strategy" = { choices = ["full_jitter", "decorrelated_jitter"] }
    budget = { options = { none = {}, grpc = { "live.budget.token_bucket.enabled" = true } } }

A ``choices`` list may hold numbers or strings; ``options`` names sets of overrides (the
key is then only a label), which is how a budget *type* with its parameters is chosen.
Every key, and both ends of every range, is validated against the scenario before
anything runs.  :data:`DEFAULT_SPACE_TOML` — the Live layer's knobs only (timeouts,
backoff, attempt limits, CancelTask on timeout, budget type): what a Live-layer team
ships — is used when no space is given; server knobs (``reasoner.*``) only when a space
names them.

**Search.**  ``optuna`` TPE (``TPESampler``; constraints set per trial with
``set_constraint``), multi-objective when several objectives are given.  Trials are
asked in batches, each batch evaluated as the points of :func:`rtalab.sim.sweep.run_points` on
the given executor (local processes or Dask), and told back; each trial stores its
metrics and constraint values as user attributes (constraint ``> 0`` = violated, using
the mean over replications).  The study lives in ``<out_dir>/study.db`` (SQLite):
rerunning into the same folder resumes it, and ``optuna-dashboard sqlite:///study.db``
or ``optuna.load_study`` inspects it.

**Confirmation.**  The best feasible trials (Pareto front, best first by the first
objective, at most ``top`` of them) and the scenario's current settings are re-run on a
fresh root seed with ``confirm_replications`` replications, every candidate with the
*same* seeds as the current settings (common random numbers).  Each candidate is
compared with today's settings replication by replication (paired:
:func:`rtalab.sim.shared.stats.paired`), on every objective and on ``success_rate``; the p-values of
all candidate × objective comparisons are corrected together (Holm).  A candidate is
*recommended* when every constraint holds with confidence (the CI end on the
unfavourable side meets the target), it is significantly better on at least one
objective and significantly worse on none, its success rate is not significantly
lower, and no other such candidate is better on every objective.  Otherwise the answer
is "keep the current settings", with the comparisons as evidence.

**Indistinguishable range.**  For each knob, the range of values (numbers) or the set
of values (choices) over the feasible trials whose first objective is statistically
indistinguishable from the best trial's (Welch, 95 %, over their replications; a trial
with a not-served ``inf`` where the best has none is distinguishable).  Any value in the
range is as good as the best one as far as the study can tell, so studies with other
sampler seeds give overlapping ranges.
"""

from __future__ import annotations

import hashlib
import json
import math
import numbers
import tomllib
from collections.abc import Mapping, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeGuard

import pandas as pd

from rtalab.sim.answers.figure import new_figure, save_figure
from rtalab.sim.answers.slo import Slo, SloError, metric_value, resolve_metric
from rtalab.sim.config import ConfigError
from rtalab.sim.scenario import Scenario, resolve_path
from rtalab.sim.shared.progress import progress_bar, should_show
from rtalab.sim.shared.stats import holm, paired, welch
from rtalab.sim.shared.summary import INF_PREFIXES
from rtalab.sim.sweep import run_points

SUCCESS = "success_rate"
ALPHA = 0.05

FRESH_SEED_OFFSET = 1_000_003  # confirmation runs use root seed + this (disjoint seeds)


class SpaceError(ValueError):
    """A malformed search space (one line, for the CLI)."""


@dataclass(frozen=True)
class Param:
    """One dimension of the search space."""

    key: str
    kind: Literal["float", "int", "choice", "options"]
    low: float = 0.0
    high: float = 0.0
    log: bool = False
    choices: tuple[Any, ...] = ()
    options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def suggest(self, trial: Any) -> Any:
        """Draw this parameter's value from an Optuna trial."""
        if self.kind == "float":
            return trial.suggest_float(self.key, self.low, self.high, log=self.log)
        if self.kind == "int":
            return trial.suggest_int(self.key, int(self.low), int(self.high), log=self.log)
        if self.kind == "choice":
            return trial.suggest_categorical(self.key, list(self.choices))
        return trial.suggest_categorical(self.key, list(self.options))

    def overrides(self, value: Any) -> dict[str, Any]:
        """Scenario overrides for one value of this parameter."""
        return dict(self.options[value]) if self.kind == "options" else {self.key: value}

    def extremes(self) -> list[Any]:
        """Values that together exercise every key and bound (for validation)."""
        if self.kind == "int":
            return [int(self.low), int(self.high)]
        if self.kind == "float":
            return [self.low, self.high]
        return list(self.choices) if self.kind == "choice" else list(self.options)


Space = dict[str, Param]

DEFAULT_SPACE_TOML = """
"live.timeouts.turn_response_s" = { low = 0.5, high = 5.0 }
"live.timeouts.turn_total_s" = { choices = [5.0, 10.0, 20.0, 40.0] }
"live.backoff.strategy" = { choices = ["exponential", "full_jitter", "equal_jitter",
                                       "decorrelated_jitter"] }
"live.backoff.base_s" = { low = 0.01, high = 1.0, log = true }
"live.backoff.cap_s" = { low = 1.0, high = 10.0 }
"live.retry.max_attempts" = { low = 1, high = 6 }
"live.retry.max_attempts_by_code.internal" = { low = 1, high = 4 }
"live.retry.max_attempts_by_code.rate-limited" = { low = 1, high = 4 }
"live.cancel_on_timeout" = { choices = [false, true] }

[budget.options]
none = {}
grpc_throttling = { "live.budget.token_bucket.enabled" = true }
finagle = { "live.budget.finagle.enabled" = true }
adaptive = { "live.budget.adaptive.enabled" = true }
breaker = { "live.budget.circuit_breaker.enabled" = true }
aws_quota = { "live.budget.aws_quota.enabled" = true }
envoy = { "live.budget.envoy.enabled" = true }
call_bucket = { "live.budget.call_bucket.enabled" = true }
retry_breaker = { "live.budget.retry_breaker.enabled" = true }
"""


def parse_space(data: Mapping[str, Any]) -> Space:
    """Parse a ``[tune]`` table into a :data:`Space` (raises :class:`SpaceError`)."""
    space: Space = {}
    for key, spec in data.items():
        if not isinstance(spec, Mapping):
            raise SpaceError(f"tune.{key}: expected a table like {{ low = 1, high = 5 }}, "
                             f"{{ choices = [...] }} or {{ options = {{...}} }}")
        extra = set(spec) - {"low", "high", "log", "choices", "options"}
        if extra:
            raise SpaceError(f"tune.{key}: unknown field {sorted(extra)[0]!r}")
        if "options" in spec:
            opts = spec["options"]
            if not isinstance(opts, Mapping) or not opts or \
                    not all(isinstance(v, Mapping) for v in opts.values()):
                raise SpaceError(f"tune.{key}.options: expected named tables of overrides")
            space[key] = Param(key, "options", options={k: dict(v) for k, v in opts.items()})
        elif "choices" in spec:
            ch = spec["choices"]
            if not isinstance(ch, list) or not ch or \
                    not all(isinstance(c, bool | int | float | str) for c in ch):
                raise SpaceError(f"tune.{key}.choices: expected a non-empty list of numbers "
                                 "or strings")
            space[key] = Param(key, "choice", choices=tuple(ch))
        elif "low" in spec and "high" in spec:
            lo, hi = spec["low"], spec["high"]
            if any(isinstance(v, bool) or not isinstance(v, int | float) for v in (lo, hi)):
                raise SpaceError(f"tune.{key}: low and high must be numbers")
            if not lo < hi:
                raise SpaceError(f"tune.{key}: need low < high, got {lo} and {hi}")
            log = bool(spec.get("log", False))
            if log and lo <= 0:
                raise SpaceError(f"tune.{key}: a log range needs low > 0")
            kind: Literal["int", "float"] = (
                "int" if isinstance(lo, int) and isinstance(hi, int) else "float")
            space[key] = Param(key, kind, float(lo), float(hi), log)
        else:
            raise SpaceError(f"tune.{key}: give low and high, choices, or options")
    if not space:
        raise SpaceError("the search space is empty")
    return space


def read_space(path: str | Path) -> Space:
    """The ``[tune]`` table of a TOML file (or the whole file when it has no ``[tune]``)."""
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as e:
        raise SpaceError(f"cannot read {path}: {e}") from None
    except tomllib.TOMLDecodeError as e:
        raise SpaceError(f"{path}: not valid TOML: {e}") from None
    return parse_space(data.get("tune", data))


def scenario_space(ref: str | Path) -> Space | None:
    """The ``[tune]`` section of a scenario file or preset, if it has one."""
    data = tomllib.loads(resolve_path(ref).read_text(encoding="utf-8"))
    return parse_space(data["tune"]) if "tune" in data else None


def validate_space(scenario: Scenario, space: Space, *, skip_unknown: bool = False,
                   ) -> tuple[Space, dict[str, str]]:
    """Check every key and range end against ``scenario``; return (usable space, skipped).

    A :class:`ConfigError` (bad key or value) is raised, unless ``skip_unknown`` and the
    problem is a key this build does not have (then the parameter is skipped, with why).
    """
    usable, skipped = {}, {}
    for name, p in space.items():
        try:
            for v in p.extremes():
                scenario.with_overrides(p.overrides(v))
        except ConfigError as e:
            if skip_unknown and "unknown key" in e.problem:
                skipped[name] = f"not in this build ({e.key}: unknown key)"
                continue
            raise ConfigError(e.key, f"{e.problem} (tune space {name!r})") from None
        usable[name] = p
    if not usable:
        raise SpaceError("no parameter of the search space applies to this scenario")
    return usable, skipped


def default_space(scenario: Scenario) -> tuple[Space, dict[str, str]]:
    """:data:`DEFAULT_SPACE_TOML` less the keys this build does not have."""
    return validate_space(scenario, parse_space(tomllib.loads(DEFAULT_SPACE_TOML)),
                          skip_unknown=True)


# --------------------------------------------------------------------------- objectives


@dataclass(frozen=True)
class Objective:
    """A metric to minimise or maximise."""

    metric: str
    direction: Literal["minimize", "maximize"] = "minimize"

    def __str__(self) -> str:
        return f"{self.direction} {self.metric}"


def objective(name: str, direction: str = "minimize") -> Objective:
    """An :class:`Objective` for metric ``name`` (aliases of D5 allowed)."""
    if direction not in ("minimize", "maximize"):
        raise SloError(f"direction must be minimize or maximize, got {direction!r}")
    return Objective(resolve_metric(name), direction)  # type: ignore[arg-type]  # direction checked against both just above


def trial_overrides(space: Space, params: Mapping[str, Any]) -> dict[str, Any]:
    """Scenario overrides of a trial's parameter values."""
    out: dict[str, Any] = {}
    for name, value in params.items():
        out.update(space[name].overrides(value))
    return out


# --------------------------------------------------------------------------- the study


@dataclass
class TuneResult:
    """What :func:`tune` found: the study, the confirmation runs and the recommendation."""

    study_path: Path
    objectives: tuple[Objective, ...]
    constraints: tuple[Slo, ...]
    space: Space
    trials: pd.DataFrame  # one row per finished trial: params, metrics, feasible
    candidates: pd.DataFrame  # confirmation: one row per candidate (+ "current")
    recommended: list[dict[str, Any]]  # params of the recommended candidates
    evaluations: int = 0  # trials evaluated by this call (not resumed ones)
    skipped: dict[str, str] = field(default_factory=dict)
    # knob -> (low, high) or tuple of values indistinguishable from the best trial
    ranges: dict[str, Any] = field(default_factory=dict)

    def sentence(self) -> str:
        """A paste-able summary of the recommendation against today's settings."""
        c = self.candidates
        cur = c[c["candidate"] == "current"].iloc[0]
        if not self.recommended:
            others = c[c["candidate"] != "current"]
            evidence = []
            if len(others):
                best = others.iloc[0]
                for o in self.objectives:
                    m = o.metric
                    evidence.append(f"{best['candidate']}: {m} {_g(best[m])} vs "
                                    f"{_g(cur[m])} today, paired difference "
                                    f"{_g(best[m + '.change'])} [{_g(best[m + '.diff_ci_low'])}, "
                                    f"{_g(best[m + '.diff_ci_high'])}], p = "
                                    f"{_g(best[m + '.p'])}")
            why = ("; ".join(evidence) + " (p before the Holm correction over all "
                   "candidates)") if evidence else "no feasible trial"
            return ("Keep the current settings: no candidate beat them significantly on "
                    f"fresh seeds without lowering success or breaking a constraint. {why}.")
        best = c[c["recommended"]].iloc[0]
        parts = []
        for o in self.objectives:
            m = o.metric
            parts.append(f"{m} {_g(best[m])} vs {_g(cur[m])} today (paired difference "
                         f"{_g(best[m + '.change'])} [{_g(best[m + '.diff_ci_low'])}, "
                         f"{_g(best[m + '.diff_ci_high'])}], p = {_g(best[m + '.p'])})")
        parts.append(f"success_rate {_g(best[SUCCESS])} vs {_g(cur[SUCCESS])} today")
        settings = ", ".join(f"{k} = {v:.4g}" if isinstance(v, float) else f"{k} = {v}"
                             for k, v in self.recommended[0].items())
        cons = " and ".join(str(s) for s in self.constraints) or "no constraint"
        return (f"Recommended: {settings}; {'; '.join(parts)} (fresh seeds, paired, "
                f"Holm-corrected; {cons} holds with 95 % confidence).")

    def range_lines(self) -> list[str]:
        """One line per knob: the values statistically indistinguishable from the best."""
        out = []
        for k, r in self.ranges.items():
            if isinstance(r, list):
                out.append(f"{k}: any of {', '.join(str(v) for v in r)}")
            else:
                out.append(f"{k}: {_g(r[0])} to {_g(r[1])}")
        return out


def _g(v: Any) -> str:
    """A number for a sentence (4 significant digits; inf, n/a)."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "n/a"
    if isinstance(v, float) and math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return f"{v:.4g}" if isinstance(v, float | int) and not isinstance(v, bool) else str(v)


def metric_or_inf(summary: dict[str, Any], name: str) -> float | None:
    """:func:`metric_value`, except that a caller-perceived percentile that is undefined
    (``inf`` written as ``null`` in summary.json) reads as ``inf``."""
    v = metric_value(summary, name)
    if v is None and name.startswith(INF_PREFIXES):
        m = summary["metrics"].get(name) or {}
        mean = m.get("mean")
        return math.inf if mean is None or math.isinf(mean) else float(mean)
    return v


def replication_values(summary: dict[str, Any], name: str) -> list[float | None]:
    """Per-replication values of ``name`` (``null`` of a caller-perceived percentile = inf)."""
    vals = (summary["metrics"].get(name) or {}).get("values") or []
    inf_ok = name.startswith(INF_PREFIXES)
    return [math.inf if v is None and inf_ok else v for v in vals]


def _sampler(seed: int, startup: int) -> Any:
    """TPE seeded per batch (``seed`` = root seed + trials so far), so a resumed study asks
    exactly what an uninterrupted one would; constraints come from ``set_constraint``."""
    # lazy: +917 ms (optuna, redis, opentelemetry) off importing tune
    import optuna

    return optuna.samplers.TPESampler(seed=seed, n_startup_trials=startup, multivariate=True)


def _study(path: Path, name: str, objectives: Sequence[Objective]) -> Any:
    # lazy: +671 ms (optuna, redis, opentelemetry) off importing tune
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna.create_study(
        study_name=name, storage=f"sqlite:///{path}", load_if_exists=True,
        directions=[o.direction for o in objectives])


def tune(scenario: Scenario, out_dir: Path, *, objectives: Sequence[Objective],
         constraints: Sequence[Slo] = (), space: Space, trials: int = 30,
         replications: int = 2, root_seed: int | None = None,
         executor: Executor | None = None, batch: int = 2, top: int = 3,
         confirm_replications: int | None = None, startup_trials: int | None = None,
         progress: bool = False) -> TuneResult:
    """Search ``space`` for ``objectives`` under ``constraints``; confirm on fresh seeds.

    ``trials`` is the study's total (a resumed study runs only the missing ones);
    ``batch`` trials are asked at a time and evaluated together on ``executor``.
    """
    # lazy: +509 ms (optuna, redis, opentelemetry) off importing tune
    from optuna.trial import TrialState

    if not objectives:
        raise SloError("give at least one objective (--minimize METRIC)")
    if trials < 1 or batch < 1:
        raise ValueError("trials and batch must be >= 1")
    space, skipped = validate_space(scenario, space)
    root_seed = scenario.run.seed if root_seed is None else root_seed
    confirm_reps = confirm_replications or max(2 * replications, 3)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    study_path = out_dir / "study.db"
    startup = max(2, trials // 3) if startup_trials is None else startup_trials
    study = _study(study_path, f"tune-{scenario.name}", objectives)
    metrics = [o.metric for o in objectives] + [s.metric for s in constraints]

    done = [t for t in study.trials if t.state in (TrialState.COMPLETE, TrialState.FAIL)]
    evaluations = 0

    with progress_bar(f"tune {scenario.name}: {trials} trials",
                      enabled=progress and should_show(False)) as bar:
        while len(done) + evaluations < trials:
            k = min(batch, trials - len(done) - evaluations)
            study.sampler = _sampler(root_seed + len(done) + evaluations, startup)
            asked = [study.ask() for _ in range(k)]
            params = [{name: p.suggest(t) for name, p in space.items()} for t in asked]
            points = [trial_overrides(space, pv) for pv in params]
            summaries = run_points(scenario, points, replications=replications,
                                   root_seed=root_seed, executor=executor, progress=False,
                                   plots=False)
            for t, summary in zip(asked, summaries, strict=True):
                values = {m: metric_or_inf(summary, m) for m in metrics}
                for m, v in values.items():
                    t.set_user_attr(m, v)
                for o in objectives:
                    t.set_user_attr("values." + o.metric,
                                    replication_values(summary, o.metric))
                violations = [s.violation(values[s.metric]) for s in constraints]
                t.set_user_attr("constraints", violations)
                for s, v in zip(constraints, violations, strict=True):
                    t.set_constraint(str(s), min(v, 1e300))
                obj = [values[o.metric] for o in objectives]
                if any(v is None for v in obj):
                    study.tell(t, state=TrialState.FAIL)
                else:
                    study.tell(t, obj)
            evaluations += k
            bar((len(done) + evaluations) / trials)

    trials_df = _trials_frame(study, space, metrics, constraints)
    ok = [t for t in study.trials if t.state == TrialState.COMPLETE
          and all(c <= 0 for c in t.user_attrs.get("constraints", []))]
    front = {t.number for t in study.best_trials} if len(objectives) > 1 else set()
    # several objectives: the feasible Pareto front (all feasible trials if none is on it);
    # one objective: the best feasible trials
    feasible = [t for t in ok if t.number in front] or ok
    sign = 1 if objectives[0].direction == "minimize" else -1
    feasible = sorted(feasible, key=lambda t: (sign * t.values[0], t.number))[:top]
    cand_params = [dict(t.params) for t in feasible]
    names = [f"trial {t.number}" for t in feasible]
    candidates = _confirm(scenario, out_dir, space, cand_params, names, objectives,
                          constraints, confirm_reps, root_seed + FRESH_SEED_OFFSET, executor)
    rec = [cand_params[names.index(n)] for n in candidates.loc[candidates["recommended"],
                                                               "candidate"]]
    ranges = indistinguishable_ranges(ok, space, objectives[0])
    return TuneResult(study_path, tuple(objectives), tuple(constraints), space, trials_df,
                      candidates, rec, evaluations, skipped, ranges)


def _same_as_best(best: Sequence[float], other: Sequence[float], minimize: bool) -> bool:
    """Is ``other`` statistically indistinguishable from ``best`` (replication values)?"""
    b_inf = any(math.isinf(v) for v in best if v is not None)
    o_inf = any(math.isinf(v) for v in other if v is not None)
    if b_inf or o_inf:
        return b_inf == o_inf if minimize else True
    d = welch(best, other)
    return d is None or d.p_value >= ALPHA


def indistinguishable_ranges(trials: Sequence[Any], space: Space,
                             obj: Objective) -> dict[str, Any]:
    """Per knob, the values of the feasible ``trials`` indistinguishable from the best on
    ``obj``: (low, high) for numbers, a sorted list for choices/options."""
    if not trials:
        return {}
    sign = 1 if obj.direction == "minimize" else -1
    best = min(trials, key=lambda t: (sign * t.values[0], t.number))
    key = "values." + obj.metric
    bvals = best.user_attrs.get(key) or [best.values[0]]
    same = [t for t in trials
            if t.number == best.number or _same_as_best(
                bvals, t.user_attrs.get(key) or [t.values[0]], sign == 1)]
    out: dict[str, Any] = {}
    for name, p in space.items():
        vals = [t.params[name] for t in same if name in t.params]
        if not vals:
            continue
        if p.kind in ("float", "int"):
            out[name] = (min(vals), max(vals))
        else:
            try:
                out[name] = sorted(set(vals))
            except TypeError:  # mixed kinds
                out[name] = sorted(set(vals), key=str)
    return out


def _trials_frame(study: Any, space: Space, metrics: Sequence[str],
                  constraints: Sequence[Slo]) -> pd.DataFrame:
    # lazy: +729 ms (optuna, redis, opentelemetry) off importing tune
    from optuna.trial import TrialState

    rows = []
    for t in study.trials:
        if t.state not in (TrialState.COMPLETE, TrialState.FAIL):
            continue
        row: dict[str, Any] = {"trial": t.number, "state": t.state.name}
        row.update({f"param.{k}": v for k, v in t.params.items()})
        row.update({m: t.user_attrs.get(m) for m in metrics})
        row["feasible"] = all(c <= 0 for c in t.user_attrs.get("constraints", [math.inf]
                                                                if constraints else []))
        rows.append(row)
    return pd.DataFrame(rows)


def success_lower(change: float | None, p: float | None) -> bool:
    """The success guard: a candidate whose success rate is lower than the current
    settings' (paired difference candidate − current < 0) with p < :data:`ALPHA`."""
    return bool(change is not None and p is not None and change < 0 and p < ALPHA)


def judge(tests: Sequence[tuple[int, str, float, float | None]], rows: int,
          objectives: Sequence[Objective]) -> tuple[list[bool], list[bool]]:
    """(significantly better, significantly worse) per candidate row from its paired tests
    ``(row, metric, p, change)`` (change = candidate − current), Holm's correction over all
    candidates' objectives at once: better = a significant change in the objective's
    direction (down for minimize, up for maximize), worse = one against it."""
    better, worse = [False] * rows, [False] * rows
    rejected = holm([p for _, _, p, _ in tests], ALPHA) if tests else []
    for (i, m, _, diff), sig in zip(tests, rejected, strict=True):
        if not sig or diff is None:
            continue
        o = next(o for o in objectives if o.metric == m)
        good = diff < 0 if o.direction == "minimize" else diff > 0
        better[i] = better[i] or good
        worse[i] = worse[i] or not good
    return better, worse


def _confirm(scenario: Scenario, out_dir: Path, space: Space, params: list[dict[str, Any]],
             names: list[str], objectives: Sequence[Objective], constraints: Sequence[Slo],
             replications: int, seed: int, executor: Executor | None) -> pd.DataFrame:
    """Re-run the candidates and the current settings on fresh seeds; one row each."""
    points = [trial_overrides(space, p) for p in params] + [{}]
    labels = [*names, "current"]
    summaries = run_points(scenario, points, replications=replications, root_seed=seed,
                           executor=executor, progress=False,
                           out_dir=out_dir / "confirm" / _sha8([points, replications, seed,
                                                                "common-seeds"]),
                           plots=False, common_seeds=True)
    cur_summary = summaries[-1]
    rows = []
    p_values: list[float] = []
    where: list[tuple[int, str]] = []
    for i, (label, pv, summary) in enumerate(zip(labels, [*params, {}], summaries,
                                                 strict=True)):
        row: dict[str, Any] = {"candidate": label}
        row.update({f"param.{k}": v for k, v in pv.items()})
        for m in dict.fromkeys([o.metric for o in objectives] + [SUCCESS]
                               + [s.metric for s in constraints]):
            mm = summary["metrics"].get(m) or {}
            row[m] = metric_or_inf(summary, m)
            row[f"{m}.ci_low"], row[f"{m}.ci_high"] = mm.get("ci_low"), mm.get("ci_high")
        for m in dict.fromkeys([o.metric for o in objectives] + [SUCCESS]):
            d = paired(replication_values(cur_summary, m), replication_values(summary, m))
            row[f"{m}.change"] = None if d is None else d.diff
            row[f"{m}.diff_ci_low"] = None if d is None else d.ci_low
            row[f"{m}.diff_ci_high"] = None if d is None else d.ci_high
            if label == "current":  # no comparison with itself
                d = None
                row[f"{m}.change"] = row[f"{m}.diff_ci_low"] = row[f"{m}.diff_ci_high"] = None
            row[f"{m}.p"] = None if d is None else d.p_value
            if label != "current" and m != SUCCESS:
                p_values.append(1.0 if d is None else d.p_value)
                where.append((i, m))
        row["success_lower"] = success_lower(row[f"{SUCCESS}.change"], row[f"{SUCCESS}.p"])
        row["constraints_hold"] = all(s.holds(summary) for s in constraints)
        rows.append(row)
    df = pd.DataFrame(rows)
    better, worse = judge([(i, m, p, df.iloc[i][f"{m}.change"])
                           for (i, m), p in zip(where, p_values, strict=True)], len(df), objectives)
    df["significantly_better"] = better
    df["significantly_worse"] = worse
    eligible = (df["constraints_hold"] & df["significantly_better"] & ~df["significantly_worse"]
                & ~df["success_lower"] & (df["candidate"] != "current"))
    df["recommended"] = _non_dominated(df.assign(constraints_hold=eligible), objectives) \
        & eligible
    return df


def _sha8(data: Any) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:8]


def _non_dominated(df: pd.DataFrame, objectives: Sequence[Objective]) -> pd.Series:
    """Rows (among those whose constraints hold) that no other such row beats on every
    objective (ties: the first row wins)."""
    ok = df["constraints_hold"].to_numpy()
    signs = [1 if o.direction == "minimize" else -1 for o in objectives]
    # an unmeasured objective (None, NaN in a frame) is the worst value: +inf once signed
    vals = [[s * v if (v := df.iloc[i][o.metric]) is not None and not pd.isna(v)
             else math.inf for s, o in zip(signs, objectives, strict=True)]
            for i in range(len(df))]
    out = []
    for i in range(len(df)):
        if not ok[i]:
            out.append(False)
            continue
        dominated = any(ok[j] and j != i and all(a <= b for a, b in zip(vals[j], vals[i],
                                                                         strict=True))
                        and (any(a < b for a, b in zip(vals[j], vals[i], strict=True)) or j < i)
                        for j in range(len(df)))
        out.append(not dominated)
    return pd.Series(out, index=df.index)



def _finite(v: object) -> TypeGuard[float]:
    """A drawable number (not None, NaN or infinite)."""
    return isinstance(v, numbers.Real) and math.isfinite(v)


def _err_bar(row: pd.Series, metric: str, value: float) -> list[list[float]] | None:
    """Matplotlib's asymmetric error bar of ``metric`` around ``value``; None when its CI is
    undefined (a replication's percentile was infinite: the CI is null in the summary)."""
    lo, hi = row.get(metric + ".ci_low"), row.get(metric + ".ci_high")
    if not (_finite(lo) and _finite(hi)):
        return None
    return [[value - lo], [hi - value]]

def plot_pareto(result: TuneResult, path: Path) -> Path:
    """Two objectives: trials in objective space (feasible / infeasible), the Pareto front,
    and the confirmed candidates and today's settings with their 95 % CIs.  One
    objective: a convergence plot — each trial's value against its number and the best
    feasible value so far (step line), with the confirmed points at the right.  PNG at
    ``path``."""
    df = result.trials[result.trials["state"] == "COMPLETE"]
    objs = [o.metric for o in result.objectives]
    two = len(objs) >= 2
    fig = new_figure(6, 4.2)
    ax = fig.subplots()
    x = df[objs[0]] if two else df["trial"]
    y = df[objs[1]] if two else df[objs[0]]
    feas = df["feasible"].to_numpy(dtype=bool)
    ax.scatter(x[~feas], y[~feas], marker="x", color="0.6", s=18, label="trial (infeasible)")
    ax.scatter(x[feas], y[feas], marker="o", color="tab:blue", s=18, alpha=0.7,
               label="trial (feasible)")
    if two and feas.any():
        f = df[feas].sort_values(objs[0])
        signs = [1 if o.direction == "minimize" else -1 for o in result.objectives[:2]]
        front, best = [], math.inf
        for _, r in f.iterrows():
            if signs[1] * r[objs[1]] < best:
                best = signs[1] * r[objs[1]]
                front.append(r)
        ax.step([r[objs[0]] for r in front], [r[objs[1]] for r in front], where="post",
                color="tab:blue", lw=1, label="Pareto front")
    if not two and feas.any():
        sign = 1 if result.objectives[0].direction == "minimize" else -1
        best, xs, ys = math.inf, [], []
        for t, v, ok in zip(df["trial"], df[objs[0]], feas, strict=True):
            if ok and v is not None and math.isfinite(v) and sign * v < best:
                best = sign * v
            if math.isfinite(best):
                xs.append(t)
                ys.append(sign * best)
        ax.step(xs, ys, where="post", color="tab:blue", lw=1.2,
                label="best feasible so far")
        ax.set_title(f"convergence: {objs[0]} ({result.objectives[0].direction})", fontsize=9)
    c = result.candidates
    for _, r in c.iterrows():
        color = "tab:green" if r["recommended"] else "tab:red" if r["candidate"] == "current" \
            else "tab:orange"
        xv = r[objs[0]] if two else (df["trial"].max() + 1 if len(df) else 0)
        yv = r[objs[1] if two else objs[0]]
        if not all(_finite(v) for v in (xv, yv)):
            continue  # not served (an infinite percentile) or undefined: nothing to draw
        xerr = _err_bar(r, objs[0], xv) if two else None
        yerr = _err_bar(r, objs[1] if two else objs[0], yv)
        ax.errorbar([xv], [yv], xerr=xerr, yerr=yerr, fmt="s", color=color, ms=6, capsize=3,
                    label=f"{r['candidate']} (fresh seeds)")
    ax.set_xlabel(objs[0] if two else "trial")
    ax.set_ylabel(objs[1] if two else objs[0])
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return save_figure(fig, path)
