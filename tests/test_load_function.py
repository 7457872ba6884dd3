"""The capture child's load_function: a step factory's file imported by path."""

from __future__ import annotations

import sys

import pytest

from diagnose.child.capture import load_function


@pytest.fixture(autouse=True)
def own_import_state(monkeypatch):
    """load_function puts the file's folder on sys.path and the module in sys.modules: undone after each test."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setattr(sys, "modules", dict(sys.modules))


def test_a_python_file_gives_the_named_function(tmp_path):
    (tmp_path / "factory_file.py").write_text("def make():\n    return 42\n")
    assert load_function(str(tmp_path / "factory_file.py"), "make")() == 42


def test_a_file_python_cannot_import_is_an_import_error_naming_it(tmp_path):
    # no loader knows the suffix, so there is no module spec: this was an AttributeError on None
    (tmp_path / "factory.txt").write_text("def make():\n    return 42\n")
    with pytest.raises(ImportError, match="factory.txt cannot be imported as a module"):
        load_function(str(tmp_path / "factory.txt"), "make")
