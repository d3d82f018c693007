"""The CLI's identity (kubeconfig ``as*`` fields, ``--as``/``--as-group``/``--as-uid``,
``--context``), its output formats and its one-line errors (a local aiohttp server records
the headers; no cluster needed)."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web

from dynquota.cli import UserError, build_parser, main
from dynquota.cli.flags import Target, target_of
from dynquota.cli.output import (
    OutputError,
    check_output,
    columns,
    render_document,
    render_jsonpath,
)
from dynquota.cli.run import check_ports
from dynquota.kube.client import new_api_client
from dynquota.kube.identity import Identity, IdentityError, header_key_escape
from dynquota.settings import Settings


def _kubeconfig(tmp_path: Path, server: str, user: dict[str, Any]) -> str:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "users": [
            {"name": "admin", "user": {"token": "x", **user}},
            {"name": "plain", "user": {"token": "y"}},
        ],
        "contexts": [
            {"name": "as-someone", "context": {"cluster": "c", "user": "admin"}},
            {"name": "plain", "context": {"cluster": "c", "user": "plain"}},
        ],
        "current-context": "as-someone",
    }
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return str(path)


async def test_the_api_client_reads_the_environments_proxy_once_not_per_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 25: aiohttp's trust_env looked up ~/.netrc and the proxy variables in a worker
    thread at every request; the proxy is looked up once, as aiohttp did (NO_PROXY too)."""
    for name in ("HTTPS_PROXY", "https_proxy", "NO_PROXY", "no_proxy", "HTTP_PROXY", "http_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTPS_PROXY", "http://u:p@proxy.example:3128")
    kubeconfig = _kubeconfig(tmp_path, "https://10.1.2.3:6443", {})
    async with await new_api_client(kubeconfig, "plain") as api:
        assert api.rest_client.pool_manager.trust_env is False
        assert api.rest_client.proxy == "http://proxy.example:3128"
        assert api.rest_client.proxy_headers == {"Proxy-Authorization": "Basic dTpw"}
    monkeypatch.setenv("NO_PROXY", "10.1.2.3")
    async with await new_api_client(kubeconfig, "plain") as api:
        assert (api.rest_client.proxy, api.rest_client.pool_manager.trust_env) == (None, False)
    # as kubectl: a loopback apiserver (kind, the local control plane) is never proxied
    monkeypatch.delenv("NO_PROXY")
    for server in ("https://127.0.0.1:6443", "https://localhost:6443", "https://[::1]:6443"):
        _point_at(Path(kubeconfig), server)
        async with await new_api_client(kubeconfig, "plain") as api:
            assert api.rest_client.proxy is None, server


def _point_at(path: Path, server: str) -> None:
    config = yaml.safe_load(path.read_text())
    config["clusters"][0]["cluster"]["server"] = server
    path.write_text(yaml.safe_dump(config))


async def _headers_seen(kubeconfig: str, target: Target) -> list[tuple[str, str]]:
    """The Impersonate-* and Authorization headers of one GET through
    :func:`new_api_client`, in the order received."""
    seen: list[tuple[str, str]] = []

    async def namespace(request: web.Request) -> web.Response:
        seen.extend(
            (k, v)
            for k, v in request.headers.items()
            if k.lower().startswith("impersonate-") or k.lower() == "authorization"
        )
        return web.json_response({"apiVersion": "v1", "kind": "Namespace", "metadata": {}})

    app = web.Application()
    app.router.add_get("/api/v1/namespaces/kube-system", namespace)
    runner = web.AppRunner(app)
    await runner.setup()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    try:
        _point_at(Path(kubeconfig), f"http://127.0.0.1:{port}")
        from kubernetes_asyncio import client

        from dynquota._k8s.request import call_api

        async with await new_api_client(
            target.kubeconfig,
            target.context,
            as_user=target.as_user,
            as_uid=target.as_uid,
            as_groups=target.as_groups,
        ) as api:
            core: Any = client.CoreV1Api(api)
            await call_api(
                "get",
                "namespaces",
                lambda t: core.read_namespace("kube-system", _request_timeout=t),
            )
    finally:
        await runner.cleanup()
    return seen


async def test_the_kubeconfig_users_impersonation_is_sent(tmp_path: Path) -> None:
    user = {
        "as": "alice",
        "as-uid": "1234",
        "as-groups": ["team-a", "devs"],
        "as-user-extra": {"reason": ["on call", "ticket 7"], "scopes/x": ["s"]},
    }
    path = _kubeconfig(tmp_path, "http://127.0.0.1:1", user)
    assert await _headers_seen(path, Target(kubeconfig=path)) == [
        ("Authorization", "Bearer x"),
        ("Impersonate-User", "alice"),
        ("Impersonate-Uid", "1234"),
        ("Impersonate-Group", "team-a"),
        ("Impersonate-Group", "devs"),
        ("Impersonate-Extra-reason", "on call"),
        ("Impersonate-Extra-reason", "ticket 7"),
        ("Impersonate-Extra-scopes%2Fx", "s"),
    ]
    # the flags replace the fields, as kubectl's do
    flags = Target(kubeconfig=path, as_user="bob", as_groups=("g1",), as_uid="9")
    assert await _headers_seen(path, flags) == [
        ("Authorization", "Bearer x"),
        ("Impersonate-User", "bob"),
        ("Impersonate-Uid", "9"),
        ("Impersonate-Group", "g1"),
        ("Impersonate-Extra-reason", "on call"),
        ("Impersonate-Extra-reason", "ticket 7"),
        ("Impersonate-Extra-scopes%2Fx", "s"),
    ]
    # --context picks another user: its own credentials, no impersonation
    plain = Target(kubeconfig=path, context="plain")
    assert await _headers_seen(path, plain) == [("Authorization", "Bearer y")]
    assert await _headers_seen(path, Target(kubeconfig=path, context="plain", as_user="c")) == [
        ("Authorization", "Bearer y"),
        ("Impersonate-User", "c"),
    ]


async def test_groups_without_a_user_are_refused(tmp_path: Path) -> None:
    path = _kubeconfig(tmp_path, "http://127.0.0.1:1", {"as-groups": ["g"]})
    with pytest.raises(IdentityError) as refused:
        await new_api_client(path)
    assert str(refused.value) == (
        "impersonating groups needs a user to impersonate (--as, or `as` in the kubeconfig user)"
    )
    assert header_key_escape("scopes/x.y_z%é") == "scopes%2Fx.y_z%25%C3%A9"
    assert Identity(user="u", groups=("g",)).headers() == [
        ("Impersonate-User", "u"),
        ("Impersonate-Group", "g"),
    ]


def test_identity_flags_before_or_after_the_subcommand() -> None:
    parser = build_parser()
    before = parser.parse_args(
        ["--context", "c", "--as", "alice", "--as-group", "a", "plan", "--as-group", "b"]
    )
    # a flag given again after the subcommand replaces the one before it
    assert target_of(before) == Target(None, "c", "alice", None, ("b",))
    after = parser.parse_args(["plan", "--kubeconfig", "k", "--as-uid", "7", "-n", "x"])
    assert target_of(after) == Target("k", None, None, "7", None)
    assert target_of(parser.parse_args(["kill-switch", "status"])) == Target()
    for argv in (["override", "ns", "--as", "x"], ["cleanup", "--context", "c"]):
        assert target_of(parser.parse_args(argv)) != Target()


def test_unknown_context_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _kubeconfig(tmp_path, "http://127.0.0.1:1", {})
    with pytest.raises(SystemExit) as done:
        main(["kill-switch", "status", "--kubeconfig", path, "--context", "nope"])
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("dynquota: error: connecting: no usable Kubernetes configuration (")
    assert err.count("\n") == 1
    assert "nope" in err


def test_run_refuses_identity_flags_and_a_busy_port(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--as", "alice", "run"])
    assert done.value.code == 2
    assert capsys.readouterr().err == (
        "dynquota: error: run does not take --as: the operator acts as its kubeconfig's current "
        "context and user (the user's as/as-groups/as-uid fields apply)\n"
    )
    with socket.socket() as busy:
        busy.bind(("0.0.0.0", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(UserError) as taken:
            check_ports(Settings(metrics_port=port, probe_port=0))
        # through the command: exit 2 and that one line, before anything starts
        with pytest.raises(SystemExit) as done:
            main(["run", "--metrics-port", str(port), "--probe-port", "0"])
        assert done.value.code == 2
        assert capsys.readouterr().err == f"dynquota: error: {taken.value}\n"
    assert str(taken.value) == (
        f"metrics port {port} is in use: another process listens there; choose another with "
        "--metrics-port/DYNQUOTA_METRICS_PORT (0 turns it off)"
    )


def test_output_formats() -> None:
    document = {"rows": [{"namespace": "a", "target": 3}, {"namespace": "b", "target": None}]}
    assert render_document(document, "json").splitlines()[:3] == ["{", '  "rows": [', "    {"]
    assert render_document(document, "json").endswith("}\n")
    assert render_document(document, "yaml") == (
        "rows:\n- namespace: a\n  target: 3\n- namespace: b\n  target: null\n"
    )
    # as kubectl: jsonpath ends where the template ends, no newline added
    assert render_document(document, "jsonpath={.rows[0].target}") == "3"
    assert render_jsonpath(document, "{.rows[*].namespace}") == "a b"
    assert render_jsonpath(document, '{.rows[0].target}{"\\n"}') == "3\n"
    assert render_jsonpath(document, ".rows[1].namespace") == ".rows[1].namespace"  # text
    assert render_jsonpath(document, "ns={.rows[1].namespace};") == "ns=b;"
    with pytest.raises(OutputError, match=r"range/end and filters are not supported"):
        render_jsonpath(document, "{range .rows[*]}{.namespace}{end}")
    with pytest.raises(OutputError, match=r"unclosed action"):
        render_jsonpath(document, "{.rows[0].namespace")  # kubectl: an error, not the text
    assert render_jsonpath(document, "{.rows[0].namespace}}") == "a}"
    with pytest.raises(OutputError) as nested:  # a Go template's braces, as fit's users wrote
        render_document(document, "jsonpath={{.rows[0].namespace}}")
    assert str(nested.value) == (
        "jsonpath template '{{.rows[0].namespace}}': the '{' at character 2 opens an action "
        "inside another: a jsonpath action takes one pair of braces, not a Go template's {{ }}; "
        "write {.rows[0].namespace}"
    )
    assert columns([("A", "BB", "C"), ("aaa", "b", "")]) == "A    BB  C\naaa  b"


def test_jsonpath_reads_a_field_name_with_an_escaped_dot_as_kubectl_does() -> None:
    """kubectl's parser.go parseField: ``\\.`` is a dot of the name (quota keys and
    annotation keys hold dots: ``requests.cpu``, ``dynquota.io/policy``)."""
    document = {
        "hard": {"requests.cpu": "2", "pods": "10"},
        "metadata": {"annotations": {"dynquota.io/policy": "p1"}},
        "rows": [{"hard": {"requests.cpu": "1"}}, {"hard": {"requests.cpu": "500m"}}],
    }
    assert render_jsonpath(document, r"{.hard.requests\.cpu}") == "2"
    assert render_jsonpath(document, r"{.metadata.annotations.dynquota\.io/policy}") == "p1"
    assert render_jsonpath(document, r"{.rows[*].hard.requests\.cpu}") == "1 500m"
    assert render_jsonpath(document, "{.hard['requests.cpu']}{.hard.pods}") == "210"
    assert render_jsonpath(document, r"{.hard.requests\.memory}") == ""  # absent: nothing


DOCUMENT = {
    "kind": "Plan",
    "summary": {"text": "a<b & c", "atRisk": 2},
    "rows": [{"namespace": "a", "target": 3}, {"namespace": "b", "target": None}],
}
WHOLE = ('{"kind":"Plan","rows":[{"namespace":"a","target":3},{"namespace":"b","target":null}],'
         '"summary":{"atRisk":2,"text":"a\\u003cb \\u0026 c"}}')  # fmt: skip


@pytest.mark.parametrize(
    ("template", "printed"),
    [
        ("  ", "  "),  # a template of spaces is text (kubectl: only an empty one is an error)
        ("plain text", "plain text"),  # text outside {} is printed as is
        (".kind", ".kind"),  # -o jsonpath= is parsed as given: no braces, no expression
        ("kind: {.kind}.", "kind: Plan."),
        ("{@}", WHOLE),  # the current object: the whole document, as compact JSON
        ("{$}", WHOLE),
        ("{}", WHOLE),
        ("{@.kind} {$.kind} { .kind }", "Plan Plan Plan"),
        ("{.summary}", '{"atRisk":2,"text":"a\\u003cb \\u0026 c"}'),  # Go's json.Marshal
        ("{.rows[*]}", '{"namespace":"a","target":3} {"namespace":"b","target":null}'),
        ("{.rows[*].target}", "3 null"),
        ("{.summary.text}", "a<b & c"),  # a string is printed bare
        ("{.missing}", ""),  # kubectl allows missing keys for -o jsonpath
        ('{"}"}{\'it\\\'s\'}{"\\u00e9\\t"}', "}it's\u00e9\t"),  # quoted text, Go's escapes
    ],
)
def test_jsonpath_prints_what_kubectl_prints(template: str, printed: str) -> None:
    # k8s.io/client-go/util/jsonpath: parser.go parseText (text outside {} is a TextNode),
    # parseInsideAction ('@' and '$' are the current object), jsonpath.go PrintResults (a
    # map, slice or struct is json.Marshal'ed); cli-runtime's JSONPathPrintFlags parses the
    # -o jsonpath= template as it is (RelaxedJSONPathExpression serves custom-columns and
    # wait --for=jsonpath, not -o)
    assert render_jsonpath(DOCUMENT, template) == printed
    assert render_document(DOCUMENT, f"jsonpath={template}") == printed


@pytest.mark.parametrize(
    ("template", "message"),
    [
        ("{.kind", "jsonpath template '{.kind': unclosed action (a { without its } on its line)"),
        ("{.kind\n}", "jsonpath template '{.kind\\n}': unclosed action (a { without its } on "
                      "its line)"),
        ('{"abc}', "jsonpath template '{\"abc}': unterminated quoted string (a \" without its "
                   "pair)"),
        ("{.rows[}", "jsonpath {.rows[}: Parse error near the end of string!"),
    ],
)  # fmt: skip
def test_a_template_that_does_not_parse_is_refused_before_anything_is_read(
    template: str, message: str
) -> None:
    with pytest.raises(OutputError) as caught:
        check_output(f"jsonpath={template}")
    assert str(caught.value) == message
    check_output("jsonpath=  ")  # spaces are a template


def test_run_refuses_an_impersonating_kubeconfig(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _kubeconfig(tmp_path, "http://127.0.0.1:1", {"as": "alice"})
    with pytest.raises(SystemExit) as done:
        main(["run", "--kubeconfig", path, "--metrics-port", "0", "--probe-port", "0"])
    assert done.value.code == 2
    assert capsys.readouterr().err == (
        "dynquota: error: run cannot act as the kubeconfig user's impersonation (as: alice): "
        "kopf's own requests cannot carry Impersonate-* headers, so the operator would act as "
        "two identities; give run a kubeconfig whose user is the operator's own identity\n"
    )


def test_run_takes_the_kubeconfig_given_before_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as done:
        main(
            [
                "--kubeconfig",
                str(tmp_path / "nope"),
                "run",
                "--metrics-port",
                "0",
                "--probe-port",
                "0",
            ]
        )
    assert done.value.code == 2
    assert capsys.readouterr().err == f"dynquota: error: kubeconfig not found: {tmp_path}/nope\n"
