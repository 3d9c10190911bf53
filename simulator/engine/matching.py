"""Matching: which documents each evaluation of a reading stage shows, in which order.

Every draw uses a generator seeded by the study seed, the stage and the stratum, so a resumed
run (whose documents replay from the store) forms exactly the evaluations it formed before, and
adding a stratum never reshuffles another.
"""

from __future__ import annotations

import hashlib
import random
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from biasim.agents.documents import Document, Evaluation, Shown
from biasim.analysis.text.redaction import redact_names
from biasim.simulator.study.populations import (
    REDACTED,
    ReadsConfig,
    pool_slices,
    selects_from,
    stratum_key,
)


@dataclass
class Matching:
    """A stage's evaluations and the documents left out, counted by reason."""

    evaluations: list[Evaluation] = field(default_factory=list)
    excluded: Counter[str] = field(default_factory=Counter)


#: (persona attributes, index within the persona) -> the name a persona with them carries.
NameLookup = Callable[[tuple[tuple[str, str], ...], int], str | None]


def stage_rng(seed: int, stage: str, stratum: str) -> random.Random:
    """The generator of one stage's draws in one stratum."""
    digest = hashlib.blake2b(f"{seed}:{stage}:{stratum}".encode(), digest_size=8).digest()
    return random.Random(int.from_bytes(digest, "big"))


def form_evaluations(
    reads: ReadsConfig,
    stage: str,
    documents: Sequence[Document],
    *,
    k: int,
    seed: int,
    axes: Mapping[str, Sequence[str]],
    carried: Mapping[str, Sequence[str]] | None = None,
    names: NameLookup | None = None,
) -> Matching:
    """The evaluations of a reading stage.

    Args:
        reads: The stage's ``reads`` section.
        stage: The stage name (seeds its draws).
        documents: The documents that may be read, in design order (only those advanced by
            ``reads.after`` when it is set).
        k: Documents each reader picks (``select``; 0 for single readings).
        seed: The study seed.
        axes: The study's persona axes (value order for pairs and counterfactuals).
        carried: For ``draw: carry``: the ``after`` stage's pool -> author ids it advanced.
        names: Finds the name a counterfactual persona carries.
    """
    out = Matching()
    if reads.matching == "pool" and reads.draw == "carry":
        by_author = {d.author.agent_id: d for d in documents}
        for cluster, authors in (carried or {}).items():
            pool = [by_author[a] for a in authors if a in by_author]
            rng = stage_rng(seed, stage, cluster)
            rng.shuffle(pool)
            _add_pool(out, reads, cluster, pool, k)
        return out
    for stratum, docs in _strata(documents, reads.within).items():
        rng = stage_rng(seed, stage, stratum)
        prefix = f"{stratum}/" if stratum else ""
        if reads.matching == "single":
            _singles(out, reads, docs, axes, names)
        elif reads.matching == "pair":
            _pairs(out, reads, prefix, docs, axes, rng)
        else:
            _pools(out, reads, prefix, docs, k, rng)
    return out


def _strata(documents: Sequence[Document], within: Sequence[str]) -> dict[str, list[Document]]:
    if not within:
        # One stratum, named "": no key to build per document (100,000 at the benchmark).
        return {"": list(documents)} if documents else {}
    strata: dict[str, list[Document]] = {}
    for doc in documents:
        key = stratum_key(doc.author.levels, doc.author.persona.attributes, within)
        strata.setdefault(key, []).append(doc)
    return strata


def show(
    document: Document,
    *,
    redact: bool = False,
    name: str | None = None,
    attributes: tuple[tuple[str, str], ...] | None = None,
    variant: str = "",
) -> Shown:
    """``document`` as shown: as written, redacted, or under another name."""
    persona = document.author.persona
    own = persona.name
    if redact:
        # The label a template prints is the withheld marker, never "None". The name goes in
        # any case ("EMILY", "emily's"), as the analyses that check redaction assume.
        text = redact_names([document.text], [own], REDACTED)[0] if own else document.text
        return Shown(document, REDACTED, (), text)
    if attributes is None:
        return Shown(document, own, persona.attributes, document.text, variant)
    text = _replace_name(document.text, own, name) if name else document.text
    return Shown(document, name, attributes, text, variant)


def _replace_name(text: str, name: str | None, by: str | None) -> str:
    if not name or by is None:
        return text
    return re.sub(rf"\b{re.escape(name)}\b", by, text)


def _singles(
    out: Matching,
    reads: ReadsConfig,
    docs: list[Document],
    axes: Mapping[str, Sequence[str]],
    names: NameLookup | None,
) -> None:
    axis = reads.counterfactual
    for doc in docs:
        author = doc.author
        if axis is None:
            shown = show(doc, redact=reads.author == "redacted")
            out.evaluations.append(Evaluation(author.agent_id, (shown,), author.agent_id, 0))
            continue
        for value in axes[axis]:
            attributes = tuple((a, value if a == axis else v) for a, v in author.persona.attributes)
            name = names(attributes, author.index) if names else None
            shown = show(doc, name=name, attributes=attributes, variant=value)
            out.evaluations.append(
                Evaluation(f"{author.agent_id}/{axis}={value}", (shown,), author.agent_id, 0)
            )


def _pairs(
    out: Matching,
    reads: ReadsConfig,
    prefix: str,
    docs: list[Document],
    axes: Mapping[str, Sequence[str]],
    rng: random.Random,
) -> None:
    axis = reads.differ_in
    assert axis is not None
    first, second = axes[axis][0], axes[axis][1]
    sides: dict[str, list[Document]] = {first: [], second: []}
    for doc in docs:
        value = dict(doc.author.persona.attributes).get(axis)
        if value in sides:
            sides[value].append(doc)
        else:
            out.excluded[f"{axis} is neither {first} nor {second}"] += 1
    for side in sides.values():
        rng.shuffle(side)
    n = min(len(sides[first]), len(sides[second]))
    if len(sides[first]) + len(sides[second]) > 2 * n:
        out.excluded["no partner"] += len(sides[first]) + len(sides[second]) - 2 * n
    redact = reads.author == "redacted"
    width = len(str(max(n - 1, 1)))
    for i in range(n):
        a = show(sides[first][i], redact=redact)
        b = show(sides[second][i], redact=redact)
        cluster = f"{prefix}pair{i:0{width}d}"
        # Both orders: the position effect is measured and cancels in the group rates.
        out.evaluations.append(Evaluation(f"{cluster}/ab", (a, b), cluster, 1))
        out.evaluations.append(Evaluation(f"{cluster}/ba", (b, a), cluster, 1))


def _pools(
    out: Matching,
    reads: ReadsConfig,
    prefix: str,
    docs: list[Document],
    k: int,
    rng: random.Random,
) -> None:
    size = reads.size
    assert size is not None
    if reads.draw == "stratified":
        cells: dict[tuple[tuple[str, str], ...], list[Document]] = {}
        # Authors share a handful of attribute tuples: each one's cell is worked out once.
        cell_of: dict[tuple[tuple[str, str], ...], tuple[tuple[str, str], ...]] = {}
        for doc in docs:
            attributes = doc.author.persona.attributes
            cell = cell_of.get(attributes)
            if cell is None:
                attrs = dict(attributes)
                cell = tuple((g, attrs.get(g, "")) for g in (reads.groups or list(attrs)))
                cell_of[attributes] = cell
            cells.setdefault(cell, []).append(doc)
        order = list(cells)
        rng.shuffle(order)
        for cell in order:
            rng.shuffle(cells[cell])
        # Dealing the cells in turn puts every cell in each run of `len(cells)` documents,
        # so each pool of at least that size holds every group.
        ordered = [
            cells[c][i]
            for i in range(max(len(v) for v in cells.values()))
            for c in order
            if i < len(cells[c])
        ]
    else:
        ordered = list(docs)
        rng.shuffle(ordered)
    slices = pool_slices(len(ordered), size)
    width = len(str(max(len(slices) - 1, 1)))
    for p, cut in enumerate(slices):
        pool = ordered[cut]
        rng.shuffle(pool)  # the position in a pool never follows the group
        _add_pool(out, reads, f"{prefix}pool{p:0{width}d}", pool, k)


def _add_pool(
    out: Matching, reads: ReadsConfig, cluster: str, pool: list[Document], k: int
) -> None:
    if not selects_from(k, len(pool)):
        # Picking k of k or fewer is no decision: the documents are counted, not advanced.
        out.excluded[f"pool of {len(pool)} cannot select {k}"] += len(pool)
        return
    redact = reads.author == "redacted"
    shown = tuple(show(doc, redact=redact) for doc in pool)
    out.evaluations.append(Evaluation(cluster, shown, cluster, k))
