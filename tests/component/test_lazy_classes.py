"""papermill's classes are resolved before notebooks run in several threads (`batch --jobs 2`): in a fresh interpreter
some of their traits name a class by string, to be resolved on the first instance, where two threads race
(toolkit.jupyter.kernels.resolve_lazy_classes); after the call none does, the kernel client's included."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.process

NAMED_BY_STRING = """
import json
from jupyter_client.asynchronous import AsyncKernelClient
from papermill.clientwrap import PapermillNotebookClient
from toolkit.jupyter.kernels import SameSessionKernelManager, SameSessionProvisioner, resolve_lazy_classes
classes = [PapermillNotebookClient, SameSessionKernelManager, AsyncKernelClient, SameSessionProvisioner]
def named():
    return sorted(f"{c.__name__}.{name}" for c in classes for name, trait in c.class_traits().items()
                  if isinstance(getattr(trait, "klass", None), str))
before = named()
resolve_lazy_classes()
print(json.dumps([before, named()]))
"""


def test_every_class_a_notebook_run_names_by_string_is_resolved_in_one_thread() -> None:
    done = subprocess.run([sys.executable, "-c", NAMED_BY_STRING], cwd=REPO, capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    before, after = json.loads(done.stdout)
    assert {"PapermillNotebookClient.parent", "SameSessionKernelManager.session",
            "SameSessionKernelManager.client_factory", "AsyncKernelClient.session",
            "SameSessionProvisioner.kernel_spec"} <= set(before)  # fmt: skip
    assert after == []
