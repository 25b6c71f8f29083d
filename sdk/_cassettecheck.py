"""``stockade cassette verify``: what a reviewer checks before a cassette is committed.

:func:`check_cassette` parses the file (format, fields, digests, the size ceiling) and
scans every string of it for:

- credential-shaped text that is not a placeholder: ``Bearer``/``Basic``/``token``
  schemes followed by a long token, JSON Web Tokens, and well-known key prefixes (AWS
  ``AKIA``, GitHub ``ghp_``/``gho_``/``ghs_``/``ghu_``/``ghr_``/``github_pat_``, Slack
  ``xox?-``, Stripe and OpenAI-style ``sk-``/``sk_live_``, Google ``AIza``, PEM private keys);
- a credential-like header, cookie or query parameter whose value is not a placeholder;
- unexpected placeholders: ``[REDACTED]`` (a secret form only the last-resort redactor
  caught: check the field), and, given the package's manifest, ``<secret:NAME>`` for a
  NAME the manifest does not declare.

Example::

    findings = check_cassette(Path("tests/cassettes/list.json").read_bytes())
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from host.egress.hygiene import fold_header_name, is_credential_header_name, is_credential_query_name
from host.formats.cassette import Cassette

__all__ = ["Finding", "check_cassette"]

_SHAPES: Final = (
    ("auth scheme with a token", re.compile(r"\b(?:Bearer|Basic|token)\s+(?!<)[A-Za-z0-9._~+/=-]{16,}")),
    ("JSON Web Token", re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}")),
    ("AWS access key", re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b")),
    ("GitHub token", re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,})")),
    ("Slack token", re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}")),
    ("secret key", re.compile(r"\b(?:sk|rk)(?:_live|_test|-proj)?[-_][A-Za-z0-9]{20,}")),
    ("Google API key", re.compile(r"\bAIza[0-9A-Za-z_-]{35}")),
    ("private key", re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----")),
)
_PLACEHOLDER: Final = re.compile(r"<secret:([^<>\s]*)>")
_ONLY_PLACEHOLDERS: Final = re.compile(r"(?:[A-Za-z][\w-]* )?(?:<secret:[^<>\s]+>|<redacted>)")
_SECRET_NAME: Final = re.compile(r"[a-z][a-z0-9_]{0,63}")


@dataclass(frozen=True, slots=True)
class Finding:
    """One problem: which interaction (``-1``: the file), where, and what."""

    interaction: int
    where: str
    problem: str


def check_cassette(data: bytes, *, declared_secrets: Iterable[str] | None = None) -> list[Finding]:
    """Every finding in a cassette (empty: nothing to fix).

    Args:
        data: the file's bytes.
        declared_secrets: the manifest's secret names, to flag other placeholders (None:
            only malformed names are flagged).

    Raises:
        CassetteInvalid: the file is not a valid ``stockade.cassette/1`` cassette.
    """
    cassette = Cassette.from_bytes(data)
    declared = None if declared_secrets is None else set(declared_secrets)
    findings: list[Finding] = []
    for index, interaction in enumerate(cassette.interactions):
        request, response = interaction.request, interaction.response
        texts = [("request url", request.url)]
        texts += [(f"request header {n}", v) for n, v in request.headers]
        texts += [(f"response header {n}", v) for n, v in response.headers]
        if request.body is not None:
            texts.append(("request body", request.body))
        if response.body is not None:
            texts.append(("response body", response.body))
        for where, text in texts:
            findings += [Finding(index, where, p) for p in _scan(text, declared)]
        for side, headers in (("request", request.headers), ("response", response.headers)):
            for name, value in headers:
                folded = fold_header_name(name)
                if folded.endswith("cookie") or folded.endswith("cookie2"):
                    continue  # cookie values are checked one by one by the redactor's rule
                if is_credential_header_name(folded) and not _ONLY_PLACEHOLDERS.fullmatch(value):
                    problem = "credential-like header not redacted"
                    findings.append(Finding(index, f"{side} header {name}", problem))
        _, _, query = request.url.partition("?")
        for part in query.split("&") if query else ():
            name, _, value = part.partition("=")
            if is_credential_query_name(name) and not _ONLY_PLACEHOLDERS.fullmatch(value):
                problem = "credential-like parameter not redacted"
                findings.append(Finding(index, f"query parameter {name}", problem))
    return findings


def _scan(text: str, declared: set[str] | None) -> list[str]:
    problems = [f"looks like a credential ({label})" for label, shape in _SHAPES if shape.search(text)]
    if "[REDACTED]" in text:
        problems.append("holds [REDACTED]: a secret form only the last-resort redactor caught")
    for name in _PLACEHOLDER.findall(text):
        if not _SECRET_NAME.fullmatch(name):
            problems.append(f"placeholder <secret:{name[:64]}> is not a secret name")
        elif declared is not None and name not in declared:
            problems.append(f"placeholder <secret:{name}> names no secret of the manifest")
    return problems
