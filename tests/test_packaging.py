"""What pyproject.toml declares the package ships is there (issue 16: `py.typed` was declared and missing)."""

import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "gbfix"


def test_every_declared_package_data_pattern_matches_a_file():
    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["gbfix"]
    assert "py.typed" in patterns
    missing = [p for p in patterns if not any(f.is_file() for f in PACKAGE.glob(p))]
    assert missing == []
