"""The Crash Signals TensorBoard plugin: its routes.

Each route checks its query, calls the `AnalysisService` with plain values
(TensorBoard's request context, the experiment id, the run name) and responds;
analysis and caching live in the service, the tab's assets in `static/`.

Routes (under ``/data/plugin/crash_signals/``, see docs/http_api.md): ``runs``,
``analysis?run=R``, ``rules``, ``sweep``, ``index.js``, ``index.css``.
"""

from __future__ import annotations

import logging
import os

from tensorboard import errors, plugin_util
from tensorboard.backend import http_util
from tensorboard.plugins import base_plugin
from werkzeug import wrappers

from tb_crash_signals.tb_plugin.data import DEFAULT_SCALAR_SAMPLES
from tb_crash_signals.tb_plugin.locator import RunLocator
from tb_crash_signals.tb_plugin.metadata import CONFIG_FLAG, PLUGIN_NAME, SCALARS_PLUGIN, TAB_NAME
from tb_crash_signals.tb_plugin.service import AnalysisService, Limits
from tb_crash_signals.tb_plugin.state import ConfigState, dumps
from tb_crash_signals.tb_plugin.sweep import SweepAnswers, failed_sweep

STATIC_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "static")

logger = logging.getLogger("tensorboard")


class CrashSignalsPlugin(base_plugin.TBPlugin):
    """Ranks runs by crash signals and serves each run's findings and curves."""

    plugin_name = PLUGIN_NAME
    limits = Limits()

    def __init__(self, context):
        flags = context.flags
        logdir = getattr(flags, "logdir", None) if flags is not None else None
        logdir = logdir or getattr(context, "logdir", None)
        spec = getattr(flags, "logdir_spec", None) if flags is not None else None
        reload_interval = getattr(flags, "reload_interval", 5.0) if flags is not None else 5.0
        locator = RunLocator(logdir, spec, listing_interval=float(reload_interval or 0))
        explicit = getattr(flags, CONFIG_FLAG, None) if flags is not None else None
        hints = context.sampling_hints
        if hints is None and flags is not None:
            hints = getattr(flags, "samples_per_plugin", None)
        capacity = (hints or {}).get(SCALARS_PLUGIN, DEFAULT_SCALAR_SAMPLES)
        self.service = AnalysisService(
            context.data_provider, locator, ConfigState(locator, explicit), capacity, self.limits
        )
        self.sweeps = SweepAnswers(context.data_provider, locator)
        self._assets: dict[str, tuple] = {}

    # -- TBPlugin -----------------------------------------------------------

    def get_plugin_apps(self):
        return {
            "/runs": self._json_route(
                self._runs, (), lambda request, message: self.service.runs_failed(message)
            ),
            "/analysis": self._json_route(
                self._analysis, ("run",),
                lambda request, message: self.service.analysis_failed(request.args.get("run"), message),
            ),
            "/rules": self._json_route(
                self._rules, (), lambda request, message: self.service.rules_failed(message)
            ),
            "/sweep": self._json_route(self._sweep, (), lambda request, message: failed_sweep(message)),
            "/index.js": self._asset_route("index.js", "text/javascript"),
            "/index.css": self._asset_route("index.css", "text/css"),
        }

    def is_active(self):
        return False  # enabled by data_plugin_names: whenever there are scalars

    def data_plugin_names(self):
        return (SCALARS_PLUGIN,)

    def frontend_metadata(self):
        return base_plugin.FrontendMetadata(es_module_path="/index.js", tab_name=TAB_NAME)

    # -- routes -------------------------------------------------------------

    def _runs(self, request, ctx, eid):
        with self.service.worker.foreground():
            return self.service.runs(ctx, eid)

    def _analysis(self, request, ctx, eid):
        name = request.args.get("run")
        if name is None:
            raise errors.InvalidArgumentError("missing required parameter 'run' (a run name from ./runs)")
        with self.service.worker.foreground():
            return self.service.analysis(ctx, eid, name)

    def _sweep(self, request, ctx, eid):
        with self.service.worker.foreground():
            listing = self.service.runs(ctx, eid)
            return self.sweeps.payload(ctx, eid, listing, self.service.logical_runs(ctx, eid))

    def _rules(self, request, ctx, eid):
        return self.service.rules()

    def _json_route(self, answer, params, fallback):
        """A JSON route: rejects unknown or repeated parameters (400), answers with
        `answer(request, ctx, eid)`, or with `fallback(request, message)` when that raised."""
        allowed = set(params)

        @wrappers.Request.application
        def app(request):
            unknown = sorted(k for k in request.args if k not in allowed)
            if unknown:
                expected = ", ".join(sorted(allowed)) or "none"
                raise errors.InvalidArgumentError(f"unknown query parameter {unknown[0]!r} (expected: {expected})")
            for k in allowed:
                if len(request.args.getlist(k)) > 1:
                    raise errors.InvalidArgumentError(f"parameter {k!r} given more than once")
            ctx = plugin_util.context(request.environ)
            eid = plugin_util.experiment_id(request.environ)
            try:
                payload = answer(request, ctx, eid)
            except errors.PublicError:
                raise
            except Exception as e:
                logger.exception("crash_signals: %s failed", request.path)
                try:
                    payload = fallback(request, f"internal error: {type(e).__name__}: {e}")
                except Exception:
                    logger.exception("crash_signals: fallback for %s failed", request.path)
                    return http_util.Respond(
                        request,
                        "Crash Signals could not answer this request; see TensorBoard's log.",
                        "text/plain",
                        code=503,
                    )
            text = payload if isinstance(payload, str) else dumps(payload)
            return http_util.Respond(request, text, "application/json")

        return app

    def _asset_route(self, name, content_type):
        @wrappers.Request.application
        def app(request):
            body = self._read_asset(name)
            if body is None:
                return http_util.Respond(
                    request,
                    f"Crash Signals: the frontend bundle static/{name} is missing from the "
                    "tb_crash_signals package. Build it with `npm ci && npm run build` in "
                    "frontend/ (or reinstall the package with `pip install .`).",
                    "text/plain",
                    code=404,
                )
            return http_util.Respond(request, body, content_type)

        return app

    def _read_asset(self, name):
        path = os.path.join(STATIC_DIR, name)  # `name` is one of two constants
        try:
            st = os.stat(path)
        except OSError:
            return None
        key = (st.st_mtime_ns, st.st_size)
        cached = self._assets.get(name)
        if cached is not None and cached[0] == key:
            return cached[1]
        try:
            with open(path, "rb") as f:
                body = f.read()
        except OSError:
            return None
        self._assets[name] = (key, body)
        return body
