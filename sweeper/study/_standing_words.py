"""The words a standing is told in: each race outcome's phrase (confidence levels and speedups
are worded by ``sweeper._text``, as everywhere else).

Shared by the descriptions of ``Decision``, ``ClaimBasis`` and ``Standing``
(``_standing``), which ``sweeper status`` and ``status --json`` print, so
every figure reads the same wherever it is shown.
"""

from __future__ import annotations

from sweeper.study._race_decision import Outcome

OUTCOME_WORDS = {
    Outcome.FASTER: "faster, confirmed: the new incumbent",
    Outcome.SLOWER: "slower, confirmed",
    Outcome.BEHIND: "no faster once re-measured: not raced further",
    Outcome.SCREENED: "slower as measured: not raced further",
    Outcome.TIE_KEPT: "a tie; the incumbent is closer to the base manifest and stays",
    Outcome.TIE_WON: "a tie; the contender is closer to the base manifest and takes over",
    Outcome.RACING: "not clear yet: re-measuring",
    Outcome.UNCONFIRMED: "faster as measured; races are off, so it takes over unconfirmed",
}
