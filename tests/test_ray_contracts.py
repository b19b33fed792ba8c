"""Ray's private APIs ModSAR relies on, held to the installed Ray (fast: no cluster is started). A Ray upgrade
that moves one of them fails here, by name, instead of letting a local search reach the network again or a
Ctrl-C end one Tuner only.

- modsar.sweep.cluster.quiet_dashboard swaps the module attribute `ray._private.services.start_api_server`:
  that works only while Ray's Node calls the dashboard's starter through that attribute.
- modsar.sweep.interrupt sets TUNE_DISABLE_SIGINT_HANDLER, so that Tune leaves SIGINT to it, and calls the
  SIGUSR1 handler Tune installs for a fit, which saves the search's state and ends the fit.
- modsar.sweep.ray_session._loopback_only sets Ray's local-only switch (ray_constants.ENABLE_RAY_CLUSTER and
  its environment variable).
"""

from __future__ import annotations

import inspect
import os
import re
import signal
import threading
from pathlib import Path

import pytest

from modsar.errors import ModsarError
from modsar.sweep.cluster import TESTED_RAY, quiet_dashboard, ray_hook


def test_ray_nodes_start_the_dashboard_through_the_attribute_quiet_dashboard_swaps():
    from ray._private import node, services

    assert callable(services.start_api_server)
    starts = inspect.getsource(node.Node.start_api_server)
    # looked up on the module at each call (`ray._private.services.start_api_server(...)`), not bound by a
    # `from ... import` when node.py was imported: only then does the swap reach the Node
    assert re.search(r"\bservices\.start_api_server\(", starts), starts
    assert not re.search(
        r"^\s*from ray\._private\.services import .*start_api_server", inspect.getsource(node), re.M
    )
    assert "self.start_api_server(" in inspect.getsource(node.Node.start_head_processes)


def test_quiet_dashboard_starts_the_dashboard_behind_a_dead_proxy_and_puts_ray_back(monkeypatch):
    from ray._private import services

    seen = {}

    def fake_start(*args, **kwargs):
        seen.update(args=args, https=os.environ.get("https_proxy"), no_proxy=os.environ.get("no_proxy"))
        return "url", "process"

    monkeypatch.setattr(services, "start_api_server", fake_start)
    monkeypatch.delenv("https_proxy", raising=False)
    with quiet_dashboard():
        assert services.start_api_server is not fake_start
        assert services.start_api_server(1, 2) == ("url", "process")  # as Ray's Node calls it
        assert os.environ.get("https_proxy") is None  # the other Ray processes: the environment as it was
    assert services.start_api_server is fake_start
    assert seen["args"] == (1, 2) and re.fullmatch(r"http://127\.0\.0\.1:\d+", seen["https"])
    assert "127.0.0.1" in seen["no_proxy"]


def test_a_ray_without_the_dashboard_hook_is_refused_in_one_line_naming_the_supported_ray(monkeypatch):
    from ray._private import services

    monkeypatch.delattr(services, "start_api_server")
    with pytest.raises(ModsarError) as refused, quiet_dashboard():
        pytest.fail("entered without Ray's hook")
    message = str(refused.value)
    assert "\n" not in message and "ray._private.services.start_api_server" in message
    assert f"tested with {TESTED_RAY}" in message and ">=2.44" in message
    with pytest.raises(ModsarError, match=r"has no ray\._private\.nothing_here\.x"):
        ray_hook("ray._private.nothing_here", "x")


def test_the_tested_ray_is_the_one_installed_or_a_newer_one_the_contracts_still_hold_for():
    """TESTED_RAY is what the error message recommends: it must be a release these contracts were run on."""
    import ray

    def version(text: str) -> tuple[int, ...]:
        return tuple(int(part) for part in re.findall(r"\d+", text)[:3])

    assert version(TESTED_RAY) <= version(ray.__version__), (TESTED_RAY, ray.__version__)


def test_tune_reads_the_sigint_switch_and_installs_its_sigusr1_handler_for_every_fit():
    from ray.tune import tune
    from ray.tune.impl import tuner_internal

    catching = inspect.getsource(tune._setup_signal_catching)
    assert 'os.getenv("TUNE_DISABLE_SIGINT_HANDLER"' in catching and "signal.SIGUSR1" in catching
    assert "_setup_signal_catching()" in inspect.getsource(tune.run)
    assert tuner_internal.run is tune.run  # Tuner.fit runs through tune.run


@pytest.mark.skipif(
    threading.current_thread() is not threading.main_thread(), reason="signal handlers: main thread only"
)
def test_tunes_signal_handling_does_what_the_interrupt_module_expects():
    """With the switch set Tune leaves SIGINT alone; its SIGUSR1 handler, called by hand as
    interrupt._CtrlC calls it, marks the fit interrupted and puts back the SIGINT handler it found."""
    from ray.tune import tune

    def ours(signum, frame):
        raise AssertionError("not called here")

    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGUSR1)}
    previous_switch = os.environ.get("TUNE_DISABLE_SIGINT_HANDLER")
    try:
        os.environ["TUNE_DISABLE_SIGINT_HANDLER"] = "1"
        signal.signal(signal.SIGINT, ours)
        interrupted = tune._setup_signal_catching()
        assert signal.getsignal(signal.SIGINT) is ours  # the switch is read: SIGINT stays ours
        tune_stop = signal.getsignal(signal.SIGUSR1)
        assert callable(tune_stop) and tune_stop is not saved[signal.SIGUSR1]
        assert not interrupted.is_set()
        tune_stop(signal.SIGUSR1, None)
        assert interrupted.is_set() and signal.getsignal(signal.SIGINT) is ours

        os.environ["TUNE_DISABLE_SIGINT_HANDLER"] = "0"  # without the switch, Tune takes SIGINT itself
        tune._setup_signal_catching()
        assert signal.getsignal(signal.SIGINT) is not ours
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
        if previous_switch is None:
            os.environ.pop("TUNE_DISABLE_SIGINT_HANDLER", None)
        else:
            os.environ["TUNE_DISABLE_SIGINT_HANDLER"] = previous_switch


def test_rays_local_only_switch_is_where_the_tuner_sets_it():
    from ray._private import ray_constants, services

    assert isinstance(ray_constants.ENABLE_RAY_CLUSTERS_ENV_VAR, str)
    assert isinstance(ray_constants.ENABLE_RAY_CLUSTER, bool)
    # read at each call (the driver's node address), so that setting the constant for a while takes effect
    assert "ray_constants.ENABLE_RAY_CLUSTER" in inspect.getsource(services.get_node_ip_address)


def test_the_supported_ray_said_in_the_refusal_is_the_one_pyproject_asks_for():
    """The bound and the tested version the refusal names (modsar.sweep.cluster.ray_hook) are pyproject's."""
    text = (Path(__file__).parents[1] / "pyproject.toml").read_text()
    assert re.findall(r'^\s*"(ray\[[^"]*)",(.*)$', text, re.M) == [
        (
            "ray[default,tune]>=2.44",
            f"  # tested with {TESTED_RAY}: tests/test_ray_contracts.py holds Ray's private hooks",
        )
    ]
