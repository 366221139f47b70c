"""The checked-in import root of the ``cmbuyer.*`` names for type checkers and editors.

setup.py installs the source folders under ``cmbuyer.`` (``server/`` → ``cmbuyer.server`` …) through
setuptools' editable finder, which static tools cannot follow. The relative symlinks beside this file
state the same mapping on disk: ``server`` → ``../../server``, ``agent`` → ``../../agent``,
``schemas`` → ``../../shared/schemas``, ``phonesim`` → ``../../phonesim``,
``migrations`` → ``../../migrations``. pyproject.toml points mypy (``mypy_path``) and pyright
(``extraPaths``) at ``typecheck/``; nothing imports this package at run time.
"""
