"""Inflections of one English word reduced to one key, so "value", "values", "valued" and
"valuing" are counted as one term.

The rules are the inflectional steps of Porter's stemmer (Porter 1980, "An algorithm for suffix
stripping", steps 1a, 1b and 1c) followed by its step 5a (a final ``e`` dropped), so that a word
with and without its ``-ing``/``-ed`` ending meets at the same key ("evacuate", "evacuating" and
"evacuated" all give ``evacuat``). The derivational steps (2-4: ``-ness``, ``-ation`` ...) are
left out on purpose: they merge words of different meaning ("generous", "general"), which a
count of rationale terms must not do. A key is not always a word; show the surface forms.

Two additions to Porter's rules, both listed here: irregular plurals (``IRREGULAR``, e.g.
"children" -> "child"), and words ending in ``s`` that are not plurals (``NOT_PLURAL``, e.g.
"news", which Porter would merge with "new"). Possessives ("child's", "parents'") lose the
apostrophe ending first. Words of one or two letters and words with another apostrophe
("don't") are left as they are.
"""

from __future__ import annotations

import re
from functools import lru_cache

IRREGULAR: dict[str, str] = {
    "children": "child",
    "men": "man",
    "women": "woman",
    "feet": "foot",
    "teeth": "tooth",
    "mice": "mouse",
    "geese": "goose",
    "lives": "life",
    "wives": "wife",
    "knives": "knife",
    "selves": "self",
}
NOT_PLURAL: frozenset[str] = frozenset(
    {"news", "always", "perhaps", "series", "species", "politics", "economics", "ethics"}
)

_VOWELS = frozenset("aeiou")
_POSSESSIVE = re.compile(r"(?:'s|s')$")


def stem(word: str) -> str:
    """The key shared by the inflections of ``word`` (lower-cased).

    Examples from Porter (1980): "caresses" -> "caress", "ponies" -> "poni", "cats" -> "cat",
    "plastered" -> "plaster", "motoring" -> "motor", "hopping" -> "hop", "filing" -> "file",
    "happy" -> "happi"; and after step 5a "evacuate", "evacuated" -> "evacuat".
    """
    return _stem(word.lower().replace("\u2019", "'"))


@lru_cache(maxsize=65536)
def _stem(word: str) -> str:
    if word in IRREGULAR:
        return IRREGULAR[word]
    if len(word) > 3 and _POSSESSIVE.search(word):
        word = word[:-2] if word.endswith("'s") else word[:-1]
        if word in IRREGULAR:
            return IRREGULAR[word]
    if len(word) <= 2 or "'" in word or word in NOT_PLURAL:
        return word
    return _step5a(_step1c(_step1b(_step1a(word))))


def _consonant(word: str, i: int) -> bool:
    """Porter's consonant: not a, e, i, o, u, and not a ``y`` after a consonant."""
    letter = word[i]
    if letter in _VOWELS:
        return False
    if letter == "y":
        return i == 0 or not _consonant(word, i - 1)
    return True


def _measure(stem_: str) -> int:
    """Porter's m: the number of vowel-consonant sequences in ``[C](VC)^m[V]``."""
    pattern = "".join("c" if _consonant(stem_, i) else "v" for i in range(len(stem_)))
    return len(re.findall(r"v+c+", pattern))


def _has_vowel(stem_: str) -> bool:
    return any(not _consonant(stem_, i) for i in range(len(stem_)))


def _double_consonant(word: str) -> bool:
    return len(word) >= 2 and word[-1] == word[-2] and _consonant(word, len(word) - 1)


def _cvc(word: str) -> bool:
    """Porter's *o: consonant-vowel-consonant at the end, the last not w, x or y."""
    if len(word) < 3:
        return False
    shape = [_consonant(word, i) for i in range(len(word) - 3, len(word))]
    return shape == [True, False, True] and word[-1] not in "wxy"


def _step1a(word: str) -> str:
    if word.endswith("sses"):
        return word[:-2]
    if word.endswith("ies"):
        return word[:-2]
    if word.endswith("ss"):
        return word
    if word.endswith("s"):
        return word[:-1]
    return word


def _step1b(word: str) -> str:
    if word.endswith("eed"):
        return word[:-1] if _measure(word[:-3]) > 0 else word
    for suffix in ("ed", "ing"):
        if word.endswith(suffix) and _has_vowel(word[: -len(suffix)]):
            return _tidy(word[: -len(suffix)])
    return word


def _tidy(word: str) -> str:
    """Step 1b's repair after ``-ed``/``-ing`` is removed."""
    if word.endswith(("at", "bl", "iz")):
        return word + "e"
    if _double_consonant(word) and word[-1] not in "lsz":
        return word[:-1]
    if _measure(word) == 1 and _cvc(word):
        return word + "e"
    return word


def _step1c(word: str) -> str:
    if word.endswith("y") and _has_vowel(word[:-1]):
        return word[:-1] + "i"
    return word


def _step5a(word: str) -> str:
    if word.endswith("e"):
        base = word[:-1]
        m = _measure(base)
        if m > 1 or (m == 1 and not _cvc(base)):
            return base
    return word
