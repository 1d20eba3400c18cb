"""The test session's setup (tests/conftest.py): 8 CPU devices, a default mesh over one of them unless a
test is marked multi_device, and a compilation cache of the tests' own."""

import os
import types

import jax
import pytest

from lmprobe.engine import default_devices, make_mesh


def test_a_test_gets_a_one_device_default_mesh_and_can_name_all_eight():
    assert jax.device_count() == 8
    assert default_devices() == jax.devices()[:1] and make_mesh().size == 1
    assert make_mesh(devices=jax.devices()).size == 8


@pytest.mark.multi_device
def test_a_multi_device_test_gets_all_eight():
    assert default_devices() == jax.devices() and dict(make_mesh(model_parallel=2).shape) == {"data": 4, "model": 2}


def test_every_compiled_program_goes_to_the_tests_cache_the_front_ends_share():
    directory = jax.config.jax_compilation_cache_dir
    assert directory and os.environ["LMPROBE_COMPILATION_CACHE"] == directory
    assert directory != os.path.join(os.path.expanduser("~"), ".cache", "lmprobe", "jax")  # not the user's runs'
    assert jax.config.jax_persistent_cache_min_compile_time_secs == 0


@pytest.mark.skipif(not os.path.exists("/proc/sys/vm/max_map_count"), reason="Linux's limit on memory mappings")
def test_a_module_ending_past_the_bound_clears_jax_caches_and_the_bound_leaves_a_module_room(monkeypatch):
    import tests.conftest as session

    with open("/proc/sys/vm/max_map_count") as limit:
        assert session.MAPPINGS_BOUND + 35_000 < int(limit.read())  # the most one module added: 33,000
    assert session.memory_mappings() > 100  # counted here (the interpreter's libraries alone map more)
    cleared = []
    monkeypatch.setattr(jax, "clear_caches", lambda: cleared.append(True))
    one, other = types.SimpleNamespace(module=object()), types.SimpleNamespace(module=object())
    past, under = session.MAPPINGS_BOUND + 1, session.MAPPINGS_BOUND
    for mappings, nextitem, clears in ((past, other, 1), (past, one, 0), (under, other, 0), (past, None, 0)):
        monkeypatch.setattr(session, "memory_mappings", lambda mappings=mappings: mappings)
        session.pytest_runtest_teardown(one, nextitem)
        assert len(cleared) == clears, (mappings, nextitem)
        cleared.clear()


def test_a_job_the_session_did_not_start_names_the_marker_to_add(started_early):
    """Jobs a ``starts_early`` marker names start with the session (tests/engine/test_multiprocess.py's); asking for
    one no selected test marked is an error that says which marker to add."""
    with pytest.raises(KeyError, match=r"mark the test @pytest.mark.starts_early\('tests.nowhere:start'\)"):
        started_early("tests.nowhere:start")
