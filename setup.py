"""Map the top-level source folders onto the ``cmbuyer.*`` import namespace.

The user fixed the folder layout (``server/``, ``agent/``, ``shared/schemas/``, ``phonesim/``), while
generic top-level import names like ``server`` would collide in a shared site-packages, so every folder
is installed under ``cmbuyer.``. pyproject.toml cannot compute this mapping, hence this file.
"""

from setuptools import find_namespace_packages, setup

ROOTS = {
    "cmbuyer.server": "server",
    "cmbuyer.agent": "agent",
    "cmbuyer.schemas": "shared/schemas",
    "cmbuyer.phonesim": "phonesim",
    "cmbuyer.migrations": "migrations",
}

packages: list[str] = []
package_dir: dict[str, str] = {}
for name, folder in ROOTS.items():
    package_dir[name] = folder
    packages.append(name)
    # namespace discovery also lists data-only folders (templates/, static/, packs/ …) as packages, so
    # their files ship as package data without setuptools' "absent from packages" warnings
    subs = find_namespace_packages(folder, exclude=["__pycache__", "*.__pycache__"])
    packages.extend(f"{name}.{sub}" for sub in subs)

setup(packages=packages, package_dir=package_dir)
