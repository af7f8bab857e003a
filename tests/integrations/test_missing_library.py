"""Without its library, each integration says in one line what to install, with a command
that works from the package index (and the checkout's extra beside it); the requirements it
names are ``pyproject.toml``'s extras."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from loopbreak._config import tomllib
from loopbreak._errors import LoopbreakError
from loopbreak._extras import EXTRAS, MissingDependency, install_command, install_hint, missing
from support import REPO

# module, the imports made to fail, what the message names, the extra, what to run after import
CASES = [
    ("openai", ["openai"], "the openai SDK", "openai", None),
    ("litellm", ["litellm"], "litellm", "litellm", None),
    ("langchain", ["langchain"], "LangChain v1 (agent middleware)", "langchain", None),
    ("openai_agents", ["agents"], "openai-agents", "agents", None),
    ("pydantic_ai", ["pydantic_ai"], "pydantic-ai", "pydantic-ai", None),
    # These two import without their library (the vLLM processor's unit tests run so); using
    # them is what asks for it.
    ("transformers", ["torch", "transformers"], "torch", "transformers",
     "module.LoopStoppingCriteria(object())"),
    ("vllm", ["vllm", "transformers", "torch"], "vLLM", "vllm",
     "module.load_tokenizer(SimpleNamespace(model_config=SimpleNamespace(tokenizer='x')))"),
]

SCRIPT = """
import importlib, json, sys
from types import SimpleNamespace
for name in {blocked!r}:
    sys.modules[name] = None  # import of it fails, as if it were not installed
try:
    module = importlib.import_module("loopbreak.integrations.{module}")
    {action}
except ImportError as exc:
    print(json.dumps({{"types": [c.__name__ for c in type(exc).__mro__], "message": str(exc),
                       "name": exc.name}}))
else:
    print("null")
"""


def _attempt(module: str, blocked: list[str], action: str | None) -> Any:
    code = SCRIPT.format(blocked=blocked, module=module, action=action or "pass")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.parametrize("module, blocked, library, extra, action", CASES,
                         ids=[case[0] for case in CASES])
def test_without_its_library_an_integration_names_the_install_command(
        module: str, blocked: list[str], library: str, extra: str, action: str | None) -> None:
    if action is not None:  # imports without the library; the failure comes from using it
        assert _attempt(module, blocked, None) is None
    raised = _attempt(module, blocked, action)
    assert raised is not None, f"loopbreak.integrations.{module} worked without {blocked}"
    assert raised["message"] == (f"loopbreak.integrations.{module} needs {library}: "
                                 f"{install_hint(extra)}")
    assert "\n" not in raised["message"]
    assert {"MissingDependency", "ModuleNotFoundError", "LoopbreakError"} <= set(raised["types"])
    assert raised["name"].split(".")[0] in blocked


def test_the_message_names_a_command_from_the_index_and_the_checkouts_extra() -> None:
    assert install_hint("pydantic-ai") == (
        f"{install_command('pydantic-ai')} (or, from a loopbreak checkout, "
        "pip install '.[pydantic-ai]')")
    assert install_command("openai") == "pip install 'openai>=1.40'"
    # Requirements behind an environment marker (uvloop, a Python-only peer) are left out.
    assert "uvloop" not in install_command("proxy") and "aiohttp" in install_command("proxy")
    assert install_hint("proxy", "openai").endswith("pip install '.[proxy,openai]')")
    error = missing("loopbreak proxy", "uvicorn", "proxy", ModuleNotFoundError(name="uvicorn"))
    assert isinstance(error, ModuleNotFoundError) and isinstance(error, LoopbreakError)
    assert isinstance(error, MissingDependency) and error.name == "uvicorn"


def test_the_requirements_are_pyprojects_extras() -> None:
    with open(REPO / "pyproject.toml", "rb") as f:
        extras = tomllib.load(f)["project"]["optional-dependencies"]
    tools = {"test", "test-integrations", "dev"}
    assert set(EXTRAS) == set(extras) - tools
    for name, requirements in EXTRAS.items():
        assert list(requirements) == extras[name], name
