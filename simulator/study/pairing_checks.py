"""The checks of a pairing stage the schema cannot make: it reads the whole study (its vars,
factors and populations), so it sits above the schema (:mod:`.config`), beside the other checks."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from biasim.simulator.common.errors import Problem
    from biasim.simulator.common.yamlsource import FieldPath, SourceMap
    from biasim.simulator.study.config import StageConfig, StudyConfig


def check_pairing(
    config: StudyConfig, stage: StageConfig, at: FieldPath, smap: SourceMap
) -> list[Problem]:
    """A pairing stage answers in free text, alone (no populations), and every level of the
    factor that picks its items names a subset the items file has."""
    pairing = stage.pairing
    assert pairing is not None
    problems = []
    if stage.output:
        problems.append(
            smap.problem((*at, "output"), "a pairing stage answers in free text: no `output`")
        )
    if config.populations:
        problems.append(smap.problem((*at, "pairing"), "pairing stages run without populations"))
    if pairing.subset_column is None:
        return problems
    column, var = pairing.subset_column, pairing.subset_from
    subsets = {r.get(column, "") for r in pairing.rows}
    defined = var in config.vars
    if defined and config.vars[var] not in subsets:
        problems.append(
            smap.problem(("vars", var), f"`{config.vars[var]}` is not a `{column}` of the items")
        )
    for fname, levels in config.design.factors.items():
        for level, fvars in levels.items():
            if var in fvars:
                defined = True
                if fvars[var] not in subsets:
                    problems.append(
                        smap.problem(
                            ("design", "factors", fname, level, var),
                            f"`{fvars[var]}` is not a `{column}` of the items "
                            f"(known: {', '.join(sorted(subsets))})",
                        )
                    )
    if not defined:
        problems.append(
            smap.problem((*at, "pairing", "subset_from"), f"no factor level or var defines `{var}`")
        )
    return problems
