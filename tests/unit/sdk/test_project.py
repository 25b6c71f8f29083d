"""stockade.toml -> manifest: what the manifest models refuse, the build refuses, fast.

A refused project must fail before the slow componentize step and leave no bundle.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from host.errors import ManifestInvalid
from host.formats.manifest import PackageManifest
from sdk.author.build import build_project
from sdk.author.project import PLACEHOLDER_SHA256, load_project

GOOD = """
[package]
name = "tracker"
version = "1.2.0"
description = "Issue tracker tools"
language = "python"

[http]
allow = [{ host = "api.tracker.example", path_prefix = "/v1/issues", methods = ["GET"] }]

[[http.credentials]]
secret = "tracker_token"
location = { type = "bearer" }
hosts = ["api.tracker.example"]
path_prefixes = ["/v1"]

[[tools]]
name = "tracker.list-issues"
description = "List open issues"
effect = "read"
risk = "low"
permissions = ["issues.read"]
output_schema = { type = "array", maxItems = 100, items = { type = "string", maxLength = 500 } }

[tools.input_schema]
type = "object"
additionalProperties = false
properties = { repo = { type = "string", maxLength = 200 } }
required = ["repo"]
"""


def _project(tmp_path: Path, toml: str, *, source: str = "app.py") -> Path:
    (tmp_path / "stockade.toml").write_text(toml)
    (tmp_path / source).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / source).write_text("from stockade import tool\n")
    return tmp_path


def test_toml_maps_onto_the_design_manifest(tmp_path: Path) -> None:
    project = load_project(_project(tmp_path, GOOD))
    manifest = PackageManifest.from_json(json.dumps(project.manifest_dict(module_sha256=PLACEHOLDER_SHA256)))
    tool = manifest.tools[0]
    assert (project.language, project.source) == ("python", "app.py")
    assert (manifest.package.name, manifest.package.homepage, manifest.module.world) == (
        "tracker",
        None,
        "stockade:plugin/tool@1.1.0",
    )
    assert (tool.version, tool.timeout_s, tool.permissions, tool.input_schema["required"]) == (
        "1.2.0",
        30,
        ("issues.read",),
        ["repo"],
    )
    entry = manifest.http.allow[0]
    assert (entry.scheme, entry.port, manifest.limits.fuel) == ("https", None, 2_000_000_000)
    assert manifest.http.credentials[0].secret == "tracker_token"


@pytest.mark.parametrize(
    ("old", "new", "loc"),
    [
        ('effect = "read"\n', "", "tools.0.effect"),
        ('risk = "low"\n', 'risk = "low"\nalways_allow = true\n', "tools.0.always_allow"),
        ('name = "tracker.list-issues"', 'name = "other.list-issues"', "tools.0.name"),
        ('hosts = ["api.tracker.example"]', 'hosts = ["evil.example"]', "http.credentials.0.hosts.0"),
        ('path_prefix = "/v1/issues"', 'path_prefix = "/v1/../admin"', "http.allow.0.path_prefix"),
        ('version = "1.2.0"', 'version = "v1.2"', "package.version"),
        ("[http]\n", "[limits]\nfuel = 99_000_000_000\n\n[http]\n", "limits.fuel"),
        ("[http]\n", "[sandbox]\nunsafe = true\n\n[http]\n", "sandbox"),
        (
            'language = "python"\n',
            'language = "python"\nhomepage = "javascript:alert(1)"\n',
            "package.homepage",
        ),
        ("maxLength = 200 }", 'maxLength = 200, pattern = ".*" }', "tools.0.input_schema"),
    ],
    ids=[
        "missing-effect",
        "unknown-tool-key",
        "tool-outside-package",
        "credential-host-not-allowed",
        "dot-segment-prefix",
        "non-semver",
        "limit-over-ceiling",
        "unknown-section",
        "bad-homepage",
        "schema-outside-subset",
    ],
)
def test_toml_the_manifest_refuses_is_refused_before_building(
    tmp_path: Path, old: str, new: str, loc: str
) -> None:
    assert old in GOOD
    root = _project(tmp_path, GOOD.replace(old, new, 1))
    started = time.monotonic()
    with pytest.raises(ManifestInvalid) as info:
        build_project(root, out_dir=tmp_path / "out", cache_dir=tmp_path / "cache")
    assert time.monotonic() - started < 5  # refused before componentize (about 10 s)
    assert any(p["loc"].startswith(loc) for p in info.value.details["problems"]), info.value.details
    assert not (tmp_path / "out").exists() and not (tmp_path / "cache").exists()


@pytest.mark.parametrize(
    ("toml", "source", "loc"),
    [
        (GOOD.replace('language = "python"\n', ""), "app.py", "package.language"),
        (GOOD.replace('language = "python"', 'language = "rust"'), "app.py", "package.language"),
        (
            GOOD.replace('language = "python"', 'language = "python"\nsource = "../outside.py"'),
            "app.py",
            "package.source",
        ),
        (
            GOOD.replace('language = "python"', 'language = "python"\nsource = "missing.py"'),
            "app.py",
            "package.source",
        ),
        (
            GOOD.replace('language = "python"', 'language = "python"\nsource = "my-app.py"'),
            "my-app.py",
            "package.source",
        ),
        (GOOD + '\n[module]\nsha256 = "' + "a" * 64 + '"\n', "app.py", "module"),
        (GOOD.replace("[package]", 'format = "stockade.manifest/2"\n[package]'), "app.py", "format"),
        (GOOD.replace('name = "tracker"', 'name = "tracker"\nname = "again"'), "app.py", ""),
        ("tools = 1\n", "app.py", "package"),
    ],
    ids=[
        "no-language",
        "unknown-language",
        "source-outside-project",
        "source-missing",
        "source-not-importable",
        "module-by-hand",
        "format-by-hand",
        "duplicate-key",
        "no-package",
    ],
)
def test_project_file_mistakes_refused(tmp_path: Path, toml: str, source: str, loc: str) -> None:
    with pytest.raises(ManifestInvalid) as info:
        load_project(_project(tmp_path, toml, source=source))
    assert info.value.details["problems"][0]["loc"] == loc


def test_missing_project_file_refused(tmp_path: Path) -> None:
    with pytest.raises(ManifestInvalid, match=r"no stockade\.toml"):
        load_project(tmp_path)
