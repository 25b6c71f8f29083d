"""Templates for ``stockade new``: a plugin project that builds and whose tests pass.

A new project holds ``stockade.toml``, the source (``app.py`` or ``app.js``), a
``README.md``, a ``.gitignore`` (private keys and caches; not ``dist/``, which a lock
points at) and ``tests/test_tools.py``
(pytest, through :mod:`sdk.harness`). It has
two tools, so the author sees both kinds at once:

- ``<name>.greet``: pure computation, effect ``read``;
- ``<name>.lookup``: one GET to ``https://api.example.com/v1/items/{id}`` with the
  ``api_token`` secret injected by the host as a bearer token (the code never sees it).

Example::

    files = scaffold_project(Path("my-tools"), "my-tools", language="python")
"""

from __future__ import annotations

from pathlib import Path
from string import Template
from typing import Final

from host.files import create_exclusive
from host.formats.manifest import is_name
from sdk.author._templates import TEMPLATES
from sdk.author.project import LANGUAGES, PROJECT_FILE, Language

__all__ = [
    "MAX_PROJECT_NAME",
    "SCAFFOLD_ERROR_CODES",
    "TEMPLATE_NAMES",
    "ScaffoldError",
    "render",
    "scaffold_project",
]

_LONGEST_TOOL: Final = ".lookup"
MAX_PROJECT_NAME: Final = 64 - len(_LONGEST_TOOL)
"""Tool names (``<name>.lookup``) must fit in 64 characters."""


SCAFFOLD_ERROR_CODES: Final = ("NAME_INVALID", "TEMPLATE_UNKNOWN", "DIR_NOT_EMPTY")
"""The stable codes of :class:`ScaffoldError`: the first two are usage errors (exit 2 in
the CLI), ``DIR_NOT_EMPTY`` a refusal (exit 1)."""


class ScaffoldError(ValueError):
    """The name, template or target directory is not usable (nothing was written).

    Args:
        code: one of :data:`SCAFFOLD_ERROR_CODES`.
        message: what is wrong and what to do.

    Raises:
        ValueError: ``code`` is not one of :data:`SCAFFOLD_ERROR_CODES` (a bug).
    """

    def __init__(self, code: str, message: str) -> None:
        if code not in SCAFFOLD_ERROR_CODES:
            raise ValueError(f"unknown scaffold error code {code!r}")
        super().__init__(message)
        self.code = code
        self.message = message


_README: Final = Template('''\
# $name

A Stockade plugin ($language); its tools, egress and limits are declared in `stockade.toml`.

```sh
stockade build              # -> dist/$name-0.1.0/{manifest.json,module.wasm}
stockade test               # build, then run tests/ against a real host with scripted HTTP
stockade inspect dist/$name-0.1.0   # what the bundle may reach and do, as a reviewer sees it
stockade keygen --out signing.pem --keys-file trusted-keys.json   # once; never commit signing.pem
stockade sign dist/$name-0.1.0 --key signing.pem                  # optional: shows what lock add --key signs
stockade lock add dist/$name-0.1.0 --key signing.pem              # signed entry in ./stockade.lock
stockade lock verify --trusted-keys trusted-keys.json --require-signatures
```

- `stockade.toml` declares everything the host enforces: tools and their schemas,
  effects and permissions, the hosts and paths the plugin may reach, where credentials
  are injected, and its limits. The code cannot widen any of it.
- `$source` holds the tool functions (guest SDK: `tool`, `http`, `log`,
  `ToolError`, `ToolInputError`).
- `tests/test_tools.py` drives the tools through `sdk.harness.Harness`.
''')


_GITIGNORE: Final = (
    "# dist/<name>-<version>/ holds built bundles. stockade.lock pins them by path and digest,\n"
    "# so commit the bundles you lock together with the lock (or publish them).\n"
    "__pycache__/\n.pytest_cache/\n*.pem\n"
)


TEMPLATE_NAMES: Final = tuple(TEMPLATES)
"""``stockade new --template`` choices, ``read-api`` (the default) first; their texts live
in :mod:`sdk.author._templates`."""


def render(name: str, language: Language, template: str = "read-api") -> dict[str, str]:
    """The files of a new project, ``{relative path: text}``.

    Raises:
        ScaffoldError: ``name`` is not a valid package name or too long, or the template
            is unknown.
    """
    _check_name(name)
    source = LANGUAGES[language]
    values = {"name": name, "language": language, "source": source}
    parts = TEMPLATES.get(template)
    if parts is None:
        choices = ", ".join(TEMPLATE_NAMES)
        raise ScaffoldError("TEMPLATE_UNKNOWN", f"unknown template {template!r}; one of {choices}")
    toml, code, test = parts["toml"], parts[language], parts["test"]
    return {
        PROJECT_FILE: toml.substitute(values),
        source: code.substitute(values),
        "README.md": _README.substitute(values),
        "tests/test_tools.py": test.substitute(values),
        ".gitignore": _GITIGNORE,
    }


def _check_name(name: str) -> None:
    if not is_name(name):
        raise ScaffoldError(
            "NAME_INVALID",
            f"invalid package name {name!r}: use lowercase letters and digits, segments joined "
            "by '.', '_' or '-', starting with a letter (e.g. 'my-tools')"
        )
    if len(name) > MAX_PROJECT_NAME:
        raise ScaffoldError("NAME_INVALID", f"package name {name!r} is over {MAX_PROJECT_NAME} characters")


def scaffold_project(
    directory: Path, name: str, *, language: Language, template: str = "read-api"
) -> list[Path]:
    """Write a new project into ``directory`` (created; it must not hold anything yet).

    Args:
        directory: the project directory.
        name: the package name (also the prefix of every tool name).
        language: ``"python"`` or ``"javascript"``.
        template: one of :data:`TEMPLATE_NAMES`.

    Raises:
        ScaffoldError: invalid name, or ``directory`` exists and is not an empty directory.

    Returns:
        The files written, in order.
    """
    files = render(name, language, template)
    directory = Path(directory)
    if directory.is_symlink() or (directory.exists() and not directory.is_dir()):
        raise ScaffoldError("DIR_NOT_EMPTY", f"{directory} exists and is not a directory")
    if directory.is_dir() and any(directory.iterdir()):
        raise ScaffoldError("DIR_NOT_EMPTY", f"{directory} is not empty")
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for rel, text in files.items():
        path = directory / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        create_exclusive(path, text.encode("utf-8"), mode=0o644)
        written.append(path)
    return written
