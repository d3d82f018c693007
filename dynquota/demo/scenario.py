"""The demo's scenario: the policy, the operator, and the workloads it drives (a normal
scale-up, a runaway of pods and one of Secrets, a Helm-like burst with the tenant's override,
the kill switch, two teams under one QuotaBudget); see
:mod:`dynquota.demo`."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from dynquota.demo.budget_act import budget_act
from dynquota.demo.cli_act import cli_act
from dynquota.demo.watch import HELM, LABEL, NAMESPACES, RUNAWAY, WEB, DemoWatch
from dynquota.settings import Settings
from dynquota.testing.growth import deployment
from dynquota.testing.operator import OperatorThread, fill, operator_settings
from dynquota.testing.wait import wait_until

__all__ = ["Demo"]


class Demo(DemoWatch):
    """One demo run against a started control plane: :meth:`run`, then :meth:`summary`."""

    def deployment(self, ns: str, name: str, replicas: int) -> None:
        self.c.apps.create_namespaced_deployment(ns, deployment(name, replicas))

    def scale(self, ns: str, name: str, replicas: int) -> None:
        self.c.apps.patch_namespaced_deployment_scale(name, ns, {"spec": {"replicas": replicas}})

    def run(self, start_operator: Callable[[Settings], OperatorThread]) -> None:
        t = self.t
        for ns in NAMESPACES:
            self.c.core.create_namespace({"metadata": {"name": ns, "labels": LABEL}})
        self.c.policy(
            "demo",
            LABEL,
            pods={
                "bufferPercent": 40,
                "minimum": 10,
                "maximum": t.pods_max,
                "upscaleCooldown": f"{t.up}s",
                "downscaleCooldown": f"{t.down}s",
            },
            configmaps={
                "bufferPercent": 40,
                "minimum": 50,
                "maximum": t.cms_max,
                "upscaleCooldown": f"{t.up}s",
                "downscaleCooldown": f"{t.down}s",
            },
            secrets={
                "bufferPercent": 40,
                "minimum": 10,
                "maximum": t.secrets_max,
                "upscaleCooldown": f"{t.up}s",
                "downscaleCooldown": f"{t.down}s",
            },
        )
        self.show.line(
            "demo",
            f"policy 'demo': buffer 40%, pods 10..{t.pods_max}, configmaps 50..{t.cms_max}, "
            f"secrets 10..{t.secrets_max}, upscale cooldown {t.up}s, downscale window {t.down}s, "
            f"override TTL {t.ttl}s",
        )
        self.op = start_operator(
            operator_settings(self.c, override_ttl=f"{t.ttl}s", resync_seconds=30)
        )
        assert self.op.runtime is not None
        self.op.runtime.operator.reporter.on_decision = self.on_decision
        self.show.line(
            "demo", "operator running in-process as ServiceAccount dynquota-system/dynquota"
        )
        for ns in NAMESPACES:
            self.c.wait_hard(ns, {"pods": "10", "configmaps": "50", "secrets": "10"})
        watcher = threading.Thread(target=self.watch, name="demo-watch", daemon=True)
        watcher.start()
        try:
            self._workloads()
        finally:
            self._stop.set()
            watcher.join(10)

    def _workloads(self) -> None:
        t = self.t
        self.show.line("demo", f"1. {WEB}: Deployment web with 5 replicas")
        self.deployment(WEB, "web", 5)
        wait_until(lambda: self.pods(WEB) == 5, "5 web pods", timeout=60)
        self.show.line(
            "demo",
            f"2. {RUNAWAY}: Deployment runaway with replicas: 100000 (a controller gone wild)",
        )
        self.deployment(RUNAWAY, "runaway", 100_000)
        self.show.line("demo", f"1. {WEB}: scaling web 5 -> {t.web_replicas}")
        self.scale(WEB, "web", t.web_replicas)
        wait_until(
            lambda: self.pods(WEB) == t.web_replicas,
            f"{t.web_replicas} web pods",
            timeout=12 * t.up,
        )
        self.show.line(
            "demo", f"1. {WEB}: all {t.web_replicas} pods created, in steps of one cooldown"
        )
        self.print_table(force=True)
        # at the maximum, or above it when quota admission admitted past hard (kubernetes#123434)
        # and the operator raised hard to that usage (never below usage)
        wait_until(
            lambda: int((self.c.hard(RUNAWAY) or {}).get("pods", "0")) >= t.pods_max,
            f"runaway at the maximum {t.pods_max}",
            timeout=14 * t.up,
        )
        wait_until(lambda: self.pods(RUNAWAY) >= t.pods_max, "runaway pods at the cap", 60)
        # the history is the watch thread's sampling (every 0.3 s): let it see the last raise
        # too (a loaded make test printed "throttled to 60 ...: 10 -> ... -> 56")
        wait_until(lambda: self.sampled(RUNAWAY, "pods") >= t.pods_max, "the history's last", 30)
        self.show.line(
            "demo",
            f"2. {RUNAWAY}: throttled to {self.pods(RUNAWAY)} pods instead of 100000: "
            + " -> ".join(self.history.get((RUNAWAY, "pods"), [])),
        )
        self.scale(RUNAWAY, "runaway", 0)
        self.show.line(
            "demo", f"2. {RUNAWAY}: scaled to 0; the quota follows after the {t.down}s window"
        )
        self.secrets_runaway()
        self.helm_burst()
        wait_until(
            lambda: (self.c.hard(RUNAWAY) or {}).get("pods") == "10",
            "runaway sized down",
            timeout=4 * t.down + 30,
        )
        self.show.line("demo", f"2. {RUNAWAY}: sized down to the minimum after the window")
        self.print_table(force=True)
        self.kill_switch()
        budget_act(self)
        cli_act(self)

    def _secrets_hard(self, enforced: bool = False) -> int:
        quota = self.c.quota(RUNAWAY)
        hard = (quota.status.hard if enforced else quota.spec.hard) if quota else None
        return int((hard or {}).get("secrets", "-1"))

    @staticmethod
    def _numbered(create: Callable[[int], object], first: int = 0) -> Callable[[], None]:
        """``create(i)`` for ``i = first, first + 1, ...``; the number moves on only once a
        create succeeded, so a create retried by :func:`~dynquota.testing.operator.fill`
        keeps its name."""
        number = [first]

        def one() -> None:
            create(number[0])
            number[0] += 1

        return one

    def _mint_secrets(self, first: int) -> int:
        """Create Secrets ``run-<first>``, ... in the runaway namespace until the quota refuses
        one; how many."""
        return fill(
            self._numbered(
                lambda i: self.c.core.create_namespaced_secret(
                    RUNAWAY, {"metadata": {"name": f"run-{i}"}, "stringData": {"token": "x"}}
                ),
                first,
            ),
            1000,
        )

    def _release_config_maps(self, first: int) -> int:
        """Create the Helm-like release's ConfigMaps ``release-cm-<first>``, ... up to the
        burst size until the quota refuses one; how many."""
        return fill(
            self._numbered(
                lambda i: self.c.core.create_namespaced_config_map(
                    HELM, {"metadata": {"name": f"release-cm-{i}"}, "data": {"i": str(i)}}
                ),
                first,
            ),
            self.t.burst - first,
        )

    def secrets_runaway(self) -> None:
        """A job that mints a Secret per run and never cleans up: sized from the quota's own
        status.used (the operator has no verb on Secrets), one step per cooldown."""
        t = self.t
        self.show.line(
            "demo", f"2. {RUNAWAY}: a job minting Secrets without end (one per run, none deleted)"
        )
        created, sequence = 0, [self._secrets_hard()]
        while True:
            created += self._mint_secrets(created)
            if sequence[-1] >= t.secrets_max:
                break
            wait_until(
                lambda: self._secrets_hard() > sequence[-1], "next secrets step", 3 * t.up + 30
            )
            sequence.append(self._secrets_hard())
            # admission enforces status.hard: mint again once the quota controller copied it
            wait_until(
                lambda: self._secrets_hard(enforced=True) == sequence[-1], "secrets enforced", 30
            )
        self.show.line(
            "demo",
            f"2. {RUNAWAY}: {created} Secrets, then 403 exceeded quota at the maximum: secrets "
            + " -> ".join(map(str, sequence))
            + " (sized from the quota's status.used; dynquota cannot read Secrets)",
        )

    def helm_burst(self) -> None:
        t = self.t
        self.show.line("demo", f"3. {HELM}: burst of {t.burst} ConfigMaps, like a Helm install")
        created = self._release_config_maps(0)
        denied_at = created if created < t.burst else None
        self.show.line(
            "demo",
            f"3. {HELM}: {created} created, then 403 exceeded quota (nothing retries a "
            "denied ConfigMap create: the install fails)",
        )
        if denied_at is None:
            return
        self.show.line("tenant", f"dynquota override {HELM}  (dynquota.io/override=max)")
        self.c.core.patch_namespaced_resource_quota(
            "dynquota", HELM, {"metadata": {"annotations": {"dynquota.io/override": "max"}}}
        )
        # admission enforces status.hard: the quota controller copies spec.hard into it
        # shortly after the grant, and a create before that is still refused
        wait_until(
            lambda: all(
                (hard or {}).get("configmaps") == str(t.cms_max)
                for quota in [self.c.quota(HELM)]
                for hard in ([quota.spec.hard, quota.status.hard] if quota else [None])
            ),
            "override granted and enforced",
            timeout=60,
        )
        if self._release_config_maps(denied_at) != t.burst - denied_at:
            raise RuntimeError(f"{HELM}: a ConfigMap was refused under the override")
        self.show.line(
            "demo",
            f"3. {HELM}: install re-run, all {t.burst} ConfigMaps created under the override",
        )
        self.print_table(force=True)
        self.show.line("demo", f"4. {HELM}: waiting for the override to expire ({t.ttl}s TTL)")
        wait_until(
            lambda: "dynquota.io/override" not in self.c.annotations(HELM),
            "override expired",
            timeout=t.ttl + 30,
        )
        self.show.line("demo", f"4. {HELM}: override expired, configmaps sized from the peak usage")

    def kill_switch(self) -> None:
        self.show.line("admin", "dynquota kill-switch on  (dynquota.io/kill-switch=true)")
        self.c.kill_switch("true")
        wait_until(
            lambda: all(self.c.quota(ns) is None for ns in NAMESPACES),
            "managed quotas deleted",
            timeout=30,
        )
        self.show.line("demo", "5. every managed quota deleted; none is created while engaged")
        self.print_table(force=True)
        # Stay engaged for one cooldown: shows that nothing comes back (and in the picture).
        time.sleep(self.t.up)
        back = [ns for ns in NAMESPACES if self.c.quota(ns) is not None]
        self.show.line("demo", f"5. engaged for {self.t.up}s: managed quotas re-created: {back}")
        self.show.line("admin", "dynquota kill-switch off")
        self.c.kill_switch(None)
        wait_until(
            lambda: all(self.c.quota(ns) is not None for ns in NAMESPACES),
            "managed quotas re-created",
            timeout=30,
        )
        time.sleep(1)
        self.show.line("demo", "5. quotas re-created from current usage")
        self.print_table(force=True)
