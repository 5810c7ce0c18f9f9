"""Suite-wide: tests that only mean something for uid 0 (what root inside a sandbox can do,
giving files to other users) carry the ``root_only`` marker. CI runs the suite as root and
again as an unprivileged user; in the unprivileged pass they are deselected, not skipped,
and the summary says how many and why. With ``SBXC_TEST_NO_SKIP=1`` (set by .ci/run) a
skipped test fails the run: on CI every skip point's need (bwrap, Landlock, runc, the
toolchains) must be met by the set-up, never quietly passed over."""
import os
import sys

import pytest

# Test modules in any folder import the shared helpers as ``support.NAME`` (tests/support/).
_TESTS = os.path.dirname(os.path.abspath(__file__))
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)

_DESELECTED = []

# Every sbxc this suite runs keeps its plans, run journal and caches in a private root, never
# in the caller's real /var/tmp/sbxc-{uid}: suites running side by side then share nothing,
# and a test run leaves nothing in the real root (tests/test_private_root.py checks both).
if not os.environ.get("SBXC_ROOT"):
    import atexit
    import shutil
    import tempfile

    _ROOT_PARENT = tempfile.mkdtemp(prefix="sbxc-test-root-", dir="/var/tmp")
    os.environ["SBXC_ROOT"] = _ROOT_PARENT + "/root"

    def _drop_root():
        def writable(func, path, exc):
            try:
                os.chmod(os.path.dirname(path), 0o700)
                os.chmod(path, 0o700)
            except OSError:
                pass
            func(path)
        shutil.rmtree(_ROOT_PARENT, onerror=lambda f, p, e: writable(f, p, e) if os.path.lexists(p) else None)

    atexit.register(_drop_root)


def pytest_collection_modifyitems(config, items):
    if os.geteuid() == 0:
        return
    keep = [i for i in items if i.get_closest_marker("root_only") is None]
    gone = [i for i in items if i.get_closest_marker("root_only") is not None]
    if gone:
        _DESELECTED.extend(gone)
        config.hook.pytest_deselected(items=gone)
        items[:] = keep


def pytest_terminal_summary(terminalreporter):
    if _DESELECTED:
        terminalreporter.write_line(f"{len(_DESELECTED)} root-only tests deselected (not uid 0); the root pass runs them")


_REAL_ROOT = f"/var/tmp/sbxc-{os.getuid()}"
_REAL_BEFORE = set()


def _real_root_entries() -> set:
    """The entries of the caller's real default root and of its plans folder (names)."""
    out = set()
    for folder in (_REAL_ROOT, _REAL_ROOT + "/plans", _REAL_ROOT + "/plans/runs"):
        try:
            out.update(folder + "/" + n for n in os.listdir(folder))
        except OSError:
            pass
    return out


def _leaks(basetemp: str) -> list:
    """New entries of the real root that this run made: those naming a path of this run's
    temporary folders."""
    from support.rootscan import naming

    return naming(_real_root_entries() - _REAL_BEFORE, basetemp)


def pytest_sessionstart(session):
    _REAL_BEFORE.update(_real_root_entries())


def pytest_sessionfinish(session, exitstatus):
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    factory = getattr(session.config, "_tmp_path_factory", None)
    basetemp = str(factory.getbasetemp()) if factory is not None and factory._basetemp is not None else ""
    leaked = _leaks(basetemp) if basetemp else []
    if leaked and reporter is not None:
        # Every sbxc a test runs must keep its plans and caches in the suite's private root
        # (SBXC_ROOT above): a test that builds its own environment must pass it on.
        reporter.write_line(f"{len(leaked)} entries written into the real root {_REAL_ROOT} by this run:", red=True)
        for path in leaked[:20]:
            reporter.write_line(f"  {path}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    if os.environ.get("SBXC_TEST_NO_SKIP") != "1":
        return
    skipped = reporter.stats.get("skipped", []) if reporter is not None else []
    if skipped:
        reporter.write_line(f"SBXC_TEST_NO_SKIP=1: {len(skipped)} test(s) skipped, which CI does not allow:", red=True)
        for rep in skipped[:20]:
            reporter.write_line(f"  {rep.nodeid}: {rep.longrepr[-1] if isinstance(rep.longrepr, tuple) else rep.longrepr}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
