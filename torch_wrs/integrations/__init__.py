"""Adapters for the libraries users already run. Each module imports its library, so
import the one you need (``torch_wrs.integrations.pyg``); none is needed at run time."""
