"""``stockade secrets oauth-login``: the command line around sdk.oauthlogin (the flows
themselves run against a real authorization server in tests/unit/host/egress/test_oauth.py)."""

from __future__ import annotations

from pathlib import Path

from tests.support.cli import run_cli


def test_oauth_login_refuses_without_a_declaration_or_a_client_secret(tmp_path: Path) -> None:
    state = tmp_path / "state"
    assert run_cli("secrets", "init-key", "--state-dir", str(state), cwd=tmp_path).returncode == 0
    common = ("--project", "p", "--subject", "alice", "--state-dir", str(state))
    usage = run_cli("secrets", "oauth-login", "api_token", *common, cwd=tmp_path)
    assert usage.returncode == 2 and "need --manifest, or --token-url and --client" in usage.stderr
    missing = run_cli("secrets", "oauth-login", "api_token", *common, "--token-url", "https://auth.example/t",
                      "--client", "api_client", "--no-browser", cwd=tmp_path)  # fmt: skip
    assert missing.returncode == 1 and "CLIENT_SECRET_MISSING" in missing.stderr
    assert "stockade secrets set api_client --project p --subject alice" in missing.stderr
