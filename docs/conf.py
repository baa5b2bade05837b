"""Sphinx configuration: the user guide (Markdown, through MyST) and the API reference
generated from the docstrings (numpy style, through napoleon). CI builds it with -W."""
import os
import sys

sys.path.insert(0, os.path.abspath(".."))

project = "torch_wrs"
author = "the torch_wrs developers"
extensions = ["myst_parser", "sphinx.ext.autodoc", "sphinx.ext.napoleon"]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
exclude_patterns = ["_build", "runs"]  # runs/: recorded tables, inlined into benchmarks.md
myst_heading_anchors = 3
napoleon_numpy_docstring = True
napoleon_google_docstring = False
autodoc_member_order = "bysource"
autodoc_typehints = "none"
html_theme = "alabaster"
html_static_path = ["_static"]
