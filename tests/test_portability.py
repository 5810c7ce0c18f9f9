"""The run-time modules must load and work where ``os.O_PATH`` does not exist (macOS)."""
import os
import subprocess
import sys
import textwrap


def test_cache_folder_checks_work_without_o_path(tmp_path):
    root = tmp_path / "root"
    code = textwrap.dedent(f"""
        import os
        del os.O_PATH
        from sbxc.runtime import cachedir, plancache
        root_fd, proj_fd, made = cachedir.open_cache({str(root)!r}, "proj-0123456789abcdef", os.getuid(), True)
        assert made
        print(oct(os.stat({str(root)!r}).st_mode & 0o777))
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "0o700"
    assert (root / "proj-0123456789abcdef").is_dir()
