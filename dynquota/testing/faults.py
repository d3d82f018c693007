"""HTTP-level faults from real components: 429 from API Priority and Fairness.

Used by the fault tests and the chaos soak; never imported by the operator. Transport faults
are :mod:`dynquota.testing.toxiproxy`'s; timeouts and 5xx come from pausing etcd
(:meth:`LocalControlPlane.pause_etcd`), a CRD not served yet from restarting kube-apiserver
(:meth:`LocalControlPlane.restart_apiserver`).

**429** (:class:`Throttle`): a PriorityLevelConfiguration with no seats of its own
(``nominalConcurrencyShares: 0``, nothing borrowed) and ``limitResponse: Reject``, and a
FlowSchema sending the operator's ServiceAccount (and a "noisy neighbour" ServiceAccount) to
it. The level still runs one request at a time, so it answers 429 only under concurrency
(checked on v1.37.2: serial requests all got 200, 40 concurrent LISTs 7 x 200 and 33 x 429).
To make the operator see 429 on most calls, :class:`Throttle` also runs a few threads that keep
that one seat busy with LISTs as the noisy neighbour (a real situation: another client in the
same priority level).
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any, Final

import kubernetes
import yaml
from kubernetes.client.exceptions import ApiException

from dynquota.testing.controlplane import LocalControlPlane
from dynquota.testing.operator import OPERATOR_NS, OPERATOR_SA

__all__ = ["NOISY_SA", "THROTTLE_NAME", "Throttle"]

THROTTLE_NAME: Final = "dynquota-test-reject"
NOISY_SA: Final = "noisy-neighbour"


def _manifests(service_accounts: list[tuple[str, str]]) -> str:
    level = {
        "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
        "kind": "PriorityLevelConfiguration",
        "metadata": {"name": THROTTLE_NAME},
        "spec": {
            "type": "Limited",
            "limited": {
                "nominalConcurrencyShares": 0,
                "lendablePercent": 0,
                "borrowingLimitPercent": 0,
                "limitResponse": {"type": "Reject"},
            },
        },
    }
    schema = {
        "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
        "kind": "FlowSchema",
        "metadata": {"name": THROTTLE_NAME},
        "spec": {
            "priorityLevelConfiguration": {"name": THROTTLE_NAME},
            "matchingPrecedence": 100,
            "rules": [
                {
                    "subjects": [
                        {"kind": "ServiceAccount", "serviceAccount": {"name": n, "namespace": ns}}
                        for ns, n in service_accounts
                    ],
                    "resourceRules": [
                        {
                            "verbs": ["*"],
                            "apiGroups": ["*"],
                            "resources": ["*"],
                            "clusterScope": True,
                            "namespaces": ["*"],
                        }
                    ],
                    "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
                }
            ],
        },
    }
    return yaml.safe_dump_all([level, schema])


class Throttle:
    """429s for the operator's ServiceAccount while active (see the module docs).

    Args:
        cp: the control plane (admin kubeconfig; admin requests are exempt from APF).
        noise_threads: LIST loops of the noisy neighbour keeping the level's seat busy
            (0: only the operator's own concurrency meets the limit).
    """

    def __init__(self, cp: LocalControlPlane, noise_threads: int = 3) -> None:
        self.cp = cp
        self.noise_threads = noise_threads
        self.noise_requests = 0
        self.noise_rejected = 0
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def start(self, timeout: float = 30.0) -> None:
        """Apply the FlowSchema and priority level, wait until the noisy neighbour's requests
        are classified into it (429s seen, or the level's UID header), start the noise.

        Raises:
            subprocess.CalledProcessError: kubectl failed.
            TimeoutError: the apiserver did not classify into the level within ``timeout``.
        """
        api = kubernetes.config.new_client_from_config(config_file=self.cp.kubeconfig)  # type: ignore[no-untyped-call]
        try:
            core: Any = kubernetes.client.CoreV1Api(api)
            with contextlib.suppress(ApiException):
                core.create_namespaced_service_account(
                    OPERATOR_NS, {"metadata": {"name": NOISY_SA}}
                )
            token = core.create_namespaced_service_account_token(
                NOISY_SA, OPERATOR_NS, {"spec": {"expirationSeconds": 3600}}
            ).status.token
            # the noisy neighbour may list namespaces
            self.cp.kubectl(
                "apply",
                "-f",
                "-",
                input=yaml.safe_dump_all(
                    [
                        {
                            "apiVersion": "rbac.authorization.k8s.io/v1",
                            "kind": "ClusterRoleBinding",
                            "metadata": {"name": THROTTLE_NAME},
                            "roleRef": {
                                "apiGroup": "rbac.authorization.k8s.io",
                                "kind": "ClusterRole",
                                "name": "view",
                            },
                            "subjects": [
                                {
                                    "kind": "ServiceAccount",
                                    "name": NOISY_SA,
                                    "namespace": OPERATOR_NS,
                                }
                            ],
                        }
                    ]
                ),
            )
        finally:
            api.close()
        self.cp.kubectl(
            "apply",
            "-f",
            "-",
            input=_manifests([(OPERATOR_NS, OPERATOR_SA), (OPERATOR_NS, NOISY_SA)]),
        )
        self._stop.clear()
        self._token = token
        deadline = time.monotonic() + timeout
        while not self._classified():
            if time.monotonic() >= deadline:
                raise TimeoutError(f"FlowSchema {THROTTLE_NAME} not in effect after {timeout} s")
            time.sleep(0.2)
        self._threads = [
            threading.Thread(target=self._noise, name=f"noise-{i}", daemon=True)
            for i in range(self.noise_threads)
        ]
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        """Stop the noise and delete the FlowSchema and priority level (idempotent)."""
        self._stop.set()
        for thread in self._threads:
            thread.join(15)
        self._threads = []
        for kind in ("flowschema", "prioritylevelconfiguration", "clusterrolebinding"):
            with contextlib.suppress(Exception):
                self.cp.kubectl("delete", kind, THROTTLE_NAME, "--ignore-not-found")

    def __enter__(self) -> Throttle:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _client(self) -> kubernetes.client.ApiClient:
        config = kubernetes.client.Configuration()
        config.host = self.cp.server
        config.ssl_ca_cert = str(self.cp.ca_file)
        config.api_key = {"authorization": f"Bearer {self._token}"}
        return kubernetes.client.ApiClient(config)

    def _classified(self) -> bool:
        with self._client() as api:
            core: Any = kubernetes.client.CoreV1Api(api)
            try:
                answer = core.list_namespace_with_http_info(limit=1, _request_timeout=5)
            except ApiException as exc:
                return bool(exc.status == 429)
            headers = answer[2]
            uid = headers.get("X-Kubernetes-PF-PriorityLevel-UID", "")
            flow = headers.get("X-Kubernetes-PF-FlowSchema-UID", "")
            return bool(uid) and self._is_ours(flow)

    def _is_ours(self, flow_uid: str) -> bool:
        api = kubernetes.config.new_client_from_config(config_file=self.cp.kubeconfig)  # type: ignore[no-untyped-call]
        try:
            flow: Any = kubernetes.client.FlowcontrolApiserverV1Api(api)
            return bool(flow.read_flow_schema(THROTTLE_NAME).metadata.uid == flow_uid)
        except ApiException:
            return False
        finally:
            api.close()

    def _noise(self) -> None:
        with self._client() as api:
            core: Any = kubernetes.client.CoreV1Api(api)
            while not self._stop.is_set():
                self.noise_requests += 1
                try:
                    core.list_namespace(_request_timeout=10)
                except ApiException as exc:
                    if exc.status == 429:
                        self.noise_rejected += 1
                        continue
                except Exception:  # an apiserver restart, a timeout: keep going
                    time.sleep(0.1)
