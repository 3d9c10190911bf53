"""An in-process decision tool: ``module:function`` (an in-house scikit-learn or rules model).

The function is called with the call's inputs as keywords, ``document``, ``system`` and
``fields`` (see :mod:`simulator.llm.decision_tools`; it may take only those it names, or
``**inputs``), and returns a dict, mapped to the stage's output fields by ``response`` paths
like the ``http`` backend's reply. It runs in a worker thread, so a slow model does not hold
the event loop; an exception it raises is a recorded per-call error, not a crashed run.

A study naming a function names code to run, so the run needs the user's trust in its module
(``--trust-backend python:MODULE``, or ``trust_backends`` in the user's config file), as a
backend that cannot declare where it connects does. Validation checks the option without
running anything (a malformed target or a module not on the Python path is exit 2 naming
``options.function``); the module is imported when the run builds its backends, after the
trust check, where an import that fails or a name that is no function is exit 2 too.

The identity (the cache key and the manifest) names the function and a digest of its module's
source, so editing the model's code asks every call again on resume or replay; a model read
from a file the module loads is not covered: name its version in ``model:``.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib.util
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
from biasim.simulator.llm.egress import Egress
from biasim.simulator.llm.errors import BackendConfigError, FatalBackendError
from biasim.simulator.llm.http_common import check_options, clip_message, option_str
from biasim.simulator.llm.types import LLMRequest, LLMResponse

_OPTIONS = {"function", "response"}
_TARGET = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*")
_FIELD = "options.function"


def function_target(options: dict[str, Any]) -> str:
    """The ``function`` option, checked without running any code: a ``module:function`` whose
    top-level package is on the Python path (importing it would run it, which waits for the
    user's trust).

    Raises:
        BackendConfigError: Malformed, or no such module; names ``options.function``.
    """
    target = option_str(options, "function")
    if target is None or not _TARGET.fullmatch(target):
        raise BackendConfigError(
            "the python backend needs `function: module:function` (e.g. `mymodels.screen:score`)",
            field=_FIELD,
        )
    top = target.partition(":")[0].partition(".")[0]
    if importlib.util.find_spec(top) is None:
        raise BackendConfigError(
            f"cannot import `{target}`: no module `{top}` on the Python path (install the "
            "package, or add its folder to PYTHONPATH)",
            field=_FIELD,
        )
    return target


def load_function(target: str) -> Callable[..., Any]:
    """``target`` imported (the module's code runs).

    Raises:
        BackendConfigError: Not importable, or not a callable; names the reason.
    """
    module, _, name = target.partition(":")
    try:
        function = load_target(target)
    except ModuleNotFoundError as exc:
        raise BackendConfigError(
            f"cannot import `{target}`: no module `{exc.name}` on the Python path",
            field=_FIELD,
        ) from None
    except AttributeError:
        raise BackendConfigError(f"module `{module}` has no `{name}`", field=_FIELD) from None
    except Exception as exc:  # the user's module failed while importing
        raise BackendConfigError(
            f"importing `{target}` failed: {type(exc).__name__}: {clip_message(str(exc))}",
            field=_FIELD,
        ) from None
    if not callable(function):
        raise BackendConfigError(f"`{target}` is not a function", field=_FIELD)
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
        self.target = function_target(options)
        self._function = load_function(self.target)
        self._takes = _inputs_taken(self._function)
        self.mapping = parse_mapping(options.get("response"), "options.response")
        self.model = str(role.model or self.target)
        self._digest = _source_digest(self._function)

    @classmethod
    def egress(cls, role: Any) -> Egress:
        """The options checked, nothing imported: the function is code the study names, which
        may do anything (read keys, open sockets the run's guard then refuses), so it runs only
        once the user trusts its module (``--trust-backend python:MODULE``)."""
        options = dict(role.options)
        check_options(options, _OPTIONS, cls.name)
        target = function_target(options)
        parse_mapping(options.get("response"), "options.response")
        return Egress(undeclared=f"python:{target.partition(':')[0]}")

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
