"""The synthetic language the tiny model is trained on.

Nothing here comes from outside text. Words are made-up syllable pairs
("kalo", "mire", ...). A stream of words follows two rules:

* an order-2 Markov chain: each word has a short list of successors, and
  which successor is likely depends on the word before it as well, with a
  peaked profile, so the most likely continuation is usually clear;
* an echo: with probability ``echo_prob`` a position repeats the word
  ``echo_offset`` positions back. The offset lies beyond the smallest
  sliding window of the demo search space and inside the trained window,
  so a model whose window is cut below the offset loses the echo and its
  perplexity rises.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging

import numpy as np

logger = logging.getLogger(__name__)

CONSONANTS = "bdfgklmnprstvz"
VOWELS = "aeiou"


@dataclasses.dataclass(frozen=True, kw_only=True)
class CorpusSpec:
    """The knobs of the synthetic language."""

    num_words: int = 1016
    successors: int = 6
    profile: tuple[float, ...] = (0.62, 0.16, 0.09, 0.06, 0.04, 0.03)
    echo_offset: int = 24
    echo_prob: float = 0.45
    seed: int = 1234


def make_words(count: int, seed: int) -> list[str]:
    """``count`` distinct two-syllable words, in a seeded order."""
    syllables = [c + v for c, v in itertools.product(CONSONANTS, VOWELS)]
    words = [a + b for a, b in itertools.product(syllables, syllables)]
    if count > len(words):
        raise ValueError(f"at most {len(words)} words, asked for {count}")
    rng = np.random.default_rng(seed)
    picked = rng.choice(len(words), size=count, replace=False)
    return [words[i] for i in picked]


class Language:
    """A seeded instance of the synthetic language over word indices 0..num_words-1."""

    def __init__(self, spec: CorpusSpec, first_word: int) -> None:
        if len(spec.profile) != spec.successors:
            raise ValueError("profile needs one probability per successor")
        self.spec = spec
        self.first_word = first_word
        rng = np.random.default_rng(spec.seed)
        n = spec.num_words
        self.successors = np.stack(
            [rng.choice(n, size=spec.successors, replace=False) for _ in range(n)]
        )
        profile = np.asarray(spec.profile, dtype=np.float64)
        self.profile = profile / profile.sum()
        # an order-2 twist: the ranking of b's successors depends on a
        self._twist = rng.integers(0, 2**31 - 1, size=n, dtype=np.int64)
        self._orders = np.stack([rng.permutation(spec.successors) for _ in range(64)])

    def ranking(self, prev2: int, prev1: int) -> np.ndarray:
        """Successors of ``prev1`` ordered from most to least likely, given ``prev2``."""
        succ = self.successors[prev1]
        mixed = (int(self._twist[prev2]) ^ (prev1 * 2654435761)) & 0x7FFFFFFF
        return succ[self._orders[(mixed >> 7) % len(self._orders)]]

    def extend(self, tokens: list[int], count: int, rng: np.random.Generator) -> None:
        """Append ``count`` words to ``tokens`` (a sequence of token ids).

        Words are token ids ``>= first_word``; other ids (chat markers) are
        skipped when looking for the two previous words and are never echoed.
        """
        spec = self.spec
        base = self.first_word
        words = [t - base for t in tokens if t >= base][-2:]
        while len(words) < 2:
            start = int(rng.integers(spec.num_words)) if not words else int(
                self.successors[words[-1]][0]
            )
            words.append(start)
            tokens.append(start + base)
            count -= 1
        cumulative = np.cumsum(self.profile)
        for _ in range(count):
            i = len(tokens)
            source = tokens[i - spec.echo_offset] if i >= spec.echo_offset else -1
            if source >= base and rng.random() < spec.echo_prob:
                word = source - base
            else:
                ranked = self.ranking(words[-2], words[-1])
                word = int(ranked[min(int(np.searchsorted(cumulative, rng.random())), len(ranked) - 1)])
            tokens.append(word + base)
            words = [words[-1], word]

    def document(
        self, prompt_words: int, response_words: int, rng: np.random.Generator,
        header: list[int], middle: list[int],
    ) -> tuple[list[int], int]:
        """A chat-formatted document: ``header`` + prompt words + ``middle`` + response words.

        Returns the token ids and the index where the response starts.
        """
        tokens = list(header)
        self.extend(tokens, prompt_words, rng)
        tokens.extend(middle)
        start = len(tokens)
        self.extend(tokens, response_words, rng)
        return tokens, start
