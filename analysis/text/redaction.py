"""Withholding a name from a text: what a reader sees when a policy redacts the applicant.

Generic text handling with no heavy dependency, so the engine (a reading stage with
``author: redacted``), the templates (``redact_name``), the hiring-email classifiers and the
Bias-Transmission letters' leak check share one definition.
"""

from __future__ import annotations

import re
from collections.abc import Sequence


def redact_names(
    texts: Sequence[str], names: Sequence[str], placeholder: str = "[NAME]"
) -> list[str]:
    """Replace each text's applicant first name with ``placeholder``.

    Matching is case-insensitive and whole-word: the name must not touch a letter, digit or
    underscore on either side, so "Jack" leaves "Jackson" alone while "Jack's" becomes
    "[NAME]'s". The name is matched literally (regex metacharacters such as ``.`` or ``(`` have
    no special meaning), which also lets names that begin or end with punctuation ("J.R.") match.

    Names that are also English words (Precious, Queen, Essence, Lane, German ...) are removed
    wherever the word appears: a leaked name can carry the very demographic signal the classifier
    must not see, while a lost common word costs it little.

    Args:
        texts: One email per applicant.
        names: The applicant's first name for each text, aligned with ``texts``.
        placeholder: Replacement text.

    Returns:
        The redacted texts, in input order.

    Raises:
        ValueError: If the sequences differ in length or a name is empty or not a string.
    """
    if len(texts) != len(names):
        raise ValueError(f"got {len(texts)} texts but {len(names)} names; they must align")
    done: dict[tuple[str, str], str] = {}
    out = []
    for i, pair in enumerate(zip(texts, names, strict=True)):
        # A design repeats (text, name) pairs (a synthetic study, a name answered alike in many
        # roles): each distinct pair is redacted once.
        hit = done.get(pair)
        if hit is None:
            text, name = pair
            if not isinstance(name, str) or not name.strip():
                raise ValueError(f"name {i} is empty or not a string: {name!r}")
            # Lookarounds instead of \b: \b needs a word character at the name's edge.
            pattern = re.compile(rf"(?<!\w){re.escape(name.strip())}(?!\w)", re.IGNORECASE)
            hit = done[pair] = pattern.sub(lambda _: placeholder, text)
        out.append(hit)
    return out


def names_after_redaction(
    texts: Sequence[str], own: Sequence[str], names: Sequence[str]
) -> list[tuple[str, ...]]:
    """The names of ``names`` each text still contains once its own name is redacted.

    Redaction (:func:`redact_names`) removes a text's own name in any case; a letter can still
    carry another name of the lists (signed with another name, a named colleague or reference),
    which would tell a reader the gender the redaction withheld.

    Args:
        texts: One text per writer.
        own: Each writer's own name, aligned with ``texts``.
        names: Every name a reader could take as the writer's (e.g. the study's name lists).

    Returns:
        Per text, the names found after redaction (case-insensitive, whole words), in the order
        of ``names``; empty when none.
    """
    patterns = [
        (n, re.compile(rf"(?<!\w){re.escape(n.strip())}(?!\w)", re.IGNORECASE))
        for n in dict.fromkeys(names)
        if n.strip()
    ]
    redacted = redact_names(texts, own)
    return [tuple(n for n, p in patterns if p.search(text)) for text in redacted]
