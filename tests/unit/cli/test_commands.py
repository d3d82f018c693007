"""The CLI: flags to settings, clear error messages, exit codes (no cluster needed)."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import aiohttp
import pytest
import yaml
from aiohttp import web
from multidict import CIMultiDict, CIMultiDictProxy
from yarl import URL

import dynquota
from dynquota._k8s.errors import (
    ForbiddenError,
    NotFoundError,
    TransportError,
    error_from_response,
    redact_userinfo,
)
from dynquota.cli import (
    CRD_HINT,
    UserError,
    _preflight,
    build_parser,
    explain,
    main,
    settings_from_args,
)
from dynquota.settings import Settings
from dynquota.testing.wait import async_wait_until


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


def test_missing_kubeconfig(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(SystemExit) as done:
        main(["plan", "--kubeconfig", str(tmp_path / "nope")])
    assert done.value.code == 2
    assert capsys.readouterr().err == f"dynquota: error: kubeconfig not found: {tmp_path}/nope\n"
    # no $KUBECONFIG, no ~/.kube/config: one line, no stray `Config not found` before it
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    for argv in (["plan"], ["kill-switch", "status"], ["override", "team-a"], ["cleanup"]):
        with pytest.raises(SystemExit) as done:
            main(argv)
        assert done.value.code == 2
        assert capsys.readouterr().err == (
            f"dynquota: error: connecting: kubeconfig not found: {tmp_path}/.kube/config (the "
            "default location); set KUBECONFIG or --kubeconfig\n"
        ), argv


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
    expected = {
        "plan": "listing deployments (to find the release's settings)",
        "kill-switch": "reading namespace kube-system",
        "override": "reading quota in team-a",
    }
    for argv in (["plan"], ["kill-switch", "status"], ["override", "team-a"]):
        with pytest.raises(SystemExit) as done:
            main([*argv, "--kubeconfig", str(path)])
        assert done.value.code == 2
        assert capsys.readouterr().err == (
            f"dynquota: error: {expected[argv[0]]}: cannot reach the Kubernetes API at "
            "127.0.0.1:1: connection refused\n"
        ), argv


def test_explain_rbac_crd_and_transport_errors() -> None:
    # as call_api raises them: the one (kubernetes_asyncio) stack's answers, mapped
    forbidden = error_from_response(
        403,
        b'{"kind":"Status","message":"namespaces \\"kube-system\\" is forbidden: User '
        b'\\"bob\\" cannot get resource \\"namespaces\\""}',
    )
    error = explain(forbidden, "reading namespace kube-system")
    assert str(error) == (
        "reading namespace kube-system: insufficient RBAC permissions (403): namespaces "
        '"kube-system" is forbidden: User "bob" cannot get resource "namespaces"'
    )
    missing = error_from_response(404, b"404 page not found")
    assert str(explain(missing, "listing dynamicquotapolicies")) == (
        f"listing dynamicquotapolicies: {CRD_HINT}"
    )
    assert str(explain(NotFoundError(404, "NotFound", "x"))) == CRD_HINT
    assert "insufficient RBAC" in str(explain(ForbiddenError(403, "Forbidden", "no")))
    assert "cannot reach" in str(explain(TransportError("refused")))
    assert "cannot reach" in str(explain(aiohttp.ServerDisconnectedError()))
    assert "cannot reach" in str(explain(aiohttp.ClientConnectionError("refused")))
    assert explain(ValueError("bug")) is None


def test_a_429_is_one_line_and_no_error_shows_a_proxys_password() -> None:
    """README-only attack: a 429 ("storage is (re)initializing" after a CRD was re-created)
    was a traceback; a kubeconfig proxy-url's password was printed in every error."""
    busy = error_from_response(
        429, b'{"kind":"Status","message":"storage is (re)initializing","code":429}'
    )
    assert str(explain(busy, "listing quotabudgets")) == (
        "listing quotabudgets: the apiserver asked to retry later (429 Too Many Requests): "
        "storage is (re)initializing; run the command again"
    )
    proxied = aiohttp.ClientHttpProxyError(
        aiohttp.RequestInfo(
            URL("https://10.1.2.3:6443/api"), "GET", CIMultiDictProxy(CIMultiDict())
        ),
        (),
        status=407,
        message="Proxy Authentication Required",
    )
    text = str(
        explain(TransportError(f"get namespaces: {proxied!r} via http://kuser:kpass@proxy:3128"))
    )
    assert "kpass" not in text
    assert "kuser" not in text
    assert "http://***@proxy:3128" in text
    assert (
        redact_userinfo("url='http://a:b@h:1/x', https://h/p@q")
        == "url='http://***@h:1/x', https://h/p@q"
    )
    assert "kpass" not in str(explain(aiohttp.ClientConnectionError("http://kuser:kpass@proxy:1")))


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out == f"dynquota {dynquota.__version__}\n"


@pytest.mark.parametrize("command", [["run"], ["plan"], ["kill-switch", "status"]])
def test_kubeconfig_path_is_named_and_malformed_yaml_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    missing = tmp_path / "nonexistent"
    with pytest.raises(SystemExit) as done:
        main([*command, "--kubeconfig", str(missing)])
    assert done.value.code == 2
    assert capsys.readouterr().err == f"dynquota: error: kubeconfig not found: {missing}\n"
    bad = tmp_path / "kubeconfig"
    bad.write_text("apiVersion: v1\nclusters: [\n  - {name: x\n")
    with pytest.raises(SystemExit) as done:
        main([*command, "--kubeconfig", str(bad)])
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err  # one line, no traceback
    assert err.endswith(
        f"kubeconfig {bad} (line 3, column 3) is not valid YAML: "
        "expected the node content, but found '-'\n"
    )


def test_missing_kubeconfig_env_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "a"))
    with pytest.raises(SystemExit) as done:
        main(["plan"])
    assert done.value.code == 2
    assert capsys.readouterr().err == (
        f"dynquota: error: kubeconfig not found: {tmp_path / 'a'} (from $KUBECONFIG)\n"
    )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _kubeconfig(tmp_path: Path, server: str) -> Path:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": {"token": "x"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return path


def _preflight_api(refusals: dict[str, int]) -> web.AppRunner:
    """An HTTP stand-in for the two reads of ``_preflight``: ``GET`` kube-system answers 403
    while ``refusals["ns"]`` lasts, the policy list 404 while ``refusals["crd"]`` lasts (each
    refusal counts its entry down), then they succeed."""

    def refuse(key: str, code: int, reason: str) -> web.Response | None:
        if refusals[key] <= 0:
            return None
        refusals[key] -= 1
        return web.json_response(
            {"kind": "Status", "code": code, "reason": reason, "message": "no"}, status=code
        )

    async def namespace(request: web.Request) -> web.Response:
        return refuse("ns", 403, "Forbidden") or web.json_response(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kube-system"}}
        )

    async def policies(request: web.Request) -> web.Response:
        return refuse("crd", 404, "NotFound") or web.json_response(
            {"apiVersion": "dynquota.io/v1alpha1", "items": []}
        )

    app = web.Application()
    app.router.add_get("/api/v1/namespaces/kube-system", namespace)
    app.router.add_get("/apis/dynquota.io/v1alpha1/dynamicquotapolicies", policies)
    return web.AppRunner(app)


async def test_run_waits_for_an_unreachable_apiserver_with_backoff(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    port = _free_port()
    settings = Settings(kubeconfig=str(_kubeconfig(tmp_path, f"http://127.0.0.1:{port}")))
    runner = _preflight_api({"ns": 0, "crd": 0})
    await runner.setup()
    with caplog.at_level("WARNING", logger="dynquota.cli"):
        task = asyncio.ensure_future(_preflight(settings, delay=0.05))
        await async_wait_until(lambda: len(caplog.records) >= 3, "three failed attempts")
        assert not task.done()  # still waiting, not exited
        site = web.TCPSite(runner, "127.0.0.1", port)
        await site.start()
        try:
            await asyncio.wait_for(task, timeout=10)
        finally:
            await runner.cleanup()
    attempts = [r.getMessage() for r in caplog.records]
    assert attempts[0] == (
        f"reading namespace kube-system: cannot reach the Kubernetes API at 127.0.0.1:{port}: "
        "connection refused (attempt 1); retrying in 0.0 s"
    )
    assert [m.split("(attempt ")[1].split(")")[0] for m in attempts[:3]] == ["1", "2", "3"]
    assert all(r.levelname == "WARNING" for r in caplog.records)


async def test_preflight_still_fails_at_once_on_a_missing_kubeconfig(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"^kubeconfig not found: "):
        await _preflight(Settings(kubeconfig=str(tmp_path / "nope")))
    port = _free_port()
    settings = Settings(kubeconfig=str(_kubeconfig(tmp_path, f"http://127.0.0.1:{port}")))
    with pytest.raises(UserError, match="cannot reach the Kubernetes API"):
        await _preflight(settings, attempts=2, delay=0.01)


async def test_preflight_retries_rbac_and_crd_refusals_as_after_an_apiserver_restart(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Right after a kube-apiserver restart its authorizer answers 403 and the CRD 404 for a
    few seconds: ``run`` must wait them out (logged at ERROR), not exit."""
    port = _free_port()
    settings = Settings(kubeconfig=str(_kubeconfig(tmp_path, f"http://127.0.0.1:{port}")))
    answers = {"ns": 2, "crd": 2}
    runner = _preflight_api(answers)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    try:
        with caplog.at_level("WARNING", logger="dynquota.cli"):
            await asyncio.wait_for(_preflight(settings, delay=0.01), timeout=10)
    finally:
        await runner.cleanup()
    assert answers == {"ns": 0, "crd": 0}
    levels = [r.levelname for r in caplog.records]
    assert levels == ["ERROR"] * 4
    assert "insufficient RBAC permissions (403)" in caplog.records[0].getMessage()


@pytest.mark.parametrize("missing", ["cryptography", "kubernetes"])
def test_demo_without_the_testing_extra_is_one_clear_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], missing: str
) -> None:
    """As in the operator image: the launcher's ``cryptography`` (or the test bed's sync
    client) is not installed, so ``dynquota demo`` says what to do instead, exit 2."""
    import sys

    for name in list(sys.modules):
        if name == "dynquota.demo" or name.startswith("dynquota.testing"):
            monkeypatch.delitem(sys.modules, name)
        if name == missing or name.startswith(f"{missing}."):
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, missing, None)  # `import missing` raises ImportError
    with pytest.raises(SystemExit) as done:
        main(["demo", "--fast"])
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert err == (
        f"dynquota: error: dynquota demo runs from a dynquota source checkout ({missing} is "
        "not installed): it builds and starts a local control plane from the repository (git "
        "clone, then `make demo`); the wheel and the operator image hold neither the demo nor "
        "the test bed\n"
    )


def test_every_run_flag_names_a_setting() -> None:
    from dynquota.settings import RUN_FLAGS

    fields = {flag.removeprefix("--").replace("-", "_") for flag, _ in RUN_FLAGS}
    assert fields <= set(Settings.model_fields)
    run = build_parser()._subparsers._group_actions[0].choices["run"]  # type: ignore[union-attr]
    assert {a.dest for a in run._actions if a.dest != "help"} == fields


@pytest.mark.parametrize(
    ("flags", "warned"), [([], True), (["--leader-election", "--namespace", "ops"], False)]
)
def test_run_warns_when_it_writes_without_a_lease(
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    flags: list[str],
    warned: bool,
) -> None:
    import dynquota.cli.run as run_module
    import dynquota.operator.runtime as runtime

    async def nothing(*args: object, **kwargs: object) -> None:
        return None

    monkeypatch.setattr(run_module, "preflight", nothing)
    monkeypatch.setattr(runtime, "run", nothing)
    monkeypatch.setattr(run_module, "_setup_logging", lambda settings: None)
    with caplog.at_level("WARNING", logger="dynquota.cli"):
        assert run_module.cmd_run(build_parser().parse_args(["run", *flags])) == 0
    lines = [r.getMessage() for r in caplog.records if r.name == "dynquota.cli"]
    assert any(m.startswith("leader election is off") for m in lines) is warned


@pytest.mark.parametrize(
    "command", [["plan"], ["status", "-n", "a"], ["fit", "-f", "-"], ["kill-switch", "status"]]
)
@pytest.mark.parametrize("output", ["jsonpath=", "jsonpath"])
def test_a_jsonpath_without_a_template_is_refused_before_the_cluster_is_asked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str], output: str
) -> None:
    # kubectl: "error: template format specified but no template given" (exit 1); dynquota's
    # usage errors exit 2 (fit's 1 is an answer: some pods fit only later). The kubeconfig
    # does not exist: asked first, the cluster would be the error
    missing = str(tmp_path / "none")
    with pytest.raises(SystemExit) as exit_:
        main([*command, "--kubeconfig", missing, "-o", output])
    assert exit_.value.code == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == "dynquota: error: template format specified but no template given\n"


@pytest.mark.parametrize(
    "command", [["plan"], ["status", "-n", "a"], ["fit", "-f", "-"], ["kill-switch", "status"]]
)
def test_a_jsonpath_template_that_does_not_parse_is_refused_before_the_cluster_is_asked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    # kubectl parses the template when it builds its printer, before the request
    missing = str(tmp_path / "none")
    with pytest.raises(SystemExit) as exit_:
        main([*command, "--kubeconfig", missing, "-o", "jsonpath={.status"])
    assert exit_.value.code == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == (
        "dynquota: error: jsonpath template '{.status': unclosed action (a { without its } on "
        "its line)\n"
    )


def test_jsonpath_text_is_printed_as_kubectl_prints_it(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from dynquota.cli import status

    async def read(args: object) -> dict[str, object]:
        return {"kind": "AppliedDynamicQuota", "status": {"state": "Enforced", "n": 1}}

    monkeypatch.setattr(status, "_read", read)
    printed = {
        "  ": "  ",  # was: the whole document
        "plain text": "plain text",  # was: Parse error, exit 2
        ".kind": ".kind",  # was: AppliedDynamicQuota
        "{@}": '{"kind":"AppliedDynamicQuota","status":{"n":1,"state":"Enforced"}}',  # was: ""
        "{.status}": '{"n":1,"state":"Enforced"}',  # was: {"state": "Enforced", "n": 1}
    }
    for template, text in printed.items():
        assert main(["status", "-n", "a", "-o", f"jsonpath={template}"]) == 0
        assert capsys.readouterr().out == text, template


def test_jsonpath_output_ends_where_the_template_ends(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from dynquota.cli import status

    async def read(args: object) -> dict[str, object]:
        return {"kind": "AppliedDynamicQuota", "status": {"state": "Enforced"}}

    monkeypatch.setattr(status, "_read", read)
    assert main(["status", "-n", "a", "-o", "jsonpath={.status.state}"]) == 0
    assert capsys.readouterr().out == "Enforced"  # kubectl prints no newline after jsonpath
    assert main(["status", "-n", "a", "-o", 'jsonpath={.kind}{"\\n"}']) == 0
    assert capsys.readouterr().out == "AppliedDynamicQuota\n"
    assert main(["status", "-n", "a", "-o", "json"]) == 0
    assert capsys.readouterr().out.endswith("}\n")
