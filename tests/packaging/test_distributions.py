"""What `pip install` puts into site-packages: the offload distribution installs the one
top-level package ``offload``, and the compat distribution only the hermes paths (``tools``,
``gateway``) that the acceptance suite imports. Built offline from a copy of the tracked files."""
from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _top_level_names(source: Path, out: Path) -> set[str]:
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                    "--wheel-dir", str(out), str(source)], check=True, capture_output=True, timeout=120)
    (wheel,) = out.glob("*.whl")
    with zipfile.ZipFile(wheel) as zf:
        return {name.split("/")[0] for name in zf.namelist() if not name.split("/")[0].endswith(".dist-info")}


@pytest.fixture(scope="module")
def checkout(tmp_path_factory) -> Path:
    """The tracked files only, so nothing built or cached in the work tree leaks into a wheel."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    copy = tmp_path_factory.mktemp("checkout")
    for name in filter(None, files.decode().split("\0")):
        if (REPO / name).is_file():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, copy / name)
    return copy


def test_offload_installs_only_the_offload_package(checkout, tmp_path):
    assert _top_level_names(checkout, tmp_path) == {"offload"}


def test_the_compat_distribution_installs_only_the_hermes_paths(checkout, tmp_path):
    assert _top_level_names(checkout / "compat", tmp_path) == {"tools", "gateway"}
