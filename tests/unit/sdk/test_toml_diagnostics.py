"""Manifest problems reported against stockade.toml, all of them, with "did you mean"
; JSON Schemas generated from the models and checked in."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from host.errors import ManifestInvalid
from sdk import jsonschemas
from sdk.author.project import load_project, validate_project
from sdk.author.scaffold import render

REPO = Path(__file__).resolve().parents[3]
tomllib = pytest.importorskip("tomllib")


def _project(tmp_path: Path, edit: dict[str, str]) -> Path:
    files = render("demo", "python")
    text = files["stockade.toml"]
    for old, new in edit.items():
        assert old in text, old
        text = text.replace(old, new, 1)
    files["stockade.toml"] = text
    for rel, body in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(body)
    return tmp_path


def _problems(root: Path) -> tuple[str, list[dict[str, object]]]:
    with pytest.raises(ManifestInvalid) as caught:
        validate_project(load_project(root))
    return caught.value.message, list(caught.value.details["problems"])


def test_misspelled_key_named_in_toml_terms_with_line_and_did_you_mean(tmp_path: Path) -> None:
    root = _project(tmp_path, {'effect = "read"               #': 'efect = "read"  #'})
    message, problems = _problems(root)
    unknown = next(p for p in problems if p["loc"] == "tools.0.efect")
    assert unknown["where"] == '[[tools]] "demo.greet": efect'
    assert unknown["msg"] == "unknown key (did you mean 'effect'?)"
    line = unknown["line"]
    assert isinstance(line, int) and (root / "stockade.toml").read_text().splitlines()[line - 1].startswith("efect")
    assert f"stockade.toml:{line}: [[tools]] \"demo.greet\": efect: unknown key (did you mean 'effect'?)" in message
    assert "manifest.json" not in message


def test_every_problem_listed_not_the_first_three(tmp_path: Path) -> None:
    root = _project(
        tmp_path,
        {
            'risk = "low"                  #': 'risk = "lo"  #',
            "timeout_ms = 10_000": "timeout_ms = 99_999_999",
            "maxLength = 200 }": "maxlength = 200 }",
            'effect = "read"\nrisk = "low"\npermissions': 'effect = "reed"\nrisk = "low"\npermissions',
            "fuel = 2_000_000_000": "fuell = 2_000_000_000",
        },
    )
    message, problems = _problems(root)
    assert len(problems) == 5 and message.startswith("stockade.toml has 5 problems:\n")
    assert len(message.splitlines()) == 6
    wheres = {str(p["where"]) for p in problems}
    assert wheres == {
        "[limits]: timeout_ms", "[limits]: fuell", '[[tools]] "demo.greet": risk',
        '[[tools]] "demo.greet": output_schema.properties.greeting.maxlength', '[[tools]] "demo.lookup": effect',
    }  # fmt: skip
    by_where = {p["where"]: p["msg"] for p in problems}
    assert str(by_where["[limits]: fuell"]).endswith("(did you mean 'fuel'?)")
    assert str(by_where['[[tools]] "demo.greet": output_schema.properties.greeting.maxlength']).endswith(
        "(did you mean 'maxLength'?)"
    )
    assert "got 'reed'" in str(by_where['[[tools]] "demo.lookup": effect'])


def test_misspelled_section_suggests_the_section(tmp_path: Path) -> None:
    root = _project(tmp_path, {"[limits]": "[limit]"})
    _, problems = _problems(root)
    assert any(p["msg"] == "unknown key (did you mean 'limits'?)" for p in problems)


def test_checked_in_json_schemas_match_the_models() -> None:
    for name, text in jsonschemas.render().items():
        checked_in = (jsonschemas.SCHEMA_DIR / name).read_text("utf-8")
        assert checked_in == text, f"sdk/schemas/{name} is stale: run `python -m sdk.jsonschemas`"


@pytest.mark.parametrize(
    "toml", sorted(str(p.relative_to(REPO)) for p in [*REPO.glob("examples/*/stockade.toml"),
                                                       *REPO.glob("plugins/*/stockade.toml")])
)  # fmt: skip
def test_every_shipped_project_validates_against_the_toml_schema(toml: str) -> None:
    document = tomllib.loads((REPO / toml).read_text())
    jsonschema.validate(document, jsonschemas.project_schema())


def test_toml_schema_catches_a_misspelled_key_in_an_editor() -> None:
    document = tomllib.loads(render("demo", "python")["stockade.toml"])
    document["tools"][0]["efect"] = document["tools"][0].pop("effect")
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(document, jsonschemas.project_schema())


def test_built_manifest_validates_against_the_manifest_schema(tmp_path: Path) -> None:
    root = _project(tmp_path, {})
    manifest = validate_project(load_project(root))
    jsonschema.validate(json.loads(json.dumps(manifest)), jsonschemas.manifest_schema())
