"""Keyword oracle: case-insensitive whole-word matching of expected words in model output."""

from __future__ import annotations

import re
from collections.abc import Sequence

from harness.judging.oracles.result import OracleResult, excerpt

# A match preceded, within NEGATION_WINDOW words of its sentence, by one of these does not count:
# "it is not green" names green only to deny it.
NEGATIONS = frozenset(
    {"not", "no", "never", "neither", "nor", "without", "isn't", "aren't", "wasn't", "isnt"}
)
NEGATION_WINDOW = 3
_WORD = re.compile(r"[\w']+")


def negated(text: str, start: int) -> bool:
    """True if the word at `start` is denied by a negation just before it in its sentence."""
    sentence = re.split(r"[.!?;\n]", text[:start])[-1]
    before = [w.lower() for w in _WORD.findall(sentence)][-NEGATION_WINDOW:]
    return any(w in NEGATIONS or w.endswith("n't") for w in before)


def _affirmed(pattern: re.Pattern[str], text: str) -> bool:
    return any(not negated(text, m.start()) for m in pattern.finditer(text))


def _whole_word_pattern(word: str) -> re.Pattern[str]:
    parts = [re.escape(part) for part in word.split()]
    return re.compile(r"(?<!\w)" + r"\s+".join(parts) + r"(?!\w)", re.IGNORECASE)


class KeywordOracle:
    """Passes when the text holds every ``all_of`` word and at least one ``any_of`` word.

    Matching is case-insensitive and whole-word: a word must not touch a letter, digit or
    underscore on either side. Punctuation and hyphens are boundaries. For the word "green":

    - matches: "Green.", "GREEN", "a green-ish square", "(green)", "green's"
    - does not match: "greenish", "evergreen", "greens", "green_square"

    Plurals are different words: list ``any_of=["triangle", "triangles"]`` to accept both.
    A denied word does not count: "It is not green." holds no "green" (see ``negated``).
    A multi-word entry such as "yellow triangle" matches across any run of whitespace.
    An oracle with no words, or with a blank word, raises ValueError: it could never fail.
    """

    def __init__(self, all_of: Sequence[str] = (), any_of: Sequence[str] = ()) -> None:
        if isinstance(all_of, str) or isinstance(any_of, str):
            raise TypeError("all_of and any_of are lists of words, not a single string")
        self.all_of = list(all_of)
        self.any_of = list(any_of)
        if not self.all_of and not self.any_of:
            raise ValueError("KeywordOracle needs at least one all_of or any_of word")
        blank = [word for word in [*self.all_of, *self.any_of] if not word.strip()]
        if blank:
            raise ValueError(f"KeywordOracle words must not be blank: {blank!r}")
        self._all_of_patterns = [_whole_word_pattern(word) for word in self.all_of]
        self._any_of_patterns = [_whole_word_pattern(word) for word in self.any_of]

    def __repr__(self) -> str:
        return f"KeywordOracle(all_of={self.all_of!r}, any_of={self.any_of!r})"

    def check(self, text: str) -> OracleResult:
        missing = [
            word
            for word, pattern in zip(self.all_of, self._all_of_patterns, strict=True)
            if not _affirmed(pattern, text)
        ]
        found_any = [
            word
            for word, pattern in zip(self.any_of, self._any_of_patterns, strict=True)
            if _affirmed(pattern, text)
        ]
        problems = [f"missing all-of word {word!r}" for word in missing]
        if self.any_of and not found_any:
            problems.append(f"none of the any-of words {self.any_of!r}")
        if problems:
            return OracleResult(False, f"{'; '.join(problems)}; text: {excerpt(text)}")
        found = [*self.all_of, *found_any]
        return OracleResult(True, f"found {', '.join(repr(word) for word in found)}")
