"""Notebooks a user can open (issue 18, acceptance 6): ``make lab`` serves JupyterLab on
notebooks/ with the project's kernel, and the committed outputs read well."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from rtalab.loadtests.common.procs import free_port
from tests.kinds import REPO

NOTEBOOKS = REPO / "notebooks"


def test_make_lab_runs_jupyterlab_on_the_notebooks() -> None:
    dry = subprocess.run(["make", "-n", "lab"], cwd=REPO, capture_output=True, text=True,
                         check=True).stdout
    assert "pip install -q -e '.[lab]'" in dry
    assert ".venv/bin/jupyter lab --notebook-dir=notebooks" in dry


def test_jupyterlab_serves_the_notebooks_with_the_project_kernel(tmp_path: Path) -> None:
    jupyter = Path(sys.executable).with_name("jupyter")
    port = free_port()
    env = dict(os.environ, JUPYTER_CONFIG_DIR=str(tmp_path / "cfg"),
               JUPYTER_RUNTIME_DIR=str(tmp_path / "rt"))
    p = subprocess.Popen([str(jupyter), "lab", "--notebook-dir=notebooks", "--no-browser",
                          f"--port={port}", "--ServerApp.token=", "--ServerApp.password=",
                          "--ServerApp.ip=127.0.0.1", "--allow-root"], cwd=REPO, env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{base}/api/kernelspecs", timeout=2) as r:
                    specs = json.load(r)
                break
            except OSError:
                assert p.poll() is None, "jupyter lab exited"
                assert time.monotonic() < deadline, "jupyter lab did not answer in 60 s"
                time.sleep(0.3)
        default = specs["kernelspecs"][specs["default"]]["spec"]
        # the project's kernel: this virtualenv's Python, which has rtalab installed
        assert Path(default["argv"][0]).resolve() == Path(sys.executable).resolve() or \
            default["argv"][0] == "python"
        with urllib.request.urlopen(f"{base}/api/contents", timeout=5) as r:
            names = {c["name"] for c in json.load(r)["content"]}
        assert {"capacity_planning.ipynb", "retry_storms.ipynb",
                "timeout_tuning.ipynb"} <= names
        with urllib.request.urlopen(f"{base}/lab", timeout=10) as r:
            assert r.status == 200
    finally:
        p.terminate()
        p.wait(timeout=20)


def _read(path: Path) -> Any:
    """``nbformat.read(path, as_version=4)``, nbformat imported on first use, not at
    collection: it imports jsonschema, whose optional rfc3987-syntax (installed with
    jupyterlab) builds its grammar on import, ~1.5 CPU-s in every xdist worker that
    collects this file (tests/test_notebooks.py likewise)."""
    import nbformat

    return nbformat.read(path, as_version=4)


@pytest.mark.parametrize("path", sorted(NOTEBOOKS.glob("*.ipynb")), ids=lambda p: p.stem)
def test_committed_outputs_are_for_people(path: Path) -> None:
    nb = _read(path)
    texts = []
    for c in nb.cells:
        for o in c.get("outputs", []) if c.cell_type == "code" else []:
            texts.append(o.get("text", "") + str(o.get("data", {}).get("text/plain", "")))
    joined = "\n".join(texts)
    assert "np.float64(" not in joined and "np.int64(" not in joined


def test_timeout_table_is_sorted() -> None:
    nb = _read(NOTEBOOKS / "timeout_tuning.ipynb")
    [table] = [o["data"]["text/plain"] for c in nb.cells if c.cell_type == "code"
               for o in c.get("outputs", []) if "spurious share" in
               str(o.get("data", {}).get("text/plain", ""))]
    timeouts = [float(line.split()[1]) for line in table.splitlines()[1:]]
    assert timeouts == sorted(timeouts) and len(timeouts) == 6
