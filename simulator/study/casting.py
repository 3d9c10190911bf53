"""Who plays each role for each model label of a study that compares models.

When a role lists several models, the roles that feed it run per model too: each model writes
its own personas and formats its own answers (Li et al. 2025 let every model they tested
generate its agents' personas). A feeding role is one that plays a stage before a stage of the
role listing models (its answers are in that stage's ``outputs``) or formats such a stage's
answers. For each label it is played by that label's model (the backend, model, options and
structured output the variant sets) with its own sampling settings. A role marked
``shared: true`` keeps its own model for every label, as do roles that only read what the models
wrote (a judge): one fixed instrument for every model compared.
"""

from __future__ import annotations

from dataclasses import dataclass

from biasim.simulator.study.config import ModelVariant, RoleConfig, StudyConfig

#: What a model variant says about who plays a role (the rest is how the role samples).
_PLAYER_FIELDS = tuple(k for k in ModelVariant.model_fields if k not in ("label", "synthetic"))


def feeding_roles(config: StudyConfig) -> dict[str, str]:
    """Role without ``models`` -> the role listing models it feeds first (its stage comes
    before one of that role's stages, or it formats one of them). Shared roles included."""
    fed: dict[str, str] = {}
    earlier: list[str] = []
    for stage in config.stages:
        players = [stage.role] + ([stage.completion.formatter] if stage.completion else [])
        target = config.roles.get(stage.role)
        if target is not None and target.models:
            for role in {*earlier, *players}:
                if role in config.roles and not config.roles[role].models:
                    fed.setdefault(role, stage.role)
        earlier += players
    return fed


def cast(config: StudyConfig) -> dict[str, dict[str, RoleConfig]]:
    """Role -> model label -> the role as played for that label; ``{"": role}`` for a role one
    model plays for every label (every role of a study without ``models``)."""
    fed = feeding_roles(config)
    out: dict[str, dict[str, RoleConfig]] = {}
    for name, role in config.roles.items():
        if role.models:
            out[name] = role.variants()
        elif name in fed and not role.shared:
            models = config.roles[fed[name]].variants()
            out[name] = {
                label: role.model_copy(update={k: getattr(model, k) for k in _PLAYER_FIELDS})
                for label, model in models.items()
            }
        else:
            out[name] = {"": role}
    return out


@dataclass(frozen=True)
class Casting:
    """Who answers one stage (or formats its answers) for one model label.

    Attributes:
        stage: The stage.
        role: The role acting.
        label: The model label ("" when one model plays the role for every label).
        model: ``backend:model`` as configured (``default`` for the backend's own).
        formats: True for the formatter of a completion stage.
    """

    stage: str
    role: str
    label: str
    model: str
    formats: bool = False


def castings(config: StudyConfig) -> list[Casting]:
    """Every stage's player, and formatter, per model label, in stage order."""
    roles = cast(config)
    out: list[Casting] = []
    for stage in config.stages:
        acting = [(stage.role, False)]
        if stage.completion is not None:
            acting.append((stage.completion.formatter, True))
        for role, formats in acting:
            for label, played in roles.get(role, {}).items():
                model = f"{played.backend}:{played.model or 'default'}"
                out.append(Casting(stage.name, role, label, model, formats))
    return out
