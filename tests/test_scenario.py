"""Scenario parsing and validation: every class of broken scenario names its key and problem."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from rtalab.sim.config import ConfigError
from rtalab.sim.dist import Const, Exp, LogNormal
from rtalab.sim.scenario import (
    Scenario,
    apply_overrides,
    dumps,
    from_dict,
    load_scenario,
    preset_names,
    resolve_path,
)


def _write(tmp_path: Path, text: str, name: str = "case.toml") -> Path:
    """Write a scenario file and return its path."""
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


def _error(tmp_path: Path, text: str) -> ConfigError:
    """Load ``text`` as a scenario file and return the ConfigError it raises."""
    with pytest.raises(ConfigError) as info:
        load_scenario(_write(tmp_path, text))
    return info.value


# --------------------------------------------------------------------------- presets


def test_presets_include_the_three_named_ones() -> None:
    assert {"baseline", "lossy_network", "retry_storm"} <= set(preset_names())


@pytest.mark.parametrize("name", preset_names())
def test_every_preset_loads_with_a_description(name: str) -> None:
    s = load_scenario(name)
    assert isinstance(s, Scenario)
    assert s.name == name
    assert s.description.strip()
    assert s.run.warmup_s < s.run.duration_s


def test_empty_file_is_a_valid_scenario_named_after_its_stem(tmp_path: Path) -> None:
    s = load_scenario(_write(tmp_path, "", name="empty.toml"))
    assert s == Scenario(name="empty")


def test_preset_values_are_parsed_into_typed_objects() -> None:
    s = load_scenario("baseline")
    assert s.workload.calls_per_s == 2.0
    assert s.workload.think_time_s == Exp(3.0)
    assert s.reasoner.reasoning_time_s == LogNormal(0.6, 0.6)
    assert s.workload.turns_per_call == Const(4.0)
    assert dict(s.reasoner.errors) == {"internal": 0.005, "upstream-timeout": 0.0}


def test_resolve_path_prefers_an_existing_file(tmp_path: Path) -> None:
    p = _write(tmp_path, "", name="baseline.toml")
    assert resolve_path(p) == p
    assert resolve_path("baseline").name == "baseline.toml"


# --------------------------------------------------------------------------- broken scenarios


@pytest.mark.parametrize(
    ("text", "key", "problem"),
    [
        # unknown keys: a section, a field, a nested field, a map key
        ("[bogus]\nx = 1\n", "bogus", "unknown key"),
        ("[workload]\nfoo = 1\n", "workload.foo", "unknown key"),
        ("[network.uplink]\nlos = 0.1\n", "network.uplink.los", "unknown key"),
        ("[reasoner]\nerrors = { bogus = 0.1 }\n", "reasoner.errors.bogus", "unknown key"),
        ("[live.retry]\nmax_attempts_by_code = { nope = 2 }\n",
         "live.retry.max_attempts_by_code.nope", "unknown key"),
        # wrong types
        ('[workload]\ncalls_per_s = "fast"\n', "workload.calls_per_s", "must be a number"),
        ("[reasoner]\nworkers = 2.5\n", "reasoner.workers", "must be an integer"),
        ("[reasoner]\nworkers = true\n", "reasoner.workers", "must be an integer"),
        ("[live.retry]\nretry_on_timeout = 1\n", "live.retry.retry_on_timeout", "true or false"),
        ('[reasoner]\ndedup = "maybe"\n', "reasoner.dedup", "must be one of"),
        ("workload = 5\n", "workload", "must be a table"),
        ("[network]\noutages = 3\n", "network.outages", "must be an array"),
        # negative rates and durations
        ("[workload]\ncalls_per_s = -1\n", "workload.calls_per_s", "must be >= 0"),
        ("[reasoner]\ncontext_rate_per_s = -0.5\n", "reasoner.context_rate_per_s", ">= 0"),
        ("[run]\nduration_s = 0\n", "run.duration_s", "must be > 0"),
        ("[[network.outages]]\nstart_s = -1\n", "network.outages[0].start_s", "must be >= 0"),
        ("[reasoner]\nworkers = 0\n", "reasoner.workers", "must be >= 1"),
        # probabilities outside [0, 1]
        ("[network.uplink]\nloss = 1.5\n", "network.uplink.loss", "must be in [0, 1], got 1.5"),
        ("[network.downlink]\nduplication = -0.1\n", "network.downlink.duplication",
         "must be in [0, 1]"),
        ("[workload]\nside_effect_share = 2\n", "workload.side_effect_share", "must be in [0, 1]"),
        ("[reasoner]\nerrors = { internal = 1.2 }\n", "reasoner.errors.internal",
         "must be in [0, 1]"),
        ("[reasoner]\nerrors = { internal = 0.7, auth = 0.6 }\n", "reasoner.errors",
         "must sum to <= 1"),
        # bad distributions
        ('[reasoner]\nreasoning_time_s = { dist = "pareto", mean = 1 }\n',
         "reasoner.reasoning_time_s", "'dist' must be one of"),
        ('[reasoner]\nreasoning_time_s = { dist = "exp" }\n', "reasoner.reasoning_time_s",
         "missing 'mean'"),
        ('[reasoner]\nreasoning_time_s = { dist = "exp", mean = -1 }\n',
         "reasoner.reasoning_time_s", "must be >= 0"),
        ('[reasoner]\nreasoning_time_s = { dist = "exp", mean = 1, sd = 2 }\n',
         "reasoner.reasoning_time_s", "unknown key"),
        ('[reasoner]\nreasoning_time_s = { dist = "uniform", low = 2, high = 1 }\n',
         "reasoner.reasoning_time_s", "must be >= 'low'"),
        ('[workload]\nthink_time_s = "long"\n', "workload.think_time_s", "expected a number"),
        ("[workload]\nthink_time_s = -3\n", "workload.think_time_s", ">= 0"),
        # cross-field rules
        ("[run]\nduration_s = 10\nwarmup_s = 20\n", "run.warmup_s", "must be < duration_s"),
        ('[workload]\narrival = "schedule"\n', "workload.schedule", "at least one phase"),
        ('[workload]\narrival = "schedule"\nschedule = [{ start_s = 10 }, { start_s = 5 }]\n',
         "workload.schedule", "increasing start_s"),
        ("[live.backoff]\nbase_s = 1.0\ncap_s = 0.5\n", "live.backoff.cap_s", "must be >="),
        # the bounds themselves (round 7 of tests/oneoff/mutate.py): a warm-up as long as the
        # run counts no turn; replicas are numbered 0..N-1; two phases cannot start together
        ("[run]\nduration_s = 10\nwarmup_s = 10\n", "run.warmup_s", "must be < duration_s"),
        ("[fleet]\nreplicas = 2\nfailures = [{ replica = 2 }]\n", "fleet.failures",
         "replica 2 of 2"),
        ('[workload]\narrival = "schedule"\nschedule = [{ start_s = 5 }, { start_s = 5 }]\n',
         "workload.schedule", "increasing start_s"),
        # a refusing outage acts on connections, so on both directions
        ('[[network.outages]]\nkind = "reasoner-down"\ndirection = "uplink"\n',
         "network.outages[0].direction", "acts on connections"),
        ('[[network.outages]]\nkind = "reset"\ndirection = "downlink"\n',
         "network.outages[0].direction", "acts on connections"),
        # a sampled run keeps a share 0 < P <= 1 of the calls (0 is records = "none")
        ('[run]\nrecords = "sample:0"\n', "run.records", "0 < P <= 1"),
        # TOML's true is no number
        ("[workload]\ncalls_per_s = true\n", "workload.calls_per_s", "must be a number"),
        ("[network.uplink]\nloss = false\n", "network.uplink.loss", "must be a number"),
    ],
)
def test_broken_scenario_names_key_and_problem(
    tmp_path: Path, text: str, key: str, problem: str
) -> None:
    err = _error(tmp_path, text)
    assert err.key == key
    assert problem in err.problem
    line = str(err)
    assert "\n" not in line
    assert line.startswith(f"{key}: ")


def test_bad_toml_syntax_is_a_config_error(tmp_path: Path) -> None:
    err = _error(tmp_path, "[workload\ncalls_per_s = 1\n")
    assert "not valid TOML" in str(err)
    assert "case.toml" in str(err)
    assert "\n" not in str(err)


def test_duplicate_key_is_a_toml_error(tmp_path: Path) -> None:
    err = _error(tmp_path, "[run]\nseed = 1\nseed = 2\n")
    assert "not valid TOML" in str(err)


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_scenario(tmp_path / "nope.toml")
    assert "no scenario file or preset" in str(info.value)
    with pytest.raises(ConfigError) as info:
        load_scenario("no_such_preset")
    assert "baseline" in str(info.value)  # lists the presets


def test_unreadable_file_is_a_config_error(tmp_path: Path) -> None:
    p = tmp_path / "binary.toml"
    p.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(ConfigError) as info:
        load_scenario(p)
    assert "cannot read" in str(info.value) or "not valid TOML" in str(info.value)


# --------------------------------------------------------------------------- --set overrides


def test_overrides_set_values_parsed_as_toml() -> None:
    s = load_scenario(
        "baseline",
        [
            "run.seed=7",
            "network.uplink.loss=0.25",
            'reasoner.dedup="none"',
            "reasoner.dedup_window_s = 10",
            "workload.think_time_s={dist='exp', mean=1.5}",
            "live.retry.retry_on_timeout=false",
        ],
    )
    assert s.run.seed == 7
    assert s.network.uplink.loss == 0.25
    assert s.reasoner.dedup == "none"
    assert s.reasoner.dedup_window_s == 10.0
    assert s.workload.think_time_s == Exp(1.5)
    assert s.live.retry.retry_on_timeout is False
    # untouched values keep the preset's
    assert s.workload.calls_per_s == 2.0


def test_override_bare_word_is_a_string() -> None:
    s = load_scenario("baseline", ["reasoner.dedup=turn"])
    assert s.reasoner.dedup == "turn"


def test_overrides_as_dict_and_on_a_scenario_object() -> None:
    s = load_scenario("baseline", {"run.replications": 5})
    assert s.run.replications == 5
    t = s.with_overrides(["run.duration_s=40", "run.warmup_s=5"])
    assert (t.run.duration_s, t.run.warmup_s, t.run.replications) == (40.0, 5.0, 5)
    assert s.with_seed(99).run.seed == 99


def test_override_creates_missing_tables() -> None:
    data = apply_overrides({}, ["a.b.c=1"])
    assert data == {"a": {"b": {"c": 1}}}
    s = load_scenario("baseline", ["network.downlink.loss=0.1"])
    assert s.network.downlink.loss == 0.1


def test_override_does_not_mutate_its_input() -> None:
    data = {"run": {"seed": 1}}
    apply_overrides(data, ["run.seed=2"])
    assert data == {"run": {"seed": 1}}


@pytest.mark.parametrize(
    ("override", "key", "problem"),
    [
        ("noequals", "noequals", "key.path=value"),
        ("run.seed.x=1", "run.seed", "is not a table"),
        ("run.sed=1", "run.sed", "unknown key"),
        ("run.seed=abc", "run.seed", "must be an integer"),
        ("network.uplink.loss=1.5", "network.uplink.loss", "must be in [0, 1]"),
        ("run.replications=0", "run.replications", "must be >= 1"),
    ],
)
def test_bad_override_names_key_and_problem(override: str, key: str, problem: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_scenario("baseline", [override])
    assert info.value.key == key
    assert problem in info.value.problem


# --------------------------------------------------------------------------- dumps round trip


@pytest.mark.parametrize("name", preset_names())
def test_dumps_round_trips_every_preset(name: str, tmp_path: Path) -> None:
    s = load_scenario(name, ["run.seed=3", "network.uplink.loss=0.01"])
    text = dumps(s)
    assert from_dict(tomllib.loads(text)) == s
    # written to a file under another name, the resolved scenario keeps its own name
    assert load_scenario(_write(tmp_path, text, name="copy.toml")) == s
    assert dumps(from_dict(tomllib.loads(text))) == text


def test_dumps_spells_out_every_default() -> None:
    data = tomllib.loads(dumps(Scenario()))
    assert set(data) == {"name", "description", "workload", "live", "network", "reasoner", "run",
                         "load", "fleet"}
    assert data["run"]["replications"] == 1
    assert data["network"]["uplink"]["loss"] == 0.0
    assert "backoff" in data["live"]


def test_dumps_round_trips_schedules_and_distributions() -> None:
    s = from_dict(
        {
            "workload": {
                "arrival": "schedule",
                "schedule": [{"start_s": 0, "calls_per_s": 1}, {"start_s": 60, "calls_per_s": 4}],
                "think_time_s": {"dist": "empirical", "values": [0.5, 1, 2]},
                "turns_per_call": {"dist": "uniform", "low": 1, "high": 6},
            },
            "network": {"outages": [{"start_s": 30, "duration_s": 5, "direction": "uplink"}]},
            "reasoner": {
                "capacity_drops": [{"start_s": 10, "duration_s": 20, "workers": 1}],
                "reasoning_time_s": {"dist": "gamma", "mean": 0.5, "cv": 2},
            },
        }
    )
    assert from_dict(tomllib.loads(dumps(s))) == s
    assert s.workload.rate_at(59.0) == 1.0
    assert s.workload.rate_at(60.0) == 4.0
