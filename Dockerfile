# syntax=docker/dockerfile:1
# The image the Helm chart (deploy/helm/orchestrator) runs: the `orchestrator` CLI (control plane,
# router, exporter) and Ray, in a virtual environment, as the non-root user 10001 the chart's
# security contexts name. Ray's head and workers must run the same Ray and Python as the control
# plane, so Ray workers that serve real engines use this file with a ROCm vLLM/SGLang base:
#   docker build -t orchestrator:0.1.0 .
#   docker build --build-arg BASE_IMAGE=rocm/vllm:<tag> -t orchestrator-rocm-vllm:0.1.0 .
# (the virtual environment sees the base image's packages, so the engine stays importable).
ARG BASE_IMAGE=python:3.11-slim-bookworm

# The build stage compiles the router's data plane and the routing decision with mypyc
# (docs/compiled.md), as `pip install -e .` does on a developer's machine, so the routers the
# chart deploys run the code the benchmarks measure; a build that fell back to pure Python fails.
FROM ${BASE_IMAGE} AS build
WORKDIR /src
RUN if ! command -v gcc >/dev/null; then \
        apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev \
        && rm -rf /var/lib/apt/lists/*; \
    fi
COPY pyproject.toml setup.py README.md ./
COPY orchestrator ./orchestrator
RUN python3 -m venv --system-site-packages /opt/orchestrator \
    && /opt/orchestrator/bin/pip install --no-cache-dir --upgrade pip \
    && /opt/orchestrator/bin/pip install --no-cache-dir ".[fast]" \
    && cd / && /opt/orchestrator/bin/python -W error -c \
       "import orchestrator, sys; sys.exit(orchestrator.BUILD != 'compiled' and orchestrator.BUILD)"

FROM ${BASE_IMAGE}
COPY --from=build /opt/orchestrator /opt/orchestrator
# HOME and Ray's session files live on the pods' writable /tmp (the root filesystem is read-only).
ENV PATH=/opt/orchestrator/bin:$PATH \
    HOME=/tmp \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
# ethtool: the exporter reads NIC statistics (PFC, pause) with `ethtool -S`.
RUN if ! command -v ethtool >/dev/null; then \
        apt-get update && apt-get install -y --no-install-recommends ethtool \
        && rm -rf /var/lib/apt/lists/*; \
    fi \
    && groupadd --gid 10001 orchestrator \
    && useradd --uid 10001 --gid 10001 --home-dir /tmp --no-create-home \
       --shell /usr/sbin/nologin orchestrator \
    && orchestrator --help >/dev/null \
    && ray --version
USER 10001:10001
# The chart sets each container's command (`orchestrator control-plane`, `orchestrator router`,
# `orchestrator exporter`, `ray start`); run alone, the image prints the CLI's help.
CMD ["orchestrator", "--help"]
