#!/usr/bin/env bash
# Installs the Debian packages the integration tests use (prometheus for promtool and the
# server, prometheus-alertmanager for Alertmanager and amtool, mosquitto for MQTT, iproute2 for the veth testbed, tmux for the terminal view,
# openssl for test certificates, systemd for systemd-analyze, fuse3 for the fault tests'
# counter files that fail with EIO or EINVAL, slurm-wlm and munge for the Slurm cluster that
# runs the shipped prolog and epilog, mmdebstrap, buildah, podman and runc for the container
# image, victoria-metrics for long-term storage) when they are missing and
# we are root. Anywhere else it says what is missing and leaves the tests to skip.
set -euo pipefail
need=()
command -v promtool  >/dev/null 2>&1 || need+=(prometheus)
# prometheus-alertmanager: Alertmanager and amtool (tests/test_alertmanager.py)
command -v amtool    >/dev/null 2>&1 || need+=(prometheus-alertmanager)
command -v mosquitto >/dev/null 2>&1 || [ -x /usr/sbin/mosquitto ] || need+=(mosquitto)
command -v ip        >/dev/null 2>&1 || need+=(iproute2)
command -v tmux      >/dev/null 2>&1 || need+=(tmux)
command -v openssl   >/dev/null 2>&1 || need+=(openssl)
command -v systemd-analyze >/dev/null 2>&1 || need+=(systemd)
command -v fusermount3 >/dev/null 2>&1 || need+=(fuse3)
command -v slurmctld >/dev/null 2>&1 || [ -x /usr/sbin/slurmctld ] || need+=(slurm-wlm)
command -v munged    >/dev/null 2>&1 || [ -x /usr/sbin/munged ] || need+=(munge)
# The container image (tests/test_container_image.py): its base from Debian's packages,
# built with buildah, run with podman and the runc runtime.
command -v mmdebstrap >/dev/null 2>&1 || need+=(mmdebstrap)
command -v buildah   >/dev/null 2>&1 || need+=(buildah)
command -v podman    >/dev/null 2>&1 || need+=(podman)
command -v runc      >/dev/null 2>&1 || [ -x /usr/sbin/runc ] || need+=(runc)
# victoria-metrics: the single-node server Prometheus remote-writes to
# (tests/test_victoriametrics.py).
command -v victoria-metrics >/dev/null 2>&1 || need+=(victoria-metrics)
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "system packages missing: ${need[*]} (not root or no apt-get: integration tests will skip)" >&2
    exit 0
fi
echo "installing Debian packages: ${need[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# --no-install-recommends keeps the services from pulling in half a desktop; policy-rc.d
# stops Debian from starting the daemons: the tests start their own on free ports.
policy=/usr/sbin/policy-rc.d
created_policy=0
if [ ! -e "$policy" ]; then printf '#!/bin/sh\nexit 101\n' >"$policy"; chmod +x "$policy"; created_policy=1; fi
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
[ "$created_policy" -eq 1 ] && rm -f "$policy"
exit 0
