"""The ablation's server order: blocks around a shared base, rounds alternating direction."""

from __future__ import annotations

import pytest

from sweeper.ablation import Slot, blocks, schedule, servers_per_round


def test_blocks_split_the_switches_evenly_in_order() -> None:
    assert blocks(10, 4) == ((0, 1, 2, 3), (4, 5, 6), (7, 8, 9))
    assert blocks(4, 4) == ((0, 1, 2, 3),)
    assert blocks(3, 1) == ((0,), (1,), (2,))
    for count in range(1, 31):
        for size in range(1, 7):
            parts = blocks(count, size)
            assert [i for part in parts for i in part] == list(range(count))
            assert max(map(len, parts)) <= size and max(map(len, parts)) - min(map(len, parts)) <= 1


def test_a_round_is_the_base_then_its_switches_and_the_next_round_reversed() -> None:
    order = [(s.round, s.block, s.arm) for s in schedule(3, rounds=2, block_size=2)]
    # one round a row, in the order its servers run (hence fmt: skip)
    assert order == [
        (1, 0, None), (1, 0, 0), (1, 0, 1), (1, 1, None), (1, 1, 2),
        (2, 0, 1), (2, 0, 0), (2, 0, None), (2, 1, 2), (2, 1, None),
    ]  # fmt: skip


def test_each_switch_and_each_block_base_runs_once_a_round() -> None:
    slots = schedule(17, rounds=3, block_size=4)
    assert len(slots) == 3 * servers_per_round(17, 4) == 3 * (17 + 5)
    for round_number in (1, 2, 3):
        in_round = [s for s in slots if s.round == round_number]
        assert sorted(s.arm for s in in_round if s.arm is not None) == list(range(17))
        assert sorted(s.block for s in in_round if s.is_base) == [0, 1, 2, 3, 4]
    assert Slot(1, 0, None).is_base and not Slot(1, 0, 3).is_base


def test_bad_counts_raise() -> None:
    with pytest.raises(ValueError):
        blocks(0, 4)
    with pytest.raises(ValueError):
        schedule(3, rounds=0)
