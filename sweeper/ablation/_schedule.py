"""The order an ablation starts its servers in: blocks of switches around a shared base, in rounds.

Racing every switch against a base server of its own costs two fresh
servers a switch a round. An ablation shares the base instead: the
switches are split into **blocks** of at most ``block_size``, and a block's
round is one fresh server of the base and one of each of its switches,
back to back (``B S1 S2 S3``; every second round reversed, ``S3 S2 S1 B``,
so a steady drift of the host reads alike on average for every arm). A
round of K switches costs K + ceil(K / block_size) servers instead of 2K.
A block's rounds are the blocks of ``evaluators.blocked_spread``: log TPS
is fitted as arm + round inside each block, so what the host did between
two rounds cancels; the smaller the block, the less drift fits inside one
round of it.
"""

from __future__ import annotations

import dataclasses
import math

DEFAULT_BLOCK_SIZE = 4  # switches sharing one base server a round


@dataclasses.dataclass(frozen=True)
class Slot:
    """One fresh server of the schedule: ``arm`` None is the base, else the switch's index."""

    round: int  # from 1
    block: int  # from 0
    arm: int | None

    @property
    def is_base(self) -> bool:
        return self.arm is None


def blocks(switch_count: int, block_size: int = DEFAULT_BLOCK_SIZE) -> tuple[tuple[int, ...], ...]:
    """The switches 0 .. ``switch_count`` - 1 in ceil(K / ``block_size``) blocks of near-equal size, in order."""
    if switch_count < 1 or block_size < 1:
        raise ValueError(
            f"blocks: need at least one switch and a block size of at least 1, not {switch_count}, {block_size}"
        )
    count = math.ceil(switch_count / block_size)
    size, extra = divmod(switch_count, count)
    result: list[tuple[int, ...]] = []
    start = 0
    for index in range(count):
        end = start + size + (1 if index < extra else 0)
        result.append(tuple(range(start, end)))
        start = end
    return tuple(result)


def schedule(switch_count: int, *, rounds: int, block_size: int = DEFAULT_BLOCK_SIZE) -> tuple[Slot, ...]:
    """Every server of ``rounds`` rounds, in the order they run: round by round, block by block."""
    if rounds < 1:
        raise ValueError(f"schedule: rounds must be at least 1, not {rounds}")
    slots: list[Slot] = []
    for round_number in range(1, rounds + 1):
        for block_index, members in enumerate(blocks(switch_count, block_size)):
            lineup: list[int | None] = [None, *members]
            if round_number % 2 == 0:
                lineup.reverse()
            slots.extend(Slot(round_number, block_index, arm) for arm in lineup)
    return tuple(slots)


def servers_per_round(switch_count: int, block_size: int = DEFAULT_BLOCK_SIZE) -> int:
    """Fresh servers one round starts: one per switch and one base per block."""
    return switch_count + len(blocks(switch_count, block_size))
