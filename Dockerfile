# syntax=docker/dockerfile:1
# dynquota operator image: `docker build -t dynquota:dev .`
# Stage 1 builds the wheel and installs it with its pinned dependencies into a virtualenv;
# stage 2 copies only that virtualenv onto a slim Python. No shell entrypoint, non-root numeric
# user, nothing written at run time (works with readOnlyRootFilesystem; the chart mounts an
# emptyDir on /tmp). tests/integration/test_chart_image.py repeats these steps without Docker.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
COPY pyproject.toml constraints.txt README.md ./
COPY dynquota ./dynquota
RUN python -m pip wheel --no-deps --wheel-dir /wheels . \
 && python -m venv /opt/dynquota \
 && /opt/dynquota/bin/python -m pip install --constraint constraints.txt /wheels/dynquota-*.whl \
 && /opt/dynquota/bin/python -m compileall -q /opt/dynquota/lib \
 && /opt/dynquota/bin/dynquota --help > /dev/null

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="dynquota" \
      org.opencontainers.image.description="Kubernetes operator sizing one ResourceQuota per namespace from observed usage" \
      org.opencontainers.image.licenses="Apache-2.0"
# Same path as in the build stage: the virtualenv's scripts point at /opt/dynquota/bin/python.
COPY --from=build /opt/dynquota /opt/dynquota
# USER: kopf computes a peering id with getpass.getuser() at start-up (even with --standalone),
# which reads $USER before /etc/passwd; uid 65532 (or any runAsUser) has no passwd entry in the
# base image, where it raises KeyError and the operator exits.
ENV PATH=/opt/dynquota/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp \
    USER=dynquota
# 65532: the conventional "nonroot" uid/gid; numeric so runAsNonRoot can verify it.
USER 65532:65532
EXPOSE 8080 8081
ENTRYPOINT ["dynquota", "run"]
