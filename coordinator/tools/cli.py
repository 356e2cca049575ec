"""The ``kgc`` command's former home, kept for console scripts installed before it moved.

How this works: ``pip install`` writes a ``kgc`` script that imports ``main`` from the module
``pyproject.toml`` names; a script written when that was this module still finds it here.
The command itself is ``coordinator.cli``.
"""

from coordinator.cli import compiled_modules, main

__all__ = ["compiled_modules", "main"]
