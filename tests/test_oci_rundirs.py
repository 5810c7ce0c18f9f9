"""Where an OCI run's bundle goes: the plans folder's own ``runs`` folder, made private
when missing, and never an entry there that is not this user's private folder."""
import os

from sbxc.runtime import oci_run


def test_runs_folder_is_made_private(tmp_path):
    plans = tmp_path / "plans"
    plans.mkdir(mode=0o700)
    got = oci_run._runs_dir(str(plans))
    assert got == str(plans / "runs")
    st = os.lstat(got)
    assert st.st_mode & 0o777 == 0o700 and st.st_uid == os.geteuid()
    assert oci_run._runs_dir(str(plans)) == got  # there already: the same folder


def test_a_link_or_an_open_folder_is_refused(tmp_path):
    plans = tmp_path / "plans"
    plans.mkdir(mode=0o700)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    os.symlink(elsewhere, plans / "runs")
    assert oci_run._runs_dir(str(plans)) == ""  # never followed
    os.unlink(plans / "runs")
    (plans / "runs").mkdir()
    os.chmod(plans / "runs", 0o755)
    assert oci_run._runs_dir(str(plans)) == ""  # others could enter it
    os.chmod(plans / "runs", 0o700)
    assert oci_run._runs_dir(str(plans)) == str(plans / "runs")  # control: the same folder, private
    (plans / "runs").rmdir()
    (plans / "runs").write_text("")
    assert oci_run._runs_dir(str(plans)) == ""  # a file
    assert oci_run._runs_dir("") == ""
    assert oci_run._runs_dir(str(tmp_path / "missing")) == ""


def test_a_state_naming_hooks_in_any_spelling_is_left_alone():
    """runc decodes keys ignoring case: a hook under any spelling of config/hooks counts."""
    from sbxc.runtime.rundirs import _names_hooks

    assert not _names_hooks({"config": {"Hooks": {"poststop": None, "prestart": None}}})  # runc's own
    assert not _names_hooks({"id": "x"})
    for state in ({"config": {"Hooks": {"poststop": [{"path": "/bin/sh"}]}}},
                  {"config": {"hooks": {"poststop": [{"path": "/bin/sh"}]}}},
                  {"CONFIG": {"HOOKS": {"createRuntime": [{"path": "/bin/sh"}]}}},
                  {"config": {"Hooks": ["x"]}}, {"config": "x"}):
        assert _names_hooks(state), state
