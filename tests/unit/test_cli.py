"""The CLI: flags to settings, clear error messages, exit codes (no cluster needed)."""

from __future__ import annotations

from pathlib import Path

import aiohttp
import kubernetes
import pytest
import urllib3
import yaml

from dynquota.cli import CRD_HINT, build_parser, explain, main, settings_from_args
from dynquota.kube.errors import ForbiddenError, NotFoundError, TransportError


def test_run_flags_override_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DYNQUOTA_METRICS_PORT", "9000")
    monkeypatch.setenv("DYNQUOTA_LOG_FORMAT", "json")
    args = build_parser().parse_args(
        ["run", "--dry-run", "--metrics-port", "9100", "--override-ttl", "72h",
         "--exclude-namespaces", "a,b", "--leader-election", "--namespace", "ops"]
    )  # fmt: skip
    settings = settings_from_args(args)
    assert settings.dry_run is True
    assert settings.metrics_port == 9100
    assert settings.override_ttl == 72 * 3600
    assert settings.exclude_namespaces == ["a", "b"]
    assert settings.leader_election is True
    assert settings.namespace == "ops"
    assert settings.log_format == "json"  # not given: from the environment
    assert settings_from_args(build_parser().parse_args(["run"])).dry_run is False


def test_invalid_setting_exits_2_with_a_message(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["run", "--override-ttl", "7d"])
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("dynquota: error: invalid setting:")
    assert "7d" in err


def test_missing_kubeconfig(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["plan", "--kubeconfig", str(tmp_path / "nope")])
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert "no usable Kubernetes configuration" in err or "kubeconfig not found" in err
    assert "KUBECONFIG" in err or "nope" in err


def test_unreachable_cluster(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
        "users": [{"name": "u", "user": {"token": "x"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    for argv in (["plan"], ["kill-switch", "status"], ["override", "team-a"]):
        with pytest.raises(SystemExit) as done:
            main([*argv, "--kubeconfig", str(path)])
        assert done.value.code == 2
        err = capsys.readouterr().err
        assert "cannot reach the Kubernetes API" in err, (argv, err)


def test_explain_rbac_crd_and_transport_errors() -> None:
    forbidden = kubernetes.client.exceptions.ApiException(status=403, reason="Forbidden")
    forbidden.body = (
        '{"kind":"Status","message":"namespaces \\"kube-system\\" is forbidden: User '
        '\\"bob\\" cannot get resource \\"namespaces\\""}'
    )
    error = explain(forbidden, "reading namespace kube-system")
    assert str(error) == (
        "reading namespace kube-system: insufficient RBAC permissions (403): namespaces "
        '"kube-system" is forbidden: User "bob" cannot get resource "namespaces"'
    )
    missing = kubernetes.client.exceptions.ApiException(status=404, reason="Not Found")
    assert str(explain(missing, "listing dynamicquotapolicies")) == (
        f"listing dynamicquotapolicies: {CRD_HINT}"
    )
    assert str(explain(NotFoundError(404, "NotFound", "x"))) == CRD_HINT
    assert "insufficient RBAC" in str(explain(ForbiddenError(403, "Forbidden", "no")))
    assert "cannot reach" in str(explain(TransportError("refused")))
    assert "cannot reach" in str(explain(urllib3.exceptions.MaxRetryError(None, "/", None)))
    assert "cannot reach" in str(explain(aiohttp.ClientConnectionError("refused")))
    assert explain(ValueError("bug")) is None
