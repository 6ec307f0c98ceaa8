"""The synthetic language the tiny model is trained on.

Nothing here comes from outside text. Words are made-up syllable pairs
("kalo", "mire", ...). Each word has a short list of successors and belongs
to one of as many classes. A stream of words follows one rule:

    the next word is the successor of the previous word picked by the class of
    the word ``echo_offset`` positions back,

with some noise (a random successor, rarely any word). So the next word is
well determined, but only for a reader who sees ``echo_offset`` tokens back:
a model whose sliding window is cut below the offset loses the class and its
perplexity rises. Classes are unequally frequent, so a reader that cannot see
that far (or a drafter that gets it wrong) still guesses right fairly often.
Greedy continuation of such text does not fall into short cycles: the state
it depends on is the whole last ``echo_offset`` words.
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

    num_words: int = 248
    class_probs: tuple[float, ...] = (0.68, 0.16, 0.10, 0.06)
    echo_offset: int = 20
    rule_prob: float = 0.85
    jump_prob: float = 0.02
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
    """A seeded instance of the language; words are token ids ``first_word + index``."""

    def __init__(self, spec: CorpusSpec, first_word: int) -> None:
        self.spec = spec
        self.first_word = first_word
        rng = np.random.default_rng(spec.seed)
        n, classes = spec.num_words, len(spec.class_probs)
        probs = np.asarray(spec.class_probs, dtype=np.float64)
        self.successors = np.stack([rng.choice(n, size=classes, replace=False) for _ in range(n)])
        # exact quotas, so the class frequencies do not depend on the seed's luck
        quotas = np.floor(probs / probs.sum() * n).astype(int)
        quotas[0] += n - quotas.sum()
        self.word_class = rng.permutation(np.repeat(np.arange(classes), quotas))

    def next_word(self, previous: int, echo: int | None, rng: np.random.Generator) -> int:
        """The next word index after ``previous`` with ``echo`` the word ``echo_offset`` back."""
        spec = self.spec
        draw = rng.random()
        if draw < spec.jump_prob:
            return int(rng.integers(spec.num_words))
        if draw < spec.jump_prob + (1 - spec.jump_prob) * (1 - spec.rule_prob):
            return int(self.successors[previous][rng.integers(self.successors.shape[1])])
        chosen = 0 if echo is None else int(self.word_class[echo])
        return int(self.successors[previous][chosen])

    def extend(self, tokens: list[int], count: int, rng: np.random.Generator) -> None:
        """Append ``count`` words to ``tokens`` (token ids, chat markers included).

        Chat markers (ids below ``first_word``) are skipped when looking for the
        previous word; an echo position holding a marker counts as class 0.
        """
        base, offset = self.first_word, self.spec.echo_offset
        previous = next((t - base for t in reversed(tokens) if t >= base), None)
        for _ in range(count):
            if previous is None:
                word = int(rng.integers(self.spec.num_words))
            else:
                i = len(tokens)
                source = tokens[i - offset] if i >= offset else -1
                word = self.next_word(previous, source - base if source >= base else None, rng)
            tokens.append(word + base)
            previous = word

    def document(
        self,
        prompt_words: int,
        response_words: int,
        rng: np.random.Generator,
        header: list[int],
        middle: list[int],
    ) -> tuple[list[int], int]:
        """``header`` + prompt words + ``middle`` + response words, and where the response starts."""
        tokens = list(header)
        self.extend(tokens, prompt_words, rng)
        tokens.extend(middle)
        start = len(tokens)
        self.extend(tokens, response_words, rng)
        return tokens, start
