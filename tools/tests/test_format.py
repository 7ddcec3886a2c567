"""The C++ tree is formatted by clang-format with the repository's .clang-format: every
tracked .h and .cc file (`make format` rewrites them)."""

import shutil
import subprocess

from helpers import REPO, require


def test_every_cxx_file_is_clang_formatted():
    exe = shutil.which("clang-format")
    require(exe is not None, "clang-format is not installed (tools/bootstrap.sh installs it)")
    files = subprocess.run(["git", "ls-files", "*.h", "*.cc"], cwd=REPO, capture_output=True,
                           text=True, check=True).stdout.split()
    assert files, "git ls-files found no C++ files"
    r = subprocess.run([exe, "--dry-run", "--Werror", "--style=file", *files], cwd=REPO,
                       capture_output=True, text=True)
    unformatted = sorted({line.split(":", 1)[0] for line in r.stderr.splitlines()
                          if "error:" in line})
    assert r.returncode == 0 and not unformatted, "not clang-formatted (run make format): " + \
        ", ".join(unformatted)
