"""Which env keys an ablation turns, and each arm's env, on the demo's and the challenge's manifests."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sweeper.ablation import AblationArms, AblationMode, find_switches
from sweeper.ablation._switches import looks_numeric
from sweeper.demo import demo_paths
from sweeper.errors import UserInputError

SHARED = Path(__file__).resolve().parents[4] / "shared" / "challenge-data"


def test_flags_are_the_env_values_0_and_1_except_numbers_by_name() -> None:
    env = {"A": "1", "B": "0", "MAX_NUM_SEQS": "1", "WARMUP_MAX_TOKENS": "1", "DTYPE": "float32", "TOP_K": "1"}
    assert [s.key for s in find_switches(env)] == ["A", "B"]
    assert looks_numeric("VLLM_CPU_KVCACHE_SPACE") and not looks_numeric("ENFORCE_EAGER")


def test_the_demo_manifest_has_one_flag() -> None:
    env = json.loads(demo_paths().manifest.read_text())["env"]
    assert [s.label for s in find_switches(env)] == ["ENFORCE_EAGER=1"]


@pytest.mark.skipif(not SHARED.is_dir(), reason="the challenge's data is not beside this checkout")
def test_the_winning_manifest_s_switches_are_its_on_off_settings() -> None:
    env = json.loads((SHARED / "vidraft-fw188-ctk49-manifest.json").read_text())["env"]
    found = {s.key for s in find_switches(env)}
    named = {"ONEGRAPH", "FUSED_SPARSE_ARGMAX", "SPLITKV_VERIFY", "DETOK_ENDONLY", "FASTRENDER", "LM_HEAD_PRUNE"}
    named |= {"PRECACHE_BENCH", "WARMUP_BRIDGE", "LOOPGRAPH_REQUIRE_CAPTURE"}
    assert named <= found
    # the counts that read 1 are not switches
    assert not found & {"MAX_NUM_SEQS", "WARMUP_MAX_TOKENS"}
    # every switch found is a 0/1 value of the env
    assert all(env[key] in ("0", "1") for key in found)


def test_leave_one_out_turns_one_key_away_from_the_manifest() -> None:
    env = {"A": "1", "B": "0", "DTYPE": "bfloat16"}
    switches = find_switches(env, alternatives={"DTYPE": "float32"})
    arms = AblationArms(mode=AblationMode.LEAVE_ONE_OUT, switches=switches)
    assert arms.base_overrides() == {}
    assert [arms.arm_overrides(i) for i in range(3)] == [{"A": "0"}, {"B": "1"}, {"DTYPE": "float32"}]
    # the effect is the subject's (1, float32) over the reference's: A's arm holds the reference
    assert [s.effect_sign(AblationMode.LEAVE_ONE_OUT) for s in switches] == [-1, 1, 1]


def test_add_one_in_starts_from_every_switch_off() -> None:
    env = {"A": "1", "B": "0", "DTYPE": "bfloat16"}
    switches = find_switches(env, alternatives={"DTYPE": "float32"})
    arms = AblationArms(mode=AblationMode.ADD_ONE_IN, switches=switches)
    assert arms.base_overrides() == {"A": "0"}
    assert arms.arm_overrides(0) == {"A": "1"}
    assert arms.arm_overrides(1) == {"A": "0", "B": "1"}
    assert arms.arm_overrides(2) == {"A": "0", "DTYPE": "float32"}
    assert all(s.effect_sign(AblationMode.ADD_ONE_IN) == 1 for s in switches)


def test_a_key_the_env_lacks_is_judged_against_unset() -> None:
    flag, value = find_switches({"A": "1"}, flags=["NEW_FLAG"], alternatives={"KV_CACHE_DTYPE": "fp8"})
    assert (flag.manifest_value, flag.reference, flag.reference_text) == (None, None, "unset")
    assert (value.subject, value.reference) == ("fp8", None)
    for mode in AblationMode:
        arms = AblationArms(mode=mode, switches=(flag, value))
        assert arms.base_overrides() == {}
        assert arms.arm_overrides(0) == {"NEW_FLAG": "1"} and arms.arm_overrides(1) == {"KV_CACHE_DTYPE": "fp8"}
        assert flag.effect_sign(mode) == 1


@pytest.mark.parametrize(
    ("env", "flags", "alternatives", "message"),
    [
        ({"A": "2"}, ["A"], None, "A is '2'"),
        ({"A": "1"}, ["A", "A"], None, "named twice"),
        ({"A": "1"}, ["A"], {"A": "0"}, "also a flag"),
        ({"A": "x"}, None, {"A": "x"}, "own value"),
        ({"DTYPE": "float32"}, None, None, "no env value 0 or 1"),
    ],
)
def test_bad_switches_are_one_line_errors_naming_the_key(env, flags, alternatives, message) -> None:
    with pytest.raises(UserInputError, match=message):
        find_switches(env, flags=flags, alternatives=alternatives)
