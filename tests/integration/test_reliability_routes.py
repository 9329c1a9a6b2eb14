"""Hostile requests against the plugin's routes (property-based), through TensorBoard's own WSGI app.

Every answer is a 200 with well-formed JSON (or the bundle, byte for byte), or a 400/404 with a
plain-text message: never a 5xx, never a file other than the two bundle files.
"""

from __future__ import annotations

import json
import os

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from support.eventwriters import write_scalars
from support.plugin_harness import PREFIX, backend, tb_flags
from tb_crash_signals.tb_plugin import plugin as plugin_mod

HOSTILE_RUNS = [
    "<img src=x onerror=alert(1)>",
    "a\x1b[31mred\x07\tb\nc",
    "\u202eevil\u202c.exe",
    "e\u0301\u0301\u0301 🔥 combining",
    "x" * 200,
]
ROUTES = ["runs", "analysis", "rules", "sweep", "index.js", "index.css"]
SETTINGS = settings(
    max_examples=150, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("logdir"))
    for i, name in enumerate(["ok"] + HOSTILE_RUNS):
        write_scalars(os.path.join(root, name), {"loss": [(s, 1.0 / (s + 1 + i)) for s in range(40)]})
    with backend("python", tb_flags(logdir=root)) as s:
        yield s


def _bundle(name):
    with open(os.path.join(plugin_mod.STATIC_DIR, name), "rb") as f:
        return f.read()


def _get(served, path_info, query=b"", method="GET"):
    """A request with a raw PATH_INFO and QUERY_STRING (no client-side normalisation)."""
    return served.client.open(
        "/", method=method,
        environ_overrides={"PATH_INFO": path_info, "QUERY_STRING": query.decode("latin-1")},
    )


def _check(r, route=None):
    assert r.status_code in (200, 400, 404, 405), (r.status_code, r.get_data()[:300])
    body = r.get_data()
    if r.status_code != 200:
        assert r.mimetype == "text/plain" and body.strip(), r.status_code
        return None
    if route in ("index.js", "index.css"):
        assert body == _bundle(route)
        return None
    assert r.mimetype == "application/json"
    assert b"<" not in body and b">" not in body  # escaped as \u003c / \u003e
    return json.loads(body)


query_piece = st.one_of(
    st.sampled_from([
        "run", "run=", "run=ok", "=", "&", "&&", ";", "%", "%Z", "%ZZ", "%00", "%ff%fe", "%C0%AF", "%E2%80%AE",
        "run=..%2F..%2Fetc%2Fpasswd", "run=/etc/passwd", "run=.", "run=..", "run[]=ok", "RUN=ok",
        "run=%3Cimg%20src%3Dx%20onerror%3Dalert(1)%3E", "x=1", "run=ok&run=ok", "run=\x00", "+", "run=a+b",
    ]),
    st.text(max_size=30).map(lambda t: t.encode("utf-8", "surrogatepass").decode("latin-1")),
    st.integers(1, 20000).map(lambda n: "run=" + "A" * n),
)


@SETTINGS
@given(st.sampled_from(ROUTES), st.lists(query_piece, max_size=5))
def test_random_query_strings_never_500(served, route, pieces):
    q = "&".join(pieces).encode("latin-1")
    r = _get(served, PREFIX + route, q)
    payload = _check(r, route)
    if route == "analysis" and r.status_code == 200:
        assert payload["run"] in ["ok", "."] + HOSTILE_RUNS
    if route in ("runs", "rules") and q:
        assert r.status_code in (200, 400)


@SETTINGS
@given(st.text(max_size=60))
@example(tail="sweep")  # a route, found by this test once the sweep view was added
def test_unknown_sub_paths_are_404(served, tail):
    path = (PREFIX + tail).encode("utf-8", "surrogatepass").decode("latin-1")
    r = _get(served, path)
    if tail.rstrip("/") in ROUTES:
        return
    if tail in ("runs", "rules", "sweep") or tail.startswith(("runs?", "rules?", "sweep?")):
        return
    assert r.status_code in (404, 405), (tail, r.status_code)
    assert r.get_data().strip()


@pytest.mark.parametrize(
    "tail",
    [
        "index.js/", "index.js/..", "index.js/../plugin.py", "../plugin.py", "..%2fplugin.py", "static/index.js",
        "index.js%00", "index.js\x00.py", "INDEX.JS", "index.map", "index.js.map", "./index.js/x", "%2e%2e/setup.py",
        "index.css/../../../../etc/passwd", "plugin.py", "loader.py", "__init__.py", "static", "static/",
        "//etc/passwd",
    ],
)
def test_static_routes_serve_only_their_two_files(served, tail):
    r = _get(served, PREFIX + tail)
    if r.status_code == 200:  # werkzeug may normalise e.g. a trailing slash: then it must be the file
        assert r.get_data() in (_bundle("index.js"), _bundle("index.css")), tail
    else:
        assert r.status_code in (404, 405)


@pytest.mark.parametrize("name", ["ok"] + HOSTILE_RUNS)
def test_hostile_run_names_round_trip(served, name):
    import urllib.parse

    runs = _check(_get(served, PREFIX + "runs"))
    assert name in {r["run"] for r in runs["runs"]}
    a = _check(_get(served, PREFIX + "analysis", ("run=" + urllib.parse.quote(name, safe="")).encode()))
    assert a["run"] == name and a["health"] == "ok"


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"])
@pytest.mark.parametrize("route", ROUTES + ["nope"])
def test_other_methods_never_500(served, method, route):
    r = _get(served, PREFIX + route, b"run=ok", method=method)
    assert r.status_code < 500, (method, route, r.status_code)


def test_huge_and_repeated_parameters(served):
    _check(_get(served, PREFIX + "analysis", b"run=" + b"%41" * 300000))
    r = _get(served, PREFIX + "analysis", b"&".join([b"run=ok"] * 1000))
    assert r.status_code == 400 and b"more than once" in r.get_data()
    r = _get(served, PREFIX + "runs", b"&".join(b"k%d=v" % i for i in range(5000)))
    assert r.status_code == 400 and len(r.get_data()) < 500
    r = _get(served, PREFIX + "analysis", b"run=" + b"x" * 100000)
    assert r.status_code == 404 and len(r.get_data()) < 500  # the name is not echoed in full
