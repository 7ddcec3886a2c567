"""Helpers shared by the Python tests (imported as `helpers`; conftest.py puts this folder
on sys.path). One definition of each, so every test means the same thing by it."""

from pathlib import Path

import pytest

from oppsched import netns

# The repository's top folder (experiment files, flowgraphs, the build tree).
REPO = Path(__file__).resolve().parents[2]

# Tests that build network namespaces, veths and TUNs need CAP_NET_ADMIN.
needs_root = pytest.mark.skipif(not netns.is_root(),
                                reason="network namespaces need root (CAP_NET_ADMIN)")
