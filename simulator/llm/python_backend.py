"""An in-process decision tool: ``module:function`` (an in-house scikit-learn or rules model).

The function is called with the call's inputs as keywords, ``document``, ``system`` and
``fields`` (see :mod:`simulator.llm.decision_tools`; it may take only those it names, or
``**inputs``), and returns a dict, mapped to the stage's output fields by ``response`` paths
like the ``http`` backend's reply. It runs in a worker thread, so a slow model does not hold
the event loop; an exception it raises is a recorded per-call error, not a crashed run.

The module is imported when the role is checked: a module that cannot be imported, or a name
that is not a function in it, is exit 2 naming ``options.function``. The identity (the cache
key and the manifest) names the function and a digest of its module's source, so editing the
model's code asks every call again on resume or replay; a model read from a file the module
loads is not covered: name its version in ``model:``.
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from biasim.registry import load_target
from biasim.simulator.llm.answer_paths import parse_mapping
from biasim.simulator.llm.decision_tools import (
    TOOL_INPUTS,
    mapping_identity,
    tool_answer,
    tool_inputs,
)
from biasim.simulator.llm.egress import NO_EGRESS, Egress
from biasim.simulator.llm.errors import BackendConfigError, FatalBackendError
from biasim.simulator.llm.http_common import check_options, clip_message, option_str
from biasim.simulator.llm.types import LLMRequest, LLMResponse

_OPTIONS = {"function", "response"}
_TARGET = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*")


def load_function(options: dict[str, Any]) -> Callable[..., Any]:
    """The ``function`` option imported.

    Raises:
        BackendConfigError: Malformed, not importable, or not a callable; names the reason.
    """
    target = option_str(options, "function")
    field = "options.function"
    if target is None or not _TARGET.fullmatch(target):
        raise BackendConfigError(
            "the python backend needs `function: module:function` (e.g. `mymodels.screen:score`)",
            field=field,
        )
    try:
        function = load_target(target)
    except ModuleNotFoundError as exc:
        raise BackendConfigError(
            f"cannot import `{target}`: no module `{exc.name}` on the Python path "
            "(install the package, or add its folder to PYTHONPATH)",
            field=field,
        ) from None
    except AttributeError:
        module = target.partition(":")[0]
        raise BackendConfigError(
            f"module `{module}` has no `{target.partition(':')[2]}`", field=field
        ) from None
    except Exception as exc:  # the user's module failed while importing
        raise BackendConfigError(
            f"importing `{target}` failed: {type(exc).__name__}: {clip_message(str(exc))}",
            field=field,
        ) from None
    if not callable(function):
        raise BackendConfigError(f"`{target}` is not a function", field=field)
    return function


def _inputs_taken(function: Callable[..., Any]) -> tuple[str, ...]:
    """The inputs ``function`` names (all of them when it takes ``**kwargs``)."""
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return TOOL_INPUTS
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return TOOL_INPUTS
    names = {p.name for p in parameters}
    return tuple(name for name in TOOL_INPUTS if name in names)


def _source_digest(function: Callable[..., Any]) -> str | None:
    try:
        path = inspect.getsourcefile(function)
    except TypeError:
        return None
    if path is None or not Path(path).is_file():
        return None
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]


class PythonBackend:
    """Call ``module:function`` in this process.

    Options:
        function: ``module:function`` (required).
        response: Output field -> path in the returned dict; default: the dict is the answer.
    """

    name = "python"
    synthetic = False
    reasks = False
    default_concurrency = 4

    def __init__(self, role: Any) -> None:
        options = dict(role.options)
        check_options(options, _OPTIONS, self.name)
        self.target = str(options["function"]).strip() if "function" in options else ""
        self._function = load_function(options)
        self._takes = _inputs_taken(self._function)
        self.mapping = parse_mapping(options.get("response"), "options.response")
        self.model = str(role.model or self.target)
        self._digest = _source_digest(self._function)

    @classmethod
    def egress(cls, role: Any) -> Egress:
        """Nothing leaves the process; the options are checked (the module imported)."""
        options = dict(role.options)
        check_options(options, _OPTIONS, cls.name)
        load_function(options)
        parse_mapping(options.get("response"), "options.response")
        return NO_EGRESS

    def identity(self) -> dict[str, Any]:
        """The function, its module's source digest, the mapping and ``model``."""
        return {
            "backend": self.name,
            "model": self.model,
            "function": self.target,
            "source_sha256": self._digest,
            "response": mapping_identity(self.mapping),
        }

    async def generate(self, request: LLMRequest) -> LLMResponse:
        """The function's answer, computed in a worker thread.

        Raises:
            FatalBackendError: The function raised, or returned no mappable answer.
        """
        inputs = tool_inputs(request).context()
        kwargs = {name: inputs[name] for name in self._takes}
        try:
            if inspect.iscoroutinefunction(self._function):
                reply = await self._function(**kwargs)
            else:
                reply = await asyncio.to_thread(self._function, **kwargs)
        except Exception as exc:  # the model's own failure is this call's recorded error
            raise FatalBackendError(
                f"{self.target} raised {type(exc).__name__}: {clip_message(str(exc))}"
            ) from None
        return tool_answer(reply, self.mapping)

    async def aclose(self) -> None:
        """Nothing to release."""
