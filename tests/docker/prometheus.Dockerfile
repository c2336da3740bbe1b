# Prometheus from Debian's package, standing in for the prom/prometheus image where no image registry
# is reachable (the compose test builds it on the same local Debian base as the judge). Same entry
# point and data folder as the official image, so compose.yaml's command and volume apply unchanged.
ARG BASE_IMAGE=debian:bookworm-slim
FROM ${BASE_IMAGE}
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends prometheus \
    && rm -rf /var/lib/apt/lists/* \
    && install -d -o nobody -g nogroup /prometheus
USER 65534:65534
EXPOSE 9090
ENTRYPOINT ["/usr/bin/prometheus"]
CMD ["--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.path=/prometheus"]
